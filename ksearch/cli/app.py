"""Wiring: compose a config, build the task, model, evaluator and run directory, run or resume a search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ksearch import data_dir
from ksearch.config import Config, register_configs


class ConfigError(ValueError):
    """A bad override or config file; the message names the key and the fix."""


def conf_dir() -> Path:
    return data_dir("conf")


def _task_dir_override(overrides: list[str]) -> str | None:
    """`task.dir=PATH` must be known before composing: it decides which `task=` options exist."""
    for o in overrides:
        key, eq, value = o.lstrip("+~").partition("=")
        if eq and key.strip() == "task.dir" and value.strip() not in ("", "null"):
            return value.strip()
    return None


def checked(cfg: DictConfig) -> DictConfig:
    """`cfg` against the schema (keys added with `+` included), every setting's own checks (ksearch.config)
    and the machine's (ksearch.config_validate)."""
    from ksearch.config import problems, to_plain
    from ksearch.config_validate import leaf_keys, violations

    plain = to_plain(cfg)
    known = set(leaf_keys(to_plain(OmegaConf.structured(Config))))
    unknown = sorted(set(leaf_keys(plain)) - known)
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not a setting of ksearch (a `+key=` override cannot add one); "
                          f"ksearch/config.py lists the settings")
    bad = problems(cfg) + violations(plain)
    if bad:
        raise ConfigError("; ".join(bad))
    return cfg


def _not_a_value(e: Exception) -> str | None:
    """OmegaConf's refusal of a value its setting's type does not take, as `key=value: must be ...`."""
    from ksearch.config import refusal

    for err in (e, e.__cause__):
        key, value = getattr(err, "full_key", None), getattr(err, "value", None)
        problem = refusal(str(key), value) if key else None
        if problem:
            return problem
    return None


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def compose_config(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ksearch.config_hints import first_problem
    from ksearch.task import add_task_dirs, list_tasks

    user_dir = _task_dir_override(overrides)
    if user_dir:
        if not Path(user_dir).expanduser().is_dir():
            raise ConfigError(f"task.dir={user_dir}: not an existing folder (it should hold task folders, e.g. "
                              f"made by `ksearch task new DEFINITION.json --dir {user_dir}`)")
        add_task_dirs(user_dir)
    problem = first_problem(overrides, conf_dir())
    if problem:
        raise ConfigError(problem)
    register_configs(list_tasks())
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
            cfg = compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_not_a_value(e) or f"{_first_line(e)} (overrides look like group=option or "
                                                f"key.sub=value)") from None
    return checked(cfg)


def load_saved_config(run_dir: Path, overrides: list[str]) -> DictConfig:
    """A run's saved config, validated against the schema, with `overrides` applied on top."""
    from omegaconf.errors import OmegaConfBaseException

    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml); `ksearch run` creates one")
    from ksearch.task import add_task_dirs

    groups = [o for o in overrides if "=" in o and "." not in o.split("=", 1)[0].lstrip("+~")]
    if any(o.split("=", 1)[0].lstrip("+~") == "task" for o in groups):
        raise ConfigError(f"resume cannot change task: the recorded measurements would no longer compare. "
                          f"Start a new run, or branch this one with `ksearch run fork.from={run_dir} "
                          f"fork.node=ID {' '.join(groups)}`")
    if groups:
        raise ConfigError(f"{' '.join(groups)}: resume takes key.sub=value overrides (e.g. llm.kind=litellm "
                          f"llm.model=openai/gpt-5.2), not group=option")
    from ksearch.config_hints import first_problem

    problem = first_problem(overrides, conf_dir())
    if problem:
        raise ConfigError(problem)
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.load(path))
        if overrides:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([o.lstrip("+") for o in overrides]))
    except OmegaConfBaseException as e:
        raise ConfigError(_not_a_value(e) or _first_line(e)) from None
    if cfg.task.get("dir"):
        add_task_dirs(cfg.task.dir)
    return checked(cfg)  # type: ignore[arg-type]


