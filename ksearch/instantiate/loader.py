"""Load a solution's source and find its entry point: Python/Triton modules are imported from a file;
CUDA C++ sources (recognised by `language_of`) are built as a torch extension (see cuda.py)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


class SolutionLoadError(RuntimeError):
    """The source did not import/build, lacks the entry point, or cannot run on this machine."""


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
    """The callable `entry` of a solution source, Python or CUDA.

    kw: `name_hint` and `cache_dir` (Python: where the module file goes; CUDA: the build directory
    root, default $KSEARCH_CUDA_BUILD_DIR or <tmp>/ksearch_cuda_builds).
    """
    from ksearch.instantiate.language import CUDA, language_of

    if language_of(source) == CUDA:
        from ksearch.instantiate.cuda import load_cuda_entry_point

        return load_cuda_entry_point(source, entry, build_root=kw.get("cache_dir"))
    module = load_module_from_source(source, **kw)
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise SolutionLoadError(f"solution defines no callable `{entry}`")
    return fn
