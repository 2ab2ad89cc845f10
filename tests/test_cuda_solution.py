"""CUDA solutions beside Triton: recognising them in replies, generating their binding, and refusing
clearly where they cannot run. The @gpu tests build and run real extensions (an H200 runs them)."""

import os
import stat
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from ksearch.instantiate import (
    CUDA,
    PYTHON,
    CodeExtractionError,
    SolutionLoadError,
    extract_code,
    extract_python,
    language_of,
    load_entry_point,
)
from ksearch.instantiate import cuda as cu
from ksearch.instantiate.language import fence_language

SCALE_CU = textwrap.dedent("""\
    #include <torch/extension.h>

    // y = 2 * x, one thread per element
    __global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = 2.0f * x[i];
    }

    torch::Tensor run(torch::Tensor x) {
        auto xc = x.contiguous();
        auto y = torch::empty_like(xc);
        int n = static_cast<int>(xc.numel());
        if (n > 0) scale_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
        return y;
    }
    """)

PAIR_CU = textwrap.dedent("""\
    #include <torch/extension.h>
    #include <vector>
    __global__ void add_sub(const float* a, const float* b, float* s, float* d, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { s[i] = a[i] + b[i]; d[i] = a[i] - b[i]; }
    }
    std::vector<torch::Tensor> run(const torch::Tensor& a, const torch::Tensor& b, double unused = 1.0) {
        auto s = torch::empty_like(a), d = torch::empty_like(a);
        int n = a.numel();
        add_sub<<<(n + 127) / 128, 128>>>(a.data_ptr<float>(), b.data_ptr<float>(), s.data_ptr<float>(),
                                          d.data_ptr<float>(), n);
        return {s, d};
    }
    """)

OWN_BINDING_CU = SCALE_CU.replace("torch::Tensor run(", "torch::Tensor forward(") + \
    'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &forward, "scale"); }\n'


# ---- recognising CUDA in replies --------------------------------------------------------------------
@pytest.mark.parametrize("tag", ["cuda", "cpp", "c++", "cu", ""])
def test_a_cuda_reply_is_extracted_as_cuda(tag):
    got = extract_code(f"Here is the kernel.\n```{tag}\n{SCALE_CU}```\nIt doubles x.")
    assert got.language == CUDA and got.code.strip() == SCALE_CU.strip()
    assert got.file_name == "main.cu" and got.entry_point() == "main.cu::run"
    assert language_of(got.code) == CUDA


def test_an_unfenced_cuda_reply_is_recognised():
    assert extract_code(SCALE_CU).language == CUDA


def test_python_replies_still_extract_as_before():
    text = "Here you go:\n```python\nimport math\n```\nand\n```python\ndef run(x):\n    return x\n```\nThanks"
    got = extract_code(text)
    assert got.language == PYTHON and got.code == extract_python(text) and got.code.startswith("def run")
    assert got.file_name == "main.py"
    with pytest.raises(CodeExtractionError, match="no top-level function"):
        extract_code("```python\ndef go():\n    pass\n```")
    with pytest.raises(CodeExtractionError, match="hex float"):
        extract_code("```python\ndef run(x):\n    return 0x1.8p3\n```")


def test_a_python_wrapper_that_defines_run_wins_over_a_cuda_listing():
    text = f"```cuda\n{SCALE_CU}```\n```python\nSRC = '...'\ndef run(x):\n    return x * 2\n```\n"
    assert extract_code(text).language == PYTHON


def test_kernels_and_host_code_split_over_two_blocks_are_joined():
    kernel, host = SCALE_CU.split("torch::Tensor run(")
    text = f"Kernel:\n```cuda\n{kernel}```\nHost side:\n```cpp\ntorch::Tensor run({host}```\n"
    got = extract_code(text)
    assert got.language == CUDA and "__global__" in got.code and "torch::Tensor run(" in got.code


def test_cuda_replies_that_could_never_load_are_refused_with_the_reason():
    cut = "```cuda\n" + SCALE_CU[: SCALE_CU.index("return y;")]            # cut off, fence never closed
    with pytest.raises(CodeExtractionError, match="cut off"):
        extract_code(cut)
    with pytest.raises(CodeExtractionError, match="defines no host function `run`"):
        extract_code("```cuda\n" + SCALE_CU.replace("run(", "forward(") + "```")
    with pytest.raises(CodeExtractionError, match="declared static"):
        extract_code("```cuda\n" + SCALE_CU.replace("torch::Tensor run(", "static torch::Tensor run(") + "```")
    with pytest.raises(CodeExtractionError, match="declared __global__"):
        extract_code("```cuda\n__global__ void run(float* x) { x[0] = 1; }\n```")
    with pytest.raises(CodeExtractionError, match="inside a namespace"):
        extract_code("```cuda\nnamespace k {\ntorch::Tensor run(torch::Tensor x) { return x; }\n}\n```")
    with pytest.raises(CodeExtractionError, match='does not define "run"'):
        extract_code("```cuda\n" + OWN_BINDING_CU.replace('"run"', '"fwd"') + "```")


