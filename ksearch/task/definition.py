"""A kernel definition in FlashInfer-Bench's schema, validated once at load so callers can trust it."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "bool": torch.bool,
}


class DefinitionError(ValueError):
    """A definition file that does not follow the schema."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: symbolic shape (None for a Python scalar) and dtype name."""

    name: str
    shape: tuple[str, ...] | None
    dtype: str
    description: str = ""

    @property
    def is_scalar(self) -> bool:
        return self.shape is None

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def concrete_shape(self, axes: dict[str, int]) -> tuple[int, ...]:
        if self.shape is None:
            raise ValueError(f"{self.name} is a scalar and has no shape")
        return tuple(int(axes[a]) for a in self.shape)


@dataclass(frozen=True)
class Definition:
    """Name, axes, ordered inputs/outputs (the calling convention) and the reference source."""

    name: str
    op_type: str
    axes: dict[str, dict[str, Any]]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    reference: str
    constraints: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def const_axes(self) -> dict[str, int]:
        return {k: int(v["value"]) for k, v in self.axes.items() if v.get("type") == "const"}

    def var_axes(self) -> list[str]:
        return [k for k, v in self.axes.items() if v.get("type") == "var"]

    def to_json(self) -> dict[str, Any]:
        """The full FlashInfer-Bench document, reference source included."""

        def spec(t: TensorSpec) -> dict[str, Any]:
            d: dict[str, Any] = {"shape": list(t.shape) if t.shape is not None else None, "dtype": t.dtype}
            if t.description:
                d["description"] = t.description
            return d

        return {
            "name": self.name,
            "op_type": self.op_type,
            "description": self.description,
            "tags": list(self.tags),
            "axes": self.axes,
            "constraints": list(self.constraints),
            "inputs": {t.name: spec(t) for t in self.inputs},
            "outputs": {t.name: spec(t) for t in self.outputs},
            "reference": self.reference,
        }

    def render_text(self) -> str:
        """Plain-text rendering for prompts: axes, tensors, constraints and the reference."""
        lines = [f"Name: {self.name}", f"Type: {self.op_type}", "Axes:"]
        for k, v in self.axes.items():
            val = v.get("value", "variable")
            lines.append(f"  {k}: {val}" + (f"  ({v['description']})" if v.get("description") else ""))
        for title, group in (("Inputs", self.inputs), ("Outputs", self.outputs)):
            lines.append(f"{title}:")
            for t in group:
                shape = "scalar" if t.shape is None else "[" + ", ".join(t.shape) + "]"
                lines.append(f"  {t.name}: {shape} {t.dtype}" + (f"  {t.description}" if t.description else ""))
        if self.constraints:
            lines.append("Constraints:")
            lines.extend(f"  {c}" for c in self.constraints)
        lines.append("Reference implementation:")
        lines.append(self.reference)
        return "\n".join(lines)


def _tensor_specs(raw: Any, where: str, axes: dict[str, Any]) -> tuple[TensorSpec, ...]:
    if not isinstance(raw, dict) or not raw:
        raise DefinitionError(f"{where} must be a non-empty mapping of name -> {{shape, dtype}}")
    specs = []
    for name, d in raw.items():
        if not isinstance(d, dict) or "dtype" not in d or "shape" not in d:
            raise DefinitionError(f"{where}.{name} needs 'shape' (list or null) and 'dtype'")
        if d["dtype"] not in DTYPES:
            raise DefinitionError(f"{where}.{name}: unknown dtype {d['dtype']!r}; allowed: {sorted(DTYPES)}")
        shape = d["shape"]
        if shape is not None:
            missing = [a for a in shape if a not in axes]
            if missing:
                raise DefinitionError(f"{where}.{name}: shape uses undeclared axes {missing}")
            shape = tuple(shape)
        specs.append(TensorSpec(name, shape, d["dtype"], d.get("description", "")))
    return tuple(specs)


def parse_definition(doc: dict[str, Any], reference: str | None = None) -> Definition:
    """Validate a definition document; `reference` overrides the document's reference source."""
    for key in ("name", "op_type", "axes", "inputs", "outputs"):
        if key not in doc:
            raise DefinitionError(f"definition is missing required field {key!r}")
    axes = doc["axes"]
    for k, v in axes.items():
        if v.get("type") not in ("const", "var"):
            raise DefinitionError(f"axis {k!r} must have type 'const' or 'var'")
        if v["type"] == "const" and not isinstance(v.get("value"), int):
            raise DefinitionError(f"const axis {k!r} needs an integer 'value'")
    inputs = _tensor_specs(doc["inputs"], "inputs", axes)
    outputs = _tensor_specs(doc["outputs"], "outputs", axes)
    overlap = {t.name for t in inputs} & {t.name for t in outputs}
    if overlap:
        raise DefinitionError(f"input and output names overlap: {sorted(overlap)}")
    ref = reference if reference is not None else doc.get("reference")
    if not ref:
        raise DefinitionError("definition has no reference source")
    try:
        tree = ast.parse(ref)
    except SyntaxError as e:
        raise DefinitionError(f"reference does not parse: {e}") from e
    if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
        raise DefinitionError("reference must define a top-level function `run`")
    for c in doc.get("constraints", []):
        try:
            ast.parse(c, mode="eval")
        except SyntaxError as e:
            raise DefinitionError(f"constraint {c!r} does not parse: {e}") from e
    known = {"name", "op_type", "axes", "inputs", "outputs", "reference", "constraints", "tags", "description"}
    return Definition(
        name=doc["name"],
        op_type=doc["op_type"],
        axes=axes,
        inputs=inputs,
        outputs=outputs,
        reference=ref,
        constraints=tuple(doc.get("constraints", [])),
        tags=tuple(doc.get("tags", [])),
        description=doc.get("description", ""),
        extra={k: v for k, v in doc.items() if k not in known},
    )


def load_definition(task_dir: Path) -> Definition:
    """Read `definition.json`; the reference comes from `reference.py` beside it when present."""
    path = task_dir / "definition.json"
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DefinitionError(f"{path}: not valid JSON: {e}") from e
    ref_path = task_dir / "reference.py"
    return parse_definition(doc, ref_path.read_text() if ref_path.exists() else None)
