"""The `ksearch` command: run (and sweeps), resume, show, report, compare, eval, bench, tasks, task new, export,
memory."""

from __future__ import annotations

import argparse
import errno
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ksearch.viz.width import terminal_width

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from ksearch.cli.sweep import Sweep
    from ksearch.planner.search import SearchOutcome
    from ksearch.viz.tracking import Tee

# One width rule for everything drawn (ksearch/viz/width.py); log lines are never wrapped.
console = Console(width=terminal_width(), soft_wrap=True)
# Errors and refusals: stderr, one line, printed as they are (a hint such as 'ksearch[ray]' is no markup).
errors = Console(stderr=True, soft_wrap=True, highlight=False)


def print_error(message: object) -> None:
    errors.print(Text.assemble(("error: ", "bold red"), str(message)))


def _print_outcome(outcome: SearchOutcome) -> None:
    from ksearch.store import load_history
    from ksearch.store.best_manifest import manifest_from_history
    from ksearch.store.short_ids import ShortIds
    from ksearch.viz.tree_view import found_at, render_tree

    history = load_history(outcome.run_dir)
    ids = ShortIds.from_history(history)
    best = manifest_from_history(history, ids)
    console.print(render_tree(outcome.world_model, best=best, ids=ids, width=console.width))
    console.print(f"stopped: {outcome.stop_reason}; {outcome.evaluations} evaluations on {outcome.device}")
    if best is not None:
        console.print(f"[bold]best[/]: {best.score:.4g}x {best.score_name.replace('_', ' ')} vs {best.baseline}: "
                      f"{best.describe()} ({found_at(history, best)}, solution {best.solution_id})",
                      highlight=False)
        console.print(f"best kernel: {outcome.run_dir / 'best' / best.file} (what it is: best/manifest.json)",
                      highlight=False)
    else:
        console.print("[red]no passing kernel was found[/]")
    console.print(f"run written to {outcome.run_dir}", highlight=False)


def _sinks(cfg: DictConfig, run_path: Path, group: str | None = None) -> Tee:
    """The run's progress sink: the terminal display, plus the experiment tracker when `logger` picks one."""
    from ksearch.config import to_plain
    from ksearch.viz.progress import LiveProgress
    from ksearch.viz.tracking import make_tracker, tee

    tracker = make_tracker(cfg.get("logger", "none"), to_plain(cfg), run_path, group=group,
                           warn=lambda text: errors.print(Text.assemble(("warning: ", "yellow"), text)))
    return tee(LiveProgress(console, live=cfg.run.live), tracker)


def _ending_cleanly(work: Callable[[], int], where: Path | str, note: str = "") -> int:
    """`work()`, but a SIGTERM or a full disk ends it with one line on stderr saying how to resume `where`
    (see store.shutdown), `note` after it."""
    from ksearch.store.shutdown import (
        EXIT_DISK_FULL,
        EXIT_TERMINATED,
        Terminated,
        disk_full_message,
        is_disk_full,
        stop_on_sigterm,
        terminated_message,
    )

    try:
        with stop_on_sigterm():
            return work()
    except Terminated:
        print(terminated_message(where) + note, file=sys.stderr, flush=True)
        return EXIT_TERMINATED
    except OSError as e:
        if not is_disk_full(e):
            raise
        print(disk_full_message(where, e) + note, file=sys.stderr, flush=True)
        return EXIT_DISK_FULL


def _execute(cfg: DictConfig, run_path: Path, *, fresh: bool) -> int:
    """Run or resume; a SIGTERM or a full disk ends it with one line on stderr."""
    return _ending_cleanly(lambda: _execute_and_print(cfg, run_path, fresh=fresh), run_path)


def _execute_and_print(cfg: DictConfig, run_path: Path, *, fresh: bool) -> int:
    from ksearch.cli.app import execute

    sink = _sinks(cfg, run_path)
    status = "failed"
    try:
        outcome = execute(cfg, run_path, fresh=fresh, progress=sink)
        sink.summary({"best_score": outcome.best.score if outcome.best else None,
                      "evaluations": outcome.evaluations, "stop_reason": outcome.stop_reason})
        status = "finished"
    except KeyboardInterrupt:
        status = "killed"
        raise
    finally:
        sink.stop(status)
    _print_outcome(outcome)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from ksearch.cli.app import ConfigError, compose_config, preflight
    from ksearch.store import default_run_dir

    if args.multirun:
        return _sweep_ending_cleanly(args)
    swept = _swept_overrides(args.overrides)
    if swept:
        raise ConfigError(f"{' '.join(swept)}: several values are a sweep; add -m to run every combination "
                          f"(`ksearch run -m {' '.join(args.overrides)}`)")
    cfg = compose_config(args.overrides)
    preflight(cfg)
    run_path = Path(cfg.run.dir) if cfg.run.dir else default_run_dir(cfg.task.name)
    console.print(f"run directory: {run_path}", highlight=False)
    return _execute(cfg, run_path, fresh=True)


