"""`ksearch bench`: time the reference, the baselines and given kernels the way the evaluator does.

Prints one table per kernel (per workload: latency, speedup against each baseline, achieved bandwidth,
and for the kernel and every baseline the fraction of the workload's physical limit: the copy bandwidth
or the tensor-core peak, whichever binds (ksearch/eval/clocks/roofline.py; peaks measured once per process on
a GPU), and, for a task that declares its FLOPs, the kernel's TFLOP/s and % of the tensor peak on every row,
memory-bound or not (causal prefill counts only unmasked pairs)), then the geometric mean and fast_p
(fraction of workloads faster than the best baseline).
`--out` keeps the raw numbers. `--no-reference` leaves the reference's column out (on a CPU the reference is the
baseline and is timed anyway).

`--baseline-repeats N` instead measures the baselines N times, each in a fresh worker process (a new
CUDA context, as a new run would get), and prints per workload and variant the median latency and the
coefficient of variation (sample standard deviation / mean) across the N runs, plus the largest CV of
the best-of-variants latency: the repeatability check ("under 2% over ten runs").

The baselines come from the baseline cache across runs as `eval.baseline_cache=` says (on a GPU by default:
ksearch/eval/trusted/baseline_cache.py), except with `--self-check` and `--baseline-repeats`: they check the
clock, so they measure anew (`refresh`: the new numbers replace the cached ones).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ksearch.eval.clocks.roofline import LimitFraction
from ksearch.eval.report import BaselineTimes, EvalReport, geomean
from ksearch.eval.trusted.baseline_cache import BaselineCacheMode

if TYPE_CHECKING:
    from ksearch.task.catalog import Catalog


def _versions() -> dict[str, str]:
    import torch

    out = {"torch": torch.__version__, "python": platform.python_version()}
    try:
        import triton
        out["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        import importlib.metadata as md
        out["flashinfer"] = md.version("flashinfer-python")
    except Exception:  # noqa: BLE001 - a version note only: any failure means "look at the module"
        try:
            import flashinfer
            out["flashinfer"] = getattr(flashinfer, "__version__", "?")
        except Exception:  # noqa: BLE001 - a broken install is reported as absent, never fatal
            out["flashinfer"] = "not installed"
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name()
    return out


LimitFn = Callable[[str, float], LimitFraction | None]   # (workload name, latency ms) -> fraction of the limit
RateFn = Callable[[str, float], tuple[float, float] | None]   # (workload, ms) -> (TFLOP/s, fraction of tensor peak)


def summarize(name: str, report: EvalReport, baseline: BaselineTimes, traffic: dict[str, int | None],
              copy_tbs: float | None, limit: LimitFn | None = None, rate: RateFn | None = None) -> dict[str, Any]:
    """Per-workload rows; with `limit`, each subject's (kernel, baselines) fraction of the physical limit;
    with `rate`, the kernel's TFLOP/s on the task's useful (causal) FLOPs and its % of the tensor peak."""
    rows = []
    # Baselines timed in the kernel's own job, interleaved with it (GPU), when there are any.
    variants = {v: {**t, **report.baseline_ms.get(v, {})} for v, t in baseline.variants.items()}
    best = {**baseline.best(), **{w.workload: w.baseline_ms for w in report.workloads if w.baseline_ms}}
    for w in report.workloads:
        row: dict[str, Any] = {"workload": w.workload, "status": w.status, "latency_ms": w.latency_ms,
                               "spread": w.spread, "reference_ms": baseline.reference.get(w.workload),
                               "gpu_time_ms": w.gpu_time_ms, "call_latency_ms": w.call_latency_ms,
                               "timing_method": w.timing_method, "unstable": w.unstable,
                               # where the slowest and fastest timed window went (a diagnosis; JSON only)
                               "window_breakdown": [asdict(b) for b in w.window_breakdown]}
        for v, times in variants.items():
            row[f"{v}_ms"] = times.get(w.workload)
            lf = limit(w.workload, times[w.workload]) if limit and times.get(w.workload) else None
            if lf:
                row[f"{v}_limit"] = lf.to_json()
        if w.latency_ms and not w.unstable:      # an unstable row prints "unstable", never a ratio
            row["vs_best"] = best[w.workload] / w.latency_ms if w.workload in best else None
            for v, times in variants.items():
                if w.workload in times:
                    row[f"vs_{v}"] = times[w.workload] / w.latency_ms
            tb = traffic.get(w.workload)
            if tb:
                row["tb_per_s"] = tb / (w.latency_ms * 1e-3) / 1e12
                if copy_tbs:
                    row["frac_copy_bw"] = row["tb_per_s"] / copy_tbs
            lf = limit(w.workload, w.latency_ms) if limit else None
            if lf:
                row["limit"] = lf.to_json()
            r = rate(w.workload, w.latency_ms) if rate else None
            if r:
                row["tflops"], row["frac_compute_peak"] = r
        rows.append(row)
    ok = [r for r in rows if r.get("vs_best")]
    out = {"name": name, "status": report.status, "rows": rows, "baseline": baseline.label,
           "flags": report.flags, "score_spread": report.score_spread, "env": report.env,
           "geomean_vs_best": geomean([r["vs_best"] for r in ok]) if ok and report.passed else None,
           "fast_p": sum(1 for r in ok if r["vs_best"] > 1) / max(1, len(rows)) if report.passed else 0.0}
    for v in baseline.variants:
        vals = [r[f"vs_{v}"] for r in rows if r.get(f"vs_{v}")]
        out[f"geomean_vs_{v}"] = geomean(vals) if vals and report.passed and len(vals) == len(rows) else None
    if not report.passed:
        f = report.first_failure()
        out["failure"] = f.message if f else report.log[-500:]
    return out


def print_summary(console: Console, s: dict[str, Any], variants: list[str]) -> None:
    t = Table(title=f"{s['name']}  [{s['status']}]  vs {s['baseline']}")
    rates = any("tflops" in r for r in s["rows"])
    cols = ["workload", "ref ms"] + [f"{v} ms" for v in variants] + ["kernel ms", "±%", "call ms", "vs best"] + \
        [f"vs {v}" for v in variants] + ["TB/s", "% limit"] + [f"{v} % limit" for v in variants] + \
        (["TFLOP/s", "% tensor peak"] if rates else [])
    for c in cols:
        t.add_column(c, justify="right" if c != "workload" else "left")

    def f(x: Any, fmt: str = ".4g") -> str:
        return "-" if x is None else format(x, fmt)

    for r in s["rows"]:
        t.add_row(r["workload"], f(r.get("reference_ms")), *[f(r.get(f"{v}_ms")) for v in variants],
                  f(r.get("latency_ms")), f(100 * r["spread"] if r.get("spread") else None, ".1f"),
                  f(r.get("call_latency_ms")), "unstable" if r.get("unstable") else f(r.get("vs_best"), ".3f"), *[f(r.get(f"vs_{v}"), ".3f") for v in variants],
                  f(r.get("tb_per_s"), ".2f"), _limit_cell(r.get("limit")),
                  *[_limit_cell(r.get(f"{v}_limit")) for v in variants],
                  *([f(r.get("tflops"), ".1f"), f(100 * r["frac_compute_peak"] if r.get("frac_compute_peak") else None,
                                                  ".1f")] if rates else []))
    console.print(t)
    sources = {lim["source"] for r in s["rows"] for k, lim in r.items() if k == "limit" or k.endswith("_limit")}
    if sources:
        console.print("% limit: achieved / the binding limit (mem = copy bandwidth, fp = tensor peak); limits: "
                      + ", ".join(sorted(sources)), highlight=False)
    extra = "  ".join(f"vs {v}: {f(s.get(f'geomean_vs_{v}'), '.3f')}" for v in variants)
    console.print(f"geomean vs best baseline: {f(s['geomean_vs_best'], '.3f')}  fast_p: {s['fast_p']:.2f}  {extra}",
                  highlight=False)
    for flag in s.get("flags") or []:
        console.print(f"flag: {flag}", highlight=False, markup=False)
    if s.get("failure"):
        console.print(f"failure: {s['failure']}", highlight=False, markup=False)


def _limit_cell(lim: dict[str, Any] | None) -> str:
    """e.g. "62% mem" or "41% fp"."""
    if not lim:
        return "-"
    return f"{100 * lim['fraction']:.0f}% {'mem' if lim['bound'] == 'memory' else 'fp'}"


def repeat_baselines(task: Any, settings: Any, workloads: list[Any], repeats: int,
                     progress: Any = None) -> dict[str, Any]:
    """Measure the baselines `repeats` times, each in a fresh worker; per variant and workload the
    latencies, their median and coefficient of variation ("best" is the best variant per run)."""
    import statistics

    from ksearch.eval.parent.evaluator import Evaluator

    runs: list[dict[str, dict[str, float]]] = []
    envs = []
    for i in range(repeats):
        with Evaluator(task, settings) as ev:
            b = ev.measure_baselines(workloads)
        runs.append({**b.variants, "best": b.best()})
        envs.append(b.env)
        if progress:
            progress(i + 1, b)
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for variant in runs[0]:
        for w in (w.name for w in workloads):
            vals = [r[variant][w] for r in runs if w in r.get(variant, {})]
            if not vals:
                continue
            mean = statistics.fmean(vals)
            cv = statistics.stdev(vals) / mean if len(vals) > 1 and mean > 0 else 0.0
            table.setdefault(variant, {})[w] = {"median_ms": statistics.median(vals), "cv": cv, "min_ms": min(vals),
                                                "max_ms": max(vals), "runs": vals}
    worst = max((c["cv"] for c in table.get("best", {}).values()), default=0.0)
    return {"repeats": repeats, "table": table, "max_cv_best": worst, "envs": envs}


def print_repeats(console: Console, result: dict[str, Any], limit: float = 0.02) -> None:
    t = Table(title=f"baselines over {result['repeats']} fresh processes")
    for c in ("variant", "workload", "median ms", "CV %", "min ms", "max ms"):
        t.add_column(c, justify="left" if c in ("variant", "workload") else "right")
    for variant, rows in result["table"].items():
        for w, r in rows.items():
            t.add_row(variant, w, f"{r['median_ms']:.4g}", f"{100 * r['cv']:.2f}", f"{r['min_ms']:.4g}",
                      f"{r['max_ms']:.4g}")
    console.print(t)
    verdict = "within" if result["max_cv_best"] < limit else "NOT within"
    console.print(f"largest CV of the best baseline: {100 * result['max_cv_best']:.2f}% ({verdict} "
                  f"{100 * limit:.0f}%)", highlight=False)


SELF_CHECK_TOLERANCE = 0.03


def family_kernels(cat: Catalog, device: str, say: Callable[[str], None]) -> list[tuple[str, str]]:
    """(name, source) of each catalog family at its defaults that `device` runs; the ones it cannot run
    (CUDA families on the CPU) are named in one line through `say`, not benched."""
    skipped = [f.name for f in cat.families if not f.runs_on(device)]
    if skipped:
        say(f"skipped {', '.join(skipped)}: CUDA, which {device} cannot run (bench them on a GPU host)")
    return [(f"family {f.name} (defaults)", cat.render(f.name, {})) for f in cat.runnable_families(device)]


def chosen_family_kernels(cat: Catalog, specs: list[str], device: str) -> list[tuple[str, str]]:
    """(name, source) of each `--family NAME[:KEY=VALUE,...]`: the family rendered at those knobs (no kernel
    file to write first); a family `device` cannot run is refused, like a bad knob, with a CatalogError."""
    from ksearch.task.catalog import CatalogError

    kernels = []
    for spec in specs:
        name, knobs = cat.parse_spec(spec)
        if not cat.family(name).runs_on(device):
            raise CatalogError(f"family {name} is CUDA, which {device} cannot run: bench it on a GPU host")
        shown = ", ".join(f"{k}={v}" for k, v in knobs.items()) or "defaults"
        kernels.append((f"family {name} ({shown})", cat.render(name, knobs)))
    return kernels


def self_check(kernels: list[tuple[str, str]], results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The same source listed twice must give the same ratio on every workload (within 3%): bench checks
    its own repeatability in the job it reports."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for (_, code), res in zip(kernels, results):
        groups.setdefault(code, []).append(res)
    worst, where = 0.0, ""
    pairs = 0
    for same in groups.values():
        for a, b in zip(same, same[1:]):
            ra = {r["workload"]: r.get("vs_best") for r in a["rows"]}
            for r in b["rows"]:
                x, y = ra.get(r["workload"]), r.get("vs_best")
                if x and y:
                    pairs += 1
                    d = abs(x / y - 1)
                    if d > worst:
                        worst, where = d, f"{a['name']} on {r['workload']}"
    if not pairs:
        return None
    ok = worst <= SELF_CHECK_TOLERANCE
    msg = (f"self-check: the same kernel twice agrees within {100 * worst:.1f}% on every workload "
           f"({'within' if ok else 'NOT within'} {100 * SELF_CHECK_TOLERANCE:.0f}%"
           + (f"; worst: {where})" if where else ")"))
    return {"pairs": pairs, "max_relative_difference": worst, "within_tolerance": ok, "message": msg}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`ksearch bench` options (one argparse tree: ksearch/cli/main.py adds these to its `bench` subcommand)."""
    p.add_argument("--solution", action="append", default=[], help="a kernel file (repeatable)")
    p.add_argument("--run", action="append", default=[], help="a run directory: bench its best kernel")
    p.add_argument("--families", action="store_true", help="bench every catalog family at its defaults")
    p.add_argument("--family", action="append", default=[], metavar="NAME[:KEY=VALUE,...]",
                   help="bench one catalog family at these knobs, the rest at their defaults (repeatable)")
    p.add_argument("--out", default=None, help="write all numbers as JSON here")
    p.add_argument("--self-check", action="store_true",
                   help="bench the first kernel twice and check both give the same ratios (within 3%%)")
    p.add_argument("--no-reference", action="store_true",
                   help="do not time the PyTorch reference (its column is for information; on a GPU the references "
                        "of a large set take minutes of device time). It still computes every expected output")
    p.add_argument("--baseline-repeats", type=int, default=0, metavar="N",
                   help="only measure the baselines, N times in fresh processes: median and CV per workload")
    p.add_argument("overrides", nargs="*", help="Hydra overrides: task=..., eval.workloads=..., eval.device=...")


