"""Hydra structured configs: one dataclass per group, so a typo in an override is an error.

Every setting's choices and range are declared here, with the field: a choice is an Enum (OmegaConf
refuses any other value when the config is composed), a range is a check in the field's metadata that
`__post_init__` runs when the composed config becomes these dataclasses (ksearch.cli.app.checked), and each
problem reads `key=value: what is wrong`. What depends on the machine (a folder or a kernel file that must
exist) is checked in ksearch.config_validate.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum, auto
from typing import Any, ClassVar

from hydra.core.config_store import ConfigStore

from ksearch.eval.report import Metric
from ksearch.eval.trusted.baseline_cache import BaselineCacheMode

#: A value's problem in words ("must be a positive integer"), or None when it is fine.
Check = Callable[[Any], str | None]


class LLMKind(StrEnum):
    offline = auto()            # the built-in model: the task's strategy catalog, no network
    litellm = auto()            # any provider through litellm


class ReasoningEffort(StrEnum):
    minimal = auto()
    low = auto()
    medium = auto()
    high = auto()


class Policy(StrEnum):
    learned = auto()            # evidence + calibration
    greedy = auto()             # K-Search's
    random = auto()             # a baseline


class Language(StrEnum):
    triton = auto()
    cuda = auto()


class PoolKind(StrEnum):
    local = auto()              # worker processes on this host
    ray = auto()                # Ray actors across GPUs and hosts


class Logger(StrEnum):
    none = auto()
    wandb = auto()
    mlflow = auto()


def integer(low: int | None = None, high: int | None = None, *, optional: bool = False) -> Check:
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
           optional: bool = False) -> Check:
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


def text(*, optional: bool = False) -> Check:
    def check(v: Any) -> str | None:
        if v is None:
            return None if optional else "must be set"
        return None if isinstance(v, str) and v.strip() else "must be a non-empty string"
    return check


def device(v: Any) -> str | None:
    if isinstance(v, str) and re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
        return None
    return "must be auto | cpu | cuda | cuda:N"


def setting(default: Any, check: Check) -> Any:
    """A field with its default and the check `__post_init__` runs on its value."""
    return field(default=default, metadata={"check": check})


def shown(value: Any) -> str:
    """A value as an override would write it."""
    return "null" if value is None else str(value)


class SettingError(ValueError):
    """Values a setting's type accepts but ksearch cannot use; `problems` has one line per setting."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


class Checked:
    """Runs every field's check when the group is built (OmegaConf.to_object, or in code)."""

    GROUP: ClassVar[str] = ""

    def __post_init__(self) -> None:
        problems = []
        for f in dataclasses.fields(self):  # type: ignore[arg-type]  # every Checked is a dataclass
            check = f.metadata.get("check")
            value = getattr(self, f.name)
            why = check(value) if check is not None else None
            if why:
                problems.append(f"{self.GROUP}.{f.name}={shown(value)}: {why}")
        problems += self.also()
        if problems:
            raise SettingError(problems)

    def also(self) -> list[str]:
        """Problems that involve more than one field."""
        return []


@dataclass
class TaskConfig(Checked):
    GROUP: ClassVar[str] = "task"

    name: str = setting("gqa_paged_decode_h32_kv4_d128_ps1", text())
    dataset_dir: str | None = None     # a local FlashInfer-Trace copy: its workloads replace the synthesised ones
    dir: str | None = None             # a folder of task folders of your own (searched before the bundled ones)


