"""Wiring: compose a config, build the task, model, evaluator and run directory, run or resume a search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ksearch import PROJECT_ROOT
from ksearch.config import Config, register_configs


class ConfigError(ValueError):
    """A bad override or config file; the message names the key and the fix."""


def conf_dir() -> Path:
    return PROJECT_ROOT / "conf"


def compose_config(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ksearch.task import list_tasks

    register_configs(list_tasks())
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
            return compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"{e}\n(overrides look like group=option or key.sub=value; `ksearch tasks` lists tasks)") \
            from None


def load_saved_config(run_dir: Path, overrides: list[str]) -> DictConfig:
    """A run's saved config, validated against the schema, with `overrides` applied on top."""
    from omegaconf.errors import OmegaConfBaseException

    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml); `ksearch run` creates one")
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.load(path))
        if overrides:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(overrides))
    except OmegaConfBaseException as e:
        raise ConfigError(f"{e}") from None
    return cfg  # type: ignore[return-value]


def resolve_eval(cfg: DictConfig, task: Any) -> tuple[str, str, list[Any], Any]:
    """(device, workload set name, workloads, EvalSettings) for a config: one place for the CPU/GPU split."""
    from ksearch.eval.evaluator import EvalSettings, resolve_device

    device = resolve_device(cfg.eval.device)
    on_gpu = device.startswith("cuda")
    dataset = cfg.task.get("dataset_dir")
    if dataset and cfg.eval.workloads in ("auto", "dataset"):
        set_name, workloads = "dataset", task.dataset_workloads(dataset)
    else:
        set_name = cfg.eval.workloads if cfg.eval.workloads != "auto" else task.default_workload_set(on_gpu)
        workloads = task.workload_set(set_name)
    settings = EvalSettings(device=device, timeout_s=cfg.eval.timeout_s,
                            warmup=cfg.eval.warmup if on_gpu else cfg.eval.cpu_warmup,
                            iterations=cfg.eval.iterations if on_gpu else cfg.eval.cpu_iterations,
                            run_seed=cfg.run.seed, trials=cfg.eval.trials, check_trials=cfg.eval.check_trials,
                            static_checks=cfg.eval.static_checks)
    return device, set_name, workloads, settings


def fork_settings(cfg: DictConfig) -> tuple[str | None, str | None]:
    """(fork.from, fork.node), checked: `fork` is a plain mapping (its key `from` is a Python keyword)."""
    fork = cfg.get("fork") or {}
    unknown = set(fork) - {"from", "node"}
    if unknown:
        raise ConfigError(f"unknown fork settings {sorted(unknown)}; use fork.from=RUN_DIR fork.node=ID")
    src, node = fork.get("from"), fork.get("node")
    if node and not src:
        raise ConfigError("fork.node needs fork.from=RUN_DIR (the run to fork)")
    return (str(src) if src else None), (str(node) if node is not None else None)


def recorded_settings(run_path: Path) -> DictConfig | None:
    """The settings a run's journal says are in effect at its end (first segment + recorded changes)."""
    from ksearch.store import records as R

    records, _ = R.read_records(run_path / "journal.jsonl")
    cfg = None
    for r in records:
        if isinstance(r, (R.RunStart, R.ConfigChange)) and r.config:
            cfg = r.config
    return OmegaConf.merge(OmegaConf.structured(Config), cfg) if cfg else None  # type: ignore[return-value]


def _model_settings(cfg: DictConfig) -> dict[str, Any]:
    llm = OmegaConf.to_container(cfg.llm) if isinstance(cfg.llm, DictConfig) else dict(cfg.llm)
    return {k: v for k, v in llm.items() if k not in ("kind", "replay_measurements")}


def execute(cfg: DictConfig, run_path: Path, *, fresh: bool, progress: Any = None):
    """Run (fresh) or resume the search described by `cfg` in `run_path`. Returns the SearchOutcome."""
    from ksearch.eval.pool import build_pool
    from ksearch.llm import build_model
    from ksearch.planner.search import Search, frozen_changes, settings_diff
    from ksearch.store import Journal, RunDir
    from ksearch.store.fork import ForkError, load_fork, seed_from_own_journal
    from ksearch.store.replay import RecordedEvaluator
    from ksearch.store.rundir import atomic_write
    from ksearch.task import load_task

    c: Config = cfg  # type: ignore[assignment]
    task = load_task(c.task.name)
    device, set_name, workloads, settings = resolve_eval(cfg, task)
    run = RunDir(run_path)
    fork_from, fork_node = fork_settings(cfg)
    fork = None
    if fresh:
        if fork_from:
            try:
                fork = load_fork(Path(fork_from), fork_node)
            except ForkError as e:
                raise ConfigError(str(e)) from None
        run.create(OmegaConf.to_yaml(cfg))
    elif not run.exists():
        raise ConfigError(f"{run_path} holds no run to resume")
    else:
        recorded = recorded_settings(run_path)
        if recorded is not None:
            bad = frozen_changes(settings_diff(recorded, cfg))
            if bad:
                raise ConfigError(f"resume cannot change {', '.join(bad)}: the recorded measurements would no "
                                  f"longer compare. Start a new run, or branch this one with `ksearch run "
                                  f"fork.from={run_path} fork.node=ID ...`")
        if fork_from:    # rebuilt from this run's own records (the source run may be gone by now)
            fork = seed_from_own_journal(run_path)
        atomic_write(run.config_path, OmegaConf.to_yaml(cfg))
    model = build_model(c.llm.kind, run_dir=run_path, max_new_nodes=c.search.max_new_nodes,
                        **_model_settings(cfg))
    journal = Journal(run.journal_path)
    notify = progress.message if progress is not None else print

    def pool() -> Any:     # local evaluators or Ray actors, one per GPU or per cycle slot (search.parallel)
        try:
            return build_pool(c.eval.pool, task, settings, max(1, c.search.parallel), ray_address=c.eval.ray_address)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    if c.llm.replay and c.llm.replay_measurements:
        evaluator: Any = RecordedEvaluator(Path(c.llm.replay), pool, notify)
    else:
        evaluator = pool()
    try:
        search = Search(c, task, model, evaluator, run, journal, workloads, set_name, device, progress, fork=fork)
        return search.run()
    finally:
        evaluator.close()
        journal.close()
