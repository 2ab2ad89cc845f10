"""Profile collection on the CPU: occupancy from an SM's limits, registers and spills from a real cubin,
a hand-made Triton cache folder, fake profiler spans, and the judge's validation of what a candidate's
process reports (every field bounded; launches that outrun the judge's clock are dropped with a note)."""

import json
import math
import os
from pathlib import Path

import pytest

from ksearch.profile.collect import assemble, kernels_from_reply, launches_from_reply, workload_profile
from ksearch.profile.cubin import cubin_resources
from ksearch.profile.launches import MAX_LAUNCHES, GpuSpan, launches_from_spans
from ksearch.profile.model import KernelInfo, Launch
from ksearch.profile.occupancy import LIMITS, blocks_per_sm, limits_for, occupancy
from ksearch.profile.triton_cache import MAX_JSON_BYTES, MAX_KERNELS, read_triton_cache

H200 = LIMITS[(9, 0)]
#: compiled for sm_90 by Triton 3.9 with maxnreg=24 (ptxas: 24 registers, 168 bytes of stack: spills)
CUBIN = Path(__file__).parent / "fixtures" / "cubin" / "spills_24regs_sm90.cubin"


@pytest.mark.parametrize("regs, smem, warps, expected", [
    (32, 0, 4, 1.0),                # nothing limits: 16 blocks x 4 warps fill the SM's 64 warps
    (128, 0, 4, 0.25),              # 128 x 32 x 4 = 16384 registers a block: 4 blocks, 16 warps
    (255, 0, 4, 0.125),             # rounded up to 256 a warp: 8192 a warp, 2 blocks
    (168, 0, 8, 0.125),             # 5376 a warp x 8 = 43008: one block
    (64, 100 * 1024, 4, 0.125),     # 100 KiB + 1 KiB reserved: 2 blocks in 228 KiB
    (24, 0, 1, 0.5),                # one warp a block: 32 blocks at most, half the warps
    (32, 228 * 1024, 4, 0.0),       # more than the 227 KiB a block may have: cannot launch
    (256, 0, 4, 0.0),               # more registers than a thread may have
])
def test_occupancy_on_an_h200(regs, smem, warps, expected):
    assert occupancy(regs, smem, warps, H200) == pytest.approx(expected)


def test_limits_are_known_per_capability_or_not_at_all():
    assert limits_for((9, 0)) is H200 and limits_for((7, 5)) is None and limits_for(None) is None
    assert blocks_per_sm(32, 0, 0, H200) == 0 and blocks_per_sm(32, -1, 4, H200) == 0


def test_registers_and_spills_from_a_real_cubin():
    [k] = cubin_resources(CUBIN.read_bytes())
    assert (k.name, k.registers, k.frame_bytes) == ("big", 24, 168)


