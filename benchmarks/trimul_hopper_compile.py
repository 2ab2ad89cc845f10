"""Compile gemm_input_pass's Triton kernels for the H200 (sm_90) on a machine without a GPU, and say what
Hopper would run: shared memory, whether the GEMM is on wgmma, and (with ptxas -v) registers and spills.

    PYTHONPATH=. python benchmarks/trimul_hopper_compile.py --knobs "" --knobs input_mode=epilogue_stats

Each --knobs is a comma-separated knob=value list for the family (empty: its defaults). Registers decide
how many programs share a multiprocessor (65536 per SM: 8 warps at <= 128 registers fit two), which the
interpreter cannot show. Triton must not be in interpreter mode (TRITON_INTERPRET unset). Exit status: 0
every kernel compiled on wgmma within 227 KiB of shared memory; 1 one did not; 3 this Triton cannot
compile for sm_90 here.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TASK = "trimul_outgoing_h128"
SMEM_LIMIT = 227 * 1024


def parse_knobs(spec: str) -> dict[str, Any]:
    knobs: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        knobs[key] = int(value) if value.isdigit() else value
    return knobs


def compile_kernel(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], num_warps: int,
                   num_stages: int) -> Any:
    """Triton's whole pipeline for sm_90 (to a cubin); pointer and integer arguments 16-divisible."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {**signature, **{k: "constexpr" for k in constexprs}}
    names = list(sig)
    attrs = {(i,): [["tt.divisibility", 16]] for i, k in enumerate(names) if sig[k] not in ("constexpr", "fp32")}
    src = ASTSource(fn=fn, signature=sig, constexprs={(names.index(k),): v for k, v in constexprs.items()},
                    attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def programs_per_sm(registers: int, shared: int, warps: int) -> int:
    """Programs of this kernel that fit one H100/H200 multiprocessor at once: 65536 registers (allocated per
    warp in steps of 256, i.e. per thread in steps of 8), 227 KiB of shared memory for programs (1 KiB more
    reserved per program), 64 warps."""
    per_warp = -(-registers * 32 // 256) * 256
    by_regs = 65536 // (per_warp * warps)
    by_smem = SMEM_LIMIT // (shared + 1024) if shared else 32
    return max(0, min(by_regs, by_smem, 64 // warps, 32))


def ptxas_report(ptx: str) -> str:
    """'N registers, S bytes spilled' from the ptxas Triton ships (the newest of its copies), or why not."""
    import triton

    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    for name in ("ptxas-blackwell", "ptxas"):
        exe = bin_dir / name
        if not exe.exists():
            continue
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "k.ptx"
            src.write_text(ptx)
            r = subprocess.run([str(exe), "-arch=sm_90a", "-v", str(src), "-o", str(Path(d) / "k.cubin")],
                               capture_output=True, text=True)
        if r.returncode == 0:
            lines = [ln.split(":", 1)[-1].strip() for ln in (r.stdout + r.stderr).splitlines()
                     if "registers" in ln or "spill" in ln]
            return "; ".join(lines)
    return "no ptxas here could assemble it"


def kernels(mod: Any, precision: str) -> list[tuple[str, Any, dict[str, str], dict[str, Any], int, int]]:
    """(name, kernel, signature, constexprs, warps, stages) of the module's input-pass kernels and its
    output pass."""
    mode = mod.MODE
    half = "*fp16" if precision == "fp16" else "*bf16"
    sig = {"a_ptr": "*fp16" if mode == 0 else "*fp32", "stats_ptr": "*fp32", "mask_ptr": "*fp32",
           "w_ptr": "*bf16" if mode == 2 else "*fp16", "bias_ptr": "*fp32", "colsum_ptr": "*fp32", "lr_ptr": half,
           "gate_ptr": "*fp16", "num_rows": "i32", "plane": "i32", "dim": "i32", "eps": "fp32"}
    hmajor = mod.GATE_HMAJOR
    columns = 768 if hmajor else 640
    consts = {"H": 128, "MODE": mode, "N_TILES": -(-columns // mod.GEMM_BLOCK_N), "EVEN_K": True,
              "BLOCK_M": mod.GEMM_BLOCK_M, "BLOCK_N": mod.GEMM_BLOCK_N, "BLOCK_K": mod.GEMM_BLOCK_K,
              "PERSISTENT": mod.GEMM_PROGRAMS_PER_SM > 0, "UNIFORM": hmajor}
    # resident and stationary read x itself (fp32) with fp16 weights
    x_sig = {"x_ptr": "*fp32", "mask_ptr": "*fp32", "w_ptr": "*fp16", "bias_ptr": "*fp32", "lr_ptr": half,
             "gate_ptr": "*fp16", "num_rows": "i32", "plane": "i32", "dim": "i32", "eps": "fp32"}
    if mode == 4:                   # resident: one program per row block, each D's chunk count compiled apart
        out = []
        for dim in (128, 384):
            chunk, chunks = mod._resident_chunks(dim)
            res_consts = {"H": 128, "N_TILES": consts["N_TILES"], "NCH": chunks, "KC": chunk,
                          "BLOCK_M": mod.GEMM_BLOCK_M, "BLOCK_N": mod.GEMM_BLOCK_N, "UNIFORM": consts["UNIFORM"]}
            out.append((f"_proj_resident(D={dim})", mod._proj_resident, x_sig, res_consts, mod.GEMM_WARPS,
                        mod._gemm_stages(mode, dim)))
    elif mode == 5:                 # stationary: D <= 128 only (wider rows take the ln_fp16 path)
        out = []
        if mod._stationary_fits(128):
            out.append(("_proj_stationary(D=128)", mod._proj_stationary, x_sig,
                        {"H": 128, "N_TILES": -(-640 // mod.STATIONARY_BLOCK_N), "K": mod._stationary_k(128),
                         "BLOCK_M": mod.STATIONARY_BLOCK_M, "BLOCK_N": mod.STATIONARY_BLOCK_N,
                         "STAGES": mod._gemm_stages(5, 128)}, mod.STATIONARY_WARPS, 3))
        consts["MODE"] = 0
        out.append(("_proj_gemm(D=384, ln_fp16)", mod._proj_gemm, {**sig, "a_ptr": "*fp16"}, consts, mod.GEMM_WARPS,
                    mod._gemm_stages(0)))
    else:
        out = [("_proj_gemm", mod._proj_gemm, sig, consts, mod.GEMM_WARPS, mod._gemm_stages(mode))]
    if mode in (0, 1, 5):
        ln_sig = {"x_ptr": "*fp32", "out_ptr": "*fp32" if mode == 1 else "*fp16", "num_rows": "i32", "dim": "i32",
                  "eps": "fp32"}
        out.append(("_ln_rows(D=384)", mod._ln_rows, ln_sig, {"ROWS": 16, "BLOCK_D": 512, "WRITE_XHAT": mode != 1},
                    8, 1))
    fold_sig = {n: "*fp32" for n in ("lp_ptr", "lg_ptr", "rp_ptr", "rg_ptr", "og_ptr", "nw_ptr", "nb_ptr")}
    fold_sig.update({"w_ptr": "*bf16" if mode == 2 else "*fp16", "bias_ptr": "*fp32", "colsum_ptr": "*fp32",
                     "dim": "i32"})
    out.append(("_fold_weights", mod._fold_weights, fold_sig,
                {"H": 128, "N": columns, "HMAJOR": hmajor, "COLSUM": mode == 2, "BLOCK_C": 64, "BLOCK_D": 64}, 4, 3))
    out_sig = {"t_ptr": half, "gate_ptr": "*fp16", "ln_w_ptr": "*fp32", "ln_b_ptr": "*fp32", "wo_ptr": "*fp16",
               "out_ptr": "*fp32", "plane": "i32", "dim": "i32", "eps": "fp32"}
    if hmajor:
        out_sig["gate_ptr"] = half
    out.append(("_norm_gate_out", mod._norm_gate_out, out_sig,
                {"H": 128, "BLOCK_P": mod.OUT_BLOCK_P, "BLOCK_D": mod.OUT_BLOCK_D,
                 "GATE_HMAJOR": hmajor}, mod.OUT_WARPS,
                getattr(mod, "OUT_STAGES", 3)))
    if getattr(mod, "OUT_PROGRAMS_PER_SM", 0):
        for dim in (128, 384):
            d_tiles = -(-dim // mod.OUT_BLOCK_D)
            if d_tiles <= mod.OUT_MAX_D_TILES:
                out.append((f"_norm_gate_out_persistent(D={dim})", mod._norm_gate_out_persistent,
                            {k: out_sig.get(k, "i32") for k in ("t_ptr", "gate_ptr", "ln_w_ptr", "ln_b_ptr", "wo_ptr",
                                                                "out_ptr", "plane", "batches", "dim", "eps")},
                            {"H": 128, "BLOCK_P": mod.OUT_BLOCK_P, "BLOCK_D": mod.OUT_BLOCK_D, "D_TILES": d_tiles,
                             "GATE_HMAJOR": hmajor, "STAGES": min(mod.OUT_STAGES, 2)}, mod.OUT_WARPS, 3))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--knobs", action="append", default=[], help="knob=value,... (repeatable; empty = defaults)")
    ap.add_argument("--family", default="gemm_input_pass")
    ap.add_argument("--no-ptxas", dest="ptxas", action="store_false", help="skip the register/spill report")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET"):
        print("TRITON_INTERPRET is set: unset it to compile for the GPU")
        return 3
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.compiler import ASTSource  # noqa: F401
    except ImportError as e:
        print(f"this Triton cannot compile ahead of time here: {e}")
        return 3
    from ksearch.instantiate.loader import load_module_from_source
    from ksearch.task import load_task
    from ksearch.task.catalog import load_catalog

    task = load_task(TASK)
    catalog = load_catalog(task.strategies_dir, task.name)
    bad = 0
    for spec in args.knobs or [""]:
        knobs = parse_knobs(spec)
        mod = load_module_from_source(catalog.render(args.family, knobs), name_hint="trimul_hopper_compile")
        for name, fn, sig, consts, warps, stages in kernels(mod, knobs.get("precision", "fp16")):
            try:
                k = compile_kernel(fn, sig, consts, warps, stages)
            except Exception as e:  # noqa: BLE001 - report every configuration
                print(f"[{spec or 'defaults'}] {name}: COMPILE FAILED {type(e).__name__}: {str(e)[:1500]}")
                bad += 1
                continue
            ptx = k.asm["ptx"]
            wgmma = ptx.count("wgmma.mma_async")
            ok = k.metadata.shared <= SMEM_LIMIT and (wgmma > 0 or not name.startswith("_proj_"))
            bad += not ok
            regs = ptxas_report(ptx) if args.ptxas else "-"
            used = re.search(r"Used (\d+) registers", regs)
            fit = (f", {programs_per_sm(int(used.group(1)), k.metadata.shared, warps)} per SM" if used else "")
            print(f"[{spec or 'defaults'}] {name}: warps {warps} stages {stages} shared {k.metadata.shared} B, "
                  f"wgmma x{wgmma}, {regs}{fit}{'' if ok else '  <- NOT OK'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
