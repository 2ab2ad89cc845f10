"""Experiment tracking (`logger=wandb|mlflow`): per-round metrics sent to a tracker, as a progress sink.

A tracker has the methods of the search's Progress protocol (round_started, attempt_done, message), so
it rides on the same callbacks as the terminal display; `tee` forwards to several sinks at once. The
tracker package is imported only when chosen, so neither is a dependency, and a missing one is reported
with the pip package to install before the run spends anything. The journal stays the record of the
run: a tracker that fails mid-run (network, quota) is switched off with one warning, not allowed to end
a search that may have cost hours.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOGGERS = ("none", "wandb", "mlflow")


class TrackingError(RuntimeError):
    """The chosen logger cannot be used (unknown name, or its package is not installed)."""


def _import(module: str, pip_name: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise TrackingError(f"logger={module} needs the {pip_name!r} package: pip install {pip_name} "
                            f"(or run with logger=none). Import failed: {e}") from None


class Tracker:
    """Shared bookkeeping: what is logged per round, and switching off after an error."""

    def __init__(self, warn: Callable[[str], None] | None = None):
        self.warn = warn or (lambda text: None)
        self.enabled = True
        self.best: float | None = None

    # -- the Progress protocol ---------------------------------------------------------------------------
    def round_started(self, round_index: int, max_rounds: int, node: Any, attempt: int, mode: str,
                      short_id: str | None = None) -> None:
        self._safe(self._log, {"round": round_index, "attempt": attempt}, round_index)

    def attempt_done(self, round_index: int, report: Any, best_score: float | None) -> None:
        self.best = best_score if best_score is not None else self.best
        metrics: dict[str, Any] = {"round": round_index, "attempt_passed": 1.0 if report.passed else 0.0,
                                   "attempt_eval_s": float(report.elapsed_s or 0.0)}
        if report.score is not None:
            metrics["attempt_score"] = float(report.score)
        if best_score is not None:
            metrics["best_score"] = float(best_score)
        self._safe(self._log_attempt, metrics, round_index, str(report.status))

    def message(self, text: str) -> None:
        pass

    def summary(self, values: dict[str, Any]) -> None:
        """Final values of the run (best score, evaluations, stop reason)."""
        self._safe(self._summary, values)

    def stop(self, status: str = "finished") -> None:
        """End the tracker's run; status is finished | failed | killed."""
        if self.enabled:
            self._safe(self._finish, status)
            self.enabled = False

    # -- per backend ---------------------------------------------------------------------------------------
    def _log(self, metrics: dict[str, Any], step: int) -> None:
        raise NotImplementedError

    def _log_attempt(self, metrics: dict[str, Any], step: int, status: str) -> None:
        self._log(metrics, step)

    def _summary(self, values: dict[str, Any]) -> None:
        raise NotImplementedError

    def _finish(self, status: str) -> None:
        raise NotImplementedError

    def _safe(self, fn: Callable[..., None], *args: Any) -> None:
        if not self.enabled:
            return
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - a tracker outage must not end the search; the journal has everything
            self.enabled = False
            self.warn(f"experiment tracking stopped after an error ({type(e).__name__}: {e}); the run goes on, "
                      f"and its journal holds every result")


class WandbTracker(Tracker):
    def __init__(self, config: dict[str, Any], name: str, run_dir: Path, group: str | None = None,
                 warn: Callable[[str], None] | None = None):
        super().__init__(warn)
        wandb = _import("wandb", "wandb")
        run_dir.mkdir(parents=True, exist_ok=True)      # wandb keeps its files in the run directory
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "ksearch"), name=name, group=group,
                              config=config, dir=str(run_dir))

    def _log(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log(metrics, step=step)

    def _log_attempt(self, metrics: dict[str, Any], step: int, status: str) -> None:
        self.run.log({**metrics, "attempt_status": status}, step=step)

    def _summary(self, values: dict[str, Any]) -> None:
        for k, v in values.items():
            self.run.summary[k] = v

    def _finish(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "finished" else 1)


class MlflowTracker(Tracker):
    def __init__(self, config: dict[str, Any], name: str, run_dir: Path, group: str | None = None,
                 warn: Callable[[str], None] | None = None):
        super().__init__(warn)
        self.mlflow = _import("mlflow", "mlflow")
        self.mlflow.start_run(run_name=name, tags={"ksearch.run_dir": str(run_dir),
                                                   **({"ksearch.cli.sweep": group} if group else {})})
        self.mlflow.log_params({k: str(v)[:500] for k, v in _flatten(config).items()})

    def _log(self, metrics: dict[str, Any], step: int) -> None:
        self.mlflow.log_metrics(metrics, step=step)

    def _summary(self, values: dict[str, Any]) -> None:
        numbers = {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if numbers:
            self.mlflow.log_metrics(numbers)
        for k, v in values.items():
            if k not in numbers and v is not None:
                self.mlflow.set_tag(k, str(v)[:5000])

    def _finish(self, status: str) -> None:
        self.mlflow.end_run(status={"finished": "FINISHED", "killed": "KILLED"}.get(status, "FAILED"))


_BACKENDS: dict[str, type[WandbTracker] | type[MlflowTracker]] = {"wandb": WandbTracker, "mlflow": MlflowTracker}


_PACKAGES = {"wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}   # logger -> (module, pip name)


def check_logger(logger: str | None) -> None:
    """Raise TrackingError now if `logger` could not be used (checked before a sweep's first arm)."""
    if logger in (None, "", "none"):
        return
    if logger not in _BACKENDS:
        raise TrackingError(f"logger={logger!r} is not known; choose one of {', '.join(LOGGERS)}")
    _import(*_PACKAGES[logger])


def make_tracker(logger: str, config: dict[str, Any], run_dir: Path, *, group: str | None = None,
                 warn: Callable[[str], None] | None = None) -> Tracker | None:
    """The tracker for `logger` (None for "none"). Raises TrackingError before the run starts if unusable."""
    if logger in (None, "", "none"):
        return None
    check_logger(logger)
    name = f"{Path(run_dir).parent.name}/{Path(run_dir).name}"
    return _BACKENDS[logger](config, name, Path(run_dir), group=group, warn=warn)


class Tee:
    """Forwards every progress call to each sink that has the method (trackers have `summary`, displays don't)."""

    def __init__(self, *sinks: Any):
        self.sinks = [s for s in sinks if s is not None]

    def _call(self, method: str, *args: Any) -> None:
        for s in self.sinks:
            fn = getattr(s, method, None)
            if fn is not None:
                fn(*args)

    def round_started(self, *args: Any) -> None:
        self._call("round_started", *args)

    def attempt_done(self, *args: Any) -> None:
        self._call("attempt_done", *args)

    def message(self, text: str) -> None:
        self._call("message", text)

    def summary(self, values: dict[str, Any]) -> None:
        self._call("summary", values)

    def stop(self, status: str = "finished") -> None:
        """Stop every sink, even if one of them raises; the first error is re-raised afterwards."""
        first: BaseException | None = None
        for s in self.sinks:
            try:
                s.stop(status)
            except Exception as e:  # noqa: BLE001 - every sink is stopped; the first error is re-raised below
                first = first or e
        if first is not None:
            raise first


def tee(*sinks: Any) -> Tee:
    return Tee(*sinks)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out
