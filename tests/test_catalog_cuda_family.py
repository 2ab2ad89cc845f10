"""CUDA families in a strategy catalog (`<family>.cu.j2`): the language comes from the template's suffix, the
offline model writes them with a `//` plan header and a ```cuda fence, and proposes them only where the
evaluation device can run them. Small fake catalogs; nothing is compiled."""

from __future__ import annotations

import fnmatch
import json
import tomllib
from pathlib import Path

import pytest

from ksearch.cli.bench import family_kernels
from ksearch.instantiate.language import CUDA, PYTHON, language_of
from ksearch.instantiate.solution import solution_from_text
from ksearch.llm.base import ModelError, ModelRequest
from ksearch.llm.offline import OfflineModel, plan_header, read_plan_header
from ksearch.task import list_tasks
from ksearch.task.catalog import TEMPLATE_LANGUAGES, Catalog, CatalogError, load_catalog

ROOT = Path(__file__).resolve().parent.parent
TASK = "fake_task"

CU = """#include <torch/extension.h>
__global__ void scale_kernel(float* x) { x[0] *= {{ SCALE }}.0f; }
std::vector<torch::Tensor> run(torch::Tensor x, double sm_scale) {
  scale_kernel<<<1, 1>>>(x.data_ptr<float>());
  return {x};
}
"""
PY = """import torch


def run(x, sm_scale):
    return (x * {{ SCALE }},)
"""


def _family(name: str, template: str, score: float) -> dict:
    return {"name": name, "title": f"{name} kernel", "template": template,
            "prior": {"score": score}, "knobs": {"SCALE": {"values": [1, 2], "default": 1}}}


def _catalog(tmp_path: Path, families: list[dict], templates: dict[str, str] | None = None) -> Catalog:
    """A catalog in tmp_path: the CUDA family first (a fallback must not just take the first family)."""
    (tmp_path / "catalog.yaml").write_text(json.dumps({"families": families}))
    for name, text in (templates or {"wgmma.cu.j2": CU, "tiles.py.j2": PY}).items():
        (tmp_path / name).write_text(text)
    return load_catalog(tmp_path, TASK)


@pytest.fixture
def cat(tmp_path: Path) -> Catalog:
    return _catalog(tmp_path, [_family("wgmma", "wgmma.cu.j2", 0.9), _family("tiles", "tiles.py.j2", 0.5)])


@pytest.fixture
def model(cat: Catalog) -> OfflineModel:
    m = OfflineModel()
    m._catalogs[TASK] = cat
    return m


# ---------------------------------------------------------------------------------------------- the catalog
def test_a_familys_language_is_its_templates_suffix(cat):
    assert cat.family("wgmma").language == CUDA and cat.family("tiles").language == PYTHON
    for fam in cat.families:
        assert language_of(cat.render(fam.name, {"SCALE": 2})) == fam.language


def test_a_template_of_another_suffix_is_refused_in_one_line(tmp_path):
    with pytest.raises(CatalogError) as e:
        _catalog(tmp_path, [_family("odd", "odd.cpp.j2", 0.5)], {"odd.cpp.j2": CU})
    msg = str(e.value)
    assert "\n" not in msg and "odd.cpp.j2" in msg and ".py.j2" in msg and ".cu.j2" in msg


@pytest.mark.parametrize("device,names", [("cpu", ["tiles"]), ("cuda", ["wgmma", "tiles"]),
                                          ("cuda:1", ["wgmma", "tiles"]), (None, ["wgmma", "tiles"])])
def test_runnable_families(cat, device, names):
    assert [f.name for f in cat.runnable_families(device)] == names


