"""FlashInfer-Bench's Solution and Trace documents, and conversion to and from ksearch's Solution.

A Solution JSON: name, definition, author, description, spec {language, target_hardware, entry_point
("file::function"), dependencies}, sources [{path, content}]. A trace (one JSONL line): definition,
workload {uuid, axes, inputs}, solution (its name), evaluation {status, log, environment, timestamp,
correctness {max_absolute_error, max_relative_error}, performance {latency_ms, reference_latency_ms,
speedup_factor}}.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ksearch.instantiate.solution import Solution, SourceFile, solution_from_text


class FibSource(BaseModel):
    path: str
    content: str


class FibSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    language: str
    target_hardware: list[str] = Field(default_factory=list)
    entry_point: str
    dependencies: list[str] = Field(default_factory=list)


class FibSolution(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    definition: str
    author: str = ""
    description: str = ""
    spec: FibSpec
    sources: list[FibSource] = Field(min_length=1)


class FibCorrectness(BaseModel):
    max_absolute_error: float | None = None
    max_relative_error: float | None = None


class FibPerformance(BaseModel):
    latency_ms: float | None = None
    reference_latency_ms: float | None = None
    speedup_factor: float | None = None


class FibEvaluation(BaseModel):
    status: str
    log: str = ""
    environment: dict[str, Any] = Field(default_factory=dict)
    timestamp: str = ""
    correctness: FibCorrectness | None = None
    performance: FibPerformance | None = None


class FibWorkload(BaseModel):
    uuid: str
    axes: dict[str, int]
    inputs: dict[str, Any] = Field(default_factory=dict)


class FibTrace(BaseModel):
    definition: str
    workload: FibWorkload
    solution: str | None = None
    evaluation: FibEvaluation | None = None


# ksearch names a solution's language by what the file is: triton for Python modules, cuda for C++.
_TO_KSEARCH = {"triton": "triton", "python": "triton", "cuda": "cuda", "cpp": "cuda", "cuda_cpp": "cuda"}


class ConversionError(ValueError):
    """A FlashInfer-Bench solution ksearch cannot judge (the message says why)."""


def is_fib_solution(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("spec"), dict) and "sources" in doc


def from_fib(doc: dict[str, Any]) -> Solution:
    """A ksearch Solution from a FlashInfer-Bench Solution document (single-file, Python or CUDA)."""
    fib = FibSolution.model_validate(doc)
    language = _TO_KSEARCH.get(fib.spec.language.lower())
    if language is None:
        raise ConversionError(f"solution {fib.name}: spec.language {fib.spec.language!r} is not one ksearch runs "
                              f"(triton, python, cuda)")
    if "::" not in fib.spec.entry_point:
        raise ConversionError(f"solution {fib.name}: spec.entry_point must be 'file::function', got "
                              f"{fib.spec.entry_point!r}")
    entry_file, entry_fn = fib.spec.entry_point.split("::", 1)
    sources = {s.path: s.content for s in fib.sources}
    if entry_file not in sources:
        raise ConversionError(f"solution {fib.name}: entry file {entry_file} is not among its sources "
                              f"{sorted(sources)}")
    if len(sources) > 1:
        raise ConversionError(f"solution {fib.name} has {len(sources)} source files; ksearch judges single-file "
                              f"solutions (put the kernel and its `{entry_fn}` in {entry_file})")
    code = sources[entry_file]
    if entry_fn != "run":
        if language != "triton":
            raise ConversionError(f"solution {fib.name}: a CUDA entry point must be named run, not {entry_fn}")
        code = code.rstrip("\n") + f"\n\n\nrun = {entry_fn}     # ksearch calls `run`\n"
    main = "main.cu" if language == "cuda" else "main.py"
    return Solution(definition=fib.definition, sources=(SourceFile(main, code),), language=language,
                    entry_point=f"{main}::run", name=fib.name, author=fib.author, description=fib.description,
                    target_hardware=tuple(fib.spec.target_hardware) or ("cuda",))


def to_fib(sol: Solution, *, name: str | None = None, target_hardware: list[str] | None = None) -> FibSolution:
    dependencies = ["triton"] if sol.language == "triton" else []
    return FibSolution(
        name=name or sol.name or f"ksearch_{sol.solution_id}", definition=sol.definition,
        author=sol.author or "ksearch", description=sol.description,
        spec=FibSpec(language=sol.language, target_hardware=target_hardware or list(sol.target_hardware),
                     entry_point=sol.entry_point, dependencies=dependencies),
        sources=[FibSource(path=s.path, content=s.content) for s in sol.sources])


def solution_from_user_text(definition: str, text: str, entry: str = "run", **meta: Any) -> Solution:
    """A file a user hands over (`search.seed_solution`, `ksearch eval`, `ksearch bench --solution`): a
    FlashInfer-Bench Solution document, else kernel source (instantiate.solution_from_text)."""
    if text.lstrip().startswith("{"):
        doc = _fib_document(text)
        if doc is not None:
            sol = from_fib(doc)
            return Solution(definition=definition or sol.definition, sources=sol.sources, language=sol.language,
                            entry_point=sol.entry_point, **{"name": sol.name, "author": sol.author, **meta})
    return solution_from_text(definition, text, entry, **meta)


def _fib_document(text: str) -> dict[str, Any] | None:
    import json

    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None
    return doc if is_fib_solution(doc) else None
