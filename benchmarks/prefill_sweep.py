"""Time MLA prefill kernel variants against FlashInfer on real prompt lengths (issue 22), within one GPU call.

    PYTHONPATH=. python3 benchmarks/prefill_sweep.py OUT_DIR            # on the H200 (about 6-8 minutes)
    PYTHONPATH=. python3 benchmarks/prefill_sweep.py OUT_DIR --dry      # CPU: Triton interpreter, tiny shapes
    PYTHONPATH=. python3 benchmarks/prefill_sweep.py OUT_DIR --source K.cu --variants 2   # a kernel file first

--source FILE (repeatable) puts a solution file (Triton or CUDA) ahead of the catalog variants, under its file
name; --cuda puts the CUDA family (hopper_wgmma_prefill) at its defaults and every tactic next; --variants N
then keeps the first N Triton catalog variants.

For each variant (a catalog family at some knob setting: a grid of hopper_latent_tiles settings, then the
earlier families' best settings) it renders the kernel, checks it against the task's reference on one small
ragged/chunked shape (the task's tolerance), and only then times it on every shape: prompts of 3000, 6000,
12000 and 16384 tokens (batch 1), a chunked prefill (1024 new tokens over 12000), a batch of 3 x 4000, a
ragged batch of five, and the 33/34 prefill of the dataset. FlashInfer's BatchMLAPagedAttentionWrapper
(causal; planned outside the timed region) is timed on the same inputs. Timing: triton.testing.do_bench
(L2 flushed before every call), median; each shape gets fresh inputs from the task's generator (the
dataset's 989,669-row pool). A variant that fails to compile, run or match is recorded with its error and
the sweep goes on; a variant that has used up its share of time (compilation included) skips its
remaining shapes; past the overall budget no new variant starts. A CUDA error that poisons the process (an
illegal address) is recorded on its variant and the script restarts itself with --resume, which keeps what
was measured and goes on with the next variant. Results go to OUT_DIR/prefill_sweep.json
after every variant (a killed sweep keeps what it measured), and a table is printed: variant, shape, ms,
FlashInfer ms / ms, TFLOP/s counting causal FLOPs (roofline.py) and % of the bf16 peak (790 TFLOP/s, the
H200's measured dense rate).

--dry runs the same code path on the CPU under the Triton interpreter (bf16 tl.dot fixed, see
ksearch/eval/interpreter.py) with tiny shapes, a few variants and no FlashInfer: what the unit test runs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.sweep_restart import is_sticky, run_resumable
from ksearch.store.atomic import atomic_write

TASK = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
BF16_PEAK_TFLOPS = 790.0
NEW_FAMILY = "hopper_latent_tiles"
CUDA_FAMILY = "hopper_wgmma_prefill"

# hopper_latent_tiles settings (defaults: 64 rows, 64-row gathers, one program per tile over all 512 value
# columns, 256-wide q.k chunks, 8 warps, num_stages 4, persistent). Each line changes what the comment says.
HOPPER_GRID: list[dict[str, Any]] = [
    {},
    {"QK_CHUNK": 512},                                                   # one chunk, one accumulator
    {"QK_CHUNK": 128},
    {"QK_CHUNK": 64},
    {"NUM_STAGES": 3},
    {"BLOCK_N": 32, "NUM_STAGES": 7},                                    # four row tiles in flight
    {"BLOCK_N": 32, "NUM_STAGES": 5},
    {"BLOCK_N": 32, "NUM_STAGES": 7, "QK_CHUNK": 512},
    {"BLOCK_N": 128},                                                    # one row tile, no pipelining
    {"SCHEDULE": "grid"},
    {"SCHEDULE": "grid", "BLOCK_N": 32, "NUM_STAGES": 7},
    {"BLOCK_M": 128, "VALUE_SPLIT": 2, "BLOCK_N": 32},                   # q.k not replicated per warpgroup
    {"BLOCK_M": 128, "VALUE_SPLIT": 2, "BLOCK_N": 32, "QK_CHUNK": 128},
    {"BLOCK_M": 128, "VALUE_SPLIT": 2, "BLOCK_N": 32, "NUM_STAGES": 3},
    {"BLOCK_M": 128, "VALUE_SPLIT": 2, "BLOCK_N": 32, "SCHEDULE": "grid"},
    {"BLOCK_M": 128, "VALUE_SPLIT": 2, "BLOCK_N": 64},                   # one row tile
    {"BLOCK_M": 128, "VALUE_SPLIT": 4, "BLOCK_N": 32},
    {"VALUE_SPLIT": 2, "NUM_WARPS": 4},                                  # one warpgroup, 64 x 256 accumulator
    {"VALUE_SPLIT": 2, "NUM_WARPS": 4, "BLOCK_N": 32, "NUM_STAGES": 7},
    {"VALUE_SPLIT": 2},
    {"VALUE_SPLIT": 2, "BLOCK_N": 32, "NUM_STAGES": 7},
    {"BLOCK_M": 32},                                                     # 2 tokens: mma.sync, many programs
    {"BLOCK_M": 32, "BLOCK_N": 32, "NUM_STAGES": 3, "CTAS_PER_SM": 2},  # two programs per SM fit
    {"BLOCK_M": 32, "VALUE_SPLIT": 2, "NUM_WARPS": 4, "BLOCK_N": 32},
]
# The earlier families' best settings on the issue's shapes (BENCHMARKS.md, issue 22).
OTHER_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("flash_tile_heads_m", {}),
    ("flash_tile_heads_m", {"BLOCK_N": 64}),
    ("persistent_tc_tile", {}),
    ("persistent_tc_tile", {"ROWS": 8, "QK_CHUNK": 256, "PV_SPLIT": 2}),
]


@dataclass(frozen=True)
class Shape:
    name: str
    q_lens: list[int]
    kv_lens: list[int]


GPU_SHAPES = [
    Shape("q3000", [3000], [3000]),
    Shape("q6000", [6000], [6000]),
    Shape("q12000", [12000], [12000]),
    Shape("q16384_kv16387", [16384], [16387]),
    Shape("chunk_q1024_kv12000", [1024], [12000]),
    Shape("b3_q12000", [4000] * 3, [4000] * 3),
    Shape("ragged_b5", [6000, 2000, 500, 100, 7], [6500, 2000, 900, 100, 4000]),
    Shape("q33_kv34", [33], [34]),
]
GPU_CHECK = Shape("check_ragged", [300, 77, 5, 1], [300, 200, 5, 64])
DRY_SHAPES = [Shape("dry_q9", [9], [9]), Shape("dry_chunk_q5_kv70", [5], [70]),
              Shape("dry_ragged_b3", [6, 1, 2], [6, 40, 9])]
DRY_CHECK = Shape("dry_check", [7, 1], [7, 50])
MAX_RESTARTS = 5


@dataclass
class Variant:
    family: str
    knobs: dict[str, Any]
    source_path: str | None = None   # a solution file instead of a catalog family at some knobs
    status: str = "pending"          # pending | ok | failed | skipped
    error: str | None = None
    check: dict[str, Any] | None = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def label(self) -> str:
        if self.source_path is not None:
            return f"file:{Path(self.source_path).name}"
        knobs = ",".join(f"{k}={v}" for k, v in sorted(self.knobs.items())) or "defaults"
        return f"{self.family}[{knobs}]"


def cuda_variants(catalog: Any) -> list[Variant]:
    """The CUDA family at its defaults and at every tactic's setting (GPU only)."""
    fam = catalog.family(CUDA_FAMILY)
    return [Variant(CUDA_FAMILY, {})] + [Variant(CUDA_FAMILY, dict(t.settings)) for t in fam.tactics]


