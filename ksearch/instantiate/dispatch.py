"""Compose several Triton/Python kernels into one solution whose `run()` picks a kernel from the shapes.

Why not exec the embedded sources: the evaluator's static checks refuse `exec`, `compile` and
`importlib` (ksearch/eval/parent/static_checks.py), for good reason. So each kernel's module body is
namespaced by renaming instead: every top-level binding `foo` of kernel i becomes `_k{i}_foo`, and every
reference to it follows (scope-aware: a function parameter or local that shadows a module name is left
alone; attribute names and keyword-argument names are never touched). Import statements are hoisted
and shared; two kernels that bind one import name to different modules cannot be composed (DispatchError).
The result is ordinary source that the static checks, Triton's `inspect.getsource` and the evaluator see
like any other candidate.

The generated `run(<definition inputs>)` reads only tensor *shapes* on the host (never index values:
that would wait on the device), computes the region's bucket indices with the task's `RegionScheme`,
and calls that region's kernel, or the fallback (the overall best) for regions without one.

The generator is versioned, because a composed source is a solution id a recorded run's resume must
reproduce: a run composes with the version it started with (RunStart.generators; runs recorded before
versioning are version 1). Version 2 caches the choice by the shape values the regions read, so a call
with shapes seen before costs one tuple and one dict lookup on top of the kernel's own run (issue 23:
the host path of a dispatched solution).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from ksearch.instantiate.language import CUDA, language_of, parse_python
from ksearch.task.regions import RegionScheme

DISPATCH_HEADER = "# ksearch-dispatch: "
CHOICE_CACHE_LIMIT = 4096      # a serving loop sees a new total token count nearly every step: stay bounded


class DispatchError(ValueError):
    """The kernels cannot be composed (CUDA source, conflicting imports, no `run`)."""


@dataclass(frozen=True)
class Member:
    """One kernel of the composition: its solution id and source."""

    solution_id: str
    source: str


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
    return names


def _local_names(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names bound inside a function (parameters and stores), minus those declared global."""
    out: set[str] = set()
    declared_global: set[str] = set()
    args = fn.args
    for a in args.posonlyargs + args.args + args.kwonlyargs:
        out.add(a.arg)
    for rest in (args.vararg, args.kwarg):
        if rest is not None:
            out.add(rest.arg)
    stack: list[ast.AST] = list(fn.body) if isinstance(fn.body, list) else [fn.body]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Global):
            declared_global.update(node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            continue            # a nested scope: its own locals are its own
        elif isinstance(node, ast.Lambda):
            continue
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        stack.extend(ast.iter_child_nodes(node))
    return out - declared_global


class _Renamer(ast.NodeTransformer):
    def __init__(self, top: set[str], prefix: str):
        self.top, self.prefix = top, prefix
        self.shadow: list[set[str]] = []

    def _new(self, name: str) -> str:
        if name in self.top and not any(name in s for s in self.shadow):
            return self.prefix + name
        return name

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._new(node.id)
        return node

    def visit_Global(self, node: ast.Global) -> ast.AST:
        node.names = [self.prefix + n if n in self.top else n for n in node.names]
        return node

    def _function(self, node: Any) -> ast.AST:
        if not self.shadow:                                    # a module-level def: its own name is global
            node.name = self._new(node.name) if hasattr(node, "name") else None
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(default)
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            if a.annotation is not None:
                self.visit(a.annotation)
        if getattr(node, "returns", None) is not None:
            self.visit(node.returns)
        self.shadow.append(_local_names(node))
        body = node.body if isinstance(node.body, list) else [node.body]
        for stmt in body:
            self.visit(stmt)
        self.shadow.pop()
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        for default in node.args.defaults:
            self.visit(default)
        self.shadow.append({a.arg for a in node.args.args + node.args.kwonlyargs})
        self.visit(node.body)
        self.shadow.pop()
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        if not self.shadow:
            node.name = self._new(node.name)
        for b in node.bases + node.decorator_list:
            self.visit(b)
        self.shadow.append(set())
        for stmt in node.body:
            self.visit(stmt)
        self.shadow.pop()
        return node

    def _comprehension(self, node: Any) -> ast.AST:
        bound = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        self.visit(node.generators[0].iter)                    # evaluated in the enclosing scope
        self.shadow.append(bound)
        for i, g in enumerate(node.generators):
            if i:
                self.visit(g.iter)
            for cond in g.ifs:
                self.visit(cond)
        for part in ("elt", "key", "value"):
            if getattr(node, part, None) is not None:
                self.visit(getattr(node, part))
        self.shadow.pop()
        return node

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension


def _import_key(node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
    """(bound name, what it binds) for each alias of an import statement."""
    out = []
    for a in node.names:
        if isinstance(node, ast.Import):
            bound = a.asname or a.name.split(".")[0]
            what = a.name if a.asname else a.name.split(".")[0]
        else:
            mod = "." * node.level + (node.module or "")
            bound, what = a.asname or a.name, f"{mod}:{a.name}"
        out.append((bound, what))
    return out


def namespace_module(source: str, prefix: str) -> tuple[list[ast.Import | ast.ImportFrom], list[ast.stmt]]:
    """(import statements, the renamed rest of the body) of one kernel module."""
    try:
        tree = parse_python(source)
    except SyntaxError as e:
        raise DispatchError(f"a member does not parse: {e}") from None
    top = _top_level_names(tree)
    if "run" not in top:
        raise DispatchError("a member defines no top-level `run`")
    imports: list[ast.Import | ast.ImportFrom] = []
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            imports.append(node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue                                           # the member's docstring
        else:
            body.append(_Renamer(top, prefix).visit(node))
    return imports, body


def _run_v1(args: str, key: str) -> str:
    """No choice cache (`key` unused): what runs recorded before versioning composed."""
    return f'''def run({args}):
    kernel = _TABLE.get(_region(({args},)), _FALLBACK)
    return kernel({args})
'''


def _choice_key(shapes: dict[str, tuple[int, int]], input_names: list[str]) -> str:
    """The tuple of shape values the regions read, as source (the choice cache's key)."""
    dims = [f"{input_names[p]}.shape[{d}]" for _, (p, d) in sorted(shapes.items())]
    return f"({', '.join(dims)},)" if dims else "()"


def _run_v2(args: str, key: str) -> str:
    """The choice cached by `key`, the shape values the regions read."""
    return f'''# (the shape values the regions read) -> kernel: after the first call of a shape, dispatch is one lookup.
_CHOSEN = {{}}


def _choose(key, inputs):
    if len(_CHOSEN) >= {CHOICE_CACHE_LIMIT}:
        _CHOSEN.clear()
    kernel = _CHOSEN[key] = _TABLE.get(_region(inputs), _FALLBACK)
    return kernel


def run({args}):
    _key = {key}
    _kernel = _CHOSEN.get(_key) or _choose(_key, ({args},))
    return _kernel({args})
'''


# version -> the writer of `run()` for it; the newest is what new runs compose with
_RUN_WRITERS = {1: _run_v1, 2: _run_v2}
GENERATOR_VERSION = max(_RUN_WRITERS)


def compose(members: list[Member], table: dict[tuple[int, ...], str], fallback: str, scheme: RegionScheme,
            input_names: list[str], axis_sources: dict[str, tuple[int, int]], task: str,
            version: int = GENERATOR_VERSION) -> str:
    """The source of one solution: every member namespaced, plus a shape-only `run` dispatcher.

    table: bucket-index tuple (one index per scheme feature) -> solution id; fallback: the solution id
    used for every other region. axis_sources: axis -> (input position, dim) to read it from a shape.
    version: the generator's version (see the module doc); a given version always gives the same text.
    """
    if version not in _RUN_WRITERS:
        raise DispatchError(f"dispatch generator version {version} is not one of {tuple(_RUN_WRITERS)} (a newer "
                            f"ksearch recorded this run: resume it with that version)")
    ids = [m.solution_id for m in members]
    if fallback not in ids or any(sid not in ids for sid in table.values()):
        raise DispatchError("the table and the fallback must name members")
    for m in members:
        if language_of(m.source) == CUDA:
            raise DispatchError("CUDA members cannot be composed into one Python module")
    missing = [a for a in scheme.axes_used() if a not in axis_sources]
    if missing:
        raise DispatchError(f"axes {missing} cannot be read from any input shape")
    seen: dict[str, str] = {}
    import_lines: list[str] = []
    bodies: list[str] = []
    for i, m in enumerate(members):
        try:
            imports, body = namespace_module(m.source, f"_k{i}_")
            text = "\n\n".join(ast.unparse(n) for n in body)
        except RecursionError:
            raise DispatchError(f"member {m.solution_id} is nested too deeply to rewrite") from None
        for node in imports:
            for bound, what in _import_key(node):
                if seen.setdefault(bound, what) != what:
                    raise DispatchError(f"members bind `{bound}` to different modules ({seen[bound]} and {what})")
            line = ast.unparse(node)
            if line not in import_lines:
                import_lines.append(line)
        bodies.append(f"# ---- member {i}: solution {m.solution_id} " + "-" * 40 + "\n" + text)
    index = {sid: i for i, sid in enumerate(ids)}
    features = [(f.num, f.den, tuple(float(e) for e in f.edges)) for f in scheme.features]
    shapes = {a: axis_sources[a] for a in scheme.axes_used()}
    rows = ",\n".join(f"    {key!r}: _k{index[sid]}_run" for key, sid in sorted(table.items()))
    args = ", ".join(input_names)
    header = (f'"""Shape-dispatched solution for {task}: {len(members)} kernels, one per region of the shape\n'
              f"space; run() picks by tensor shapes only (no device sync), else the overall best.\n"
              f"Members: {', '.join(ids)}; fallback: {fallback}.\n" + '"""\n')
    dispatcher = f'''

# ---- dispatch ---------------------------------------------------------------------------------------
# axis -> (input position, dim): every region feature is read from a shape, never from tensor values.
_AXIS_SOURCES = {shapes!r}
# (numerator axis, denominator axis or None, ascending bucket edges) per region feature.
_FEATURES = {features!r}
_TABLE = {{
{rows}
}}
_FALLBACK = _k{index[fallback]}_run


def _bucket(value, edges):
    return sum(1 for e in edges if value > e)


def _region(inputs):
    axes = {{a: inputs[p].shape[d] for a, (p, d) in _AXIS_SOURCES.items()}}
    key = []
    for num, den, edges in _FEATURES:
        v = float(axes[num]) / max(float(axes[den]), 1.0) if den is not None else float(axes[num])
        key.append(_bucket(v, edges))
    return tuple(key)


''' + _RUN_WRITERS[version](args, _choice_key(shapes, input_names))
    plan = DISPATCH_HEADER + repr({"members": ids, "fallback": fallback,
                                   "table": {",".join(map(str, k)): v for k, v in sorted(table.items())}})
    return plan + "\n" + header + "\n".join(import_lines) + "\n\n\n" + "\n\n\n".join(bodies) + dispatcher


def axis_sources(definition: Any) -> dict[str, tuple[int, int]]:
    """For each var axis, the first (input position, dim) whose shape names it."""
    out: dict[str, tuple[int, int]] = {}
    for pos, spec in enumerate(definition.inputs):
        for dim, axis in enumerate(spec.shape or ()):
            out.setdefault(axis, (pos, dim))
    return out


def current_generators() -> dict[str, int]:
    """The versions of this ksearch's code generators, recorded at a run's start (RunStart.generators)."""
    return {"dispatch": GENERATOR_VERSION}
