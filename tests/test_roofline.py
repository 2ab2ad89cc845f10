"""Roofline formulas of every task (hand-computed small workloads) and the limit / floor arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from ksearch.eval.clocks.roofline import (
    H200_DATASHEET,
    LimitFraction,
    Peaks,
    compute_rate,
    datasheet_for,
    limit_fraction,
    measure_peaks,
    physical_floor_ms,
)
from ksearch.task import Workload, load_task

GQA = "gqa_paged_decode_h32_kv4_d128_ps1"
MLA_DECODE = "mla_paged_decode_h16_ckv512_kpe64_ps1"
MLA_PREFILL = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"


# ----------------------------------------------------------------------------- task formulas

def test_gqa_formulas_by_hand():
    task = load_task(GQA)
    w = Workload("hand", {"batch_size": 2, "num_pages": 64, "len_indptr": 3, "num_kv_indices": 10})
    # K and V: 10 rows x 4 heads x 128 x 2 B each = 10240 B each; q and output: 2 x 32 x 128 x 2 B = 16384 B
    # each; lse 2 x 32 x 4 B = 256 B; indices 10 + 3 int32 = 52 B.
    assert task.traffic_bytes(w) == 2 * 10240 + 2 * 16384 + 256 + 52
    # Per token and query head: q.k and p.v, 128 multiply-adds each.
    assert task.flops(w) == 10 * 32 * (2 * 128 + 2 * 128)
    assert task.compute_dtype == "bf16"


def test_mla_decode_formulas_by_hand():
    task = load_task(MLA_DECODE)
    w = Workload("hand", {"batch_size": 1, "num_pages": 64, "len_indptr": 2, "num_kv_indices": 3})
    # rows 3 x 576 x 2 B; q 16 x 576 x 2 B; output 16 x 512 x 2 B + lse 16 x 4 B; indices (3 + 2) x 4 B.
    assert task.traffic_bytes(w) == 3456 + 18432 + 16384 + 64 + 20
    assert task.flops(w) == 3 * 16 * (2 * 576 + 2 * 512)
    assert task.compute_dtype == "bf16"


def test_mla_prefill_counts_only_unmasked_pairs():
    task = load_task(MLA_PREFILL)
    # Sequence 0: 2 queries over 5 keys (prefix 3): query 0 sees 4 keys, query 1 sees 5. Sequence 1: one
    # query over one key. 10 visible (query, key) pairs in all.
    w = Workload("hand", {"total_q": 3, "num_pages": 64, "len_indptr": 3, "num_kv_indices": 6},
                 params={"q_lens": [2, 1], "kv_lens": [5, 1], "sm_scale": 0.1})
    assert task.flops(w) == 10 * 16 * (2 * 576 + 2 * 512)
    # rows 6 x 576 x 2 B; q 3 x 16 x 576 x 2 B; output 3 x 16 x (1024 + 4) B; kv_indices + two indptrs.
    assert task.traffic_bytes(w) == 6912 + 55296 + 49344 + 4 * (6 + 2 * 3)
    assert task.compute_dtype == "bf16"


def test_mla_prefill_pairs_match_a_brute_force_count():
    task = load_task(MLA_PREFILL)
    for w in task.workload_set("full"):
        q_lens, kv_lens = w.params["q_lens"], w.params["kv_lens"]
        if sum(q_lens) > 2000:
            continue
        pairs = sum(kv - q + i + 1 for q, kv in zip(q_lens, kv_lens) for i in range(q))
        assert task.flops(w) == pairs * 16 * 2176, w.name


def test_mla_prefill_rate_counts_causal_flops_on_every_row():
    """% of the bf16 peak for a prefill row: useful FLOPs of the causal triangle over the latency (issue 22)."""
    task = load_task(MLA_PREFILL)
    peaks = Peaks("H200 (measured)", 4.2, {"bf16": 790.0}, "measured", {"bf16": "measured"})
    w = next(w for w in task.workload_set("search") if w.name == "s_single_q16384_kv16896")
    # 16384 queries at the end of 16896 keys: query i sees 512 + i + 1 keys.
    pairs = 16384 * 512 + 16384 * 16385 // 2
    tflops, frac = compute_rate(task, w, 10.0, peaks)
    assert tflops == pytest.approx(pairs * 16 * 2176 / 10e-3 / 1e12) and frac == pytest.approx(tflops / 790.0)
    # A tiny, memory-bound row still gets its compute rate (limit_fraction would name the copy bandwidth).
    small = next(w for w in task.workload_set("search") if w.name == "s_single_q48")
    assert limit_fraction(task, small, 0.02, peaks).bound == "memory"
    tf_small, _ = compute_rate(task, small, 0.02, peaks)
    assert tf_small == pytest.approx(48 * 49 // 2 * 16 * 2176 / 0.02e-3 / 1e12)
    assert compute_rate(task, small, 0.0, peaks) is None


def test_bench_rows_carry_tflops_and_percent_of_tensor_peak():
    from rich.console import Console

    from ksearch.cli.bench import print_summary, summarize
    from ksearch.eval.report import BaselineTimes, EvalReport, WorkloadResult

    task = load_task(MLA_PREFILL)
    peaks = Peaks("H200 (measured)", 4.2, {"bf16": 790.0}, "measured", {"bf16": "measured"})
    ws = {w.name: w for w in task.workload_set("search")}
    report = EvalReport("k", "PASSED", "cuda", [WorkloadResult("s_single_q3072", "PASSED", latency_ms=0.5)])
    baseline = BaselineTimes("cuda", {"flashinfer_auto": {"s_single_q3072": 0.3}}, "FlashInfer")
    s = summarize("k", report, baseline, {"s_single_q3072": task.traffic_bytes(ws["s_single_q3072"])}, 4.2,
                  rate=lambda name, ms: compute_rate(task, ws[name], ms, peaks))
    row = s["rows"][0]
    assert row["tflops"] == pytest.approx(task.flops(ws["s_single_q3072"]) / 0.5e-3 / 1e12)
    assert row["frac_compute_peak"] == pytest.approx(row["tflops"] / 790.0)
    console = Console(width=400, record=True)
    print_summary(console, s, ["flashinfer_auto"])
    text = console.export_text()
    assert "% tensor peak" in text and f"{100 * row['frac_compute_peak']:.1f}" in text


def test_moe_formulas_follow_the_routing():
    task = load_task(MOE)
    ref = task.workloads_module._reference_module()
    for w in task.workload_set("tiny"):
        inp = task.make_inputs(w, device="cpu", seed=0)
        offset = inp["local_expert_offset"]
        ids, _ = ref.route(inp["routing_logits"], inp["routing_bias"], inp["routed_scaling_factor"])
        local = ids[(ids >= offset) & (ids < offset + 32)]
        hidden, inter = 256, 128
        assert task.flops(w) == local.numel() * (2 * hidden * 2 * inter + 2 * inter * hidden), w.name
        t = w.axes["seq_len"]
        per_expert = 3 * hidden * inter + 4 * (2 * 1 * 2 + 2 * 1)       # fp8 weights + fp32 block scales
        tokens = t * hidden + 4 * 2 * t + 4 * 256 * t + 2 * t * hidden  # activations, scales, logits, output
        assert task.traffic_bytes(w) == local.unique().numel() * per_expert + tokens + 2 * 256, w.name
    assert task.compute_dtype == "fp8"


def test_every_task_declares_its_formulas():
    for name in (GQA, MLA_DECODE, MLA_PREFILL, MOE):
        task = load_task(name)
        assert task.compute_dtype in ("bf16", "fp8", "fp32")
        w = task.workload_set("feedback")[-1]
        assert task.traffic_bytes(w) > 0 and task.flops(w) > 0
        assert not hasattr(task.workloads_module, "traffic_bytes")          # one home: roofline.py


# ----------------------------------------------------------------------------- limit and floor

@dataclass
class _FakeTask:
    traffic: int | None
    work: int | None
    compute_dtype: str | None = "fp8"

    def traffic_bytes(self, _w):
        return self.traffic

    def flops(self, _w):
        return self.work


_PEAKS = Peaks("test gpu", 2.0, {"bf16": 100.0, "fp8": 200.0, "fp32": 10.0}, "measured",
               {"bf16": "measured", "fp8": "datasheet", "fp32": "measured"})


def test_limit_fraction_memory_bound():
    # 2 GB at 2 TB/s = 1 ms; 1 GFLOP at 200 TFLOP/s = 5 us: memory binds. At 2 ms: 1 TB/s, half the limit.
    lf = limit_fraction(_FakeTask(2 * 10 ** 9, 10 ** 9), None, 2.0, _PEAKS)
    assert isinstance(lf, LimitFraction)
    assert lf.bound == "memory" and lf.unit == "TB/s"
    assert lf.achieved == pytest.approx(1.0) and lf.limit == 2.0 and lf.fraction == pytest.approx(0.5)
    assert "copy bandwidth" in lf.source and "measured" in lf.source


def test_limit_fraction_compute_bound_uses_the_task_dtype():
    # 1 TFLOP at 200 TFLOP/s (fp8) = 5 ms > 1 MB / 2 TB/s: compute binds. At 10 ms: 100 TFLOP/s, half.
    lf = limit_fraction(_FakeTask(10 ** 6, 10 ** 12, "fp8"), None, 10.0, _PEAKS)
    assert lf.bound == "compute" and lf.unit == "TFLOP/s"
    assert lf.achieved == pytest.approx(100.0) and lf.fraction == pytest.approx(0.5)
    assert "fp8" in lf.source and "datasheet" in lf.source
    # The same work as bf16 (peak 100): at 10 ms it is exactly at the limit.
    assert limit_fraction(_FakeTask(10 ** 6, 10 ** 12, "bf16"), None, 10.0, _PEAKS).fraction == pytest.approx(1.0)


def test_limit_fraction_without_formulas_or_latency():
    assert limit_fraction(_FakeTask(None, None), None, 1.0, _PEAKS) is None
    assert limit_fraction(_FakeTask(10 ** 9, 10 ** 9), None, 0.0, _PEAKS) is None
    # Traffic only: memory bound whatever the dtype.
    assert limit_fraction(_FakeTask(10 ** 9, None, None), None, 1.0, _PEAKS).bound == "memory"


def test_physical_floor_uses_the_datasheet_maxima_and_a_safety_factor():
    task = _FakeTask(4_800_000_000, 10 ** 9, "bf16")                       # 1 ms at 4.8 TB/s
    assert physical_floor_ms(task, None) == pytest.approx(0.8)
    assert physical_floor_ms(task, None, safety=1.0) == pytest.approx(1.0)
    # Compute bound: the highest dense peak of the datasheet (fp8, 1979) even for a bf16 task.
    heavy = _FakeTask(10 ** 6, 1979 * 10 ** 12, "bf16")
    assert physical_floor_ms(heavy, None) == pytest.approx(0.8 * 1000.0)
    # No floor on a CPU or for a GPU without a datasheet.
    assert physical_floor_ms(task, None, device="cpu") == 0.0
    assert physical_floor_ms(task, None, None) == 0.0
    # An honest latency at the floor / safety is exactly at the datasheet limit, never above it.
    lf = limit_fraction(task, None, physical_floor_ms(task, None, safety=1.0), H200_DATASHEET)
    assert lf.fraction == pytest.approx(1.0)


def test_datasheet_lookup():
    assert datasheet_for("NVIDIA H200") is H200_DATASHEET
    assert datasheet_for("NVIDIA H100 80GB HBM3").copy_tbs == 3.35
    assert datasheet_for("NVIDIA A100-SXM4-80GB") is None
    assert H200_DATASHEET.tflops == {"bf16": 989.0, "fp8": 1979.0, "fp32": 67.0}
    assert H200_DATASHEET.source("fp8") == "datasheet"


def test_real_workloads_floor_below_known_measurements():
    # FlashInfer's measured H200 latencies (reference/gpu-findings.md) must lie above the floor.
    prefill = load_task(MLA_PREFILL)
    big = next(w for w in prefill.workload_set("full") if w.name == "full_q16384_b1_kv16387")
    assert physical_floor_ms(prefill, big) < 7.98
    lf = limit_fraction(prefill, big, 7.98, H200_DATASHEET)
    assert lf.bound == "compute" and 0.55 < lf.fraction < 0.62             # ~585 of 989 TFLOP/s
    gqa = load_task(GQA)
    w = next(w for w in gqa.workload_set("feedback") if w.name == "fb_b64_t46287")
    assert physical_floor_ms(gqa, w) < 0.0434
    assert limit_fraction(gqa, w, 0.0434, H200_DATASHEET).bound == "memory"


def test_measure_peaks_is_none_off_the_gpu():
    assert measure_peaks("cpu") is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_measure_peaks_on_the_gpu():
    p = measure_peaks("cuda")
    assert p.memory_source == "measured" and p.source("bf16") == "measured"
    assert 0.5 < p.copy_tbs < 10.0
    assert 50.0 < p.tflops["bf16"] < 2000.0 and 1.0 < p.tflops["fp32"] < p.tflops["bf16"]
    if p.source("fp8") == "measured":
        assert p.tflops["fp8"] > p.tflops["bf16"]
    print(p.to_json())
