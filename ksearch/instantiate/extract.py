"""Pull the code out of a model's reply: fenced blocks, prose around them, and obvious breakage."""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


class CodeExtractionError(ValueError):
    """The reply holds no usable Python module; the message says what was found."""


def extract_python(text: str, entry: str = "run") -> str:
    """The fenced block that defines `entry` (else the longest python block; else the whole text).

    The result must parse as Python and define a top-level `entry`; hex float literals are refused
    rather than silently rewritten (K-Search replaced them with 1.0).
    """
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    candidates = [b for lang, b in blocks if lang in ("", "python", "py", "triton")] or [b for _, b in blocks]
    if not candidates:
        candidates = [text]
    defining = [c for c in candidates if re.search(rf"^def {re.escape(entry)}\s*\(", c, re.MULTILINE)]
    code = max(defining or candidates, key=len).strip() + "\n"
    if re.search(r"\b0[xX][0-9a-fA-F]*\.[0-9a-fA-F]*[pP][+-]?\d+", code):
        raise CodeExtractionError("the code uses hex float literals (e.g. 0x1.8p3); write decimal floats instead")
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise CodeExtractionError(f"the code does not parse: line {e.lineno}: {e.msg}") from e
    if not any(isinstance(n, ast.FunctionDef) and n.name == entry for n in tree.body):
        raise CodeExtractionError(f"the code defines no top-level function `{entry}`")
    return code
