"""Load a Triton/Python solution's source as a module and find its entry point."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable


class SolutionLoadError(RuntimeError):
    """The source did not import or lacks the entry point."""


def load_module_from_source(source: str, *, name_hint: str = "solution", cache_dir: Path | None = None) -> ModuleType:
    """Write the source to a file (Triton's JIT needs real files for `inspect`) and import it."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    module_name = f"ksearch_solution_{name_hint}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    root = cache_dir or Path(tempfile.gettempdir()) / "ksearch_solutions"
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{module_name}.py"
    if not path.exists() or path.read_text() != source:
        path.write_text(source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        del sys.modules[module_name]
        raise SolutionLoadError(f"solution failed to import: {type(e).__name__}: {e}") from e
    return module


def load_entry_point(source: str, entry: str = "run", **kw: Any) -> Callable[..., Any]:
    module = load_module_from_source(source, **kw)
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise SolutionLoadError(f"solution defines no callable `{entry}`")
    return fn