def check_device(cfg: DictConfig) -> str:
    """The device eval.device names on this machine (auto resolved); a ConfigError when it has none such."""
    from ksearch.eval.parent.evaluator import resolve_device

    try:
        device = resolve_device(cfg.eval.device)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(str(e)) from None
    if device.startswith("cuda:"):
        import torch

        if int(device.split(":")[1]) >= torch.cuda.device_count():
            raise ConfigError(f"eval.device={device}: this machine has {torch.cuda.device_count()} CUDA "
                              f"device(s), numbered from 0")
    return device


def resolve_eval(cfg: DictConfig, task: Any) -> tuple[str, str, list[Any], Any]:
    """(device, workload set name, workloads, EvalSettings) for a config: one place for the CPU/GPU split."""
    from ksearch.eval.parent.evaluator import EvalSettings

    device = check_device(cfg)
    on_gpu = device.startswith("cuda")
    dataset = cfg.task.get("dataset_dir")
    if dataset and cfg.eval.workloads in ("auto", "dataset"):
        set_name, workloads = "dataset", task.dataset_workloads(dataset)
    else:
        set_name = cfg.eval.workloads if cfg.eval.workloads != "auto" else task.default_workload_set(on_gpu)
        sets = task.workload_sets()
        if set_name not in sets:
            raise ConfigError(f"eval.workloads={set_name}: task {task.name} has the workload sets "
                              f"{' | '.join(sorted(sets))} (or auto, or dataset with task.dataset_dir)")
        workloads = sets[set_name]
    settings = EvalSettings(device=device, timeout_s=cfg.eval.timeout_s,
                            warmup=cfg.eval.warmup if on_gpu else cfg.eval.cpu_warmup,
                            run_seed=cfg.run.seed, metric=cfg.eval.metric,
                            # on a CPU the checked calls are the timing samples: no extra interpreted calls
                            trials=cfg.eval.trials if on_gpu else min(cfg.eval.trials, cfg.eval.check_trials),
                            check_trials=cfg.eval.check_trials,
                            static_checks=cfg.eval.static_checks, profile=cfg.eval.profile is not False,
                            baseline_cache=cfg.eval.baseline_cache,
                            baseline_cache_max_age_h=cfg.eval.baseline_cache_max_age_h,
                            baseline_cache_path=cfg.eval.baseline_cache_path)
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
    from ksearch.store import read_records
    from ksearch.store.state import fold

    cfg = fold(read_records(run_path / "journal.jsonl")[0]).config
    return OmegaConf.merge(OmegaConf.structured(Config), cfg) if cfg else None  # type: ignore[return-value]


def check_llm_credentials(cfg: DictConfig) -> None:
    """Fail before any run folder exists when llm=litellm lacks the provider's API key (a missing key
    would otherwise surface only on the first request, looking like a provider outage)."""
    llm = cfg.llm
    if llm.kind != "litellm" or llm.get("replay") or llm.get("api_base"):
        return
    from ksearch.llm.base import ModelError
    from ksearch.llm.litellm_model import import_litellm

    try:
        litellm = import_litellm()          # no network fetch of the cost map at import
    except ModelError as e:
        raise ConfigError(str(e)) from None
    try:
        env = litellm.validate_environment(model=llm.model)
    except Exception:       # noqa: BLE001 - an unknown provider: the first request reports it with litellm's own words
        return
    missing = env.get("missing_keys") or [] if isinstance(env, dict) else []
    if missing:
        raise ConfigError(f"llm.model={llm.model} needs {', '.join(missing)} in the environment (not set); "
                          f"export it, or point llm.api_base= at an OpenAI-compatible server")


def _model_settings(cfg: DictConfig) -> dict[str, Any]:
    llm = OmegaConf.to_container(cfg.llm, enum_to_str=True) if isinstance(cfg.llm, DictConfig) else dict(cfg.llm)
    assert isinstance(llm, dict)        # a config group is a mapping
    return {str(k): v for k, v in llm.items() if k not in ("kind", "replay_measurements")}


