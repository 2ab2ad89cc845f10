"""The settings whose check depends on this machine: folders and kernel files that must exist now.

Every other choice and range is declared with its field in ksearch/config.py (an Enum, or a check its
`__post_init__` runs); these cannot be, because a dataclass should not touch the file system when it is
built, and the answer changes with the machine a config is used on. Each problem is one line,
`key=value: what is wrong`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ksearch.config import Check, shown


def existing(kind: str, *, optional: bool = True) -> Check:
    """A path that must exist now: kind is 'dir' or 'file'."""
    def check(v: Any) -> str | None:
        if v is None:
            return None if optional else "must be set"
        p = Path(str(v)).expanduser()
        ok = p.is_dir() if kind == "dir" else p.is_file()
        return None if ok else f"{p} is not an existing {'folder' if kind == 'dir' else 'file'}"
    return check


def solution_file(v: Any) -> str | None:
    """A kernel file ksearch can read (source, solution.json or FlashInfer-Bench Solution), or None."""
    if v is None:
        return None
    from ksearch.cli.solution_file import SolutionFileError, read_solution_file

    try:
        read_solution_file(Path(str(v)).expanduser())
    except SolutionFileError as e:
        return str(e)
    return None


def file_not_folder(v: Any) -> str | None:
    """A file to create or use (not an existing folder), or None."""
    if v is None or not Path(str(v)).expanduser().is_dir():
        return None
    return f"{Path(str(v)).expanduser()} is a folder; name a file in it, e.g. {Path(str(v)) / 'baselines.sqlite'}"


RULES: dict[str, Check] = {
    "task.dataset_dir": existing("dir"),
    "task.dir": existing("dir"),
    "llm.replay": existing("dir"),
    "search.seed_solution": solution_file,
    "eval.baseline_cache_path": file_not_folder,
}

# Settings checked elsewhere with their own messages (fork: app.fork_settings).
CHECKED_ELSEWHERE = frozenset({"fork"})


def _get(cfg: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    cur: Any = cfg
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


def violations(cfg: Mapping[str, Any], rules: Mapping[str, Check] = RULES) -> list[str]:
    """One line per setting that breaks its rule, e.g. "task.dir=/x: /x is not an existing folder"."""
    out = []
    for key, rule in rules.items():
        present, value = _get(cfg, key)
        if not present:
            continue
        problem = rule(value)
        if problem:
            out.append(f"{key}={shown(value)}: {problem}")
    return out


def leaf_keys(cfg: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    """Dotted keys of every leaf setting."""
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if key in CHECKED_ELSEWHERE:
            continue
        if isinstance(v, Mapping):
            yield from leaf_keys(v, key + ".")
        else:
            yield key