def test_a_broken_python_module_that_embeds_cuda_stays_python(tmp_path):
    src = 'import torch\nSRC = """\n#include <torch/extension.h>\n__global__ void k() {}\n"""\ndef run(x:\n    pass\n'
    assert language_of(src) == PYTHON
    with pytest.raises(SolutionLoadError, match="failed to import: SyntaxError"):
        load_entry_point(src, "run", cache_dir=tmp_path)


def test_fence_tags():
    assert [fence_language(t) for t in ("cuda", "C++", "cpp", "cu", "python", "py", "triton", "json", "")] == \
        [CUDA, CUDA, CUDA, CUDA, PYTHON, PYTHON, PYTHON, None, None]


# ---- the generated binding --------------------------------------------------------------------------
def test_binding_declares_and_binds_run_as_written():
    cpp = cu.binding_source(SCALE_CU)
    assert "torch::Tensor run(torch::Tensor x);" in cpp
    assert 'm.def("run", torch::wrap_pybind_function(run)' in cpp and "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in cpp
    pair = cu.binding_source(PAIR_CU)
    assert "std::vector<torch::Tensor> run(const torch::Tensor& a, const torch::Tensor& b, double unused = 1.0);" \
        in pair


def test_binding_handles_comments_trailing_returns_and_own_modules():
    src = ("// torch::Tensor run(int) {  -- a comment, not the definition\n"
           "/* run( */ auto run(torch::Tensor a)\n  -> std::tuple<torch::Tensor, torch::Tensor> {\n"
           "  return {a, a};\n}\n")
    assert "auto run(torch::Tensor a) -> std::tuple<torch::Tensor, torch::Tensor>;" in cu.binding_source(src)
    assert "m.def" not in cu.binding_source(OWN_BINDING_CU)
    multi = "torch::Tensor run(torch::Tensor q,  // queries\n    torch::Tensor k /* keys */) { return q; }"
    assert cu.find_entry_definition(multi).declaration() == "torch::Tensor run(torch::Tensor q, torch::Tensor k);"
    sig = cu.find_entry_definition("torch::Tensor helper(torch::Tensor x) { return run(x); }\n"
                                   "__host__ torch::Tensor run(torch::Tensor x) { return x; }")
    assert sig is not None and sig.declaration() == "torch::Tensor run(torch::Tensor x);"


# ---- where CUDA cannot run ---------------------------------------------------------------------------
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")


@cpu_only
def test_without_nvcc_a_cuda_solution_is_refused_clearly(monkeypatch, tmp_path):
    monkeypatch.setattr(cu, "find_nvcc", lambda: None)
    with pytest.raises(SolutionLoadError, match="CUDA solution not runnable here: no nvcc/CUDA toolkit") as ei:
        load_entry_point(SCALE_CU, "run", cache_dir=tmp_path)
    assert isinstance(ei.value, cu.CudaNotRunnable) and ei.value.compiled is None


NVCC_ERROR = ['main.cu(11): error: identifier "yy" is undefined', '      y[i] = yy;',
              '1 error detected in the compilation of "cuda.cu".']