@dataclass
class LLMConfig(Checked):
    GROUP: ClassVar[str] = "llm"

    kind: LLMKind = LLMKind.offline
    model: str | None = setting(None, text(optional=True))       # litellm model name, e.g. openai/gpt-5.2
    temperature: float | None = setting(None, number(0, 2, optional=True))
    max_tokens: int | None = setting(None, integer(1, optional=True))
    timeout_s: float = setting(600.0, number(above=0))
    max_retries: int = setting(4, integer(0))
    api_base: str | None = setting(None, text(optional=True))    # an OpenAI-compatible server, e.g. a local vLLM
    reasoning_effort: ReasoningEffort | None = None              # for models that reason
    edit_retries: int = setting(3, integer(0))                      # re-asks when an edit script is invalid
    #: budgets: the run ends cleanly once this much is spent, or this many requests were made (replayed
    #: ones are free)
    max_cost_usd: float | None = setting(None, number(above=0, optional=True))
    max_requests: int | None = setting(None, integer(1, optional=True))
    replay: str | None = None          # RUN_DIR: answer every request from that run's recorded replies
    replay_measurements: bool = True      # with replay: also take that run's measurements (exact re-run)
    cache_dir: str | None = setting(None, text(optional=True))   # shared response cache (default: the run's own)

    def also(self) -> list[str]:
        if self.kind == LLMKind.litellm and not self.model and not self.replay:
            return ["llm=litellm needs llm.model=<provider>/<model> (e.g. openai/gpt-5.2)"]
        return []


@dataclass
class SearchConfig(Checked):
    GROUP: ClassVar[str] = "search"

    max_rounds: int = setting(12, integer(1))               # one round = one code request + one evaluation
    stagnation_window: int = setting(2, integer(1))         # non-improving attempts that end a cycle
    max_rounds_per_cycle: int = setting(3, integer(1))      # hard cap on a cycle's length
    max_difficulty: int = setting(4, integer(1, 5))         # selection cap; never raised by the search
    max_failed_cycles: int = setting(2, integer(1))         # a node with this many failed cycles is retired
    max_new_nodes: int = setting(3, integer(1))             # per edit script (the initial world model: up to 8)
    improvement_margin: float = setting(0.01, number(0, 1))  # relative gain that counts as an improvement
    explore_weight: float = setting(0.35, number(0))        # bonus for little-tried kernel families (0 = greedy)
    #: a kernel file (or FlashInfer-Bench Solution JSON) to evaluate first, attached to the root
    seed_solution: str | None = None
    policy: Policy = Policy.learned
    language: Language = Language.triton  # what code requests ask for (either is accepted)
    parallel: int = setting(1, integer(1))                  # action cycles in flight at once, on different nodes


@dataclass
class EvalConfig(Checked):
    GROUP: ClassVar[str] = "eval"

    device: str = setting("auto", device)
    #: auto (dataset if task.dataset_dir, else tiny on CPU / feedback on GPU) or a set the task has (tiny |
    #: feedback | full | dataset ...), checked against the task
    workloads: str = setting("auto", text())
    timeout_s: float = setting(300.0, number(above=0))
    warmup: int = setting(10, integer(0))                   # GPU; on the CPU interpreter cpu_warmup
    #: read by nothing (a GPU window holds ~25 ms of calls, a CPU timing call is a checked call); kept so
    #: configs and runs that set them still load
    iterations: int = setting(50, integer(1))
    cpu_warmup: int = setting(0, integer(0))
    cpu_iterations: int = setting(1, integer(1))
    trials: int = setting(3, integer(1))                    # timing trials per workload (GPU): their spread is noise
    check_trials: int = setting(2, integer(1))              # correctness checks per workload, each on fresh inputs
    static_checks: bool = True            # refuse forbidden source (reference imports, file/network, timer patches)
    remeasure_near_ties: bool = True      # re-measure a candidate within noise of the best, interleaved
    metric: Metric = Metric.gpu_time      # the score's clock on a GPU (a CPU has only call latency)
    pool: PoolKind = PoolKind.local
    ray_address: str | None = setting(None, text(optional=True))  # pool=ray: the cluster to join (None: start one)
    validate: str | None = setting("auto", text(optional=True))   # held-out set to confirm the best on (None: skip)
    #: (GPU) the advisory profile after timing: registers, spills, occupancy, launches, % of the limit, for the
    #: model's next step; unset or true: on, false: off (it never changes a verdict or a score)
    profile: bool | None = None
    #: the baseline cache across runs (ksearch/eval/trusted/baseline_cache.py): auto (on for CUDA, off on a CPU)
    #: | on | off | refresh (measure, and replace what it held); entries older than max_age_h are measured again
    baseline_cache: BaselineCacheMode = BaselineCacheMode.auto
    baseline_cache_max_age_h: float = setting(12.0, number(above=0))
    #: its SQLite file (default: $XDG_CACHE_HOME/ksearch/baselines.sqlite, beside memory.path's default)
    baseline_cache_path: str | None = setting(None, text(optional=True))