def _sweep_ending_cleanly(args: argparse.Namespace) -> int:
    """A sweep under SIGTERM or on a full disk: the arm that was running says how to resume it; one line."""
    return _ending_cleanly(lambda: cmd_sweep(args), "ARM_DIR",
                           " (ARM_DIR: the interrupted arm, named above; sweep.json lists the arms)")


def _swept_overrides(overrides: list[str]) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return [str(o.input_line) for o in OverridesParser.create().parse_overrides(overrides)
                if o.is_sweep_override()]                 # input_line: set on every parsed override
    except HydraException:
        return []       # compose_config reports the syntax error with its own hint


def cmd_sweep(args: argparse.Namespace) -> int:
    from ksearch.cli.sweep import plan_sweep, run_sweep
    from ksearch.config import to_plain
    from ksearch.viz.tracking import check_logger

    sweep = plan_sweep(args.overrides)
    console.print(f"sweep of {len(sweep.arms)} runs in {sweep.root}", highlight=False)

    def make_progress(cfg: DictConfig, run_path: Path, group: str) -> Tee:
        return _sinks(cfg, run_path, group=group)

    def compose(overrides: list[str]) -> DictConfig:
        from ksearch.cli.app import compose_config, preflight

        cfg = compose_config(overrides)
        preflight(cfg)          # every arm's refusals come before arm 1 runs
        check_logger(to_plain(cfg).get("logger", "none"))    # a missing tracker package fails before arm 1
        return cfg

    try:
        run_sweep(sweep, compose=compose, make_progress=make_progress,
                  log=lambda text: console.print(text, highlight=False, markup=False))
    finally:
        if (sweep.root / "sweep.json").is_file():      # absent when a config error stopped it before arm 1
            _sweep_summary(sweep)
    return 0 if not sweep.failed() else 1


def _sweep_summary(sweep: Sweep) -> None:
    """The arms side by side (the `compare` table), then every arm that did not finish, with its error."""
    from ksearch.store import load_history
    from ksearch.store.history import is_run_dir
    from ksearch.viz.compare import compare_rows, compare_table, default_target

    histories = [load_history(a.run_dir) for a in sweep.arms if is_run_dir(a.run_dir)]
    if histories:
        target = default_target(histories)
        console.print(compare_table(compare_rows(histories, target), target, console.width))
    for arm in sweep.failed():
        console.print(Text.assemble((f"arm {arm.index} {arm.status}", "red"), f" ({arm.name}): {arm.error or ''}"))
    console.print(f"sweep written to {sweep.root} (sweep.json lists the arms; `ksearch compare {sweep.root}` "
                  f"redraws this table)", highlight=False)


def cmd_resume(args: argparse.Namespace) -> int:
    from ksearch.cli.app import load_saved_config

    run_path = Path(args.run_dir)
    cfg = load_saved_config(run_path, args.overrides)
    console.print(f"resuming {run_path}", highlight=False)
    return _execute(cfg, run_path, fresh=False)


def _statuses(text: str | None) -> set[str] | None:
    from ksearch.world_model.node import NodeStatus

    if not text:
        return None
    wanted = {s.strip() for s in text.split(",") if s.strip()}
    bad = wanted - set(NodeStatus)
    if bad:
        raise KeyError(f"--status {','.join(sorted(bad))}: node statuses are {', '.join(NodeStatus)} "
                       f"(comma-separated for several)")
    return wanted


