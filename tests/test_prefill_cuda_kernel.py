"""The MLA prefill CUDA family (tasks/<prefill>/strategies/hopper_wgmma_prefill.cu.j2, issue 22): on the CPU,
that it renders to a CUDA solution with a bindable entry point and that every knob combination compiles for
sm_90a without spills or serialised MMAs; on the GPU (marked gpu, cuda_build), that the defaults and every
tactic match the reference on ragged, chunked and partial-tile batches and on rows past qo_indptr[-1], and that
the defaults pass the judge on the feedback workloads."""

from __future__ import annotations

import itertools
import math
import re
import shutil
import subprocess

import pytest
import torch

from ksearch import PROJECT_ROOT
from ksearch.instantiate.extract import extract_code
from ksearch.instantiate.language import CUDA, language_of
from ksearch.task import load_task
from ksearch.task.catalog import load_catalog

TASK = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
FAMILY = "hopper_wgmma_prefill"
CATALOG = load_catalog(PROJECT_ROOT / "tasks" / TASK / "strategies", TASK)
SETTINGS = [{}] + [dict(t.settings) for t in CATALOG.family(FAMILY).tactics]
SETTING_IDS = ["defaults"] + [t.name for t in CATALOG.family(FAMILY).tactics]


def _all_knob_combinations() -> list[dict]:
    knobs = CATALOG.family(FAMILY).knobs
    return [dict(zip(knobs, values, strict=True)) for values in itertools.product(*(k.values for k in knobs.values()))]


def test_the_family_renders_a_bindable_cuda_solution():
    src = CATALOG.render(FAMILY, {})
    assert language_of(src) == CUDA
    got = extract_code(f"```cuda\n{src}```")          # refuses sources whose entry point could never bind
    assert got.language == CUDA and "std::vector<torch::Tensor> run(" in got.code
    signature = ", ".join(load_task(TASK).definition.input_names)
    assert signature == "q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale"


def _device_part(src: str) -> str:
    """The kernel without its torch host function: what nvcc compiles for the GPU, checkable without torch's
    CUDA headers (a CPU build of torch has none)."""
    src = re.sub(r"^#include <(torch|c10)/.*$\n", "", src, flags=re.MULTILINE)
    return "#include <cmath>\n" + src[:src.index("std::vector<torch::Tensor> run(")] + \
        "void* keep_the_kernels[] = {(void*)&mla_prefill_kernel<false>, (void*)&mla_prefill_kernel<true>};\n"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) to compile for sm_90a")
@pytest.mark.parametrize("knobs", _all_knob_combinations(), ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_every_knob_combination_compiles_for_sm90a_without_spills(tmp_path, knobs):
    cu = tmp_path / "k.cu"
    cu.write_text(_device_part(CATALOG.render(FAMILY, knobs)))
    done = subprocess.run(["nvcc", "-arch=sm_90a", "-O3", "-std=c++17", "-cubin", "-o", str(tmp_path / "k.cubin"),
                           str(cu), "-Xptxas", "-v", "-diag-suppress", "177"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    regs = [int(n) for n in re.findall(r"Used (\d+) registers", done.stderr)]       # one line per kernel
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", done.stderr)]
    assert len(regs) == len(spills) == 2, done.stderr[-2000:]        # the plain kernel and the KV_SPLIT one
    assert max(regs) <= 255 and not any(spills), done.stderr[-2000:]
    # ptxas says so when it has to serialise the asynchronous MMAs (the pipeline would be lost)
    assert "wgmma.mma_async instructions are serialized" not in done.stderr, done.stderr[-2000:]


@pytest.fixture(scope="module", params=SETTINGS, ids=SETTING_IDS)
def kernel(request):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    from ksearch.instantiate.loader import load_entry_point

    return load_entry_point(CATALOG.render(FAMILY, request.param), "run")


@pytest.mark.gpu
@pytest.mark.cuda_build
@pytest.mark.parametrize("q_lens,kv_lens,extra_rows", [
    ([300, 77, 5, 1], [300, 200, 5, 64], 0),          # partial tiles, a chunk over a longer KV, 1-token queries
    ([130], [1000], 0),                               # chunked: 130 new tokens at the end of 1000
    ([64, 3], [64, 3], 9),                            # rows past qo_indptr[-1]: output 0, lse -inf
    ([2000], [2003], 0),                              # 32 KV steps, the last partial
    ([1, 2, 1], [4096, 3000, 70], 0),                 # decode-like: KV_SPLIT's chunks, merged by the last to finish
])
def test_matches_the_reference_on_the_gpu(kernel, q_lens, kv_lens, extra_rows):
    task = load_task(TASK)
    w = task.workloads_module._workload_lens("cuda_check", q_lens, kv_lens, task.workloads_module.POOL_PAGES)
    inputs = task.make_inputs(w, device="cuda", seed=1)
    if extra_rows:
        for name in ("q_nope", "q_pe"):
            x = inputs[name]
            inputs[name] = torch.cat([x, torch.randn(extra_rows, *x.shape[1:], device="cuda").to(x.dtype)])
    want = task.reference(**inputs)
    got = kernel(*[inputs[n] for n in task.definition.input_names])
    got = kernel(*[inputs[n] for n in task.definition.input_names])    # again: a split's counters are back at 0
    torch.cuda.synchronize()
    torch.testing.assert_close(got[0].float(), want[0].float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got[1], want[1], atol=1e-2, rtol=1e-3)
    if extra_rows:
        assert bool((got[0][-extra_rows:] == 0).all()) and bool((got[1][-extra_rows:] == -math.inf).all())


@pytest.mark.gpu
@pytest.mark.cuda_build
def test_passes_the_judge_on_the_feedback_workloads():
    from ksearch.eval.parent.evaluator import EvalSettings, Evaluator

    task = load_task(TASK)
    workloads = task.workload_set("feedback")
    with Evaluator(task, EvalSettings(device="cuda", timeout_s=600, warmup=2)) as ev:
        baseline = ev.measure_baselines(workloads)
        report = ev.evaluate(CATALOG.render(FAMILY, {}), FAMILY, workloads, baseline)
        assert report.passed, (report.summary(), report.log[-2000:])
