"""Which language a solution source is written in, from its text alone.

A solution travels as one source string (journal, evaluation jobs, `ksearch eval FILE`); the loader,
the static checks and the prompts need to know whether it is a Python/Triton module or a CUDA C++
translation unit, without a side channel that could disagree with the text.
"""

from __future__ import annotations

import ast
import re

PYTHON = "python"
CUDA = "cuda"

_CUDA_MARKERS = re.compile(r"^\s*#\s*include\s*[<\"]|__global__|\btorch::Tensor\b|\bPYBIND11_MODULE\b", re.MULTILINE)


def language_of(source: str) -> str:
    """`cuda` for C++/CUDA text (includes, __global__, torch::Tensor), else `python`."""
    try:
        ast.parse(source)
    except SyntaxError:
        return CUDA if _CUDA_MARKERS.search(source) else PYTHON
    return PYTHON
