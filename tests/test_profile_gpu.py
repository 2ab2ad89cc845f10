"""Profile feedback on a real GPU (marked `gpu`): a GPU evaluation of a Triton candidate carries a profile
(its kernels with registers, spills, shared memory and the occupancy the judge computed; per workload the
launches of one call with GPU time and % of the physical limit), and its table renders. The pieces the
harness uses are checked on their own too: the profiler pass and the Triton cache reader."""

import pytest
import torch

from ksearch.eval.parent.evaluator import EvalSettings, Evaluator
from ksearch.profile import read_profile, render_profile
from ksearch.task import load_task
from ksearch.task.catalog import load_catalog

pytestmark = pytest.mark.gpu

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"


def test_a_gpu_evaluation_of_a_triton_candidate_carries_a_profile_table():
    task = load_task(TASK)
    cat = load_catalog(task.strategies_dir, task.name)
    workloads = task.workload_set("feedback")[:2]
    with Evaluator(task, EvalSettings(device="cuda", timeout_s=600, warmup=2)) as ev:
        baseline = ev.measure_baselines(workloads)
        reports = [ev.evaluate(cat.render(name, {}), name, workloads, baseline) for name in ("split_kv", "fused_split_kv")]
    for report in reports:
        assert report.passed, (report.summary(), report.log[-2000:])
        reading = read_profile(report.to_json())
        assert reading.profile is not None, reading.reason
        p = reading.profile
        assert p.kernels, report.profile_note
        for k in p.kernels:
            assert k.registers_per_thread and k.num_warps and k.num_stages and k.spilled_bytes is not None
            assert k.occupancy is not None and 0 < k.occupancy <= 1
        assert [w.workload for w in p.workloads] == [w.name for w in workloads]
        for w, row in zip(p.workloads, report.workloads):
            assert w.launches, report.profile_note
            assert w.pct_of_limit is not None and 0 < w.pct_of_limit <= 100
            assert w.gpu_time_us <= row.gpu_time_ms * 1e3 * 1.5 + 5
        table = render_profile(reading)
        assert "occupancy" in table and "% of limit" in table and p.kernels[0].name in table
        print(f"\n{report.solution_id}:\n{table}\nnote: {report.profile_note}")


def test_the_profiler_pass_sees_every_launch_of_a_call():
    from ksearch.profile.launches import profile_call

    x = torch.randn(1 << 20, device="cuda")
    flush = torch.empty(1 << 26, dtype=torch.int8, device="cuda")
    launches = profile_call(lambda: (x * 2).sum(), torch.cuda.synchronize, flush.zero_)
    assert len(launches) >= 2 and all(us > 0 for _, us in launches), launches


def test_the_cache_reader_finds_what_triton_compiled(tmp_path, monkeypatch):
    import triton
    import triton.language as tl

    from ksearch.profile.triton_cache import read_triton_cache

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))

    @triton.jit
    def _scale(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)

    x = torch.ones(4096, device="cuda")
    _scale[(4,)](x, 4096, BLOCK=1024, num_warps=4)
    torch.cuda.synchronize()
    [k] = [k for k in read_triton_cache(tmp_path) if k["name"] == "_scale"]
    assert k["num_warps"] == 4 and k["registers_per_thread"] and k["spilled_bytes"] == 0
