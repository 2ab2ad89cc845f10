"""Keep credentials out of everything the model seam hands back (errors, usage, cache files).

API keys reach providers through environment variables; provider errors sometimes echo them back
("Incorrect API key provided: sk-..."), and those messages end up in the journal, the run directory
and the terminal. Every string leaving ksearch.llm passes through `redact`, which replaces the value of
any environment variable whose name looks secret with `[REDACTED:NAME]`. Values are read at call time,
so keys set after import (or by a test's monkeypatch) are covered too.
"""

from __future__ import annotations

import os
import re
from typing import Any

_SECRET_NAME = re.compile(r"(^|_)(API_?KEY|ACCESS_KEY|TOKEN|PASSWORD|PASSWD)$|SECRET|(^|_)KEY$", re.IGNORECASE)
_MIN_LEN = 6          # shorter values ("1", "true") would blank out ordinary words


def secret_values() -> list[tuple[str, str]]:
    """(name, value) of environment variables that look like credentials, longest value first."""
    found = [(k, v) for k, v in os.environ.items() if _SECRET_NAME.search(k) and v and len(v) >= _MIN_LEN]
    return sorted(found, key=lambda kv: -len(kv[1]))


def redact(text: str) -> str:
    for name, value in secret_values():
        if value in text:
            text = text.replace(value, f"[REDACTED:{name}]")
    return text


def redact_obj(obj: Any) -> Any:
    """`redact` applied to every string inside dicts/lists/tuples (keys included)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact_obj(k): redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_obj(v) for v in obj)
    return obj
