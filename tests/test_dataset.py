"""A local FlashInfer-Trace copy: workloads and captured index tensors are read instead of synthesised."""

import json
import struct

import pytest
import torch

from ksearch.cli.app import compose_config, resolve_eval
from ksearch.task import load_task
from ksearch.task.dataset import DatasetError, read_safetensors

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    names = {torch.int32: "I32", torch.float32: "F32"}
    for key, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        header[key] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


@pytest.fixture
def dataset(tmp_path):
    blob_dir = tmp_path / "blob" / "workloads" / "gqa_paged" / TASK
    blob_dir.mkdir(parents=True)
    indptr = torch.tensor([0, 5, 12], dtype=torch.int32)
    indices = torch.tensor([3, 9, 1, 30, 4, 7, 22, 15, 0, 2, 8, 11], dtype=torch.int32)
    write_safetensors(blob_dir / "w1.safetensors", {"kv_indptr": indptr, "kv_indices": indices})
    rel = f"./blob/workloads/gqa_paged/{TASK}/w1.safetensors"
    workload = {"uuid": "0123456789abcdef", "axes": {"batch_size": 2, "num_pages": 32, "len_indptr": 3,
                                                     "num_kv_indices": 12},
                "inputs": {"q": {"type": "random"}, "k_cache": {"type": "random"}, "v_cache": {"type": "random"},
                           "kv_indptr": {"type": "safetensors", "path": rel, "tensor_key": "kv_indptr"},
                           "kv_indices": {"type": "safetensors", "path": rel, "tensor_key": "kv_indices"},
                           "sm_scale": {"type": "scalar", "value": 0.0883883461356163}}}
    wdir = tmp_path / "workloads" / "gqa_paged"
    wdir.mkdir(parents=True)
    (wdir / f"{TASK}.jsonl").write_text(json.dumps({"definition": TASK, "workload": workload}) + "\n")
    return tmp_path, indices


def test_dataset_workloads_carry_the_captured_indices(dataset):
    root, indices = dataset
    cfg = compose_config([f"task.dataset_dir={root}"])
    task = load_task(TASK)
    _, set_name, workloads, _ = resolve_eval(cfg, task)
    assert set_name == "dataset" and [w.name for w in workloads] == ["ds_01234567"]
    inputs = task.make_inputs(workloads[0], device="cpu", seed=1)
    assert torch.equal(inputs["kv_indices"], indices) and inputs["q"].shape == (2, 32, 128)
    assert inputs["sm_scale"] == pytest.approx(0.0883883461356163)
    out, lse = task.reference(**inputs)
    assert torch.isfinite(lse).all()


def test_missing_blob_says_what_to_do(dataset):
    root, _ = dataset
    with pytest.raises(DatasetError, match="git lfs pull"):
        read_safetensors(root / "nope.safetensors", "kv_indptr")
