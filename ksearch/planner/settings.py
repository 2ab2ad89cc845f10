"""Settings segments: a resumed run may change some settings; each segment replays under its own.

The settings in effect start as the first segment's (from the journal's run_start), switch at every
recorded `config` record while replaying, and switch to the requested ones at the live edge, where the
change is recorded. Settings that would change what recorded numbers mean are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from ksearch.config import Config, to_plain

#: Settings sections that a resumed segment may change; the rest would change what recorded numbers mean.
CHANGEABLE_SECTIONS = ("search", "llm")
# (the baseline cache only decides whether a baseline not yet recorded is timed or reused: recorded ones stay)
CHANGEABLE_EVAL_KEYS = ("timeout_s", "remeasure_near_ties", "pool", "ray_address", "profile", "baseline_cache",
                        "baseline_cache_max_age_h", "baseline_cache_path")


def settings_diff(old: Any, new: Any) -> dict[str, list[Any]]:
    """Changed leaves between two configs, as {"a.b": [old, new]}, for the sections a segment may change."""
    a, b = to_plain(old), to_plain(new)
    out: dict[str, list[Any]] = {}

    def walk(x: Any, y: Any, prefix: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                walk(x.get(k), y.get(k), f"{prefix}.{k}" if prefix else k)
        elif x != y:
            out[prefix] = [x, y]

    for section in ("task", "search", "llm", "eval"):
        walk(a.get(section), b.get(section), section)
    return out


def frozen_changes(diff: dict[str, list[Any]]) -> list[str]:
    """Keys in `diff` that a resumed segment must not change (they alter what recorded numbers mean)."""
    bad = []
    for key in diff:
        section, _, rest = key.partition(".")
        if section in CHANGEABLE_SECTIONS or (section == "eval" and rest in CHANGEABLE_EVAL_KEYS):
            continue
        bad.append(key)
    return bad


def config_from_record(config: dict[str, Any]) -> Config:
    return OmegaConf.merge(OmegaConf.structured(Config), config)  # type: ignore[return-value]


class Segments:
    """The settings in effect (`cfg`) and the ones asked for now (`requested`); `epoch` counts switches."""

    def __init__(self, requested: Config, run_path: Any, record_change: Callable[[dict[str, Any], dict], None],
                 message: Callable[[str], None]):
        self.requested = requested
        self.cfg = requested
        self.epoch = 0
        self._run_path = run_path
        self._record_change = record_change
        self._message = message

    def replay_first(self, config: dict[str, Any]) -> None:
        """Replay the first segment under the settings it ran with."""
        self.cfg = config_from_record(config)

    def replayed(self, config: dict[str, Any]) -> None:
        self.cfg = config_from_record(config)
        self.epoch += 1

    def went_live(self) -> None:
        """At the live edge: if the settings asked for differ from those in effect, record and switch."""
        diff = settings_diff(self.cfg, self.requested)
        if not diff:
            return
        bad = frozen_changes(diff)
        if bad:
            raise ValueError(f"a resumed run cannot change {', '.join(bad)} (recorded measurements would no "
                             f"longer compare); start a new run, or fork this one: ksearch run "
                             f"fork.from={self._run_path} fork.node=ID ...")
        self._record_change(to_plain(self.requested), diff)
        self.cfg = self.requested
        self.epoch += 1
        self._message("settings changed from here on: " +
                      ", ".join(f"{k}: {v[0]} -> {v[1]}" for k, v in diff.items()))
