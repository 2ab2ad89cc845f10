"""Pull the code out of a model's reply: fenced blocks, prose around them, and obvious breakage.

A reply holds either a Python/Triton module (```python) or a CUDA C++ translation unit (```cuda,
```cpp, ```c++, ```cu) with `__global__` kernels and a host function `run`. `extract_code` decides which,
picks the block(s) that make the solution, and rejects what could never load, with a reason the next
attempt can act on. `extract_python` is the Python-only path it uses.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ksearch.instantiate.language import CUDA, PYTHON, SOLUTION_FILE, fence_language, language_of, parse_python

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n")


class CodeExtractionError(ValueError):
    """The reply holds no usable solution; the message says what was found."""


@dataclass(frozen=True)
class ExtractedCode:
    language: str          # PYTHON or CUDA (ksearch.instantiate.language)
    code: str

    @property
    def file_name(self) -> str:
        return SOLUTION_FILE[self.language]

    def entry_point(self, entry: str = "run") -> str:
        return f"{self.file_name}::{entry}"


def extract_python(text: str, entry: str = "run") -> str:
    """The fenced block that defines `entry` (else the longest python block; else the whole text).

    The result must parse as Python and define a top-level `entry`; hex float literals are refused
    rather than silently rewritten (K-Search replaced them with 1.0).
    """
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    candidates = [b for lang, b in blocks if lang in ("", "python", "py", "triton")] or [b for _, b in blocks]
    if not candidates:
        candidates = [text]
    defining = [c for c in candidates if _defines_python(c, entry)]
    code = max(defining or candidates, key=len).strip() + "\n"
    if re.search(r"\b0[xX][0-9a-fA-F]*\.[0-9a-fA-F]*[pP][+-]?\d+", code):
        raise CodeExtractionError("the code uses hex float literals (e.g. 0x1.8p3); write decimal floats instead")
    try:
        tree = parse_python(code)
    except SyntaxError as e:
        raise CodeExtractionError(f"the code does not parse: line {e.lineno}: {e.msg}") from e
    if not any(isinstance(n, ast.FunctionDef) and n.name == entry for n in tree.body):
        raise CodeExtractionError(f"the code defines no top-level function `{entry}`")
    return code


def extract_code(text: str, entry: str = "run") -> ExtractedCode:
    """The solution in a reply, Python or CUDA.

    Order: a Python block that defines `def entry(` wins (a Python module may itself build CUDA with
    load_inline); else CUDA blocks (tagged cuda/cpp/c++/cu, or untagged blocks that read as C++); else
    the Python path, whose error says what is missing. A reply cut off inside its last fence is read
    up to where it stops (and then usually rejected as cut off).
    """
    blocks = [(tag, body) for tag, body in _FENCE.findall(text)]
    if not blocks:
        tail = _unclosed_fence(text)
        if tail is not None:
            blocks = [tail]
    python, cuda = [], []
    for tag, body in blocks:
        lang = fence_language(tag)
        if lang is None and not tag.strip():
            lang = language_of(body)
        if lang == PYTHON:
            python.append(body)
        elif lang == CUDA:
            cuda.append(body)
    if any(_defines_python(b, entry) for b in python):
        return ExtractedCode(PYTHON, extract_python(_fenced(python), entry))
    if cuda:
        return ExtractedCode(CUDA, _cuda_code(cuda, entry))
    if not blocks:
        if language_of(text) == CUDA:
            return ExtractedCode(CUDA, _cuda_code([text], entry))
        return ExtractedCode(PYTHON, extract_python(text, entry))
    return ExtractedCode(PYTHON, extract_python(_fenced(python) if python else text, entry))


def _fenced(bodies: list[str]) -> str:
    return "\n".join(f"```python\n{b}```" for b in bodies)


def _defines_python(code: str, entry: str) -> bool:
    return re.search(rf"^def {re.escape(entry)}\s*\(", code, re.MULTILINE) is not None


def _unclosed_fence(text: str) -> tuple[str, str] | None:
    """(tag, body) of a final fence that was opened and never closed (a reply cut off mid-code)."""
    opens = list(_OPEN_FENCE.finditer(text))
    if len(opens) != 1 or text.count("```") != 1:
        return None
    m = opens[0]
    return m.group(1), text[m.end():]


def _cuda_code(bodies: list[str], entry: str) -> str:
    """The block that defines `run` and every kernel it launches; else all CUDA blocks, in order."""
    from ksearch.instantiate.cuda import CudaSourceError, binds_entry, check_source, find_entry_definition

    def self_contained(body: str) -> bool:
        launched = set(re.findall(r"\b([A-Za-z_]\w*)\s*<<<", body))
        defined = set(re.findall(r"__global__[^;{(]*?\b([A-Za-z_]\w*)\s*\(", body))
        return launched <= defined

    defining = [b for b in bodies if binds_entry(b, entry) or find_entry_definition(b, entry) is not None]
    whole = [b for b in defining if self_contained(b)]
    if whole:
        code = max(whole, key=len)
    else:
        unique: list[str] = []
        for b in bodies:
            if b.strip() and b.strip() not in (u.strip() for u in unique):
                unique.append(b)
        code = "\n\n".join(b.rstrip("\n") + "\n" for b in unique)
    code = code.strip("\n") + "\n"
    try:
        check_source(code, entry)
    except CudaSourceError as e:
        raise CodeExtractionError(str(e)) from None
    return code
