"""A task's signature: what the kernel computes, derived from its definition, never from its name alone.

Two task folders with the same op type, axes (constant values, variable names) and tensors (names,
symbolic shapes, dtypes) describe the same kernel, so what one search learned applies to the other as
is; a renamed copy keeps its memory, and a task whose head count or dtype differs does not share it
(it shares its op type, which gives weaker priors).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TaskSignature:
    digest: str          # 16 hex digits over the canonical description below
    op_type: str
    task: str            # the name it was seen under (shown, not matched)

    @property
    def short(self) -> str:
        return f"{self.op_type}:{self.digest[:8]}"


def canonical(definition: Any) -> dict[str, Any]:
    """The parts of a definition that decide what the kernel must compute."""
    def tensors(group: Any) -> list[list[Any]]:
        return [[t.name, list(t.shape) if t.shape is not None else None, t.dtype] for t in group]

    axes = {k: (int(v.value) if v.type == "const" else "var") for k, v in sorted(definition.axes.items())}
    return {"op_type": definition.op_type, "axes": axes, "inputs": tensors(definition.inputs),
            "outputs": tensors(definition.outputs)}


def signature_of(definition: Any) -> TaskSignature:
    blob = json.dumps(canonical(definition), sort_keys=True, separators=(",", ":"))
    return TaskSignature(hashlib.sha256(blob.encode()).hexdigest()[:16], definition.op_type, definition.name)