def variants(dry: bool, limit: int | None, sources: list[str] | None = None, catalog: Any = None) -> list[Variant]:
    """The solution files given (first), the CUDA family's settings (given the task's `catalog`), then the
    Triton catalog variants (with `limit`: the first `limit - 1` new-family settings and one earlier family
    for comparison)."""
    out = [Variant(NEW_FAMILY, k) for k in HOPPER_GRID] + [Variant(f, k) for f, k in OTHER_VARIANTS]
    if dry and limit is None:
        limit = 3
    if limit is not None:
        out = out[:max(limit - 1, 1)] + [Variant(*OTHER_VARIANTS[0])]
    files = [Variant(Path(p).stem, {}, source_path=str(p)) for p in sources or []]
    return files + (cuda_variants(catalog) if catalog is not None else []) + out


def _workload(task: Any, shape: Shape, num_pages: int) -> Any:
    return task.workloads_module._workload_lens(shape.name, shape.q_lens, shape.kv_lens, num_pages)


class Sweep:
    """One pass over variants x shapes; `run()` returns the JSON document it also writes to out_dir."""

    def __init__(self, out_dir: Path, dry: bool, budget_s: float, per_variant_s: float, limit: int | None,
                 log: Callable[[str], None] = print, sources: list[str] | None = None, cuda: bool = False):
        import torch

        from ksearch.task import load_task
        from ksearch.task.catalog import load_catalog

        self.out_dir, self.dry, self.log = out_dir, dry, log
        self.budget_s, self.per_variant_s = budget_s, per_variant_s
        self.task = load_task(TASK)
        self.catalog = load_catalog(self.task.strategies_dir, TASK)
        self.device = "cpu" if dry else "cuda"
        self.torch = torch
        pages = 512 if dry else self.task.workloads_module.POOL_PAGES
        self.shapes = DRY_SHAPES if dry else GPU_SHAPES
        self.workloads = {s.name: _workload(self.task, s, pages) for s in self.shapes}
        self.check_workload = _workload(self.task, DRY_CHECK if dry else GPU_CHECK, pages)
        self.variants = variants(dry, limit, sources, self.catalog if cuda else None)
        self.baseline: dict[str, dict[str, Any]] = {}
        self.t0 = time.monotonic()
        self.poisoned = False           # a sticky CUDA error: every later call in this process would fail

    def resume_from(self, doc: dict[str, Any]) -> None:
        """Take over a previous process's results (same variant list): its FlashInfer times, finished
        variants and elapsed time."""
        self.baseline = doc.get("flashinfer", {})
        done = {v["label"]: v for v in doc.get("variants", []) if v["status"] != "pending"}
        for v in self.variants:
            if v.label in done:
                d = done[v.label]
                v.status, v.error, v.check, v.results, v.seconds = (d["status"], d["error"], d["check"],
                                                                    d["results"], d["seconds"])
        self.t0 -= float(doc.get("elapsed_s", 0.0))

    # ---- timing ----------------------------------------------------------------------------------------
    def _time_ms(self, fn: Callable[[], Any]) -> float:
        if self.dry:
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median"))

    def _row(self, workload: Any, ms: float) -> dict[str, Any]:
        flops = self.task.flops(workload)
        tflops = flops / (ms * 1e-3) / 1e12 if ms > 0 else None
        return {"ms": ms, "tflops": tflops,
                "pct_bf16_peak": 100 * tflops / BF16_PEAK_TFLOPS if tflops is not None else None}

    def _inputs(self, workload: Any) -> dict[str, Any]:
        return self.task.make_inputs(workload, device=self.device, seed=workload.input_seed(0))

    # ---- the pieces --------------------------------------------------------------------------------------
    def measure_baseline(self, inputs_by_shape: dict[str, dict[str, Any]]) -> None:
        if self.dry:
            return
        factory = self.task.baselines().get("flashinfer_auto")
        for name, inputs in inputs_by_shape.items():
            try:
                if factory is None:
                    raise RuntimeError("the task has no flashinfer_auto baseline")
                call = factory(inputs)
                call()
                self.torch.cuda.synchronize()
                self.baseline[name] = {"ms": self._time_ms(call)}
            except Exception as e:          # noqa: BLE001 - no FlashInfer here: ratios stay empty, the sweep goes on
                self.baseline[name] = {"error": f"{type(e).__name__}: {e}"[-500:]}
            self.log(f"flashinfer {name}: {self.baseline[name]}")

    def check(self, v: Variant, run: Callable[..., Any]) -> bool:
        from ksearch.eval.trusted.rules import check_outputs

        inputs = self._inputs(self.check_workload)
        want = self.task.reference(**inputs)
        got = run(*[inputs[n] for n in self.task.definition.input_names])   # positional, as the judge calls it
        corr = self.task.correctness
        res = check_outputs(list(got), list(want), self.task.definition.output_names, atol=corr.atol,
                            rtol=corr.rtol, required_matched_ratio=corr.required_matched_ratio, rule=corr.rule)
        v.check = {"workload": self.check_workload.name, "passed": res.passed, "status": res.status,
                   "message": res.message}
        return res.passed

    def run_variant(self, v: Variant, inputs_by_shape: dict[str, dict[str, Any]]) -> None:
        from ksearch.instantiate.loader import load_entry_point

        start = time.monotonic()
        try:
            source = (Path(v.source_path).read_text() if v.source_path is not None
                      else self.catalog.render(v.family, v.knobs))
            run = load_entry_point(source, name_hint=f"sweep_{v.family}")
            if not self.check(v, run):
                v.status, v.error = "failed", f"wrong result on {self.check_workload.name}: {v.check['message']}"
                return
            for name, inputs in inputs_by_shape.items():
                if time.monotonic() - start > self.per_variant_s:
                    v.results[name] = {"skipped": f"variant over its {self.per_variant_s:.0f} s share"}
                    continue
                args = [inputs[n] for n in self.task.definition.input_names]
                run(*args)                   # compile + warm (counted in the variant's time)
                if not self.dry:
                    self.torch.cuda.synchronize()
                row = self._row(self.workloads[name], self._time_ms(lambda: run(*args)))  # noqa: B023 - run at once
                base = self.baseline.get(name, {}).get("ms")
                row["vs_flashinfer"] = base / row["ms"] if base and row["ms"] > 0 else None
                v.results[name] = row
            v.status = "ok"
        except Exception as e:  # noqa: BLE001 - compile errors, launch failures, out of memory: record, go on
            v.status, v.error = "failed", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"[-1500:]
            self.poisoned = not self.dry and is_sticky(e)
            if not self.dry and not self.poisoned:
                self.torch.cuda.empty_cache()
        finally:
            v.seconds = time.monotonic() - start

    def document(self) -> dict[str, Any]:
        import torch

        env = {"torch": torch.__version__, "device": self.device}
        try:
            import triton
            env["triton"] = triton.__version__
        except ImportError:
            pass
        if not self.dry and torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name()
        return {"task": TASK, "dry": self.dry, "bf16_peak_tflops": BF16_PEAK_TFLOPS, "env": env,
                "elapsed_s": time.monotonic() - self.t0,
                "shapes": {s.name: {"q_lens": s.q_lens, "kv_lens": s.kv_lens,
                                    "flops_causal": self.task.flops(self.workloads[s.name])} for s in self.shapes},
                "flashinfer": self.baseline,
                "variants": [{**asdict(v), "label": v.label} for v in self.variants]}

    def write(self) -> Path:
        return atomic_write(self.out_dir / "prefill_sweep.json", json.dumps(self.document(), indent=1))

    def run(self) -> dict[str, Any]:
        """Measure what is still pending; stops early (self.poisoned) after a sticky CUDA error."""
        inputs_by_shape = {name: self._inputs(w) for name, w in self.workloads.items()}
        if not self.baseline:
            self.measure_baseline(inputs_by_shape)
        for v in self.variants:
            if v.status != "pending":
                continue
            if time.monotonic() - self.t0 > self.budget_s:
                v.status, v.error = "skipped", f"sweep over its {self.budget_s:.0f} s budget"
                continue
            self.run_variant(v, inputs_by_shape)
            self.log(f"{v.label}: {v.status} in {v.seconds:.1f}s" + (f" ({v.error.splitlines()[0]})" if v.error else ""))
            self.write()
            if self.poisoned:
                break
        self.write()
        return self.document()


