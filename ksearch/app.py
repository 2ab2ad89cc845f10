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
                            run_seed=cfg.run.seed)
    return device, set_name, workloads, settings


def execute(cfg: DictConfig, run_path: Path, *, fresh: bool, progress: Any = None):
    """Run (fresh) or resume the search described by `cfg` in `run_path`. Returns the SearchOutcome."""
    from ksearch.eval.evaluator import Evaluator
    from ksearch.llm import build_model
    from ksearch.planner.search import Search
    from ksearch.store import Journal, RunDir
    from ksearch.task import load_task

    c: Config = cfg  # type: ignore[assignment]
    task = load_task(c.task.name)
    device, set_name, workloads, settings = resolve_eval(cfg, task)
    run = RunDir(run_path)
    if fresh:
        run.create(OmegaConf.to_yaml(cfg))
    elif not run.exists():
        raise ConfigError(f"{run_path} holds no run to resume")
    else:
        run.config_path.write_text(OmegaConf.to_yaml(cfg))
    llm_kw = OmegaConf.to_container(cfg.llm) if isinstance(cfg.llm, DictConfig) else dict(cfg.llm)
    model = build_model(c.llm.kind, max_new_nodes=c.search.max_new_nodes, **{k: v for k, v in llm_kw.items()
                                                                             if k != "kind"})
    journal = Journal(run.journal_path)
    evaluator = Evaluator(task, settings)
    try:
        search = Search(c, task, model, evaluator, run, journal, workloads, set_name, device, progress)
        return search.run()
    finally:
        evaluator.close()
        journal.close()
