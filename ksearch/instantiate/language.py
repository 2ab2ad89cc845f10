"""Which language a solution source is written in, from its text alone.

A solution travels as one source string (journal, evaluation jobs, `ksearch eval FILE`); the loader,
the static checks and the prompts need to know whether it is a Python/Triton module or a CUDA C++
translation unit, without a side channel that could disagree with the text. Model replies say it with
the fence tag (```python, ```cuda ...); `fence_language` maps those tags.
"""

from __future__ import annotations

import ast
import re

PYTHON = "python"
CUDA = "cuda"

# Fence tags a model uses for each language; an untagged fence is judged by its text.
PYTHON_FENCES = frozenset({"python", "py", "python3", "triton"})
CUDA_FENCES = frozenset({"cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "hpp", "h"})

# File name and entry point of a solution in each language (FlashInfer-Bench's file::function form).
SOLUTION_FILE = {PYTHON: "main.py", CUDA: "main.cu"}

_CUDA_MARKERS = re.compile(r"^\s*#\s*include\s*[<\"]|__global__|\btorch::Tensor\b|\bPYBIND11_MODULE\b", re.MULTILINE)
# Top-level lines no C++ file has: a Python module with a syntax error (perhaps one that embeds CUDA
# source in a string for load_inline) stays Python, so its error is reported as a Python error.
_PYTHON_LINES = re.compile(r"^(def \w+\s*\(|import \w|from [\w.]+ import )", re.MULTILINE)


def parse_python(source: str) -> ast.Module:
    """`ast.parse` for a candidate's source: one nested too deeply for the parser (hundreds of thousands of
    brackets or unary signs: MemoryError, RecursionError) is a SyntaxError like any other, never an error of
    the search process that reads it."""
    try:
        return ast.parse(source)
    except (RecursionError, MemoryError) as e:
        error = SyntaxError(f"the source is nested too deeply to parse ({type(e).__name__})")
        error.lineno = 1
        raise error from None


def language_of(source: str) -> str:
    """`cuda` for C++/CUDA text (includes, __global__, torch::Tensor), else `python`."""
    try:
        parse_python(source)
    except SyntaxError:
        if _PYTHON_LINES.search(source):
            return PYTHON
        return CUDA if _CUDA_MARKERS.search(source) else PYTHON
    return PYTHON


def fence_language(tag: str) -> str | None:
    """PYTHON or CUDA for a fence tag, None for an untagged or other (json, bash ...) fence."""
    t = tag.strip().lower()
    if t in PYTHON_FENCES:
        return PYTHON
    if t in CUDA_FENCES:
        return CUDA
    return None
