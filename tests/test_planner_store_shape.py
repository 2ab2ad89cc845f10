"""The shape issue 27 asked of ksearch/planner and ksearch/store, checked so it stays: small modules, small
constructors, no import circles, one loop, one writer of best/, and records written and read only as types.

The journal's record models (store/records.py) are exempt from the constructor limit: their fields are the
file format, one per key of a line, and they are built by keyword only.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
from pathlib import Path

import networkx as nx
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ksearch/planner", "ksearch/store")
MAX_LINES, MAX_ARGS = 450, 6


def _modules(packages=PACKAGES) -> dict[str, Path]:
    out = {}
    for pkg in packages:
        for path in sorted((ROOT / pkg).glob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _imports(path: Path) -> set[str]:
    """Every module `path` names in an import, at any depth of the file (function-level imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_no_module_over_450_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_constructor_over_six_arguments():
    wide = {}
    for name in _modules():
        module = importlib.import_module(name)
        for attr, cls in vars(module).items():
            if not inspect.isclass(cls) or cls.__module__ != name or \
                    issubclass(cls, (BaseModel, enum.Enum, BaseException)):
                continue
            params = [p for p in inspect.signature(cls).parameters.values()
                      if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            if len(params) > MAX_ARGS:
                wide[f"{name}.{attr}"] = len(params)
    assert not wide, wide


def test_no_import_circles_in_planner_and_store():
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        graph.add_edges_from((name, other) for other in _imports(path) if other in modules and other != name)
    assert not list(nx.simple_cycles(graph))


def test_one_loop_and_one_writer_of_best():
    """The parallel loop and the serial step are one loop; only the incumbent writes best/."""
    assert not (ROOT / "ksearch/planner/parallel.py").exists()
    writers = [name for name, path in _modules(("ksearch",) + PACKAGES).items()
               if ".write_best(" in path.read_text() or '"validate_report.json"' in path.read_text()]
    assert writers == ["ksearch.planner.incumbent"], writers


READERS = ("ksearch/planner", "ksearch/store", "ksearch/viz", "ksearch/llm/replay.py", "ksearch/llm/__init__.py",
           "ksearch/interop/export.py", "ksearch/cli/app.py", "ksearch/cli/sweep.py")


def _sources():
    for entry in READERS:
        path = ROOT / entry
        yield from ([path] if path.suffix == ".py" else sorted(path.glob("*.py")))


def test_records_are_written_and_read_as_types():
    """No `journal.event("kind", ...)` writers, no raw journal reader, and no reader that picks records out
    by their kind string: records are typed (store/records.py) and matched by class."""
    from ksearch.store.records import TYPES

    for path in [*_sources(), *sorted((ROOT / "tests").glob("test_*.py"))]:
        if path == Path(__file__).resolve():
            continue
        text = path.read_text()
        assert ".event(" not in text and "record_info(" not in text and "read_journal" not in text, path
    sources = set(_sources())
    for path in [*sources, *sorted((ROOT / "tests").glob("*.py"))]:
        if path.name == "records.py":
            continue
        # in tests `.kind` is also a model request's; a raw reader there is `r["kind"]` or `r.get("kind")`
        key = "kind" if path in sources else "'kind'"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                kinds = [s.value for s in sides if isinstance(s, ast.Constant) and s.value in TYPES]
                named = any(key in ast.unparse(s) for s in sides)
                assert not (kinds and named), f"{path}:{node.lineno}: {ast.unparse(node)}"
