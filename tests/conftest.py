import os

import pytest
import torch

# The tests never reach the network: litellm must not try to fetch its price list when a test imports it
# directly (ksearch's own import path sets the same default).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