def test_the_wheel_carries_every_template_suffix():
    """Package data is declared by pattern: a .cu.j2 template must match it as a .py.j2 one does."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    tasks = patterns["ksearch._data.tasks"]
    for suffix in TEMPLATE_LANGUAGES:
        assert any(fnmatch.fnmatch(f"some_task/strategies/family{suffix}", p) for p in tasks), suffix


# ---------------------------------------------------------------------------------------------- the offline model
def test_plan_header_round_trips_in_both_languages(cat):
    knobs = {"SCALE": 2}
    for name, prefix in (("wgmma", "// ksearch-plan: "), ("tiles", "# ksearch-plan: ")):
        header = plan_header(cat.family(name), knobs)
        assert header.startswith(prefix) and header.endswith("\n")
        assert read_plan_header(header + cat.render(name, knobs)) == {"family": name, "knobs": knobs}


def _init(model: OfflineModel, **ctx) -> dict:
    return json.loads(model.complete(ModelRequest("init", "init", "", {"task": TASK, **ctx})).text)


def _families(init: dict) -> list[str]:
    return [op["node"]["action"]["params"]["family"] for op in init["ops"]]


def test_init_proposes_a_cuda_family_only_where_the_device_runs_it(model):
    on_cpu = _init(model, device="cpu")
    assert _families(on_cpu) == ["tiles"]
    assert "Left out, as cpu cannot run them: wgmma (CUDA)" in on_cpu["kernel_summary"]
    assert _families(_init(model, device="cuda")) == ["wgmma", "tiles"]
    assert _families(_init(model)) == ["wgmma", "tiles"]         # no device (older callers): every family


def test_init_on_a_device_that_runs_no_family_says_so(tmp_path):
    m = OfflineModel()
    m._catalogs[TASK] = _catalog(tmp_path, [_family("wgmma", "wgmma.cu.j2", 0.9)], {"wgmma.cu.j2": CU})
    with pytest.raises(ModelError, match="every family of its strategy catalog is CUDA"):
        _init(m, device="cpu")


def _code(model: OfflineModel, **ctx) -> str:
    return model.complete(ModelRequest("code", "action", "", {"task": TASK, "mode": "action", **ctx})).text


def test_a_cuda_familys_code_is_fenced_as_cuda_and_becomes_a_cuda_solution(model):
    text = _code(model, action_params={"family": "wgmma", "set": {"SCALE": 2}})
    assert text.startswith("```cuda\n// ksearch-plan: ")
    sol = solution_from_text(TASK, text)
    assert sol.language == "cuda" and sol.entry_point == "main.cu::run"
    assert read_plan_header(sol.main_source) == {"family": "wgmma", "knobs": {"SCALE": 2}}
    # a debug attempt reads the CUDA base kernel's header back and moves one knob from it
    again = _code(model, mode="debug", action_params={"family": "wgmma"}, base_code=sol.main_source,
                  cycle_codes=[sol.main_source])
    assert read_plan_header(solution_from_text(TASK, again).main_source) == {"family": "wgmma", "knobs": {"SCALE": 1}}


def test_a_triton_familys_code_is_still_python(model):
    text = _code(model, action_params={"family": "tiles", "set": {}})
    assert text.startswith("```python\n# ksearch-plan: ")
    assert solution_from_text(TASK, text).language == "triton"


def test_a_step_without_a_family_takes_a_triton_one(model):
    """A seed kernel without a plan header: the fallback family must run anywhere, not the catalog's first."""
    assert read_plan_header(_code(model, action_params={}))["family"] == "tiles"


def test_the_device_is_not_part_of_a_requests_key():
    """Journals recorded before the initial request carried the device still resume and replay."""
    old = ModelRequest("init", "init", "P", {"task": TASK})
    assert ModelRequest("init", "init", "P", {"task": TASK, "device": "cpu"}).key() == old.key()
    assert ModelRequest("init", "init", "P", {"task": "other", "device": "cpu"}).key() != old.key()


@pytest.mark.parametrize("task", list_tasks())
def test_offline_init_on_the_cpu_proposes_no_cuda_family_of_a_real_task(task):
    m = OfflineModel()
    cat = m.catalog(task)
    families = _families(json.loads(m.complete(ModelRequest("init", "init", "", {"task": task,
                                                                                  "device": "cpu"})).text))
    assert families == [f.name for f in sorted(cat.runnable_families("cpu"), key=lambda f: -f.prior.score)]
    assert all(cat.family(f).language == PYTHON for f in families)


# ---------------------------------------------------------------------------------------------- other users
def test_bench_skips_cuda_families_on_the_cpu_with_a_reason(cat):
    said: list[str] = []
    kernels = family_kernels(cat, "cpu", said.append)
    assert [name for name, _ in kernels] == ["family tiles (defaults)"]
    assert said == ["skipped wgmma: CUDA, which cpu cannot run (bench them on a GPU host)"]
    said.clear()
    assert len(family_kernels(cat, "cuda", said.append)) == 2 and said == []