@dataclass
class RunConfig(Checked):
    GROUP: ClassVar[str] = "run"

    dir: str | None = setting(None, text(optional=True))  # default runs/<task>/<timestamp>
    seed: int = setting(0, integer(0))                      # input synthesis seed
    live: bool = True                     # live progress display


@dataclass
class MemoryConfig(Checked):
    GROUP: ClassVar[str] = "memory"

    enabled: bool = True                  # memory=off: neither read nor write the knowledge store
    write: bool = True                    # false: start from the store but add nothing (arms compared on equal footing)
    # the store's SQLite file (default: $XDG_CACHE_HOME/ksearch/knowledge.sqlite)
    path: str | None = setting(None, text(optional=True))


@dataclass
class Config:
    task: TaskConfig = field(default_factory=TaskConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    run: RunConfig = field(default_factory=RunConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    # fork.from=RUN_DIR fork.node=ID: start from the path root..ID of another run's tree ("from" is a
    # Python keyword, so this group is a checked mapping rather than a dataclass; see app.fork_settings).
    fork: Any = field(default_factory=lambda: {"from": None, "node": None})
    logger: Logger = Logger.none          # imported only when chosen


def problems(cfg: Any) -> list[str]:
    """Every group's checks on a composed config (a DictConfig), one line per problem."""
    from omegaconf import DictConfig, OmegaConf

    out: list[str] = []
    for name in cfg:
        node = cfg[name]
        if isinstance(node, DictConfig) and isinstance(OmegaConf.get_type(node), type) \
                and issubclass(OmegaConf.get_type(node), Checked):  # type: ignore[arg-type]  # a type: just checked
            try:
                OmegaConf.to_object(node)
            except SettingError as e:
                out += e.problems
    return out


def refusal(key: str, value: Any) -> str | None:
    """What OmegaConf refused when `key=value` does not fit the setting's type, in the words of the checks
    above (its own message names neither the key nor the choices); None for a key that is no setting."""
    kind = _field_type(key)
    if kind is None:
        return None
    if issubclass(kind, StrEnum):
        why = f"must be one of {' | '.join(kind.__members__)}"
    elif issubclass(kind, bool):
        why = "must be true or false"
    elif issubclass(kind, int):
        why = "must be an integer"
    elif issubclass(kind, float):
        why = "must be a number"
    else:
        return None
    return f"{key}={shown(value)}: {why}"


def _field_type(key: str) -> type | None:
    import types
    import typing

    cls: Any = Config
    for part in key.split("."):
        if not dataclasses.is_dataclass(cls):
            return None
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return None
        cls = hints[part]
        args = [a for a in typing.get_args(cls) if a is not type(None)]
        if typing.get_origin(cls) in (typing.Union, types.UnionType) and len(args) == 1:
            cls = args[0]           # X | None, or Optional[X]
    return cls if isinstance(cls, type) else None


def register_configs(task_names: list[str]) -> None:
    """Schemas for every group, plus one `task` option per task folder so `task=<name>` just works."""
    cs = ConfigStore.instance()
    # Only the root schema is stored: the group files merge into its typed fields, so a misspelt key is
    # still an error and no `llm=llm_schema`-style pseudo-option is offered.
    cs.store(name="config_schema", node=Config)
    for name in task_names:
        cs.store(group="task", name=name, node=TaskConfig(name=name))


def to_plain(cfg: Any) -> dict[str, Any]:
    """The config as plain data: choices as their strings."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]  # of a dict
