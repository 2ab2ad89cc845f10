"""Session 19: the persistent MLA prefill kernel against the per-tile one and FlashInfer (one process per subject).

    python3 s19/pf_bench.py render OUTDIR              # write the variants' .cu files
    python3 s19/pf_bench.py build FILE.cu              # build only (run several at once)
    python3 s19/pf_bench.py check FILE.cu JSON         # correctness on small/edge shapes, then timing
    python3 s19/pf_bench.py fi JSON                    # FlashInfer timing
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

T = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
VARIANTS = {"p1": {}, "p0": {"PERSISTENT": False}, "p1s": {"KV_SPLIT": True},
            "p1s_lazy8": {"KV_SPLIT": True, "LAZY_RESCALE": True, "MAX_SLACK": 8}}
CHECK = [
    ("one_step_q8", [8], [8]), ("one_step_q64", [64], [64]), ("steps2_q100", [100], [100]),
    ("steps8_q500", [500], [500]), ("chunk_q16_kv1000", [16], [1000]), ("partial_q5_q1", [5, 1], [5, 70]),
    ("ragged", [300, 77, 5, 1], [300, 200, 5, 64]), ("empty_seq", [3, 0, 9], [3, 0, 40]),
    ("many_b128_q32", [32] * 128, [32 + 7 * (i % 9) for i in range(128)]),
    ("many_b300_q5", [5] * 300, [5 + (i % 70) for i in range(300)]),
    ("mix", [700] + [1] * 30 + [37] * 9, [2000] + [300] * 30 + [37] * 9),
    ("q3000", [3000], [3000]),
    ("decodelike_q1_kv4096", [1], [4096]), ("decodelike_b16_q2_kv3000", [2] * 16, [3000] * 16),
    ("chunk_q64_kv20000", [64], [20000]), ("chunk_b3_q9_kv777", [9, 1, 3], [777, 64, 1000]),
]
FULL_GE3K = [(3024, 3, 3029), (3842, 20, 3916), (6053, 11, 6091), (8987, 56, 14390), (10870, 2, 10875),
             (15092, 26, 15187), (15883, 18, 15937), (16384, 1, 16387)]
VAL = ["val_decodelike_q1_kv4096", "val_decodelike_b64_kv1024", "val_chunk_q512_kv65536", "s_decodelike_b8_q2_kv6144",
       "val_many_b64_q16", "val_many_b128_q32", "val_many_b256_q64", "val_single_q4096", "val_single_q16384",
       "val_chunk_q2048_kv34816", "val_chunk_b2_q8192_kv40960", "val_mix_b32", "val_decodelike_b16_kv32768"]
SEARCH = ["s_single_q3072", "s_ragged_b4_q6240", "s_many_b32_q48", "s_chunk_q1536_kv16384"]


def task():
    from ksearch.task import load_task
    return load_task(T)


def timed_workloads(tk):
    sets = tk.workload_sets()
    by = {w.name: w for w in sets["space"] + sets["search"] + sets["full"]}
    names = VAL + SEARCH + [f"full_q{a}_b{b}_kv{c}" for a, b, c in FULL_GE3K]
    return [by[n] for n in names if n in by]


def bench(fn):
    import triton.testing
    return float(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median"))


def time_subject(tk, make_call, out: dict):
    import torch
    for w in timed_workloads(tk):
        inputs = tk.make_inputs(w, device="cuda", seed=w.input_seed(0))
        try:
            call = make_call(inputs)
            call(); torch.cuda.synchronize()
            ms = bench(call)
            flops = tk.flops(w)
            out[w.name] = {"ms": ms, "tflops": flops / ms / 1e9 if flops else None, "q": w.axes["total_q"]}
        except Exception as e:  # noqa: BLE001
            out[w.name] = {"error": f"{type(e).__name__}: {e}"[-400:]}
        print(w.name, out[w.name], flush=True)
        del inputs
        torch.cuda.empty_cache()


def main() -> int:
    cmd = sys.argv[1]
    if cmd == "render":
        from ksearch.task.catalog import load_catalog
        tk = task()
        cat = load_catalog(tk.strategies_dir, T)
        d = Path(sys.argv[2]); d.mkdir(parents=True, exist_ok=True)
        for name, knobs in VARIANTS.items():
            (d / f"{name}.cu").write_text(cat.render("hopper_wgmma_prefill", knobs))
        return 0
    if cmd == "build":
        from ksearch.instantiate.loader import load_entry_point
        t = time.time()
        load_entry_point(Path(sys.argv[2]).read_text())
        print(f"built {sys.argv[2]} in {time.time() - t:.0f} s")
        return 0
    import torch
    tk = task()
    res: dict = {}
    if cmd == "fi":
        factory = tk.baselines()["flashinfer_auto"]
        time_subject(tk, factory, res)
        Path(sys.argv[2]).write_text(json.dumps(res, indent=1))
        return 0
    from ksearch.instantiate.loader import load_entry_point
    run = load_entry_point(Path(sys.argv[2]).read_text())
    wm = tk.workloads_module
    corr = tk.correctness
    checks = {}
    ok_all = True
    for name, ql, kl in CHECK:
        w = wm._workload_lens(name, ql, kl, wm.POOL_PAGES)
        inputs = tk.make_inputs(w, device="cuda", seed=3)
        if name == "ragged":                          # rows past qo_indptr[-1]: output 0, lse -inf
            for key in ("q_nope", "q_pe"):
                x = inputs[key]
                inputs[key] = torch.cat([x, torch.randn(9, *x.shape[1:], device="cuda").to(x.dtype)])
        want_o, want_l = tk.reference(**inputs)
        try:
            got_o, got_l = run(*[inputs[n] for n in tk.definition.input_names])
            torch.cuda.synchronize()
            for _ in range(2):                        # again: a split's counters must be back at 0 after each call
                got_o, got_l = run(*[inputs[n] for n in tk.definition.input_names])
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            checks[name] = {"error": f"{type(e).__name__}: {e}"[-400:]}
            print(name, checks[name], flush=True)
            ok_all = False
            if "illegal" in str(e) or "launch" in str(e):
                break
            continue
        eo = (got_o.float() - want_o.float()).abs()
        fin = torch.isfinite(want_l)
        el = (got_l.float() - want_l.float()).abs()[fin]
        ok = bool(torch.allclose(got_o.float(), want_o.float(), atol=corr.atol, rtol=corr.rtol)) and \
            bool(torch.allclose(got_l.float(), want_l.float(), atol=corr.atol, rtol=corr.rtol, equal_nan=True))
        checks[name] = {"ok": ok, "out_err": float(eo.max()), "lse_err": float(el.max()) if el.numel() else 0.0,
                        "nonfinite": int((~torch.isfinite(got_o)).sum())}
        ok_all &= ok
        print(name, checks[name], flush=True)
    res["checks"] = checks
    res["correct"] = ok_all
    if ok_all:
        timing = {}
        time_subject(tk, lambda inputs: (lambda a=[inputs[n] for n in tk.definition.input_names]: run(*a)), timing)
        res["timing"] = timing
    Path(sys.argv[3]).write_text(json.dumps(res, indent=1))
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