def cmd_show(args: argparse.Namespace) -> int:
    from ksearch.store import load_history
    from ksearch.viz.node_view import render_node
    from ksearch.viz.tree_view import DEFAULT_MAX_ROWS, run_summary, show_run, terminal_width

    run_path = Path(args.run_dir)
    statuses = _statuses(args.status)
    if args.depth is not None and args.depth < 0:
        raise KeyError(f"--depth {args.depth}: levels below the start node, 0 or more (0: the node alone)")
    if args.live:
        return _show_live(run_path, args.node, args.depth, statuses)
    history = load_history(run_path)
    out = Console(width=terminal_width(args.width), highlight=False)    # the real width, also when piped
    show_run(history, out, node_id=args.node, depth=args.depth, statuses=statuses, width=out.width,
             max_rows=None if args.all else DEFAULT_MAX_ROWS)
    if args.node:
        out.print(render_node(history, args.node, width=out.width))
    out.print(run_summary(history), highlight=False)
    if history.torn_tail:
        why = "the run is writing it" if history.live else "its writer was stopped mid-write; resume drops it"
        console.print(Text(f"the journal ends in a partial line ({why})", style="dim"))
    return 0


def _show_live(run_path: Path, node_id: str | None, depth: int | None, statuses: set[str] | None) -> int:
    """Redraw the tree every 2 s from the journal until the run ends or its writer is gone (Ctrl-C leaves;
    the run goes on). A run nobody writes is drawn once, with who wrote it last."""
    from ksearch.store import load_history

    if not run_path.is_dir():
        load_history(run_path)      # raises with the message that says what to pass
    try:
        return _follow(run_path, node_id, depth, statuses)
    except KeyboardInterrupt:
        console.print("stopped watching; the run itself goes on", highlight=False)
        return 0


def _follow(run_path: Path, node_id: str | None, depth: int | None, statuses: set[str] | None) -> int:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from ksearch.store import NotARunError, load_history
    from ksearch.store.best_manifest import manifest_from_history
    from ksearch.store.lock import probe
    from ksearch.store.short_ids import ShortIds
    from ksearch.viz.tree_view import render_tree, run_summary

    with Live(console=console, refresh_per_second=1) as live:
        while True:
            writer = probe(run_path)        # before reading: a writer that ends meanwhile wrote everything
            try:
                history = load_history(run_path)
            except NotARunError:
                if not (run_path / "config.yaml").is_file():
                    raise
                history = None      # created, but the journal has no records yet
            wm = history.world_model() if history else None
            if history is None or wm is None:
                live.update(Text(f"waiting for {run_path} to build its world model ...", style="dim"))
            else:
                ids = ShortIds.from_history(history)
                live.update(Group(render_tree(wm, root_id=ids.resolve(node_id, wm) if node_id else None,
                                              max_depth=depth, statuses=statuses, ids=ids, width=console.width,
                                              best=manifest_from_history(history, ids)), run_summary(history)))
            if not writer.live:
                break
            time.sleep(2)
    if history is None or not history.ended:
        last = writer.holder
        who = f"last writer pid {last.pid} ended" if last and last.pid is not None else "no process writes it"
        console.print(f"not running ({who}); `ksearch resume {run_path}` continues it", highlight=False)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ksearch.store import load_history
    from ksearch.viz.report import write_report

    history = load_history(args.run_dir)
    if args.html:
        from ksearch.viz.html_report import write_html_report

        path = write_html_report(history, Path(args.out) if args.out else None)
        console.print(f"report written to {path} (one self-contained file)", highlight=False)
        return 0
    path = write_report(history, Path(args.out) if args.out else None)
    console.print(f"report written to {path}", highlight=False)
    for png in sorted(path.parent.glob("*.png")):
        console.print(f"  {png}", highlight=False)
    return 0


def cmd_tui(args: argparse.Namespace) -> int:
    from ksearch.viz.tui import NoTerminal, run_tui

    try:
        return run_tui(Path(args.run_dir))
    except NoTerminal as e:
        print_error(e)
        return 2


def cmd_compare(args: argparse.Namespace) -> int:
    from ksearch.store import load_history
    from ksearch.viz.compare import (
        baseline_note,
        compare_json,
        compare_rows,
        compare_table,
        default_target,
        expand_run_dirs,
    )

    histories = [load_history(p) for p in expand_run_dirs(args.run_dirs)]
    target = args.target if args.target is not None else default_target(histories)
    rows = compare_rows(histories, target)
    if args.json:
        print(compare_json(rows, target))
    else:
        console.print(compare_table(rows, target, console.width))
        note = baseline_note(rows)
        if note:
            console.print(f"[yellow]note:[/] {note}", highlight=False)
        if args.target is None and target is not None:
            console.print(f"[dim]target: the smallest best score among the runs ({target:.4g}x); "
                          f"--target SCORE picks another[/]")
    return 0


