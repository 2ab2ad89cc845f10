import importlib.util
import os

import pytest
import torch

# The tests never reach the network: litellm must not try to fetch its price list when a test imports it
# directly (ksearch's own import path sets the same default).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


# The GPU host (an offline image plus ../shared/gpu/bundle.sh) has no Textual or Ray: `pytest -m gpu` there
# must still collect. Their tests are CPU tests, run where the dev extras are installed (CI always is).
collect_ignore = [path for path, module in (("test_tui.py", "textual"), ("test_narrow_layouts.py", "textual"),
                                            ("test_ray_pool.py", "ray"))
                  if importlib.util.find_spec(module) is None]


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _own_knowledge_store(tmp_path_factory, monkeypatch):
    """Every test gets an empty knowledge store (ksearch/knowledge): runs in one test cannot steer
    the runs of another through memory, and nothing is written to the user's real cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg_cache")))
