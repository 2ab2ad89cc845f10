"""`ksearch run -m ...`: every combination of comma-separated overrides, one run after another.

    ksearch run -m task=a,b llm=offline,litellm search.policy=greedy,learned run.seed=0,1,2

Values are split by Hydra's own override parser, so quoted commas ('x="a,b"'), lists and `range(0,3)`
mean what they mean to Hydra. Every arm composes from the same overrides apart from its swept values, so
all arms get the same budget. Arms run sequentially (one GPU, timings not disturbed by each other), each
in its own run directory under one sweep directory, `runs/sweeps/<timestamp>/<index>_<values>` by default
or under `run.dir`. Every arm's config is composed before the first one starts, so a misspelt key stops
the sweep at once rather than after hours; an arm that fails while running is recorded and the sweep goes
on. sweep.json in the sweep directory lists the arms and is rewritten after each one, so an interrupted
sweep still says what ran, what failed and where.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ksearch.store.shutdown import is_disk_full

#: Settings that bound a run's spending; sweeping them gives arms different budgets, which is said aloud.
BUDGET_KEYS = ("search.max_rounds", "search.max_rounds_per_cycle", "llm.max_cost_usd", "llm.max_requests")


class SweepError(ValueError):
    """Overrides that do not describe a sweep ksearch can run; the message says what to change."""


@dataclass
class Axis:
    key: str                  # as written, with any +/++ prefix: "task", "run.seed", "+search.x"
    values: list[str]


@dataclass
class Arm:
    index: int
    name: str
    params: dict[str, str]              # this arm's swept values
    overrides: list[str]                # everything composed for this arm (run.dir is set separately)
    run_dir: str
    status: str = "pending"             # pending | running | done | failed | interrupted
    error: str | None = None
    best_score: float | None = None
    stop_reason: str | None = None
    evaluations: int | None = None
    elapsed_s: float | None = None
    budget: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sweep:
    root: Path
    overrides: list[str]
    axes: list[Axis]
    arms: list[Arm]
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))

    @property
    def name(self) -> str:
        return self.root.name

    def to_json(self) -> dict[str, Any]:
        return {"kind": "ksearch-sweep", "created": self.created, "root": str(self.root),
                "overrides": self.overrides, "axes": {a.key: a.values for a in self.axes},
                # absolute run folders: `ksearch compare SWEEP` works from any directory
                "arms": [{**asdict(a), "run_dir": str(Path(a.run_dir).resolve())} for a in self.arms]}

    def write(self) -> Path:
        from ksearch.store.atomic import atomic_write

        return atomic_write(self.root / "sweep.json", json.dumps(self.to_json(), indent=1, default=str))

    def failed(self) -> list[Arm]:
        return [a for a in self.arms if a.status != "done"]


def parse_sweep(overrides: list[str]) -> tuple[list[str], list[Axis], str | None]:
    """(fixed overrides, swept axes, run.dir if given) by Hydra's override grammar."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        raise SweepError(f"{e}") from None
    fixed: list[str] = []
    axes: list[Axis] = []
    root = None
    for o in parsed:
        if o.key_or_group == "run.dir":
            if o.is_sweep_override():
                raise SweepError("run.dir cannot be swept: in a sweep it names the folder that holds all arms")
            root = o.value()
            continue
        if not o.is_sweep_override():
            fixed.append(str(o.input_line))         # set on every parsed override
            continue
        try:
            values = list(o.sweep_string_iterator())
        except HydraException:
            raise SweepError(f"{o.input_line}: only lists of values (a,b,c), choice(...) and range(...) can be "
                             f"swept here; list the values explicitly") from None
        axes.append(Axis(o.get_key_element(), values))
    keys = [a.key.lstrip("+~") for a in axes]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise SweepError(f"{', '.join(sorted(dupes))} swept twice; give each key one list of values")
    return fixed, axes, str(root) if root is not None else None


def plan_sweep(overrides: list[str], root: str | Path | None = None, sweeps_dir: Path = Path("runs/sweeps")) -> Sweep:
    """The arms, in order (the last axis varies fastest), and their run directories."""
    fixed, axes, root_override = parse_sweep(overrides)
    root = Path(root or root_override or _fresh_dir(sweeps_dir))
    if (root / "sweep.json").exists():
        raise FileExistsError(f"{root} already holds a sweep; pick another run.dir (each arm of a finished or "
                              f"stopped sweep can be continued with `ksearch resume {root}/<arm>`)")
    combos = list(itertools.product(*[a.values for a in axes])) if axes else [()]
    width = len(str(len(combos) - 1))
    arms = []
    for i, values in enumerate(combos):
        params = {a.key: v for a, v in zip(axes, values)}
        name = f"{i:0{width}d}_{_describe(params)}"
        arms.append(Arm(i, name, params, fixed + [f"{k}={v}" for k, v in params.items()], str(root / name)))
    return Sweep(root, list(overrides), axes, arms)


