import atexit
import importlib.util
import os
import shutil
import tempfile

import pytest
import torch

# The tests never reach the network: litellm must not try to fetch its price list when a test imports it
# directly (ksearch's own import path sets the same default).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


# The GPU host (an offline image plus ../shared/gpu/bundle.sh) has no Textual or Ray: `pytest -m gpu` there
# must still collect. Their tests are CPU tests, run where the dev extras are installed (CI always is).
collect_ignore = [path for path, module in (("test_tui.py", "textual"), ("test_narrow_layouts.py", "textual"),
                                            ("test_profile_views.py", "textual"),
                                            ("test_ray_pool.py", "ray"))
                  if importlib.util.find_spec(module) is None]


# The Triton interpreter is chosen when a kernel is defined: @triton.jit reads TRITON_INTERPRET then. Several CPU
# test modules turn it on at import (prepare_interpreter(), before their kernels exist), that is during collection,
# and it used to stay on for every module imported after them and for the whole session: `pytest -m gpu` ran the
# GPU tests' kernels in the interpreter (test_fused_split_kv_on_the_gpu, 2026-12-05), and test_forkserver_gpu's
# module-level kernel was defined as an interpreted one. Now each test module is imported with TRITON_INTERPRET as
# the session had it; the interpreter a module asked for is on after collection, as before, for the CPU tests,
# and off for every gpu-marked test (_compiled_triton_on_the_gpu).
_INTERPRETER_ASKED: list[str] = []


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    if not isinstance(collector, pytest.Module):
        return (yield)
    before = os.environ.get("TRITON_INTERPRET")
    try:
        return (yield)                       # the module is imported here
    finally:
        after = os.environ.get("TRITON_INTERPRET")
        if after != before:
            if after == "1":
                _INTERPRETER_ASKED.append(str(collector.path))
            if before is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = before


def pytest_collection_finish(session):
    if _INTERPRETER_ASKED:
        os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(autouse=True)
def _compiled_triton_on_the_gpu(request, monkeypatch):
    """A gpu-marked test defines its kernels with Triton's real JIT, whatever CPU tests turned on before it."""
    if request.node.get_closest_marker("gpu") is not None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# Every test starts with an empty knowledge store (ksearch/knowledge): runs in one test cannot steer the
# runs of another through memory, and nothing reaches the user's real cache. The folder is set before any
# test module is imported, because some build a subprocess environment from os.environ at import; only its
# ksearch/ part is emptied per test (other tools' caches there, e.g. matplotlib's fonts, are kept).
KNOWLEDGE_CACHE = tempfile.mkdtemp(prefix="ksearch-tests-cache-")
os.environ["XDG_CACHE_HOME"] = KNOWLEDGE_CACHE
atexit.register(shutil.rmtree, KNOWLEDGE_CACHE, True)


# The GPU tests share one baseline cache (ksearch/eval/trusted/baseline_cache.py) for the session: several
# measure the same FlashInfer baselines with the same settings (GQA's feedback workloads), and a number the
# session measured once is the same number again (failed baselines are never stored, so a failure still
# shows in every test that meets it). CPU tests start without one, as they start without memory.
BASELINE_CACHE_FILES = ("baselines.sqlite", "baselines.sqlite-wal", "baselines.sqlite-shm", "baselines.sqlite.lock")


@pytest.fixture(autouse=True)
def _empty_knowledge_store(monkeypatch, request):
    folder = os.path.join(KNOWLEDGE_CACHE, "ksearch")
    keep = BASELINE_CACHE_FILES if request.node.get_closest_marker("gpu") is not None else ()
    for name in (os.listdir(folder) if os.path.isdir(folder) else []):
        if name not in keep:
            path = os.path.join(folder, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
    monkeypatch.setenv("XDG_CACHE_HOME", KNOWLEDGE_CACHE)


@pytest.fixture(scope="session")
def real_run(tmp_path_factory):
    """A real tiny CPU search (4 rounds), made once per session and shared by the view tests; they only
    read it or copy it."""
    from ksearch.cli.main import main

    path = tmp_path_factory.mktemp("runs") / "real"
    assert main(["run", f"run.dir={path}", "search.max_rounds=4", "run.live=false"]) == 0
    return path


@pytest.fixture
def toy_run(tmp_path):
    """A hand-written run folder (tests.fakes.write_synthetic_run), for what a real run rarely produces."""
    from tests.fakes import write_synthetic_run

    return write_synthetic_run(tmp_path / "toy")