def _task_of_solution(overrides: list[str], task: str | None) -> list[str]:
    """The solution's own task, unless the overrides name one: then the two must agree."""
    given = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") in ("task", "task.name")]
    if task is None:
        return overrides
    if given and given[-1] != task:
        from ksearch.cli.app import ConfigError

        raise ConfigError(f"this solution is for task {task}, not {given[-1]}; drop task= to judge it on its own task")
    return overrides if given else [f"task={task}", *overrides]


def cmd_eval(args: argparse.Namespace) -> int:
    from ksearch.cli.app import ConfigError, compose_config, resolve_eval
    from ksearch.cli.solution_file import read_solution_file
    from ksearch.eval.parent.evaluator import Evaluator
    from ksearch.task import load_task

    sol, own_task = read_solution_file(Path(args.solution))
    cfg = compose_config(_task_of_solution(args.overrides, own_task))
    task = load_task(cfg.task.name)
    device, set_name, workloads, settings = resolve_eval(cfg, task)
    if sol.language == "cuda" and not device.startswith("cuda"):
        import torch

        fix = ("this machine has none: judge it on a GPU host" if not torch.cuda.is_available()
               else "drop eval.device=cpu")
        raise ConfigError(f"{args.solution} is a CUDA kernel, which needs a CUDA device, and this evaluation runs "
                          f"on {device}; {fix}")
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
    from ksearch.viz.fit_table import Column, fit_table

    rows = []
    for name in list_tasks():
        t = load_task(name)
        sets = ", ".join(f"{k} ({len(v)})" for k, v in t.workload_sets().items())
        baselines = f"{', '.join(t.baselines())} (GPU)" if t.baselines() else "reference only"
        rows.append([Text(name), Text(t.definition.op_type), Text(sets), Text(baselines)])
    columns = [Column("task", whole=True), Column("op type"), Column("workload sets"), Column("baselines")]
    console.print(fit_table(columns, rows, console.width, title="tasks (task=NAME picks one)"))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from ksearch.cli.bench import run
    from ksearch.cli.solution_file import read_solution_file

    for path in args.solution:      # every file readable (and parsing) before anything is measured
        read_solution_file(Path(path))
    return run(args)


def cmd_task_new(args: argparse.Namespace) -> int:
    from ksearch.task.new_task import new_task

    made = new_task(Path(args.definition), Path(args.dir), force=args.force)
    console.print(f"task {made.name} written to {made.path}", highlight=False)
    for line in made.notes:
        console.print(line, highlight=False)
    where = "" if made.on_search_path else f"KSEARCH_TASKS_DIR={made.path.parent} "
    console.print(f"next: {where}ksearch run task={made.name}" + ("" if made.has_catalog else " llm=litellm llm.model=..."),
                  highlight=False)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ksearch.interop.export import export_flashinfer_bench

    out = export_flashinfer_bench(Path(args.run_dir), Path(args.out) if args.out else None)
    console.print(f"solution: {out.solution} (best: {out.best.score:.4g}x, {out.best.describe()})", highlight=False)
    console.print(f"traces:   {out.traces} ({out.trace_count} evaluations)", highlight=False)
    console.print(f"definition: {out.definition}", highlight=False)
    return 0


