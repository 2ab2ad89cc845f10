"""Overrides ksearch cannot use, named before Hydra sees them: one line with the nearest real setting.

Hydra's own refusal of `serach.max_rounds=3` is "Could not override 'serach.max_rounds'", which says
neither what is wrong nor what was meant. The checks here know every setting (the structured config),
every group option (the files under conf/ and the task folders) and suggest the closest one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

#: Config groups chosen with `group=option`; `task` options are the task folders.
GROUPS = ("task", "llm", "search", "eval", "memory")
#: Keys that are settings but not fields of a dataclass (see ksearch/config.py: fork is a mapping).
EXTRA_KEYS = ("fork.from", "fork.node")


def known_keys() -> list[str]:
    """Every dotted setting a `key=value` override may name."""
    from omegaconf import OmegaConf

    from ksearch.config import Config
    from ksearch.config_validate import leaf_keys

    plain = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)
    return sorted({*leaf_keys(plain), *EXTRA_KEYS})    # type: ignore[arg-type]  # a structured config: a dict


def group_options(group: str, conf_dir: Path) -> list[str]:
    if group == "task":
        from ksearch.task import list_tasks

        return list_tasks()
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


def _nearest(word: str, choices: Iterable[str]) -> str | None:
    choices = list(choices)
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if close:
        return close[0]
    # a prefix of a long name (task=gqa_paged) is a good guess too
    starts = [c for c in choices if c.startswith(word)] if len(word) >= 3 else []
    return starts[0] if len(starts) == 1 else None


def override_problem(override: str, conf_dir: Path) -> str | None:
    """What is wrong with one `key=value` / `group=option` override, or None when ksearch knows it.

    Only plain overrides are judged here (`+key`, `~key`, `hydra.*` and sweeps are left to Hydra and to
    ksearch.cli.app.checked)."""
    key, eq, value = override.partition("=")
    key = key.strip()
    if not eq or not key or key[0] in "+~" or key.startswith("hydra") or "," in value:
        return None
    if key in GROUPS:
        options = group_options(key, conf_dir)
        value = value.strip()
        if value in options or not options:
            return None
        guess = _nearest(value, options)
        lister = "`ksearch tasks` lists them" if key == "task" else f"options: {' | '.join(options)}"
        return (f"{key}={value}: no such {key}" + (f"; did you mean {key}={guess}?" if guess else "")
                + f" ({lister})")
    keys = known_keys()
    if key in keys:
        return None
    if any(k.startswith(key + ".") for k in keys):
        return f"{key}: a group of settings, not one; set one of its keys, e.g. {_first_under(key, keys)}=..."
    guess = _nearest(key, keys)
    if guess is None:       # a misspelt group with a right leaf (serach.max_rounds): match the leaf's parts
        guess = _nearest(key, [k for k in keys if k.split(".")[-1] == key.split(".")[-1]])
    return (f"{key}: not a setting of ksearch" + (f"; did you mean {guess}={value}?" if guess else "")
            + " (ksearch/config.py lists the settings)")


def _first_under(prefix: str, keys: list[str]) -> str:
    return next(k for k in keys if k.startswith(prefix + "."))


def first_problem(overrides: list[str], conf_dir: Path) -> str | None:
    for o in overrides:
        problem = override_problem(o, conf_dir)
        if problem:
            return problem
    return None
