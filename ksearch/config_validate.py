"""Every setting checked once, when the config is composed: one table of rules, one-line errors.

Hydra and OmegaConf already refuse unknown keys and wrong types; the rules here refuse values that type
checks accept but the search cannot use (`search.max_rounds=0`, `eval.trials=-5`, `search.policy=bogus`).
To add a setting, add its dotted key to RULES with one of the rule makers below (or any function that
returns an error text, or None when the value is fine); tests/test_cli_errors.py fails for a config field
that has no rule.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

Rule = Callable[[Any], "str | None"]


def one_of(*choices: str, optional: bool = False) -> Rule:
    def check(v: Any) -> str | None:
        if v is None and optional:
            return None
        return None if v in choices else f"must be one of {' | '.join(choices)}"
    return check


def integer(low: int | None = None, high: int | None = None, *, optional: bool = False) -> Rule:
    def check(v: Any) -> str | None:
        if v is None:
            return None if optional else "must be set"
        if isinstance(v, bool) or not isinstance(v, int):
            return "must be an integer"
        if low is not None and v < low:
            return "must be a positive integer" if low == 1 and high is None else f"must be >= {low}"
        if high is not None and v > high:
            return f"must be <= {high}"
        return None
    return check


def number(low: float | None = None, high: float | None = None, *, above: float | None = None,
           optional: bool = False) -> Rule:
    def check(v: Any) -> str | None:
        if v is None:
            return None if optional else "must be set"
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return "must be a number"
        if above is not None and v <= above:
            return "must be positive" if above == 0 else f"must be > {above}"
        if low is not None and v < low:
            return f"must be >= {low}"
        if high is not None and v > high:
            return f"must be <= {high}"
        return None
    return check


def text(*, optional: bool = False) -> Rule:
    def check(v: Any) -> str | None:
        if v is None:
            return None if optional else "must be set"
        return None if isinstance(v, str) and v.strip() else "must be a non-empty string"
    return check


def flag(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def existing(kind: str, *, optional: bool = True) -> Rule:
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
    from ksearch.solution_file import SolutionFileError, read_solution_file

    try:
        read_solution_file(Path(str(v)).expanduser())
    except SolutionFileError as e:
        return str(e)
    return None


def device(v: Any) -> str | None:
    if isinstance(v, str) and re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
        return None
    return "must be auto | cpu | cuda | cuda:N"


RULES: dict[str, Rule] = {
    "task.name": text(),
    "task.dataset_dir": existing("dir"),
    "task.dir": existing("dir"),
    "llm.kind": one_of("offline", "litellm"),
    "llm.model": text(optional=True),
    "llm.temperature": number(0, 2, optional=True),
    "llm.max_tokens": integer(1, optional=True),
    "llm.timeout_s": number(above=0),
    "llm.max_retries": integer(0),
    "llm.api_base": text(optional=True),
    "llm.reasoning_effort": one_of("minimal", "low", "medium", "high", optional=True),
    "llm.edit_retries": integer(0),
    "llm.max_cost_usd": number(above=0, optional=True),
    "llm.max_requests": integer(1, optional=True),
    "llm.replay": existing("dir"),
    "llm.replay_measurements": flag,
    "llm.cache_dir": text(optional=True),
    "search.max_rounds": integer(1),
    "search.stagnation_window": integer(1),
    "search.max_rounds_per_cycle": integer(1),
    "search.max_difficulty": integer(1, 5),
    "search.max_failed_cycles": integer(1),
    "search.max_new_nodes": integer(1),
    "search.improvement_margin": number(0, 1),
    "search.explore_weight": number(0),
    "search.seed_solution": solution_file,
    "search.policy": one_of("learned", "greedy", "random"),
    "search.language": one_of("triton", "cuda"),
    "search.parallel": integer(1),
    "eval.device": device,
    "eval.workloads": text(),          # the task's own sets (tiny, feedback, full ...), checked against the task
    "eval.timeout_s": number(above=0),
    "eval.warmup": integer(0),
    "eval.iterations": integer(1),
    "eval.cpu_warmup": integer(0),
    "eval.cpu_iterations": integer(1),
    "eval.trials": integer(1),
    "eval.check_trials": integer(1),
    "eval.static_checks": flag,
    "eval.remeasure_near_ties": flag,
    "eval.metric": one_of("gpu_time", "call_latency"),
    "eval.pool": one_of("local", "ray"),
    "eval.ray_address": text(optional=True),
    "eval.validate": text(optional=True),
    "run.dir": text(optional=True),
    "run.seed": integer(0),
    "run.live": flag,
    "memory.enabled": flag,
    "memory.write": flag,
    "memory.path": text(optional=True),
    "logger": one_of("none", "wandb", "mlflow"),
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


def violations(cfg: Mapping[str, Any], rules: Mapping[str, Rule] = RULES) -> list[str]:
    """One line per setting that breaks its rule, e.g. "search.max_rounds=0: must be a positive integer"."""
    out = []
    for key, rule in rules.items():
        present, value = _get(cfg, key)
        if not present:
            continue
        problem = rule(value)
        if problem:
            shown = "null" if value is None else value
            out.append(f"{key}={shown}: {problem}")
    if cfg.get("llm", {}).get("kind") == "litellm" and not cfg["llm"].get("model") and not cfg["llm"].get("replay"):
        out.append("llm=litellm needs llm.model=<provider>/<model> (e.g. openai/gpt-5.2)")
    return out


def leaf_keys(cfg: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    """Dotted keys of every leaf setting (for the test that every field has a rule)."""
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if key in CHECKED_ELSEWHERE:
            continue
        if isinstance(v, Mapping):
            yield from leaf_keys(v, key + ".")
        else:
            yield key