def cmd_memory(args: argparse.Namespace) -> int:
    from ksearch.knowledge import commands as mem
    from ksearch.viz.fit_table import Column, fit_table

    path = mem.resolve_path(args.path)
    if args.memory_command == "show":
        summaries, total = mem.show_rows(path, args.task)
        if not summaries:
            console.print(f"the knowledge store {path} holds no evaluations yet (every `ksearch run` adds its own)",
                          highlight=False)
            return 0
        columns = [Column(c, whole=c == "task") for c in mem.SUMMARY_COLUMNS]
        rows = [[Text(c) for c in mem.summary_cells(s)] for s in summaries]
        console.print(fit_table(columns, rows, console.width, title=f"knowledge store {path}"))
        console.print(f"{total} rows (one per evaluation and shape region)", highlight=False)
        return 0
    if args.memory_command == "export":
        n = mem.export(path, Path(args.out), args.format, args.task)
        console.print(f"{n} rows of {path} written to {args.out}", highlight=False)
        return 0
    n = mem.clear(path, None if args.all else args.task)
    console.print(f"removed {n} rows ({'all' if args.all else 'task ' + args.task}) from {path}", highlight=False)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand in one tree. Options may come before, between or after the Hydra overrides."""
    from ksearch import __version__
    from ksearch.cli import bench
    p = argparse.ArgumentParser(prog="ksearch", description="World-model guided search for fast GPU kernels.")
    p.add_argument("--version", action="version", version=f"ksearch {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser("run", help="start a search (Hydra overrides, e.g. task=... search.max_rounds=8)")
    r.add_argument("-m", "--multirun", action="store_true",
                   help="sweep: run every combination of comma-separated values (task=a,b run.seed=0,1)")
    r.add_argument("overrides", nargs="*")
    r.set_defaults(fn=cmd_run)
    s = sub.add_parser("resume", help="continue a stopped run from its journal")
    s.add_argument("run_dir")
    s.add_argument("overrides", nargs="*")
    s.set_defaults(fn=cmd_resume)
    v = sub.add_parser("show", help="draw a run's plan tree, or one node in detail")
    v.add_argument("run_dir")
    v.add_argument("--node", default=None, help="this node: its subtree, plan, kernel, diff and measurements")
    v.add_argument("--depth", type=int, default=None, help="levels below the start node")
    v.add_argument("--status", default=None, help="only nodes with these statuses (and their ancestors): "
                   "open, closed, failed, pruned, decision; comma-separated")
    v.add_argument("--live", action="store_true", help="redraw until the run ends")
    v.add_argument("--width", type=int, default=None, help="columns (default: the terminal's, else 100)")
    v.add_argument("--all", action="store_true", help="draw every node (no folding of long trees)")
    v.set_defaults(fn=cmd_show)
    rp = sub.add_parser("report", help="write report.md with plots for a run")
    rp.add_argument("run_dir")
    rp.add_argument("--out", default=None, help="output folder (default RUN_DIR/report)")
    rp.add_argument("--html", action="store_true", help="one self-contained report.html instead (tree, plots, kernels)")
    rp.set_defaults(fn=cmd_report)
    ui = sub.add_parser("tui", help="walk a run's plan tree in an interactive terminal app (follows a live run)")
    ui.add_argument("run_dir")
    ui.set_defaults(fn=cmd_tui)
    c = sub.add_parser("compare", help="runs side by side (run folders, or a sweep folder)")
    c.add_argument("run_dirs", nargs="+")
    c.add_argument("--target", type=float, default=None,
                   help="score whose time/rounds to reach are compared (default: smallest best among the runs)")
    c.add_argument("--json", action="store_true", help="print JSON instead of a table")
    c.set_defaults(fn=cmd_compare)
    e = sub.add_parser("eval", help="judge one solution file with the search's evaluator")
    e.add_argument("solution", help="a .py (Triton) or .cu (CUDA) file, a run's solution.json, or a "
                   "FlashInfer-Bench Solution JSON; its own task is used unless task= is given")
    e.add_argument("overrides", nargs="*")
    e.add_argument("--json", action="store_true", help="also print the full report as JSON")
    e.set_defaults(fn=cmd_eval)
    b = sub.add_parser("bench", help="time reference, baselines and kernels per workload",
                       description=(bench.__doc__ or "").strip(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_arguments(b)
    b.set_defaults(fn=cmd_bench)
    t = sub.add_parser("tasks", help="list tasks and their workload sets")
    t.set_defaults(fn=cmd_tasks)
    tk = sub.add_parser("task", help="make a task: `ksearch task new DEFINITION.json [--dir DIR]`")
    tsub = tk.add_subparsers(dest="task_command", required=True, metavar="ACTION")
    tn = tsub.add_parser("new", help="a task folder from a FlashInfer-Bench definition JSON")
    tn.add_argument("definition", help="FlashInfer-Bench definition (name, op_type, axes, inputs, outputs, reference)")
    tn.add_argument("--dir", default=".", help="folder to create the task folder in (default: here)")
    tn.add_argument("--force", action="store_true", help="replace an existing task folder of that name")
    tn.set_defaults(fn=cmd_task_new)
    x = sub.add_parser("export", help="a run's best kernel and evaluations in another format")
    x.add_argument("run_dir")
    x.add_argument("--format", choices=["flashinfer-bench"], default="flashinfer-bench")
    x.add_argument("--out", default=None, help="output folder (default RUN_DIR/export/flashinfer-bench)")
    x.set_defaults(fn=cmd_export)
    m = sub.add_parser("memory", help="what runs remembered: `ksearch memory show|export|clear`")
    msub = m.add_subparsers(dest="memory_command", required=True, metavar="ACTION")
    where: dict[str, Any] = dict(default=None, help="the knowledge store (default: $XDG_CACHE_HOME/ksearch/knowledge.sqlite, "
                 "as memory.path= for runs)")
    ms = msub.add_parser("show", help="a table per task and GPU: runs, evaluations, best family, knobs and score")
    ms.add_argument("--task", default=None, help="only this task")
    ms.add_argument("--path", **where)
    me = msub.add_parser("export", help="every stored evaluation to a JSON or CSV file")
    me.add_argument("out", help="the file to write (.json or .csv)")
    me.add_argument("--format", choices=["json", "csv"], default=None, help="default: the file's suffix")
    me.add_argument("--task", default=None, help="only this task")
    me.add_argument("--path", **where)
    mc = msub.add_parser("clear", help="forget the evaluations of one task (--task NAME) or all (--all)")
    which = mc.add_mutually_exclusive_group(required=True)
    which.add_argument("--task", default=None, help="forget this task's evaluations")
    which.add_argument("--all", action="store_true", help="forget everything")
    mc.add_argument("--path", **where)
    for q in (ms, me, mc):
        q.set_defaults(fn=cmd_memory)
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Unknown words after a subcommand that takes overrides are overrides (in order); unknown options are errors."""
    p = build_parser()
    args, extra = p.parse_known_args(argv)
    if extra:
        options = [x for x in extra if x.startswith("-")]
        if options or not hasattr(args, "overrides"):
            p.error(f"unrecognized arguments: {' '.join(options or extra)}")
        args.overrides = [*args.overrides, *extra]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from ksearch.cli.app import ConfigError
    from ksearch.cli.solution_file import SolutionFileError
    from ksearch.cli.sweep import SweepError
    from ksearch.interop.export import ExportError
    from ksearch.knowledge.commands import MemoryCommandError
    from ksearch.knowledge.store import StoreError
    from ksearch.llm.base import ModelError
    from ksearch.store import JournalCorrupted, JournalDivergence
    from ksearch.task import UnknownTaskError
    from ksearch.task.catalog import CatalogError
    from ksearch.task.dataset import DatasetError
    from ksearch.task.definition import DefinitionError
    from ksearch.viz.tracking import TrackingError

    try:
        return args.fn(args)
    except (ConfigError, UnknownTaskError, ModelError, JournalDivergence, JournalCorrupted, SweepError,
            TrackingError, SolutionFileError, DefinitionError, ExportError, CatalogError, DatasetError, FileNotFoundError,
            FileExistsError, NotADirectoryError, KeyError, MemoryCommandError, StoreError) as e:
        print_error(e.args[0] if isinstance(e, KeyError) and e.args else e)     # KeyError's str() adds quotes
        return 2
    except OSError as e:
        message = unwritable_message(e, args)
        if message is None:
            raise
        print_error(message)
        return 2
    except KeyboardInterrupt:
        errors.print("interrupted; everything recorded so far is in the journal (`ksearch resume` continues)")
        return 130


#: errno values that mean "this place cannot be written" (a read-only mount, permissions, a quota refusal).
_UNWRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM}


def unwritable_message(e: OSError, args: argparse.Namespace) -> str | None:
    """One line for a write the file system refused, with what to do for the command that tried it."""
    if e.errno not in _UNWRITABLE:
        return None
    where = e.filename or "a file"
    what = (e.strerror or "refused").lower()
    command = getattr(args, "command", "")
    hint = {
        "run": "pass a writable run.dir=PATH",
        "resume": f"a resume appends to the run's journal: copy the run somewhere writable (cp -r "
                  f"{getattr(args, 'run_dir', 'RUN_DIR')} NEW_DIR) and resume the copy",
        "report": "pass --out DIR to write the report elsewhere",
        "export": "pass --out DIR to write the export elsewhere",
        "bench": "pass --out with a writable path",
        "task": "pass --dir with a writable folder",
    }.get(command, "")
    head = f"cannot write {where} ({what})" if e.errno == errno.EROFS else f"{where}: {what}"    # EACCES: read or write
    return head + (f"; {hint}" if hint else "")


if __name__ == "__main__":
    sys.exit(main())