@pytest.mark.parametrize("damage", [
    lambda b: b[:100], lambda b: b[:len(b) // 2], lambda b: b"\x7fELF" + b"\xff" * 200, lambda b: b"",
    lambda b: b[:0x28] + (1 << 60).to_bytes(8, "little") + b[0x30:],       # section table past the end
    lambda b: bytes(x ^ 0x5A for x in b), lambda b: os.urandom(4096)])
def test_a_damaged_cubin_reads_as_nothing_and_never_raises(damage):
    got = cubin_resources(damage(CUBIN.read_bytes()))
    assert got == [] or all(isinstance(k.name, str) for k in got)


def _cache(root: Path, name: str, meta: dict | str, cubin: bytes | None = None) -> Path:
    folder = root / f"HASH{name}{len(list(root.iterdir())) if root.exists() else 0}"
    folder.mkdir(parents=True)
    (folder / f"{name}.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    (folder / f"__grp__{name}.json").write_text(json.dumps({"child_paths": {}}))
    if cubin is not None:
        (folder / f"{name}.cubin").write_bytes(cubin)
    return folder


def test_a_hand_made_triton_cache(tmp_path):
    _cache(tmp_path, "big", {"name": "big", "num_warps": 1, "num_stages": 3, "shared": 0}, CUBIN.read_bytes())
    _cache(tmp_path, "_attn", {"name": "_attn", "num_warps": 4, "num_stages": 2, "shared": 65536})  # no cubin
    _cache(tmp_path, "junk", "{not json")
    _cache(tmp_path, "typed", {"name": "typed", "num_warps": "4", "shared": 1.5})
    _cache(tmp_path, "huge", {"name": "huge", "pad": "x" * MAX_JSON_BYTES})
    os.symlink(tmp_path / "elsewhere.json", tmp_path / next(tmp_path.iterdir()).name / "link.json")
    got = {k["name"]: k for k in read_triton_cache(tmp_path)}
    assert set(got) == {"big", "_attn", "typed"}
    assert got["big"] == {"name": "big", "num_warps": 1, "num_stages": 3, "shared_memory_bytes": 0,
                          "registers_per_thread": 24, "spilled_bytes": 168}
    assert got["_attn"]["registers_per_thread"] is None and got["_attn"]["shared_memory_bytes"] == 65536
    assert got["typed"]["num_warps"] is None and got["typed"]["shared_memory_bytes"] is None
    assert read_triton_cache(tmp_path / "missing") == [] and read_triton_cache(None) == []


def test_a_cache_reports_at_most_max_kernels(tmp_path):
    for i in range(MAX_KERNELS + 5):
        _cache(tmp_path, f"k{i}", {"name": f"k{i}", "num_warps": 4})
    assert len(read_triton_cache(tmp_path)) == MAX_KERNELS


def test_launches_from_fake_profiler_spans():
    spans = [GpuSpan("second", "kernel", True, 2000, 3000), GpuSpan("first", "kernel", True, 1000, 500),
             GpuSpan("aten::mm", "cpu_op", False, 900, 9000), GpuSpan("range", "gpu_user_annotation", True, 0, 9e3),
             GpuSpan("Memset (Device)", "gpu_memset", True, 1600, 100)]
    assert launches_from_spans(spans) == [("first", 0.5), ("Memset (Device)", 0.1), ("second", 3.0)]
    many = [GpuSpan(f"k{i}", "kernel", True, i, 1) for i in range(MAX_LAUNCHES + 10)]
    assert len(launches_from_spans(many)) == MAX_LAUNCHES


def test_the_judge_keeps_only_well_formed_bounded_kernel_fields():
    raw = [{"name": "_attn", "registers_per_thread": 128, "spilled_bytes": 0, "shared_memory_bytes": 65536,
            "num_warps": 4, "num_stages": 2},
           {"name": "_attn", "registers_per_thread": 1},                      # a second report of a name
           {"name": "liar", "registers_per_thread": 9999, "num_warps": True, "shared_memory_bytes": -5,
            "num_stages": 2.0, "occupancy": 1.0},                             # out of range, wrong types
           {"name": "\x1b[2Jclear" + "x" * 500}, {"name": ""}, "not a dict", {"name": 7}]
    got = {k.name: k for k in kernels_from_reply(raw, H200)}
    assert got["_attn"].occupancy == pytest.approx(3 * 4 / 64)  # 65 KiB: 3 blocks (128 regs: 4), 4 warps each
    liar = got["liar"]
    assert (liar.registers_per_thread, liar.num_warps, liar.shared_memory_bytes, liar.num_stages,
            liar.occupancy) == (None, None, None, None, None)      # occupancy is the judge's, never reported
    weird = next(n for n in got if n.startswith("?"))
    assert weird.isprintable() and len(weird) == 200
    assert len(got) == 3
    assert kernels_from_reply({"name": "x"}, H200) == [] and kernels_from_reply(None, None) == []
    assert kernels_from_reply([{"name": f"k{i}"} for i in range(100)], None).__len__() == MAX_KERNELS
    assert kernels_from_reply(raw[:1], None)[0].occupancy is None         # no limits known: none


@pytest.mark.parametrize("raw, why", [
    (None, "no launches"), ("x", "no launches"), ([["k", 1.0]] * (MAX_LAUNCHES + 1), "more than"),
    ([["k", -1.0]], "finite"), ([["k", math.inf]], "finite"), ([["k", True]], "finite"), ([["", 1.0]], "finite"),
    ([["k"]], "pair"), ([{"kernel": "k"}], "pair")])
def test_malformed_launches_are_dropped_with_a_reason(raw, why):
    launches, note = launches_from_reply(raw)
    assert launches == [] and why in note


def test_launches_that_outrun_the_judges_clock_are_dropped():
    two = [Launch(kernel="a", gpu_time_us=6.0), Launch(kernel="b", gpu_time_us=4.0)]
    ok, note = workload_profile("b1", two, gpu_time_ms=0.010, spread=0.02, floor_ms=0.002)
    assert note == "" and ok.launches == two and ok.pct_of_limit == pytest.approx(20.0) and ok.floor_us == 2.0
    lie = [Launch(kernel="a", gpu_time_us=60.0)]
    dropped, note = workload_profile("b1", lie, gpu_time_ms=0.010, spread=0.02, floor_ms=0.002)
    assert dropped.launches == [] and "more than the judge's" in note and dropped.pct_of_limit == pytest.approx(20.0)
    unbounded, note = workload_profile("b1", two, gpu_time_ms=None, spread=None, floor_ms=None)
    assert unbounded.launches == [] and "no GPU time" in note and unbounded.pct_of_limit is None


def test_only_launched_kernels_are_listed_when_launches_are_known():
    kernels = [KernelInfo(name="_attn"), KernelInfo(name="_touch")]
    row, _ = workload_profile("b1", [Launch(kernel="_attn", gpu_time_us=5.0)], 0.01, 0.0, None)
    assert [k.name for k in assemble(kernels, [row]).kernels] == ["_attn"]
    empty, _ = workload_profile("b1", [], 0.01, 0.0, None)
    assert [k.name for k in assemble(kernels, [empty]).kernels] == ["_attn", "_touch"]
