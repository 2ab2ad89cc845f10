"""TriMul timed the way GPUMode's leaderboard times it: per-case mean latency, geometric mean in ms.

    python benchmarks/trimul_gpumode.py --family cublas_contraction --family triton_contraction
    python benchmarks/trimul_gpumode.py --solution best/solution.py --json trimul.json
    python benchmarks/trimul_gpumode.py --family triton_contraction:precision=bf16,block_m=64 --no-baselines

Subjects: each --solution FILE (a .py whose `run` takes the definition's inputs), each --family NAME (the
task's catalog family at its defaults, or with NAME:knob=value,...), and unless --no-baselines the
task's PyTorch baselines (torch_fp16, torch_compile). Cases: the 7 ranked ones (--cases benchmark), or
any workload set of the task. Each subject is checked against the fp32 reference on every timed call
(GPUMode's rule, |out - ref| <= 2e-2 + 2e-2 |ref|) unless --no-recheck. Timing: ksearch/task/gpumode_timing.py.
--device cpu runs under the Triton interpreter (use --cases tiny): a smoke test, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TASK = "trimul_outgoing_h128"


def _parse_family(spec: str) -> tuple[str, dict]:
    name, _, rest = spec.partition(":")
    knobs = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"--family {spec}: knob settings are key=value, got {item!r}")
        knobs[key] = int(value) if value.lstrip("-").isdigit() else value
    return name, knobs


def _subjects(args, task):
    """[(label, prepare)] where prepare(inputs) returns the zero-argument call to time."""
    from ksearch.instantiate.loader import load_entry_point

    subjects = []
    for path in args.solution:
        source = Path(path).read_text()
        run = load_entry_point(source, name_hint=f"gpumode_{Path(path).stem}")
        subjects.append((Path(path).name, lambda inputs, run=run: (lambda: run(**inputs))))
    if args.family:
        from ksearch.task.catalog import load_catalog

        catalog = load_catalog(task.strategies_dir, task.name)
        for spec in args.family:
            name, knobs = _parse_family(spec)
            run = load_entry_point(catalog.render(name, knobs), name_hint=f"gpumode_{name}")
            subjects.append((spec, lambda inputs, run=run: (lambda: run(**inputs))))
    if args.baselines:
        for name, factory in task.baselines().items():
            subjects.append((name, factory))
    if args.reference:
        subjects.append(("reference_fp32", lambda inputs: (lambda: task.reference(**inputs))))
    return subjects


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--solution", action="append", default=[], help="a solution .py file (repeatable)")
    ap.add_argument("--family", action="append", default=[], help="catalog family NAME[:knob=value,...] (repeatable)")
    ap.add_argument("--no-baselines", dest="baselines", action="store_false", help="skip the PyTorch baselines")
    ap.add_argument("--reference", action="store_true", help="also time the fp32 reference")
    ap.add_argument("--cases", default="benchmark", help="workload set (default: GPUMode's 7 ranked cases)")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (Triton interpreter, smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-recheck", dest="recheck", action="store_false",
                    help="reuse one input set per case and check it once (faster; GPUMode rechecks)")
    ap.add_argument("--max-repeats", type=int, default=100)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: no CUDA device here; run on the GPU host, or pass --device cpu --cases tiny for a smoke test",
              file=sys.stderr)
        return 2
    if args.device == "cpu":
        from ksearch.eval.interpreter import prepare_interpreter

        prepare_interpreter()
    from ksearch.eval.trusted.rules import check_outputs
    from ksearch.task import load_task
    from ksearch.task.gpumode_timing import geometric_mean, time_case

    task = load_task(TASK)
    try:
        workloads = task.workload_set(args.cases)
        subjects = _subjects(args, task)
    except (KeyError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not subjects:
        print("error: nothing to time; pass --solution FILE, --family NAME, or drop --no-baselines", file=sys.stderr)
        return 2
    c = task.correctness

    def check(inputs, out):
        result = check_outputs([out], [task.reference(**inputs)], task.definition.output_names, atol=c.atol,
                               rtol=c.rtol, required_matched_ratio=c.required_matched_ratio, rule=c.rule)
        return None if result.passed else f"{result.status}: {result.message}"

    results: dict[str, dict] = {}
    for label, prepare in subjects:
        rows, failed = {}, None
        for w in workloads:
            def make_inputs(seed, w=w):
                return task.make_inputs(w, device=args.device, seed=seed)
            try:
                timing = time_case(w.name, prepare, make_inputs, check, seed=w.input_seed(args.seed),
                                   device=args.device, recheck=args.recheck, max_repeats=args.max_repeats)
                rows[w.name] = timing.to_json()
                print(f"{label:40s} {w.name:40s} mean {timing.mean_ms:9.4f} ms  stderr {100 * timing.rel_stderr:6.3f}%"
                      f"  runs {timing.runs}", flush=True)
            except Exception as e:  # noqa: BLE001 - a failing subject (CheckFailed too) is reported, others run
                failed = f"{type(e).__name__}: {e}"[:600]
                print(f"{label:40s} {w.name:40s} FAILED {failed}", flush=True)
                break
            finally:
                if args.device.startswith("cuda"):
                    torch.cuda.empty_cache()
        geo = None if failed else geometric_mean([r["mean_ms"] for r in rows.values()])
        results[label] = {"cases": rows, "geomean_ms": geo, "failed": failed}

    print()
    print(f"GPUMode score (geometric mean of per-case mean latencies), {args.cases} set on "
          f"{torch.cuda.get_device_name() if args.device.startswith('cuda') else 'CPU (interpreter)'}:")
    for label, r in results.items():
        print(f"  {label:40s} " + (f"{r['geomean_ms']:.4f} ms" if r["geomean_ms"] else f"FAILED ({r['failed']})"))
    if args.json:
        Path(args.json).write_text(json.dumps({"task": TASK, "cases": args.cases, "recheck": args.recheck,
                                               "results": results}, indent=1))
    return 0 if all(r["failed"] is None for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
