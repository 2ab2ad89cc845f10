"""Read one solution file the user hands to `ksearch eval`, `ksearch bench` or `search.seed_solution`.

Accepted: a kernel source (.py Triton module or .cu CUDA file, or a model reply with fenced code), a
ksearch solution.json (from a run's solutions/ or best/), or a FlashInfer-Bench Solution JSON. Each
comes back with the task it names, when it names one (a source file takes it from the solution.json
beside it, as in a run's best/ folder), so a kernel is judged on its own task by default.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from ksearch.instantiate.solution import Solution


class SolutionFileError(ValueError):
    """The file is not a solution ksearch can read; the message says what is wrong with it."""


def _text(path: Path) -> str:
    if not path.exists():
        raise SolutionFileError(f"{path} does not exist")
    if not path.is_file():
        raise SolutionFileError(f"{path} is not a file; pass a .py, .cu or solution .json file")
    raw = path.read_bytes()
    if b"\0" in raw:
        raise SolutionFileError(f"{path} is a binary file; pass a .py (Triton), .cu (CUDA) or solution .json file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SolutionFileError(f"{path} is not UTF-8 text; pass a .py, .cu or solution .json file") from None
    if not text.strip():
        raise SolutionFileError(f"{path} is empty; it should hold a kernel with a `run` function")
    return text


def _from_json(path: Path, text: str) -> Solution:
    from ksearch.interop.flashinfer_bench import ConversionError, from_fib, is_fib_solution

    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SolutionFileError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    try:
        if is_fib_solution(doc):
            return from_fib(doc)
        if isinstance(doc, dict) and "sources" in doc and "definition" in doc:
            return Solution.from_json(doc)
    except ValidationError as e:
        first = e.errors()[0]
        raise SolutionFileError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    except (ConversionError, TypeError, ValueError, KeyError) as e:
        raise SolutionFileError(f"{path}: {e}") from None
    raise SolutionFileError(f"{path} is JSON but not a solution: a FlashInfer-Bench Solution (spec, sources) "
                            f"or a ksearch solution.json (definition, sources) is expected")


def _sibling_task(path: Path, code: str) -> str | None:
    """The task named by the solution.json beside a source file, when it describes this very code."""
    for meta in (path.with_suffix(".json"), path.parent / "solution.json"):
        if meta.is_file() and meta != path:
            try:
                sol = Solution.from_json(json.loads(meta.read_text()))
            except (ValueError, TypeError, KeyError):
                continue
            if sol.main_source.strip() == code.strip():
                return sol.definition
    return None


def read_solution_file(path: Path, task: str = "") -> tuple[Solution, str | None]:
    """(the solution, the task it names or None). `task` labels a bare source file."""
    from ksearch.instantiate.extract import CodeExtractionError
    from ksearch.interop.flashinfer_bench import solution_from_user_text as solution_from_text

    path = Path(path)
    text = _text(path)
    if path.suffix == ".json" or text.lstrip().startswith("{"):
        sol = _from_json(path, text)
        return sol, sol.definition
    try:
        sol = solution_from_text(task, text, name=path.stem)
    except CodeExtractionError as e:
        raise SolutionFileError(f"{path}: {e}") from None
    own = _sibling_task(path, sol.main_source)
    if own and own != task:
        sol = solution_from_text(own, text, name=path.stem)
    return sol, own
