"""A kernel definition in FlashInfer-Bench's schema, validated once at load so callers can trust it."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

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


class _Axis(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["const", "var"]
    value: Optional[int] = None
    description: str = ""

    @model_validator(mode="after")
    def _const_has_value(self) -> "_Axis":
        if self.type == "const" and self.value is None:
            raise ValueError("a const axis needs an integer 'value'")
        return self


class _Tensor(BaseModel):
    model_config = ConfigDict(extra="allow")
    shape: Optional[list[str]]                # None: a Python scalar
    dtype: str
    description: str = ""

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        if v not in DTYPES:
            raise ValueError(f"unknown dtype {v!r}; allowed: {sorted(DTYPES)}")
        return v


class _DefinitionDoc(BaseModel):
    """The document as FlashInfer-Bench writes it; cross-field rules are checked in parse_definition."""
    model_config = ConfigDict(extra="allow")
    name: str
    op_type: str
    axes: dict[str, _Axis]
    inputs: dict[str, _Tensor] = Field(min_length=1)
    outputs: dict[str, _Tensor] = Field(min_length=1)
    reference: Optional[str] = None
    constraints: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    description: str = ""


def _specs(group: dict[str, _Tensor], where: str, axes: dict[str, Any]) -> tuple[TensorSpec, ...]:
    specs = []
    for name, t in group.items():
        missing = [a for a in t.shape or () if a not in axes]
        if missing:
            raise DefinitionError(f"{where}.{name}: shape uses undeclared axes {missing}")
        specs.append(TensorSpec(name, tuple(t.shape) if t.shape is not None else None, t.dtype, t.description))
    return tuple(specs)


def parse_definition(doc: dict[str, Any], reference: str | None = None) -> Definition:
    """Validate a definition document; `reference` overrides the document's reference source."""
    try:
        d = _DefinitionDoc.model_validate(doc)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        what = "required field missing" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")
        raise DefinitionError(f"definition: {where}: {what}") from None
    axes = {k: a.model_dump(exclude_defaults=True) for k, a in d.axes.items()}     # as written: type, value, description
    inputs = _specs(d.inputs, "inputs", axes)
    outputs = _specs(d.outputs, "outputs", axes)
    overlap = set(d.inputs) & set(d.outputs)
    if overlap:
        raise DefinitionError(f"input and output names overlap: {sorted(overlap)}")
    ref = reference if reference is not None else d.reference
    if not ref:
        raise DefinitionError("definition has no reference source")
    try:
        tree = ast.parse(ref)
    except SyntaxError as e:
        raise DefinitionError(f"reference does not parse: {e}") from e
    if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
        raise DefinitionError("reference must define a top-level function `run`")
    for c in d.constraints:
        try:
            ast.parse(c, mode="eval")
        except SyntaxError as e:
            raise DefinitionError(f"constraint {c!r} does not parse: {e}") from e
    return Definition(name=d.name, op_type=d.op_type, axes=axes, inputs=inputs, outputs=outputs, reference=ref,
                      constraints=tuple(d.constraints), tags=tuple(d.tags), description=d.description,
                      extra=dict(d.model_extra or {}))


def load_definition(task_dir: Path) -> Definition:
    """Read `definition.json`; the reference comes from `reference.py` beside it when present.

    From the pinned snapshot of the folder when there is one (ksearch.task.snapshot): a task's own modules
    call this at import time, also in a candidate's process, where the folder itself is hidden."""
    from ksearch.task.snapshot import pinned

    snap = pinned(task_dir)
    path = Path(task_dir) / "definition.json"
    try:
        text = snap.text("definition.json") if snap is not None else path.read_text()
        doc = json.loads(text or "")
    except json.JSONDecodeError as e:
        raise DefinitionError(f"{path}: not valid JSON: {e}") from e
    if snap is not None:
        return parse_definition(doc, snap.text("reference.py"))
    ref_path = Path(task_dir) / "reference.py"
    return parse_definition(doc, ref_path.read_text() if ref_path.exists() else None)
