"""Solutions: source files plus how to call them. The id hashes only what changes behaviour."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class SourceFile:
    path: str
    content: str


@dataclass(frozen=True)
class Solution:
    """A candidate kernel in FlashInfer-Bench's solution shape (value-returning style)."""

    definition: str
    sources: tuple[SourceFile, ...]
    language: str = "triton"
    entry_point: str = "main.py::run"
    name: str = ""
    author: str = ""
    description: str = ""
    target_hardware: tuple[str, ...] = ("cuda",)
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if "::" not in self.entry_point:
            raise ValueError(f"entry_point must be 'file::function', got {self.entry_point!r}")
        path = self.entry_file
        if path not in {s.path for s in self.sources}:
            raise ValueError(f"entry file {path} is not among the sources")
        for s in self.sources:
            if s.path.startswith("/") or ".." in s.path.split("/"):
                raise ValueError(f"source path {s.path!r} must be relative and stay inside the solution")

    @property
    def entry_file(self) -> str:
        return self.entry_point.split("::", 1)[0]

    @property
    def main_source(self) -> str:
        return next(s.content for s in self.sources if s.path == self.entry_file)

    @property
    def solution_id(self) -> str:
        h = hashlib.sha1()
        for part in (self.definition, self.language, self.entry_point):
            h.update(part.encode() + b"\0")
        for s in sorted(self.sources, key=lambda s: s.path):
            h.update(s.path.encode() + b"\0" + s.content.encode() + b"\0")
        return h.hexdigest()[:16]

    @staticmethod
    def from_code(definition: str, code: str, **kw: Any) -> Solution:
        return Solution(definition=definition, sources=(SourceFile("main.py", code),), **kw)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["solution_id"] = self.solution_id
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> Solution:
        d = {k: v for k, v in d.items() if k != "solution_id"}
        d["sources"] = tuple(SourceFile(**s) for s in d["sources"])
        d["target_hardware"] = tuple(d.get("target_hardware", ("cuda",)))
        return Solution(**d)


def solution_from_text(definition: str, text: str, entry: str = "run", **meta: Any) -> Solution:
    """A Solution from a model reply or kernel source: Python/Triton (main.py) or CUDA C++ (main.cu), by
    content. A file a user hands over may also be a FlashInfer-Bench document:
    ksearch.interop.flashinfer_bench.solution_from_user_text reads both."""
    from ksearch.instantiate.extract import extract_code

    code = extract_code(text, entry)
    return Solution(definition=definition, sources=(SourceFile(code.file_name, code.code),),
                    language="cuda" if code.language == "cuda" else "triton",
                    entry_point=code.entry_point(), **meta)
