"""TriMul knob sweep for the input pass (issue 25): one device call, every subject on GPUMode's 7 cases.

    PYTHONPATH=. python3 benchmarks/trimul_sweep.py OUTDIR                # on the H200, about 4-6 minutes
    PYTHONPATH=. python3 benchmarks/trimul_sweep.py OUTDIR --smoke        # CPU, Triton interpreter, tiny cases

Subjects: the current best (`cublas_contraction` at its defaults) and `gemm_input_pass` at several knob
settings (SUBJECTS below; --only LABEL,... picks some). For each subject, in order:
1. the input pass alone (the module's `_project`, plus its `_prepass` where it has one) on the input-pass
   case (S=1024, D=384), against that pass's own limit: reading x and the mask and writing left, right and
   the out gate in half precision at the copy bandwidth, or its five projections at the bf16 tensor peak,
   whichever is slower (peaks measured in this process; datasheet values off the GPU);
2. the whole kernel on each ranked case: one checked call (GPUMode's rule, against the fp32 reference,
   computed once per case), then timed calls GPUMode's way (L2 flushed, CUDA events, the mean;
   ksearch/task/gpumode_timing.py) on those inputs, and the geometric mean; the input pass alone is
   timed on every case too, so the rest of the call (contraction, output pass) shows per case.
Then the best two subjects are checked once on every `test` workload (held-out shapes). A subject that
fails to compile or to match the reference is reported and the rest go on; subjects past --budget-s are
skipped. Prints the tables and writes OUTDIR/trimul_sweep.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

TASK = "trimul_outgoing_h128"
H = 128
PROJ_ARGS = ("x", "mask", "norm_weight", "norm_bias", "left_proj_weight", "right_proj_weight", "left_gate_weight",
             "right_gate_weight", "out_gate_weight")
#: (label, family, knobs), most important first: the budget cuts from the end.
SUBJECTS: list[tuple[str, str, dict[str, Any]]] = [
    ("cublas_defaults", "cublas_contraction", {}),
    ("gemm_defaults", "gemm_input_pass", {}),
    # session 30: the whole weight matrix in shared memory of a persistent program per SM (D <= 128)
    # (D = 128 cases; the D = 384 cases run the default GEMM)
    ("st64", "gemm_input_pass", {"input_mode": "stationary"}),
    ("st128", "gemm_input_pass", {"input_mode": "stationary", "stationary_block_m": 128}),
    # session 30: the output pass persistent, to_out kept in shared memory, the next block's t and gate in flight
    ("out_p1", "gemm_input_pass", {"out_programs_per_sm": 1}),
    ("out_p2", "gemm_input_pass", {"out_programs_per_sm": 2}),
    ("out_p2_bp32", "gemm_input_pass", {"out_programs_per_sm": 2, "out_block_p": 32}),
    ("st64_out_p2", "gemm_input_pass", {"input_mode": "stationary", "out_programs_per_sm": 2}),
    ("st64_out_p1", "gemm_input_pass", {"input_mode": "stationary", "out_programs_per_sm": 1}),
    # session 29: the out gate h-major beside left/right (one branch-free epilogue), and the persistent GEMM whose
    # tile and K loops Triton flattens with it (next tile's loads during this tile's epilogue)
    ("gemm_hmajor", "gemm_input_pass", {"gate_layout": "h_major"}),
    ("gemm_hmajor_p2", "gemm_input_pass", {"gate_layout": "h_major", "gemm_programs_per_sm": 2}),
    ("gemm_hmajor_p1", "gemm_input_pass", {"gate_layout": "h_major", "gemm_programs_per_sm": 1}),
    ("gemm_p2", "gemm_input_pass", {"gemm_programs_per_sm": 2}),
    ("gemm_hmajor_p2_out32", "gemm_input_pass", {"gate_layout": "h_major", "gemm_programs_per_sm": 2,
                                                 "out_block_p": 32}),
    ("gemm_hmajor_p2_bk128", "gemm_input_pass", {"gate_layout": "h_major", "gemm_programs_per_sm": 2,
                                                 "gemm_block_k": 128}),
    ("res2_hmajor", "gemm_input_pass", {"gate_layout": "h_major", "input_mode": "resident", "gemm_block_m": 128,
                                        "gemm_block_n": 64, "gemm_warps": 8, "resident_max_chunks": 2}),
    # resident (session 29): x read once, all five projections from fp16 row chunks kept on chip
    ("res_bm64_bn64_w4", "gemm_input_pass", {"input_mode": "resident", "gemm_block_m": 64, "gemm_block_n": 64}),
    ("res_bm128_bn64_w8", "gemm_input_pass", {"input_mode": "resident", "gemm_block_m": 128, "gemm_block_n": 64,
                                              "gemm_warps": 8}),
    ("res_bm64_bn128_w4", "gemm_input_pass", {"input_mode": "resident", "gemm_block_m": 64, "gemm_block_n": 128}),
    ("res_bm128_bn128_w8", "gemm_input_pass", {"input_mode": "resident", "gemm_block_m": 128,
                                               "gemm_block_n": 128, "gemm_warps": 8}),
    ("res_bm64_bn64_w4_s4", "gemm_input_pass", {"input_mode": "resident", "gemm_block_m": 64, "gemm_block_n": 64,
                                                "gemm_stages": 4}),
    ("res2_bm64_bn64_w4", "gemm_input_pass", {"input_mode": "resident", "gemm_block_m": 64, "gemm_block_n": 64,
                                              "resident_max_chunks": 2}),
    ("res2_bm128_bn64_w8", "gemm_input_pass", {"input_mode": "resident", "gemm_block_m": 128, "gemm_block_n": 64,
                                               "gemm_warps": 8, "resident_max_chunks": 2}),
    ("res2_bm64_bn128_w4", "gemm_input_pass", {"input_mode": "resident", "gemm_block_m": 64, "gemm_block_n": 128,
                                               "resident_max_chunks": 2}),
    ("gemm_epilogue_stats", "gemm_input_pass", {"input_mode": "epilogue_stats"}),
    ("gemm_stats_prepass", "gemm_input_pass", {"input_mode": "stats_prepass"}),
    # larger tiles: less L2 traffic per FLOP (the weight panel is re-read by every program)
    ("gemm_bm256_w16", "gemm_input_pass", {"gemm_block_m": 256, "gemm_warps": 16}),
    ("gemm_bn256_w16", "gemm_input_pass", {"gemm_block_n": 256, "gemm_warps": 16}),
    # ln_in_tile at 128 rows and 8 warps holds 249 registers (one program per SM); 64 rows fit two (128)
    ("gemm_ln_in_tile_bk128_bm64_w8", "gemm_input_pass", {"input_mode": "ln_in_tile", "gemm_block_k": 128,
                                                          "gemm_block_m": 64, "gemm_warps": 8}),
    ("gemm_out_stages1", "gemm_input_pass", {"out_stages": 1}),
    # epilogue_stats at 186 registers runs one 8-warp program per SM; 64 rows fit two (125), or larger tiles
    ("gemm_epilogue_stats_bm64_w8", "gemm_input_pass", {"input_mode": "epilogue_stats", "gemm_block_m": 64,
                                                        "gemm_warps": 8}),
    ("gemm_epilogue_stats_bk32_s4", "gemm_input_pass", {"input_mode": "epilogue_stats", "gemm_block_k": 32,
                                                        "gemm_stages": 4}),
    ("gemm_epilogue_stats_bn256_w16_bk32", "gemm_input_pass", {"input_mode": "epilogue_stats", "gemm_block_n": 256,
                                                               "gemm_warps": 16, "gemm_block_k": 32}),
    ("gemm_bn256", "gemm_input_pass", {"gemm_block_n": 256}),
    ("gemm_stages4", "gemm_input_pass", {"gemm_stages": 4}),
    ("gemm_warps4", "gemm_input_pass", {"gemm_warps": 4}),
    ("gemm_bm64_warps4", "gemm_input_pass", {"gemm_block_m": 64, "gemm_warps": 4}),
    ("gemm_out_p128_d128_w8_s1", "gemm_input_pass", {"out_block_p": 128, "out_block_d": 128, "out_warps": 8,
                                                     "out_stages": 1}),
    ("gemm_epilogue_stats_bf16", "gemm_input_pass", {"input_mode": "epilogue_stats", "precision": "bf16"}),
]
SMOKE_SUBJECTS = ("cublas_defaults", "gemm_defaults", "gemm_epilogue_stats")


def input_pass_work(b: int, s: int, d: int) -> tuple[int, int]:
    """(bytes, FLOPs) the input pass cannot avoid: read x (fp32) and the mask, write left, right and the
    out gate in half precision; the five D -> H projections."""
    rows = b * s * s
    return 4 * rows * d + 4 * rows + 3 * 2 * rows * H, 2 * rows * d * 5 * H


def limit_ms(traffic: int, flops: int, copy_tbs: float, tflops: float) -> tuple[float, str]:
    """The slower of moving `traffic` at the copy bandwidth and doing `flops` at the tensor peak."""
    t_mem, t_flop = traffic / (copy_tbs * 1e12) * 1e3, flops / (tflops * 1e12) * 1e3
    return (t_mem, "memory") if t_mem >= t_flop else (t_flop, "compute")


def _short(name: str) -> str:
    """bench_s1024_b1_d384_nomask_normal -> s1024b1d384"""
    parts = name.split("_")
    return "".join(p for p in parts[1:4])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", help="where trimul_sweep.json goes")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU, Triton interpreter, two tiny cases, 3 subjects (a test of this script, not a measurement)")
    ap.add_argument("--only", help="comma-separated subject labels (default: all; see SUBJECTS)")
    ap.add_argument("--budget-s", type=float, default=330.0, help="skip subjects that would start after this")
    ap.add_argument("--repeats", type=int, default=20, help="timed calls per case (GPUMode: up to 100)")
    ap.add_argument("--no-test-check", dest="test_check", action="store_false",
                    help="skip checking the best two subjects on the test set")
    args = ap.parse_args(argv)
    started = time.perf_counter()

    import torch

    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device here; run on the GPU host, or pass --smoke", file=sys.stderr)
        return 2
    if device == "cpu":
        from ksearch.eval.interpreter import prepare_interpreter

        prepare_interpreter()
    from ksearch.eval.clocks.roofline import H200_DATASHEET, measure_peaks
    from ksearch.eval.trusted.rules import check_outputs
    from ksearch.instantiate.loader import load_module_from_source
    from ksearch.task import load_task
    from ksearch.task.catalog import load_catalog
    from ksearch.task.gpumode_timing import geometric_mean, time_case

    task = load_task(TASK)
    catalog = load_catalog(task.strategies_dir, task.name)
    wanted = args.only.split(",") if args.only else (SMOKE_SUBJECTS if args.smoke else [s[0] for s in SUBJECTS])
    subjects = [s for s in SUBJECTS if s[0] in wanted]
    unknown = set(wanted) - {s[0] for s in subjects}
    if unknown:
        print(f"error: unknown subjects {sorted(unknown)}; known: {[s[0] for s in SUBJECTS]}", file=sys.stderr)
        return 2
    cases = task.workload_set("tiny")[:2] if args.smoke else task.workload_set("benchmark")
    proj_case = max(cases, key=lambda w: (w.axes["S"] ** 2 * w.axes["B"] * w.axes["D"], w.axes["S"]))
    repeats = 2 if args.smoke else args.repeats
    peaks = measure_peaks(device)
    peak_source = "measured" if peaks else "H200 datasheet (no GPU)"
    peaks = peaks or H200_DATASHEET
    bf16 = peaks.peak_tflops("bf16")
    device_name = torch.cuda.get_device_name() if device == "cuda" else "CPU (Triton interpreter)"
    print(f"{device_name}: copy {peaks.copy_tbs:.2f} TB/s, bf16 {bf16:.0f} TFLOP/s ({peak_source})", flush=True)
    c = task.correctness

    def agrees(out: Any, ref: Any) -> str | None:
        r = check_outputs([out], [ref], task.definition.output_names, atol=c.atol, rtol=c.rtol,
                          required_matched_ratio=c.required_matched_ratio, rule=c.rule)
        return None if r.passed else f"{r.status}: {r.message}"[:300]

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    # Inputs and fp32 reference outputs, once per case (the subjects see the same data).
    data = {}
    for w in cases:
        inputs = task.make_inputs(w, device=device, seed=w.input_seed(0))
        data[w.name] = (inputs, task.reference(**inputs))
    sync()
    b, s, d = (int(proj_case.axes[k]) for k in ("B", "S", "D"))
    traffic, flops = input_pass_work(b, s, d)
    pass_limit, pass_bound = limit_ms(traffic, flops, peaks.copy_tbs, bf16)
    print(f"inputs and references ready ({time.perf_counter() - started:.0f} s); input pass at {proj_case.name}: "
          f"{traffic / 1e9:.2f} GB, {flops / 1e12:.3f} TFLOP -> limit {pass_limit:.3f} ms ({pass_bound})", flush=True)

    def timed(name: str, call: Callable[[], Any]) -> float:
        timing = time_case(name, lambda _inputs: call, lambda _seed: {}, lambda _i, _o: None, seed=0,
                           device=device, recheck=False, max_repeats=repeats)
        return timing.mean_ms

    results: dict[str, dict[str, Any]] = {}
    modules = {}
    for label, family, knobs in subjects:
        res: dict[str, Any] = {"family": family, "knobs": knobs, "cases": {}, "geomean_ms": None, "failed": None}
        results[label] = res
        if time.perf_counter() - started > args.budget_s:
            res["failed"] = "skipped: over the time budget"
            print(f"{label}: skipped (budget)", flush=True)
            continue
        t0 = time.perf_counter()
        try:
            mod = load_module_from_source(catalog.render(family, knobs), name_hint=f"sweep_{label}")
            modules[label] = mod
            _measure(mod, res, data, cases, proj_case.name, timed, agrees, sync)
            res["input_pass"].update(limit_ms=pass_limit, bound=pass_bound,
                                     of_limit=pass_limit / res["input_pass"]["project_ms"])
            res["geomean_ms"] = geometric_mean(list(res["cases"].values()))
        except Exception as e:  # noqa: BLE001 - one failing subject is reported, the others still run
            res["failed"] = f"{type(e).__name__}: {e}"[:600]
            res["traceback"] = traceback.format_exc()[-3000:]
            sync()
        res["wall_s"] = time.perf_counter() - t0
        geo = f"{res['geomean_ms']:.4f} ms" if res["geomean_ms"] else f"FAILED {res['failed']}"
        print(f"{label:36s} geomean {geo}  ({res['wall_s']:.0f} s)", flush=True)

    ranked = sorted((r["geomean_ms"], label) for label, r in results.items() if r["geomean_ms"])
    held_out: dict[str, Any] = {}
    if args.test_check and ranked:
        for _, label in ranked[:2]:
            failures = []
            for w in cases if args.smoke else task.workload_set("test"):
                inputs = task.make_inputs(w, device=device, seed=w.input_seed(0))
                why = agrees(modules[label].run(**inputs), task.reference(**inputs))
                if why:
                    failures.append(f"{w.name}: {why}")
                del inputs
                sync()
            held_out[label] = failures
    _report(results, cases, ranked, held_out, proj_case.name, pass_limit, pass_bound)
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"task": TASK, "device": device_name, "peaks": peaks.to_json(), "peak_source": peak_source,
               "repeats": repeats, "input_pass_case": proj_case.name, "input_pass_limit_ms": pass_limit,
               "input_pass_bound": pass_bound, "subjects": results, "test_set_failures": held_out,
               "wall_s": time.perf_counter() - started}
    (out / "trimul_sweep.json").write_text(json.dumps(payload, indent=1))
    print(f"wrote {out / 'trimul_sweep.json'} ({payload['wall_s']:.0f} s)")
    return 0 if ranked else 1


def _measure(mod: Any, res: dict[str, Any], data: dict[str, Any], cases: list[Any], proj_name: str,
             timed: Callable[[str, Callable[[], Any]], float], agrees: Callable[[Any, Any], str | None],
             sync: Callable[[], None]) -> None:
    """Fill res["input_pass"] (the module's `_project` and `_prepass` alone on the input-pass case),
    res["cases"] (the whole kernel per case, each checked once first) and res["project_cases"] (`_project`
    alone per case: what the rest of the call costs, per case); raises on a wrong output."""
    inputs, ref = data[proj_name]
    why = agrees(mod.run(**inputs), ref)
    if why:
        raise RuntimeError(f"{proj_name}: {why}")
    proj_args = {k: inputs[k] for k in PROJ_ARGS}
    project_ms = timed("project", lambda: mod._project(**proj_args))
    prepass = getattr(mod, "_prepass", None)
    x = inputs["x"]
    prepass_ms = None
    if prepass is not None and mod._effective_mode(x.shape[-1]) in (0, 1):
        prepass_ms = timed("prepass", functools.partial(prepass, x))
    res["input_pass"] = {"case": proj_name, "project_ms": project_ms, "prepass_ms": prepass_ms}
    sync()
    for w in cases:
        inputs, ref = data[w.name]
        why = agrees(mod.run(**inputs), ref)
        if why:
            raise RuntimeError(f"{w.name}: {why}")
        res["cases"][w.name] = timed(w.name, functools.partial(mod.run, **inputs))
        res.setdefault("project_cases", {})[w.name] = timed(w.name, functools.partial(
            mod._project, **{k: inputs[k] for k in PROJ_ARGS}))
        sync()


def _report(results: dict[str, dict[str, Any]], cases: list[Any], ranked: list[tuple[float, str]],
            held_out: dict[str, Any], proj_name: str, pass_limit: float, pass_bound: str) -> None:
    names = [w.name for w in cases]
    base = results.get("cublas_defaults", {}).get("geomean_ms")
    print()
    print("Whole kernel, GPUMode timing (mean ms per case, L2 flushed), geometric mean:")
    print(f"{'subject':36s} " + " ".join(f"{_short(n):>12s}" for n in names) + f" {'geomean':>9s} {'vs cublas':>9s}")
    for label, r in results.items():
        cells = " ".join(f"{r['cases'][n]:12.4f}" if n in r["cases"] else f"{'-':>12s}" for n in names)
        geo = r["geomean_ms"]
        rel = f"{base / geo:8.3f}x" if geo and base else f"{'-':>9s}"
        print(f"{label:36s} {cells} {geo if geo else float('nan'):9.4f} {rel}")
    print()
    print("Input pass alone (`_project`: pre-pass, weights, GEMM) per case, ms, and its share of the call:")
    print(f"{'subject':36s} " + " ".join(f"{_short(n):>12s}" for n in names))
    for label, r in results.items():
        proj = r.get("project_cases", {})
        cells = " ".join(f"{proj[n]:6.3f} ({100 * proj[n] / r['cases'][n]:2.0f}%)" if n in proj and n in r["cases"]
                         else f"{'-':>12s}" for n in names)
        print(f"{label:36s} {cells}")
    print()
    print(f"Input pass alone at {proj_name} (limit {pass_limit:.3f} ms, {pass_bound}-bound):")
    print(f"{'subject':36s} {'prepass ms':>10s} {'project ms':>10s} {'% of limit':>10s} {'rest of call ms':>15s}")
    for label, r in results.items():
        ip = r.get("input_pass")
        if not ip or "of_limit" not in ip:            # failed before its input pass was timed
            continue
        pre = f"{ip['prepass_ms']:10.4f}" if ip["prepass_ms"] is not None else f"{'-':>10s}"
        whole = r["cases"].get(proj_name)
        rest = f"{whole - ip['project_ms']:15.4f}" if whole else f"{'-':>15s}"
        print(f"{label:36s} {pre} {ip['project_ms']:10.4f} {100 * ip['of_limit']:9.1f}% {rest}")
    for label, r in results.items():
        if r["failed"]:
            print(f"FAILED {label}: {r['failed']}")
    if ranked:
        print(f"best: {ranked[0][1]} {ranked[0][0]:.4f} ms" + (f" ({base / ranked[0][0]:.3f}x cublas_defaults)"
                                                               if base else ""))
    for label, failures in held_out.items():
        print(f"test set, {label}: " + ("all pass" if not failures else f"{len(failures)} FAIL: {failures[:3]}"))
    if not math.isfinite(pass_limit):
        print("warning: the input-pass limit is not finite")


if __name__ == "__main__":
    sys.exit(main())
