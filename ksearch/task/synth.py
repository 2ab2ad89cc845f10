"""Random inputs for a definition, the way FlashInfer-Bench's generator makes them.

Floats are standard normal (FP8 clamped to +-2 before the cast), booleans fair coins, integers uniform
in [0, the smallest axis of the workload), so that an integer input used as an index stays inside every
dimension. Python scalars come from `scalars` (name -> value); a task folder made by `ksearch task new`
sets them in its workloads.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ksearch.task.definition import Definition, TensorSpec

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def random_tensor(spec: TensorSpec, shape: tuple[int, ...], gen: torch.Generator, int_high: int) -> torch.Tensor:
    dtype = spec.torch_dtype
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=gen)
        if dtype in _FP8:
            t = t.clamp(-2, 2)
        return t.to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randint(0, max(1, int_high), shape, generator=gen).to(dtype)


def random_inputs(definition: Definition, axes: Mapping[str, int], *, device: str, seed: int,
                  scalars: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Inputs in definition order for the workload with these var-axis values."""
    full = {**definition.const_axes(), **axes}
    missing = [a for a in definition.var_axes() if a not in full]
    if missing:
        raise ValueError(f"{definition.name}: workload lacks values for the var axes {missing}")
    gen = torch.Generator().manual_seed(seed)
    int_high = min(full.values()) if full else 1
    out: dict[str, Any] = {}
    for spec in definition.inputs:
        if spec.is_scalar:
            if not scalars or spec.name not in scalars:
                raise ValueError(f"{definition.name}: scalar input {spec.name} needs a value (workloads.py SCALARS)")
            out[spec.name] = scalars[spec.name]
            continue
        out[spec.name] = random_tensor(spec, spec.concrete_shape(full), gen, int_high).to(device)
    return out
