"""Where an MLA prefill kernel goes wrong, in one GPU call: error by part, not just pass/fail (issue 22).

    PYTHONPATH=. python3 benchmarks/prefill_cuda_diagnose.py [KERNEL_FILE] [--tactics] [--json OUT.json]

Without KERNEL_FILE it checks the task's CUDA catalog family (hopper_wgmma_prefill) at its defaults, and with
--tactics also at every tactic's knob setting (the catalog promises every setting is correct on every
workload). A solution file (CUDA or Triton) works too. For each shape (one KV step, several steps, a chunk at the end of a longer KV,
partial tiles, a ragged batch) it prints the largest error of the base-2 lse (q.k, the mask and the softmax's
sums alone), of the output's value columns 0..255 and 256..511 (each written by its own warpgroup in the CUDA
kernel), the heads and query tokens that hold the worst errors, and NaN/Inf counts. Reading it: lse right and
output wrong is p.v or the P hand-off; lse wrong on every shape is q.k or its operand layout; wrong only
past one KV step is the pipeline; wrong only on the diagonal tokens is the mask. Exit code 0 when every
shape is within the task's tolerance, 1 otherwise, 2 on bad arguments or without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TASK = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
FAMILY = "hopper_wgmma_prefill"
SHAPES: list[tuple[str, list[int], list[int]]] = [
    ("one_step_q8", [8], [8]),
    ("one_step_q64", [64], [64]),
    ("steps2_q100", [100], [100]),
    ("steps8_q500", [500], [500]),
    ("chunk_q16_kv1000", [16], [1000]),
    ("partial_q5_q1", [5, 1], [5, 70]),
    ("ragged", [300, 77, 5, 1], [300, 200, 5, 64]),
]


def diagnose(run: Any, task: Any, name: str, q_lens: list[int], kv_lens: list[int]) -> dict[str, Any]:
    import torch

    w = task.workloads_module._workload_lens(name, q_lens, kv_lens, task.workloads_module.POOL_PAGES)
    inputs = task.make_inputs(w, device="cuda", seed=3)
    want_o, want_lse = task.reference(**inputs)
    try:
        got = run(*[inputs[n] for n in task.definition.input_names])
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a launch failure is this shape's finding; later shapes may still run
        return {"shape": name, "error": f"{type(e).__name__}: {e}"[-800:]}
    got_o, got_lse = got[0].float(), got[1].float()
    err_o = (got_o - want_o.float()).abs()
    err_lse = (got_lse - want_lse.float()).abs()
    finite = torch.isfinite(got_o)
    tok_err = err_o.amax(dim=(1, 2))
    head_err = err_o.amax(dim=(0, 2))
    corr = task.correctness
    ok = bool(torch.allclose(got_o, want_o.float(), atol=corr.atol, rtol=corr.rtol)) and \
        bool(torch.allclose(got_lse, want_lse.float(), atol=corr.atol, rtol=corr.rtol))
    return {
        "shape": name, "within_tolerance": ok,
        "lse_max_err": float(err_lse.max()), "out_max_err_cols_0_255": float(err_o[..., :256].max()),
        "out_max_err_cols_256_511": float(err_o[..., 256:].max()),
        "nonfinite_out": int((~finite).sum()), "nonfinite_lse": int((~torch.isfinite(got_lse)).sum()),
        "worst_tokens": [int(i) for i in tok_err.topk(min(4, tok_err.numel())).indices],
        "tokens_over_0.05": int((tok_err > 0.05).sum()), "tokens": int(tok_err.numel()),
        "worst_heads": [int(i) for i in head_err.topk(4).indices],
        "lse_err_by_token_first_last": [float(err_lse[0].max()), float(err_lse[-1].max())],
    }


def _context_lost(row: dict[str, Any]) -> bool:
    """An illegal address poisons the CUDA context: every later call in this process fails the same way."""
    return "illegal" in row.get("error", "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kernel", nargs="?", default=None,
                   help=f"a solution file (default: the catalog family {FAMILY} at its defaults)")
    p.add_argument("--tactics", action="store_true", help=f"also every tactic of {FAMILY} (no KERNEL_FILE)")
    p.add_argument("--json", default=None, help="also write the findings to this file")
    args = p.parse_args(argv)
    if args.kernel and args.tactics:
        print("prefill_cuda_diagnose: --tactics checks the catalog family; drop KERNEL_FILE or --tactics",
              file=sys.stderr)
        return 2
    if args.kernel and not Path(args.kernel).is_file():
        print(f"prefill_cuda_diagnose: no such kernel file: {args.kernel}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("prefill_cuda_diagnose: no CUDA device here; run it on the GPU machine", file=sys.stderr)
        return 2
    from ksearch.instantiate.loader import load_entry_point
    from ksearch.task import load_task
    from ksearch.task.catalog import load_catalog

    task = load_task(TASK)
    if args.kernel:
        subjects = [(Path(args.kernel).name, Path(args.kernel).read_text())]
    else:
        cat = load_catalog(task.strategies_dir, TASK)
        settings = [{}] + ([dict(t.settings) for t in cat.family(FAMILY).tactics] if args.tactics else [])
        subjects = [(f"{FAMILY}{json.dumps(k, sort_keys=True)}", cat.render(FAMILY, k)) for k in settings]
    rows: list[dict[str, Any]] = []
    for label, source in subjects:
        run = load_entry_point(source, "run")
        for name, q_lens, kv_lens in SHAPES:
            rows.append({"kernel": label, **diagnose(run, task, name, q_lens, kv_lens)})
            print(json.dumps(rows[-1]), flush=True)
            if _context_lost(rows[-1]):
                break                            # later shapes (and kernels) would only repeat it
        if _context_lost(rows[-1]):
            break
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r.get("within_tolerance") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