def table(doc: dict[str, Any]) -> str:
    """Plain-text table: variant, shape, ms, FlashInfer ms / ms, TFLOP/s (causal), % of the bf16 peak."""
    lines = [f"{'variant':<72} {'shape':<22} {'ms':>9} {'vs FI':>7} {'TFLOP/s':>8} {'% bf16':>7}"]
    for name, b in doc["flashinfer"].items():
        if "ms" in b:
            tf = doc["shapes"][name]["flops_causal"] / (b["ms"] * 1e-3) / 1e12
            lines.append(f"{'flashinfer':<72} {name:<22} {b['ms']:>9.4f} {1.0:>7.3f} {tf:>8.1f} "
                         f"{100 * tf / doc['bf16_peak_tflops']:>7.1f}")
        else:
            lines.append(f"{'flashinfer':<72} {name:<22} error: {b.get('error', '')[:80]}")
    for v in doc["variants"]:
        if v["status"] != "ok":
            lines.append(f"{v['label']:<72} {'-':<22} {v['status']}: {(v['error'] or '').splitlines()[0][:100]}")
            continue
        for name, r in v["results"].items():
            if "ms" not in r:
                lines.append(f"{v['label']:<72} {name:<22} {r.get('skipped', '')}")
                continue
            vs = f"{r['vs_flashinfer']:.3f}" if r.get("vs_flashinfer") else "-"
            lines.append(f"{v['label']:<72} {name:<22} {r['ms']:>9.4f} {vs:>7} {r['tflops']:>8.1f} "
                         f"{r['pct_bf16_peak']:>7.1f}")
    ok = [v for v in doc["variants"] if v["status"] == "ok"]
    big = [s for s, d in doc["shapes"].items() if sum(d["q_lens"]) >= 3000]
    best = []
    for v in ok:
        ratios = [v["results"][s].get("vs_flashinfer") for s in big if s in v["results"]]
        if ratios and all(ratios):
            best.append((math.exp(statistics.fmean(math.log(r) for r in ratios)), min(ratios), v["label"]))
    for g, worst, label in sorted(best, reverse=True)[:5]:
        lines.append(f"geomean vs FlashInfer over >= 3k-token shapes {g:.3f} (worst {worst:.3f}): {label}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir", help="folder for prefill_sweep.json")
    p.add_argument("--dry", action="store_true", help="CPU, Triton interpreter, tiny shapes, no FlashInfer")
    p.add_argument("--budget-s", type=float, default=420.0, help="no new variant starts after this (default 420)")
    p.add_argument("--per-variant-s", type=float, default=25.0,
                   help="a variant past this (compilation included) skips its remaining shapes (default 25)")
    p.add_argument("--variants", type=int, default=None, help="only the first N variants (dry default: 3)")
    p.add_argument("--source", action="append", default=[], metavar="FILE",
                   help="a solution file (Triton or CUDA) to check and time before the catalog variants")
    p.add_argument("--cuda", action="store_true",
                   help=f"the CUDA family {CUDA_FAMILY} at its defaults and every tactic, before the Triton variants")
    p.add_argument("--resume", type=int, default=0, help=argparse.SUPPRESS)   # restarts so far (internal)
    args = p.parse_args(argv)
    if args.budget_s <= 0 or args.per_variant_s <= 0 or (args.variants is not None and args.variants < 1):
        print("prefill_sweep: --budget-s and --per-variant-s must be positive and --variants at least 1",
              file=sys.stderr)
        return 2
    missing = [f for f in args.source if not Path(f).is_file()]
    if missing:
        print(f"prefill_sweep: no such solution file: {', '.join(missing)} (pass --source with a .py or .cu file)",
              file=sys.stderr)
        return 2
    if args.dry:
        from ksearch.eval.interpreter import prepare_interpreter

        prepare_interpreter()
    else:
        import torch

        if not torch.cuda.is_available():
            print("prefill_sweep: no CUDA device here; run it on the GPU machine, or pass --dry", file=sys.stderr)
            return 2
    sweep = Sweep(Path(args.out_dir), args.dry, args.budget_s, args.per_variant_s, args.variants,
                  log=lambda m: print(m, flush=True), sources=args.source, cuda=args.cuda)
    run_resumable(sweep, Path(args.out_dir) / "prefill_sweep.json", __file__, args.resume, MAX_RESTARTS, argv,
                  "prefill_sweep", "variants", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
