"""Hydra structured configs: one dataclass per group, so a typo in an override is an error."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class TaskConfig:
    name: str = "gqa_paged_decode_h32_kv4_d128_ps1"
    dataset_dir: Optional[str] = None     # a local FlashInfer-Trace copy: its workloads replace the synthesised ones
    dir: Optional[str] = None             # a folder of task folders of your own (searched before the bundled ones)


@dataclass
class LLMConfig:
    kind: str = "offline"                 # offline | litellm
    model: Optional[str] = None           # litellm model name, e.g. openai/gpt-5.2
    temperature: Optional[float] = None
    max_tokens: Optional[int] = None
    timeout_s: float = 600.0
    max_retries: int = 4
    api_base: Optional[str] = None        # an OpenAI-compatible server, e.g. a local vLLM
    reasoning_effort: Optional[str] = None  # low | medium | high, for models that reason
    edit_retries: int = 3                 # re-asks when an edit script is invalid
    max_cost_usd: Optional[float] = None  # budget: the run ends cleanly once spent
    max_requests: Optional[int] = None    # budget: model requests (replayed ones are free)
    replay: Optional[str] = None          # RUN_DIR: answer every request from that run's recorded replies
    replay_measurements: bool = True      # with replay: also take that run's measurements (exact re-run)
    cache_dir: Optional[str] = None       # shared content-addressed response cache (default: the run's own)


@dataclass
class SearchConfig:
    max_rounds: int = 12                  # one round = one code request + one evaluation
    stagnation_window: int = 2            # non-improving attempts that end a cycle
    max_rounds_per_cycle: int = 3         # hard cap on a cycle's length
    max_difficulty: int = 4               # selection cap; never raised by the search
    max_failed_cycles: int = 2            # a node with this many failed cycles is retired
    max_new_nodes: int = 3                # per edit script (the initial world model may add up to 8)
    improvement_margin: float = 0.01      # relative gain that counts as an improvement
    explore_weight: float = 0.35          # bonus for actions in little-tried kernel families (0 = greedy)
    seed_solution: Optional[str] = None   # a kernel file (or FlashInfer-Bench Solution JSON) to evaluate first, attached to the root
    policy: str = "learned"               # learned (evidence + calibration) | greedy (K-Search) | random (baseline)
    language: str = "triton"              # what code requests ask for: triton | cuda (either is accepted)
    parallel: int = 1                     # action cycles in flight at once, on different frontier nodes


@dataclass
class EvalConfig:
    device: str = "auto"                  # auto | cpu | cuda
    workloads: str = "auto"               # auto (dataset if task.dataset_dir, else tiny on CPU / feedback on GPU) | tiny | feedback | full | dataset
    timeout_s: float = 300.0
    warmup: int = 10                      # GPU; on the CPU interpreter 1
    iterations: int = 50                  # unused on the GPU (a graph replay holds ~25 ms of calls, >= 3); CPU: cpu_iterations
    cpu_warmup: int = 0
    cpu_iterations: int = 1
    trials: int = 3                       # timing trials per workload (GPU); their spread is the noise
    check_trials: int = 2                 # correctness checks per workload, each on fresh random inputs
    static_checks: bool = True            # refuse forbidden source (reference imports, file/network, timer patches)
    remeasure_near_ties: bool = True      # re-measure a candidate within noise of the best, interleaved
    metric: str = "gpu_time"              # gpu_time (graph replay / kernel time) | call_latency (eager, host included)
    pool: str = "local"                   # local worker processes | ray actors
    ray_address: Optional[str] = None     # with pool=ray: the cluster to join (None: start a local one)
    validate: Optional[str] = "auto"      # held-out workload set to confirm the best kernel on (None: skip)


@dataclass
class RunConfig:
    dir: Optional[str] = None             # default runs/<task>/<timestamp>
    seed: int = 0                         # input synthesis seed
    live: bool = True                     # live progress display


@dataclass
class MemoryConfig:
    enabled: bool = True                  # memory=off: neither read nor write the knowledge store
    write: bool = True                    # false: start from the store but add nothing (arms compared on equal footing)
    path: Optional[str] = None            # the store's SQLite file (default: $XDG_CACHE_HOME/ksearch/knowledge.sqlite)


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
    logger: str = "none"                  # none | wandb | mlflow (imported only when chosen)


def register_configs(task_names: list[str]) -> None:
    """Schemas for every group, plus one `task` option per task folder so `task=<name>` just works."""
    cs = ConfigStore.instance()
    # Only the root schema is stored: the group files merge into its typed fields, so a misspelt key is
    # still an error and no `llm=llm_schema`-style pseudo-option is offered.
    cs.store(name="config_schema", node=Config)
    for name in task_names:
        cs.store(group="task", name=name, node=TaskConfig(name=name))


def to_plain(cfg: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