def fake_nvcc(tmp_path, ok=True, output=NVCC_ERROR):
    """An nvcc that logs its arguments and either writes the object file or prints `output` and fails."""
    log = tmp_path / "nvcc_calls.txt"
    script = tmp_path / "bin" / "nvcc"
    script.parent.mkdir()
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        args = sys.argv[1:]
        open({str(log)!r}, "a").write(" ".join(args) + "\\n")
        if {ok!r}:
            open(args[args.index("-o") + 1], "w").write("obj")
        else:
            print({chr(10).join(output)!r})
            sys.exit(1)
        """))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


@cpu_only
def test_with_nvcc_it_is_compiled_then_refused_as_not_runnable_here(monkeypatch, tmp_path):
    nvcc, log = fake_nvcc(tmp_path)
    monkeypatch.setattr(cu, "find_nvcc", lambda: nvcc)
    for _ in range(2):
        with pytest.raises(SolutionLoadError, match="compiled with nvcc for sm_90a, but .*no GPU") as ei:
            load_entry_point(SCALE_CU, "run", cache_dir=tmp_path / "builds")
        assert ei.value.compiled is True
    calls = log.read_text().splitlines()
    assert len(calls) == 1                                      # the second load used the cached result
    args = calls[0].split()
    assert "-gencode=arch=compute_90a,code=sm_90a" in args and "-std=c++20" in args and "-c" in args
    assert any(a.startswith("-I") and a.rstrip("/").endswith("include") for a in args)
    compiled = next((tmp_path / "builds").glob("check_*/cuda.cu")).read_text()
    assert compiled.startswith("#include <torch/types.h>") and '#line 1 "main.cu"' in compiled


@cpu_only
def test_compile_errors_reach_the_model(monkeypatch, tmp_path):
    nvcc, _ = fake_nvcc(tmp_path, ok=False)
    monkeypatch.setattr(cu, "find_nvcc", lambda: nvcc)
    with pytest.raises(SolutionLoadError, match=r'does not compile[\s\S]*main.cu\(11\): error: identifier "yy"') as ei:
        load_entry_point(SCALE_CU, "run", cache_dir=tmp_path / "builds")
    assert isinstance(ei.value, cu.CudaBuildError)


@cpu_only
@pytest.mark.parametrize("output", [
    ["/venv/torch/include/c10/cuda/CUDAMacros.h:9:10: fatal error: c10/cuda/impl/cuda_cmake_macros.h: No such "
     "file or directory", "compilation terminated."],
    ['/venv/torch/include/ATen/cuda/CUDAContextLight.h(6): catastrophic error: cannot open source file '
     '"cublas_v2.h"'],
    ['main.cu(3): catastrophic error: cannot open source file "cublasLt.h"']])
def test_headers_a_cpu_host_lacks_make_the_check_inconclusive_not_a_compile_error(monkeypatch, tmp_path, output):
    nvcc, _ = fake_nvcc(tmp_path, ok=False, output=output)
    monkeypatch.setattr(cu, "find_nvcc", lambda: nvcc)
    with pytest.raises(cu.CudaNotRunnable, match="could not be compile-checked") as ei:
        load_entry_point(SCALE_CU, "run", cache_dir=tmp_path / "builds")
    assert ei.value.compiled is None


@cpu_only
def test_a_header_the_solution_invents_is_its_own_error(monkeypatch, tmp_path):
    nvcc, _ = fake_nvcc(tmp_path, ok=False, output=['main.cu:2:10: fatal error: my_helpers.h: No such file or '
                                                    'directory'])
    monkeypatch.setattr(cu, "find_nvcc", lambda: nvcc)
    with pytest.raises(cu.CudaBuildError, match="my_helpers.h"):
        load_entry_point(SCALE_CU, "run", cache_dir=tmp_path / "builds")


@pytest.mark.skipif(os.environ.get("KSEARCH_TEST_REAL_NVCC") != "1" or cu.find_nvcc() is None,
                    reason="compiles torch headers with the real nvcc (minutes on a small CPU host); "
                           "set KSEARCH_TEST_REAL_NVCC=1")
@cpu_only
def test_real_nvcc_compile_check(tmp_path):
    with pytest.raises(cu.CudaNotRunnable, match="compiled with nvcc"):
        load_entry_point(SCALE_CU, "run", cache_dir=tmp_path)
    with pytest.raises(cu.CudaBuildError, match=r"main.cu\(\d+\): error"):
        load_entry_point(SCALE_CU.replace("2.0f * x[i]", "2.0f * xx[i]"), "run", cache_dir=tmp_path)
    # uses c10/cuda headers: compiled where torch has them, inconclusive with a CPU build of torch
    with pytest.raises(cu.CudaNotRunnable):
        load_entry_point(GQA_CU, "run", cache_dir=tmp_path)


# ---- on a GPU ---------------------------------------------------------------------------------------
BROKEN_SCALE_CU = SCALE_CU.replace("2.0f * x[i]", "2.0f * xx[i]")


def _gqa_code():
    return extract_code(f"```cuda\n{GQA_CU}```").code


@pytest.fixture(scope="module")
def gpu_builds(tmp_path_factory):
    """(folder, {source: its entry point, or the SolutionLoadError its build raised}) for every extension the GPU
    tests below load, built once, all at the same time, into one folder: each build compiles torch/extension.h
    for tens of seconds, and one after another they did not finish in 110 s on the H100 (2026-12-05)."""
    root = tmp_path_factory.mktemp("cuda_builds")
    sources = [SCALE_CU, PAIR_CU, OWN_BINDING_CU, BROKEN_SCALE_CU, _gqa_code()]
    torch.cuda.init()       # once, before the builds ask for the device's architecture from their threads

    def build(src):
        try:
            return load_entry_point(src, "run", cache_dir=root)
        except SolutionLoadError as e:
            return e

    with ThreadPoolExecutor(len(sources)) as pool:
        return root, dict(zip(sources, pool.map(build, sources)))


def _built(gpu_builds, src):
    """The entry point the fixture built from `src`, or its build's error, raised again."""
    got = gpu_builds[1][src]
    if isinstance(got, BaseException):
        raise got
    return got


