"""A kernel definition in FlashInfer-Bench's schema, validated once at load so callers can trust it."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

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


class _Model(BaseModel):
    # Fields FlashInfer-Bench may add are kept (extra="allow"); nothing changes a loaded definition.
    model_config = ConfigDict(extra="allow", frozen=True)


class Axis(_Model):
    type: Literal["const", "var"]
    value: int | None = None
    description: str = ""

    @model_validator(mode="after")
    def _const_has_value(self) -> Axis:
        if self.type == "const" and self.value is None:
            raise ValueError("a const axis needs an integer 'value'")
        return self


class TensorSpec(_Model):
    """One input or output: symbolic shape (None for a Python scalar) and dtype name."""

    name: str
    shape: tuple[str, ...] | None          # required, may be null: a Python scalar
    dtype: str
    description: str = ""

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        if v not in DTYPES:
            raise ValueError(f"unknown dtype {v!r}; allowed: {sorted(DTYPES)}")
        return v

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


class Definition(_Model):
    """Name, axes, ordered inputs/outputs (the calling convention) and the reference source.

    Validated from the document as FlashInfer-Bench writes it (inputs and outputs keyed by name, in
    calling order); `to_json` writes that document back."""

    name: str
    op_type: str
    axes: dict[str, Axis]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    reference: str = ""
    constraints: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _tensors_named_by_their_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for group in ("inputs", "outputs"):
            tensors = data.get(group)
            if isinstance(tensors, dict):
                data[group] = [{**t, "name": name} if isinstance(t, dict) else t for name, t in tensors.items()]
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Definition:
        for where, group in (("inputs", self.inputs), ("outputs", self.outputs)):
            if not group:
                raise ValueError(f"{where}: a definition needs at least one tensor there")
            for t in group:
                missing = [a for a in t.shape or () if a not in self.axes]
                if missing:
                    raise ValueError(f"{where}.{t.name}: shape uses undeclared axes {missing}")
        overlap = set(self.input_names) & set(self.output_names)
        if overlap:
            raise ValueError(f"input and output names overlap: {sorted(overlap)}")
        if not self.reference:
            raise ValueError("no reference source")
        try:
            tree = ast.parse(self.reference)
        except SyntaxError as e:
            raise ValueError(f"reference does not parse: {e}") from e
        if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
            raise ValueError("reference must define a top-level function `run`")
        for c in self.constraints:
            try:
                ast.parse(c, mode="eval")
            except SyntaxError as e:
                raise ValueError(f"constraint {c!r} does not parse: {e}") from e
        return self

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def const_axes(self) -> dict[str, int]:
        return {k: int(v.value) for k, v in self.axes.items() if v.type == "const" and v.value is not None}

    def var_axes(self) -> list[str]:
        return [k for k, v in self.axes.items() if v.type == "var"]

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
            "axes": {k: a.model_dump(exclude_defaults=True) for k, a in self.axes.items()},   # as written
            "constraints": list(self.constraints),
            "inputs": {t.name: spec(t) for t in self.inputs},
            "outputs": {t.name: spec(t) for t in self.outputs},
            "reference": self.reference,
        }

    def render_text(self) -> str:
        """Plain-text rendering for prompts: axes, tensors, constraints and the reference."""
        lines = [f"Name: {self.name}", f"Type: {self.op_type}", "Axes:"]
        for k, v in self.axes.items():
            val = v.value if v.value is not None else "variable"
            lines.append(f"  {k}: {val}" + (f"  ({v.description})" if v.description else ""))
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


def parse_definition(doc: dict[str, Any], reference: str | None = None) -> Definition:
    """Validate a definition document; `reference` overrides the document's reference source."""
    try:
        return Definition.model_validate({**doc, "reference": reference} if reference is not None else doc)
    except ValidationError as e:
        err = e.errors()[0]
        loc = list(err["loc"])
        if len(loc) > 1 and loc[0] in ("inputs", "outputs") and isinstance(loc[1], int) \
                and isinstance(doc.get(loc[0]), dict):
            loc[1] = list(doc[loc[0]])[loc[1]]      # the tensor's name, as the document keys it
        where = ".".join(str(x) for x in loc)
        what = "required field missing" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")
        raise DefinitionError(f"definition: {where}: {what}" if where else f"definition: {what}") from None


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
