"""Read workloads from a local FlashInfer-Trace dataset copy instead of synthesising them.

Layout used: `<root>/workloads/<op_type>/<definition>.jsonl`, one trace per line whose `workload` holds
`uuid`, `axes` (the var axes) and `inputs` (per input: {"type": "random"}, {"type": "scalar", "value"}
or {"type": "safetensors", "path", "tensor_key"}, paths relative to the dataset root). Captured index
tensors are loaded as they are; random inputs follow FlashInfer-Bench's generator (normal floats, FP8
clamped to +-2; ksearch.task.synth), seeded so a run is reproducible.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ksearch.task.definition import Definition
from ksearch.task.synth import random_tensor
from ksearch.task.workload import Workload


class DatasetError(ValueError):
    """The dataset copy is missing a file or holds something the definition does not accept."""


def read_safetensors(path: Path, key: str) -> torch.Tensor:
    """One tensor from a .safetensors file."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise DatasetError(f"{path} is missing; fetch the dataset's blobs (git lfs pull) or use synthesised workloads")
    try:
        with safe_open(str(path), framework="pt") as f:
            if key not in f.keys():
                raise DatasetError(f"{path} has no tensor {key!r}; it has {sorted(f.keys())}")
            return f.get_tensor(key).clone()
    except SafetensorError as e:
        raise DatasetError(f"{path}: not a readable safetensors file ({e})") from None


def dataset_workloads(root: Path, definition: Definition) -> list[Workload]:
    path = Path(root) / "workloads" / definition.op_type / f"{definition.name}.jsonl"
    if not path.is_file():
        raise DatasetError(f"no workloads for {definition.name} at {path} (task.dataset_dir={root})")
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        w = json.loads(line).get("workload") or {}
        missing = [a for a in definition.var_axes() if a not in w.get("axes", {})]
        unknown = set(w.get("inputs", {})) - set(definition.input_names)
        if missing or unknown:
            raise DatasetError(f"{path}:{i + 1}: axes missing {missing}, unknown inputs {sorted(unknown)}")
        out.append(Workload(name=f"ds_{w['uuid'][:8]}", axes={k: int(v) for k, v in w["axes"].items()},
                            params={"dataset_root": str(root), "dataset_inputs": w.get("inputs", {}),
                                    "uuid": w["uuid"]}))
    return out


def dataset_inputs(definition: Definition, workload: Workload, *, device: str, seed: int) -> dict[str, Any]:
    axes = {**definition.const_axes(), **workload.axes}
    gen = torch.Generator().manual_seed(seed)
    root = Path(workload.params["dataset_root"])
    out: dict[str, Any] = {}
    for spec in definition.inputs:
        d = workload.params["dataset_inputs"].get(spec.name, {"type": "random"})
        if d["type"] == "scalar":
            out[spec.name] = d["value"]
            continue
        if spec.is_scalar:
            raise DatasetError(f"{workload.name}: scalar input {spec.name} needs a value")
        shape = spec.concrete_shape(axes)
        if d["type"] == "safetensors":
            t = read_safetensors(root / d["path"], d["tensor_key"])
            if tuple(t.shape) != shape or t.dtype != spec.torch_dtype:
                raise DatasetError(f"{workload.name}: {spec.name} is {tuple(t.shape)} {t.dtype}, the definition "
                                   f"wants {shape} {spec.torch_dtype}")
        else:
            t = random_tensor(spec, shape, gen, 1024)
        out[spec.name] = t.to(device)
    return out