def execute(cfg: DictConfig, run_path: Path, *, fresh: bool, progress: Any = None) -> Any:
    """Run (fresh) or resume the search described by `cfg` in `run_path`. Returns the SearchOutcome.

    One writer per run directory: the run's lock is taken before anything is written there (a second
    process is refused with RunLocked) and held until the search has stopped and the journal is closed.
    """
    from ksearch.store import RunDir
    from ksearch.store.lock import RunLock

    run = RunDir(run_path)
    if not fresh and not run.exists():
        raise ConfigError(f"{run_path} holds no run to resume")
    with RunLock(run_path, create_dir=fresh, before_claim=run.ensure_new if fresh else None):
        try:
            return _execute_locked(cfg, run_path, fresh=fresh, progress=progress)
        except BaseException:
            if fresh:
                run.discard_if_empty()      # then the lock removes the folder it made, if that is all left
            raise


def preflight(cfg: DictConfig) -> None:
    """Everything a fresh run can be refused for without measuring anything, checked before its folder is
    made or named: the device, the task and its workload set, fork settings, the model's language, the
    evaluation pool and the model's credentials."""
    from ksearch.task import load_task

    resolve_eval(cfg, load_task(cfg.task.name))
    fork_settings(cfg)
    if cfg.search.language == "cuda" and cfg.llm.kind == "offline" and not cfg.llm.get("replay"):
        raise ConfigError("search.language=cuda: the offline model writes its task's strategy catalog, which it "
                          "cannot restrict to CUDA (mostly Triton templates; a CUDA family only where a catalog has "
                          "one); ask a model for CUDA with llm=litellm llm.model=<provider>/<model>, or drop "
                          "search.language")
    if cfg.eval.pool == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("eval.pool=ray needs Ray: pip install 'ksearch[ray]' (or eval.pool=local)") from None
    check_memory(cfg)
    check_llm_credentials(cfg)


def check_memory(cfg: DictConfig) -> None:
    """With memory on, its store must open (a folder it can write, a file that is a store)."""
    if not cfg.memory.enabled:
        return
    from ksearch.knowledge.run_memory import store_path
    from ksearch.knowledge.store import KnowledgeStore, StoreError

    try:
        KnowledgeStore(store_path(cfg.memory)).close()
    except StoreError as e:
        raise ConfigError(f"memory: {e}; pass a writable memory.path=FILE, or memory=off") from None


def open_memory(cfg: DictConfig, task: Any) -> Any:
    """The run's link to the knowledge store (ksearch/knowledge/run_memory.py), settings checked."""
    from ksearch.knowledge.run_memory import RunMemory
    from ksearch.knowledge.store import StoreError

    try:
        return RunMemory.for_run(cfg, task)
    except StoreError as e:
        raise ConfigError(f"memory: {e}; pass a writable memory.path=FILE, or memory=off") from None


def _execute_locked(cfg: DictConfig, run_path: Path, *, fresh: bool, progress: Any = None) -> Any:
    from ksearch.eval.parent.pool import build_pool
    from ksearch.llm import build_model
    from ksearch.planner.search import Search, Services, Target, frozen_changes, settings_diff
    from ksearch.store import Journal, RunDir
    from ksearch.store.atomic import atomic_write
    from ksearch.store.fork import ForkError, load_fork, seed_from_own_journal
    from ksearch.store.replay import RecordedEvaluator, recorded_generators
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
        check_llm_credentials(cfg)
        try:
            run.create(OmegaConf.to_yaml(cfg))
        except PermissionError as e:
            raise ConfigError(f"run.dir={run_path}: cannot write there ({e.strerror}); pass a writable "
                              f"run.dir=PATH") from None
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

    memory = open_memory(cfg, task)
    if c.llm.replay and c.llm.replay_measurements:
        evaluator: Any = RecordedEvaluator(Path(c.llm.replay), pool, notify)
    else:
        evaluator = pool()
    try:
        generators = recorded_generators(Path(c.llm.replay)) if c.llm.replay else None
        services = Services(model, evaluator, progress, memory, generators) if progress is not None else \
            Services(model, evaluator, memory=memory, generators=generators)
        search = Search(c, Target(task, workloads, set_name, device), services, run, journal, fork=fork)
        return search.run()
    finally:
        evaluator.close()
        journal.close()
        memory.close()