def budget_warnings(sweep: Sweep) -> list[str]:
    swept = [a.key.lstrip("+~") for a in sweep.axes]
    hits = [k for k in swept if k in BUDGET_KEYS or "budget" in k]
    return [f"{k} is swept, so the arms do not have the same budget" for k in hits]


def run_sweep(sweep: Sweep, *, compose: Callable[[list[str]], Any] | None = None,
              execute: Callable[..., Any] | None = None,
              make_progress: Callable[[Any, Path, str], Any] | None = None,
              log: Callable[[str], None] = print) -> Sweep:
    """Run every arm; returns the sweep with each arm's status. KeyboardInterrupt stops it (and re-raises)."""
    if compose is None or execute is None:
        from ksearch.cli import app
        compose = compose or app.compose_config
        execute = execute or app.execute
    cfgs = []
    for arm in sweep.arms:       # all configs first: a typo must not wait for the earlier arms to finish
        cfg = compose(arm.overrides)
        cfg.run.dir = arm.run_dir
        arm.budget = {k: _get(cfg, k) for k in BUDGET_KEYS}
        cfgs.append(cfg)
    for warning in budget_warnings(sweep):
        log(f"warning: {warning}")
    sweep.write()
    for arm, cfg in zip(sweep.arms, cfgs):
        log(f"[arm {arm.index + 1}/{len(sweep.arms)}] {' '.join(arm.overrides) or '(defaults)'} -> {arm.run_dir}")
        _run_arm(sweep, arm, cfg, execute, make_progress, log)
    return sweep


def _run_arm(sweep: Sweep, arm: Arm, cfg: Any, execute: Callable[..., Any],
             make_progress: Callable[[Any, Path, str], Any] | None, log: Callable[[str], None]) -> None:
    arm.status = "running"
    sweep.write()
    t0 = time.monotonic()
    progress, status = None, "failed"
    try:
        progress = make_progress(cfg, Path(arm.run_dir), sweep.name) if make_progress else None
        outcome = execute(cfg, Path(arm.run_dir), fresh=True, progress=progress)
        arm.status, status = "done", "finished"
        arm.best_score = outcome.best.score if outcome.best else None
        arm.stop_reason, arm.evaluations = outcome.stop_reason, outcome.evaluations
        if progress is not None and hasattr(progress, "summary"):
            progress.summary({"best_score": arm.best_score, "evaluations": arm.evaluations,
                              "stop_reason": arm.stop_reason})
    except KeyboardInterrupt:
        arm.status, status = "interrupted", "killed"
        log(f"sweep interrupted in arm {arm.index}; `ksearch resume {arm.run_dir}` continues that arm; "
            f"{sweep.root / 'sweep.json'} lists the arms")
        raise
    except Exception as e:      # one arm's failure (model, evaluator, a bug) must not cost the other arms
        if is_disk_full(e):     # ... but a full disk would fail every arm after it: stop the sweep
            arm.status, arm.error, status = "interrupted", f"disk full: {e}", "killed"
            log(f"disk full in arm {arm.index}; `ksearch resume {arm.run_dir}` continues that arm once there "
                f"is space")
            raise
        arm.status, arm.error = "failed", f"{type(e).__name__}: {e}"
        log(f"arm {arm.index} failed: {arm.error[:500]}; going on with the next arm")
    finally:
        arm.elapsed_s = time.monotonic() - t0
        try:
            if progress is not None:
                progress.stop(status)
        finally:
            sweep.write()


def _describe(params: dict[str, str]) -> str:
    """A folder-safe summary of the swept values, e.g. "llm-offline_policy-greedy_seed-1"."""
    if not params:
        return "run"
    parts = [f"{k.lstrip('+~').split('.')[-1]}-{v.strip(chr(34) + chr(39))}" for k, v in params.items()]
    text = re.sub(r"[^A-Za-z0-9._=-]+", "-", "_".join(parts)).strip("-")
    return text[:80] or "run"


def _fresh_dir(parent: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, k = parent / stamp, 1
    while path.exists():
        path, k = parent / f"{stamp}-{k}", k + 1
    return path


def _get(cfg: Any, dotted: str) -> Any:
    cur = cfg
    for part in dotted.split("."):
        cur = cur.get(part) if hasattr(cur, "get") else None
        if cur is None:
            return None
    return cur