def run(args: argparse.Namespace) -> int:
    from ksearch.cli.app import compose_config, resolve_eval
    from ksearch.eval.clocks.roofline import compute_rate, limit_fraction, measure_peaks
    from ksearch.eval.parent.evaluator import Evaluator
    from ksearch.instantiate import Solution
    from ksearch.interop.flashinfer_bench import solution_from_user_text
    from ksearch.store.atomic import atomic_write
    from ksearch.task import load_task
    from ksearch.task.catalog import load_catalog

    console = Console(width=200)
    cfg = compose_config(args.overrides)
    task = load_task(cfg.task.name)
    device, set_name, workloads, settings = resolve_eval(cfg, task)
    on_gpu = device.startswith("cuda")
    if args.baseline_repeats or getattr(args, "self_check", False):
        # they check the clock itself: measure the baselines now (and leave the fresh numbers in the cache)
        settings = replace(settings, baseline_cache=BaselineCacheMode.refresh)
    if args.baseline_repeats:
        result = repeat_baselines(task, settings, workloads, args.baseline_repeats,
                                  lambda i, b: console.print(f"run {i}: {b.label}", highlight=False))
        print_repeats(console, result)
        console.print(json.dumps(_versions()), highlight=False)
        if args.out:
            atomic_write(args.out, json.dumps({"task": task.name, "workload_set": set_name, "device": device,
                                                  "versions": _versions(), **result}, indent=1, default=str))
        return 0
    kernels: list[tuple[str, str]] = [(Path(s).name, solution_from_user_text(task.name, Path(s).read_text()).main_source)
                                      for s in args.solution]
    for r in args.run:
        best = Solution.from_json(json.loads((Path(r) / "best" / "solution.json").read_text()))
        kernels.append((f"best of {r}", best.main_source))
    chosen = getattr(args, "family", [])
    if chosen or args.families or not kernels:
        cat = load_catalog(task.strategies_dir, task.name)
        kernels += chosen_family_kernels(cat, chosen, device)
        if args.families or not kernels:
            kernels += family_kernels(cat, device, lambda line: console.print(line, highlight=False))
    if getattr(args, "self_check", False) and kernels:
        kernels.insert(1, (kernels[0][0] + " (again)", kernels[0][1]))
    peaks = measure_peaks(device) if on_gpu else None      # once per process: copy, bf16, fp8, fp32 rates
    copy_tbs = peaks.copy_tbs if peaks else None
    traffic = {w.name: task.traffic_bytes(w) for w in workloads}
    by_name = {w.name: w for w in workloads}

    def limit(workload: str, latency_ms: float) -> LimitFraction | None:
        return limit_fraction(task, by_name[workload], latency_ms, peaks) if peaks else None

    def rate(workload: str, latency_ms: float) -> tuple[float, float] | None:
        return compute_rate(task, by_name[workload], latency_ms, peaks) if peaks else None

    results = []
    with Evaluator(task, settings) as ev:
        baseline = ev.measure_baselines(workloads, time_reference=not getattr(args, "no_reference", False))
        if baseline.provenance():
            console.print(f"baselines {baseline.provenance()} (eval.baseline_cache=refresh measures them anew)",
                          highlight=False)
        for name, fails in baseline.failures.items():
            console.print(f"[yellow]baseline {name} unavailable:[/] {fails}", highlight=False)
        for name, code in kernels:
            sol = Solution.from_code(task.name, code, name=name)
            report = ev.evaluate(code, sol.solution_id, workloads, baseline)
            s = summarize(name, report, baseline, traffic, copy_tbs, limit, rate)
            print_summary(console, s, list(baseline.variants))
            results.append(s)
    check = self_check(kernels, results)
    if check:
        console.print(check["message"], highlight=False)
    doc = {"task": task.name, "workload_set": set_name, "device": device, "versions": _versions(),
           "self_check": check, "metric": baseline.metric, "copy_bandwidth_tbs": copy_tbs, "peaks": peaks.to_json() if peaks else None, "baseline": baseline.to_json(), "kernels": results}
    if peaks:
        console.print(f"peaks ({peaks.device}): copy {peaks.copy_tbs:.2f} TB/s ({peaks.memory_source}); "
                      + ", ".join(f"{k} {v:.0f} TFLOP/s ({peaks.source(k)})" for k, v in peaks.tflops.items()),
                      highlight=False)
    console.print(json.dumps(doc["versions"]), highlight=False)
    if args.out:
        atomic_write(args.out, json.dumps(doc, indent=1, default=lambda x: None if isinstance(x, float) and
                                             math.isnan(x) else str(x)))
    return 1 if check is not None and not check["within_tolerance"] else 0     # a failed self-check fails

