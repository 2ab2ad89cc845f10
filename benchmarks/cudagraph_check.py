"""An independent check of ksearch's GPU-time ratios: `triton.testing.do_bench_cudagraph` of both calls.

    python benchmarks/cudagraph_check.py task=mla_paged_decode_h16_ckv512_kpe64_ps1 --solution best.py \
        --bench-json bench.json

For every workload of the set (feedback by default) it times the kernel and every baseline variant with
Triton's CUDA-graph benchmark (no L2 flush inside the graph: an independent method, not a copy of ours),
prints kernel / best-baseline ratios, and, given the JSON of a `ksearch bench` run of the same kernel,
how far ksearch's ratio is from this one per workload and for the geomean (the acceptance is 10%).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--solution", required=True)
    p.add_argument("--bench-json", default=None, help="a `ksearch bench --out` file of the same kernel")
    p.add_argument("--kernel-name", default=None, help="which kernel of the bench JSON (default: the first)")
    p.add_argument("--rep", type=int, default=200, help="do_bench_cudagraph rep (ms)")
    p.add_argument("overrides", nargs="*")
    args = p.parse_intermixed_args(argv)

    import torch
    import triton.testing

    from ksearch.cli.app import compose_config, resolve_eval
    from ksearch.instantiate.loader import load_entry_point
    from ksearch.task import load_task

    cfg = compose_config(args.overrides)
    task = load_task(cfg.task.name)
    _, set_name, workloads, _ = resolve_eval(cfg, task)
    fn = load_entry_point(Path(args.solution).read_text(), "run")
    ours: dict[str, float] = {}
    if args.bench_json:
        doc = json.loads(Path(args.bench_json).read_text())
        kernels = doc["kernels"]
        k = next((x for x in kernels if x["name"] == args.kernel_name), kernels[0]) if args.kernel_name else kernels[0]
        ours = {r["workload"]: r["vs_best"] for r in k["rows"] if r.get("vs_best")}
    rows = []
    for w in workloads:
        inputs = task.make_inputs(w, device="cuda", seed=w.input_seed(0))
        args_list = [inputs[n] for n in task.definition.input_names]
        kernel_ms = triton.testing.do_bench_cudagraph(
            lambda: fn(*args_list), rep=args.rep)  # noqa: B023,F821 - run at once, before the del
        base = {}
        for name, factory in task.baselines().items():
            try:
                call = factory(inputs)
                call()
                base[name] = triton.testing.do_bench_cudagraph(call, rep=args.rep)
            except Exception as e:          # noqa: BLE001 - a variant that cannot run here is named, not fatal
                print(f"{w.name}: baseline {name} failed: {type(e).__name__}: {e}")
        best = min(base.values())
        ratio = best / kernel_ms
        row = {"workload": w.name, "kernel_us": kernel_ms * 1e3, "best_baseline_us": best * 1e3, "ratio": ratio}
        if w.name in ours:
            row["ksearch_ratio"] = ours[w.name]
            row["rel_diff"] = ours[w.name] / ratio - 1
        rows.append(row)
        print(json.dumps(row))
        del inputs, args_list
        torch.cuda.empty_cache()
    g = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    print(f"{task.name} {set_name}: do_bench_cudagraph geomean kernel/best-baseline ratio {g:.3f}")
    if ours and all("ksearch_ratio" in r for r in rows):
        gk = math.exp(sum(math.log(r["ksearch_ratio"]) for r in rows) / len(rows))
        worst = max(abs(r["rel_diff"]) for r in rows)
        print(f"ksearch bench geomean {gk:.3f}: differs by {100 * (gk / g - 1):+.1f}% "
              f"(largest per-workload difference {100 * worst:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
