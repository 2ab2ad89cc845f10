"""The `ksearch` command: run, resume, show, eval, tasks."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

# Wide when piped (logs, CI) so trees are not folded at 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=160)


def _print_outcome(outcome) -> None:
    from ksearch.viz.tree_view import render_tree

    console.print(render_tree(outcome.world_model, best_node_id=outcome.best.node_id if outcome.best else None))
    console.print(f"stopped: {outcome.stop_reason}; {outcome.evaluations} evaluations on {outcome.device}")
    if outcome.best:
        b = outcome.best
        console.print(f"[bold]best[/]: {b.score:.4g}x geomean speedup vs {outcome.baseline_label} "
                      f"(node {b.node_id}, round {b.round_index}, solution {b.solution_id})", highlight=False)
        console.print(f"best kernel: {outcome.run_dir / 'best' / 'solution.py'}", highlight=False)
    else:
        console.print("[red]no passing kernel was found[/]")
    console.print(f"run written to {outcome.run_dir}", highlight=False)


def cmd_run(args: argparse.Namespace) -> int:
    from ksearch.app import compose_config, execute
    from ksearch.store import default_run_dir
    from ksearch.viz.progress import LiveProgress

    cfg = compose_config(args.overrides)
    run_path = Path(cfg.run.dir) if cfg.run.dir else default_run_dir(cfg.task.name)
    console.print(f"run directory: {run_path}", highlight=False)
    progress = LiveProgress(console, live=cfg.run.live)
    try:
        outcome = execute(cfg, run_path, fresh=True, progress=progress)
    finally:
        progress.stop()
    _print_outcome(outcome)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from ksearch.app import execute, load_saved_config
    from ksearch.viz.progress import LiveProgress

    run_path = Path(args.run_dir)
    cfg = load_saved_config(run_path, args.overrides)
    console.print(f"resuming {run_path}", highlight=False)
    progress = LiveProgress(console, live=cfg.run.live)
    try:
        outcome = execute(cfg, run_path, fresh=False, progress=progress)
    finally:
        progress.stop()
    _print_outcome(outcome)
    return 0


def _run_state(run_path: Path) -> dict:
    from ksearch.store import read_journal

    records, _ = read_journal(run_path / "journal.jsonl")
    if not records:
        raise FileNotFoundError(f"{run_path} has no journal; is it a run directory?")
    state: dict = {"tree": None, "best": None, "ended": False, "evaluations": 0, "round": 0}
    for r in records:
        if r["kind"] == "tree":
            state["tree"] = r["tree"]
        elif r["kind"] == "best":
            state["best"] = r
        elif r["kind"] == "evaluation":
            state["evaluations"] += 1
            state["round"] = max(state["round"], r.get("round", 0))
        elif r["kind"] == "run_end":
            state["ended"] = True
    if state["tree"] is None:
        raise RuntimeError(f"{run_path}: the run has not built its world model yet")
    return state


def cmd_show(args: argparse.Namespace) -> int:
    from rich.live import Live

    from ksearch.viz.tree_view import render_tree, show_run
    from ksearch.world_model import WorldModel

    run_path = Path(args.run_dir)
    if not args.live:
        state = _run_state(run_path)
        show_run(state, console, node_id=args.node, depth=args.depth)
        best = state["best"]
        console.print(f"{state['evaluations']} evaluations; "
                      + (f"best {best['score']:.4g}x at {best['node_id']}" if best else "no passing kernel yet")
                      + ("" if state["ended"] else " (run not finished)"), highlight=False)
        return 0
    with Live(console=console, refresh_per_second=1) as live:
        while True:
            state = _run_state(run_path)
            wm = WorldModel.from_json(state["tree"])
            best = state["best"] or {}
            live.update(render_tree(wm, root_id=args.node, max_depth=args.depth, best_node_id=best.get("node_id")))
            if state["ended"]:
                return 0
            time.sleep(2)


def cmd_eval(args: argparse.Namespace) -> int:
    from ksearch.app import compose_config, resolve_eval
    from ksearch.eval.evaluator import Evaluator
    from ksearch.instantiate import Solution, extract_python
    from ksearch.task import load_task

    cfg = compose_config(args.overrides)
    task = load_task(cfg.task.name)
    device, set_name, workloads, settings = resolve_eval(cfg, task)
    code = extract_python(Path(args.solution).read_text())
    sol = Solution.from_code(task.name, code, name=Path(args.solution).stem)
    with Evaluator(task, settings) as ev:
        baseline = ev.measure_baselines(workloads)
        report = ev.evaluate(sol.main_source, sol.solution_id, workloads, baseline)
    table = Table(title=f"{task.name} / {set_name} on {device}")
    for col in ("workload", "status", "latency ms", "baseline ms", "speedup", "max abs err"):
        table.add_column(col)
    best = baseline.best()
    for w in report.workloads:
        table.add_row(w.workload, w.status, f"{w.latency_ms:.4g}" if w.latency_ms else "-",
                      f"{best.get(w.workload, 0):.4g}", f"{report.speedups.get(w.workload, 0):.3g}x"
                      if w.workload in report.speedups else "-",
                      f"{w.max_abs_error:.3g}" if w.max_abs_error is not None else "-")
    console.print(table)
    console.print(report.summary(), highlight=False)
    if report.log and not report.passed:
        console.print(report.log[-2000:], highlight=False, markup=False)
    if args.json:
        print(json.dumps(report.to_json(), indent=1, default=str))
    return 0 if report.passed else 1


def cmd_tasks(args: argparse.Namespace) -> int:
    from ksearch.task import list_tasks, load_task

    table = Table(title="tasks")
    for col in ("task", "op type", "workload sets", "baselines"):
        table.add_column(col)
    for name in list_tasks():
        t = load_task(name)
        sets = ", ".join(f"{k} ({len(v)})" for k, v in t.workload_sets().items())
        baselines = "yes (GPU)" if (t.dir / "baseline.py").exists() else "reference only"
        table.add_row(name, t.definition.op_type, sets, baselines)
    console.print(table)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from ksearch.bench import main as bench_main

    return bench_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ksearch", description="World-model guided search for fast GPU kernels.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="start a search (Hydra overrides, e.g. task=... search.max_rounds=8)")
    r.add_argument("overrides", nargs="*")
    r.set_defaults(fn=cmd_run)
    s = sub.add_parser("resume", help="continue a stopped run from its journal")
    s.add_argument("run_dir")
    s.add_argument("overrides", nargs="*")
    s.set_defaults(fn=cmd_resume)
    v = sub.add_parser("show", help="draw a run's plan tree")
    v.add_argument("run_dir")
    v.add_argument("--node", default=None, help="draw only the subtree under this node")
    v.add_argument("--depth", type=int, default=None, help="levels below the start node")
    v.add_argument("--live", action="store_true", help="redraw until the run ends")
    v.set_defaults(fn=cmd_show)
    e = sub.add_parser("eval", help="judge one solution file with the search's evaluator")
    e.add_argument("solution")
    e.add_argument("overrides", nargs="*")
    e.add_argument("--json", action="store_true", help="also print the full report as JSON")
    e.set_defaults(fn=cmd_eval)
    b = sub.add_parser("bench", help="time reference, baselines and kernels per workload (see --help)",
                       add_help=False)
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(fn=cmd_bench)
    t = sub.add_parser("tasks", help="list tasks and their workload sets")
    t.set_defaults(fn=cmd_tasks)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from ksearch.app import ConfigError
    from ksearch.llm.base import ModelError
    from ksearch.store import JournalDivergence
    from ksearch.task import UnknownTaskError

    try:
        return args.fn(args)
    except (ConfigError, UnknownTaskError, ModelError, JournalDivergence, FileNotFoundError, FileExistsError,
            KeyError) as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False)
        return 2
    except KeyboardInterrupt:
        console.print("interrupted; everything recorded so far is in the journal (`ksearch resume` continues)")
        return 130


if __name__ == "__main__":
    sys.exit(main())