@pytest.mark.gpu
@pytest.mark.cuda_build
def test_gpu_builds_and_runs_cuda_solutions(gpu_builds):
    root = gpu_builds[0]
    x = torch.randn(1000, device="cuda")
    run = _built(gpu_builds, SCALE_CU)
    torch.testing.assert_close(run(x), 2 * x)
    assert load_entry_point(SCALE_CU, "run", cache_dir=root) is run          # cached in-process
    # the generated binding takes every parameter positionally (C++ defaults are not bound; the evaluator
    # always passes all of a definition's inputs)
    s, d = _built(gpu_builds, PAIR_CU)(x, x + 1, 1.0)
    torch.testing.assert_close(s, 2 * x + 1)
    torch.testing.assert_close(d, torch.full_like(x, -1.0))
    torch.testing.assert_close(_built(gpu_builds, OWN_BINDING_CU)(x), 2 * x)
    with pytest.raises(cu.CudaBuildError, match="does not build"):
        _built(gpu_builds, BROKEN_SCALE_CU)


# A naive CUDA GQA decode kernel, also the example of a CUDA solution for `ksearch eval`.
GQA_CU = (Path(__file__).resolve().parents[1] / "examples" / "gqa_decode_naive.cu").read_text()



def test_the_gqa_cuda_solution_is_extracted_and_bound():
    got = extract_code(f"```cuda\n{GQA_CU}```")
    assert got.language == CUDA
    assert ("std::vector<torch::Tensor> run(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, "
            "torch::Tensor kv_indptr, torch::Tensor kv_indices, double sm_scale);") in cu.binding_source(got.code)


@pytest.mark.gpu
@pytest.mark.cuda_build
def test_gpu_gqa_cuda_solution_matches_the_reference_on_tiny_workloads(gpu_builds):
    from ksearch.task import load_task

    task = load_task("gqa_paged_decode_h32_kv4_d128_ps1")
    run = _built(gpu_builds, _gqa_code())
    for w in task.workload_set("tiny"):
        inputs = task.make_inputs(w, device="cuda", seed=7)
        want_out, want_lse = task.reference(**inputs)
        got_out, got_lse = run(*inputs.values())
        torch.cuda.synchronize()
        torch.testing.assert_close(got_out.float(), want_out.float(), atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(got_lse, want_lse, atol=1e-2, rtol=1e-2)


@cpu_only
def test_the_cuda_builder_may_start_the_compiler_inside_the_judges_sandbox(monkeypatch):
    """The harness's CUDA builder starts nvcc in the candidate's walled, audited process: the audit hook
    allows it (it once counted the fork server's nameless `python -c` frame at the bottom of the stack as
    candidate code, and every CUDA candidate on the H200 failed as INCORRECT_TAMPERING)."""
    import shutil
    import tempfile

    from ksearch.eval.parent.evaluator import EvalSettings, Evaluator
    from ksearch.eval.report import BaselineTimes, Status
    from ksearch.task import load_task

    folder = Path(tempfile.mkdtemp(prefix="ksearch_fake_nvcc_"))
    try:
        (folder / "bin").mkdir()
        script = folder / "bin" / "nvcc"       # writes the object file, as a compile that succeeded
        script.write_text(f'#!{sys.executable}\nimport sys\nargs = sys.argv[1:]\n'
                          f'open(args[args.index("-o") + 1], "w").write("obj")\n')
        for p in (folder, folder / "bin", script):      # the candidate runs as another uid where it can
            p.chmod(0o755)
        monkeypatch.setenv("PATH", f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}")
        task = load_task("gqa_paged_decode_h32_kv4_d128_ps1")
        source = (Path(__file__).resolve().parents[1] / "examples" / "gqa_decode_naive.cu").read_text()
        workloads = task.workload_set("tiny")[:1]
        base = BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in workloads}}, "fixed 1 ms")
        with Evaluator(task, EvalSettings(device="cpu", timeout_s=300, trials=1, check_trials=1)) as ev:
            r = ev.evaluate(source, "cuda_builder_in_the_sandbox", workloads, base)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert r.status != Status.INCORRECT_TAMPERING, r.summary()
    assert "compiled with nvcc for sm_90a" in r.summary(), r.summary()
