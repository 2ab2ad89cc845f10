"""Static checks on a Python candidate's source, before any of it runs.

A refusal is cheaper and clearer than a runtime detection, and it names the line, so a model can fix
it. Refused (each a `Violation` with line and reason):

- imports of the task's own files or of ksearch (the reference, the baseline, the workload generator),
  of the baseline library (flashinfer), and of modules for files, network, processes, threads, signals,
  native code and introspection (ctypes, gc, inspect, importlib, ...);
- `open`, `exec`, `eval`, `compile`, `__import__`, file/process functions of `os`, `io.open`,
  `torch.load`/`save`, `sys.modules`, frame and code-object attributes (`__globals__`, `f_back`, ...);
- writes to attributes of imported modules or their classes (`time.perf_counter = ...`,
  `torch.cuda.Event.elapsed_time = ...`, `setattr(torch.cuda, ...)`): monkeypatching of timers and of
  anything the reference shares with the candidate;
- `getattr`/`setattr` on a module with a computed name (it would hide all of the above);
- per task (`static_checks.forbidden_calls` in tasks/<name>/task.yaml): torch functions that compute
  the kernel outright, e.g. `torch.nn.functional.scaled_dot_product_attention` for attention. Matched by
  the final name too (as an attribute, an imported name or a string), so aliases do not slip through.

What the checks cannot see (code built at run time, native code) the worker's runtime guards cover.
CUDA/C++ sources are not checked here (`ksearch.instantiate.language.language_of`); the runtime checks
still apply to them. No imports beyond the standard library: the parent calls this before a worker runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Module prefixes a candidate may not import. Matched on whole dotted components.
FORBIDDEN_MODULES: dict[str, str] = {
    "ksearch": "the evaluator and the task's reference live there",
    "ksearch_tasks": "the task's reference and baseline",
    "tasks": "the task's reference and baseline",
    "flashinfer": "the baseline library computes the kernel itself",
    "socket": "network access", "ssl": "network access", "urllib": "network access", "http": "network access",
    "requests": "network access", "httpx": "network access", "aiohttp": "network access",
    "ftplib": "network access", "smtplib": "network access", "xmlrpc": "network access",
    "subprocess": "starting processes", "multiprocessing": "starting processes", "pty": "starting processes",
    "concurrent": "background work the timer does not see", "threading": "background work the timer does not see",
    "_thread": "background work the timer does not see", "asyncio": "background work the timer does not see",
    "signal": "signal handling", "faulthandler": "signal handling", "atexit": "exit hooks",
    "shutil": "file access", "tempfile": "file access", "pathlib": "file access", "glob": "file access",
    "pickle": "file access", "marshal": "code loading", "shelve": "file access", "sqlite3": "file access",
    "mmap": "file access", "fcntl": "file access", "resource": "process limits",
    "ctypes": "native code outside the checks", "cffi": "native code outside the checks",
    "torch.utils.cpp_extension": "native code outside the checks (submit CUDA sources instead)",
    "gc": "introspection of the evaluator's objects", "inspect": "introspection of the evaluator's objects",
    "importlib": "dynamic imports", "runpy": "dynamic imports", "pkgutil": "dynamic imports",
    "zipimport": "dynamic imports", "builtins": "patching builtins", "code": "dynamic code", "codeop": "dynamic code",
}
# A module path with one of these components is the task's own file.
TASK_FILE_COMPONENTS = {"reference", "baseline", "workloads", "definition"}

FORBIDDEN_BUILTINS: dict[str, str] = {
    "open": "file access", "exec": "dynamic code", "eval": "dynamic code", "compile": "dynamic code",
    "__import__": "dynamic imports", "breakpoint": "debugger", "input": "reads stdin",
}
# Attribute paths (after resolving import aliases) refused as a prefix.
FORBIDDEN_ATTRIBUTES: dict[str, str] = {
    "sys.modules": "introspection of the evaluator's modules", "sys._getframe": "frame introspection",
    "sys.settrace": "tracing hooks", "sys.setprofile": "tracing hooks", "sys.addaudithook": "audit hooks",
    "sys.meta_path": "import hooks", "sys.path_hooks": "import hooks", "sys.stdin": "reads stdin",
    "io.open": "file access", "io.FileIO": "file access", "os.fdopen": "file access",
    "torch.load": "file access", "torch.save": "file access", "torch.from_file": "file access",
    "torch.hub": "network access", "torch.ops.load_library": "native code outside the checks",
    "numpy.load": "file access", "numpy.save": "file access", "numpy.fromfile": "file access",
    "numpy.memmap": "file access", "numpy.loadtxt": "file access", "numpy.savetxt": "file access",
}
# The only `os` attributes a kernel needs; everything else there is files, processes or signals.
OS_ALLOWED = {"environ", "getenv", "cpu_count", "sep", "linesep", "name"}
FORBIDDEN_DUNDERS = {
    "__globals__", "__code__", "__closure__", "__subclasses__", "__builtins__", "__bases__", "__base__",
    "__mro__", "__dict__", "__loader__", "__spec__", "__import__", "__wrapped__", "__self__", "__func__",
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "gi_frame", "cr_frame", "ag_frame", "tb_frame",
    "co_consts",
}


@dataclass(frozen=True)
class Violation:
    line: int
    col: int
    rule: str          # import | builtin | attribute | monkeypatch | dynamic | forbidden_call | nesting
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class StaticCheckConfig:
    """Per-task settings (`static_checks:` in task.yaml) on top of the defaults above."""

    forbidden_calls: list[str] = field(default_factory=list)     # dotted names computing the kernel outright
    forbidden_imports: list[str] = field(default_factory=list)   # more module prefixes to refuse
    allowed_imports: list[str] = field(default_factory=list)     # prefixes let through despite the defaults
    protected_names: list[str] = field(default_factory=list)     # more module names to treat as task files

    @staticmethod
    def from_mapping(d: dict[str, Any] | None, task_name: str | None = None) -> StaticCheckConfig:
        d = dict(d or {})
        unknown = set(d) - {"forbidden_calls", "forbidden_imports", "allowed_imports", "protected_names"}
        if unknown:
            raise ValueError(f"unknown static_checks settings {sorted(unknown)}; known: forbidden_calls, "
                             f"forbidden_imports, allowed_imports, protected_names")
        cfg = StaticCheckConfig(**{k: [str(x) for x in (v or [])] for k, v in d.items()})
        if task_name:
            cfg.protected_names.append(task_name)
        return cfg

    @staticmethod
    def for_task(task: Any) -> StaticCheckConfig:
        return StaticCheckConfig.from_mapping((task.meta or {}).get("static_checks"), task.name)


def _matches(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


class _Checker(ast.NodeVisitor):
    def __init__(self, config: StaticCheckConfig):
        self.cfg = config
        self.out: list[Violation] = []
        self.aliases: dict[str, str] = {}     # local name -> dotted module/object path from imports
        self.bound: set[str] = set()          # names the module binds itself (shadowing builtins)
        self.forbidden_leaves = {c.rsplit(".", 1)[-1]: c for c in config.forbidden_calls}

    # ---- helpers ---------------------------------------------------------------------------------------
    def add(self, node: ast.AST, rule: str, message: str) -> None:
        self.out.append(Violation(getattr(node, "lineno", 0), getattr(node, "col_offset", 0), rule, message))

    def dotted(self, node: ast.AST) -> str | None:
        """`a.b.c` with `a` resolved through the import aliases; None unless it starts at an import."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id]] + parts[::-1])
        return None

    def check_module(self, node: ast.AST, module: str) -> bool:
        """Refuse an imported module path; True when something was reported."""
        if any(_matches(module, p) for p in self.cfg.allowed_imports):
            return False
        comps = module.split(".")
        protected = set(self.cfg.protected_names)
        if TASK_FILE_COMPONENTS & set(comps) or protected & set(comps):
            self.add(node, "import", f"imports {module}: the task's reference and baseline are off limits")
            return True
        extra = {p: "refused for this task" for p in self.cfg.forbidden_imports}
        for prefix, why in {**FORBIDDEN_MODULES, **extra}.items():
            if _matches(module, prefix):
                self.add(node, "import", f"imports {module} ({why})")
                return True
        return False

    def check_path(self, node: ast.AST, path: str) -> bool:
        """Refuse a resolved attribute path; True when something was reported."""
        for c in self.cfg.forbidden_calls:
            if _matches(path, c):
                self.add(node, "forbidden_call", f"uses {c}, which computes the kernel itself (refused for this task)")
                return True
        for prefix, why in FORBIDDEN_ATTRIBUTES.items():
            if _matches(path, prefix):
                self.add(node, "attribute", f"uses {path} ({why})")
                return True
        comps = path.split(".")
        if comps[0] == "os" and len(comps) > 1 and comps[1] not in OS_ALLOWED:
            self.add(node, "attribute", f"uses {path} (files, processes and signals are off limits; "
                                        f"os allows only {', '.join(sorted(OS_ALLOWED))})")
            return True
        return False

    # ---- visitors --------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.check_module(node, a.name)
            local = a.asname or a.name.split(".")[0]
            self.aliases[local] = a.name if a.asname else a.name.split(".")[0]
            self.bound.add(local)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.add(node, "import", "relative import: a solution is one module and imports only installed packages")
            return
        module = node.module or ""
        refused = self.check_module(node, module)
        for a in node.names:
            full = f"{module}.{a.name}"
            if a.name == "*":
                continue
            if not refused:
                self.check_module(node, full)     # `from torch.utils import cpp_extension`
            if a.name in self.forbidden_leaves or any(_matches(full, c) for c in self.cfg.forbidden_calls):
                self.add(node, "forbidden_call",
                         f"imports {full}, which computes the kernel itself (refused for this task)")
            elif any(_matches(full, p) for p in FORBIDDEN_ATTRIBUTES) or \
                    (module == "os" and a.name not in OS_ALLOWED):
                self.check_path(node, full)
            if a.name in FORBIDDEN_DUNDERS:
                self.add(node, "attribute", f"imports {a.name} (introspection)")
            local = a.asname or a.name
            self.aliases[local] = full
            self.bound.add(local)

    def visit_Assign(self, node: ast.Assign) -> None:
        # `E = torch.cuda.Event` makes E an alias, so `E.elapsed_time = ...` is still a monkeypatch.
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            path = self.dotted(node.value) if isinstance(node.value, (ast.Name, ast.Attribute)) else None
            if path is not None:
                self.aliases[node.targets[0].id] = path
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id in FORBIDDEN_BUILTINS and node.id not in self.bound:
            self.add(node, "builtin", f"uses {node.id}() ({FORBIDDEN_BUILTINS[node.id]})")
        if node.id in ("__builtins__",):
            self.add(node, "attribute", "uses __builtins__ (patching builtins)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FORBIDDEN_DUNDERS:
            self.add(node, "attribute", f"uses .{node.attr} (introspection of code, frames or modules)")
        elif node.attr in self.forbidden_leaves:
            c = self.forbidden_leaves[node.attr]
            self.add(node, "forbidden_call", f"uses {c}, which computes the kernel itself (refused for this task)")
        elif isinstance(node.ctx, ast.Load):
            path = self.dotted(node)
            if path is not None and self.check_path(node, path):
                return              # the longest refused path is reported once
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.check_store(node)
        self.generic_visit(node)

    def check_store(self, target: ast.Attribute) -> None:
        base = self.dotted(target.value)
        if base is not None:
            verb = "deletes" if isinstance(target.ctx, ast.Del) else "assigns"
            self.add(target, "monkeypatch", f"{verb} {base}.{target.attr}: changing imported modules or their "
                                            f"classes is refused (timers, torch and the reference share them)")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value in self.forbidden_leaves:
            c = self.forbidden_leaves[node.value]
            self.add(node, "forbidden_call", f"names {c} in a string, which computes the kernel itself "
                                             f"(refused for this task)")

    def visit_Call(self, node: ast.Call) -> None:
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id in ("getattr", "setattr", "delattr", "hasattr") \
                and fn.id not in self.bound and node.args:
            obj = node.args[0]
            obj_path = self.dotted(obj) if isinstance(obj, (ast.Name, ast.Attribute)) else None
            name = node.args[1] if len(node.args) > 1 else None
            attr = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else None
            if obj_path is not None:
                if attr is None:
                    self.add(node, "dynamic", f"{fn.id}() on {obj_path} with a computed name (it would hide "
                                              f"what the static checks look for)")
                elif fn.id in ("setattr", "delattr"):
                    self.add(node, "monkeypatch", f"{fn.id}({obj_path}, {attr!r}): changing imported "
                                                  f"modules or their classes is refused")
                else:
                    full = f"{obj_path}.{attr}"
                    if attr in FORBIDDEN_DUNDERS:
                        self.add(node, "attribute", f"uses {full} (introspection)")
                    else:
                        self.check_path(node, full)
            elif fn.id in ("setattr", "delattr") and attr is not None and attr in FORBIDDEN_DUNDERS:
                self.add(node, "attribute", f"{fn.id}(..., {attr!r}) (introspection)")
        self.generic_visit(node)


def _bound_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def check_source(source: str, config: StaticCheckConfig | None = None) -> list[Violation]:
    """Every refusal in a Python source, in line order. A source that does not parse yields none (the
    loader reports the syntax error as COMPILE_ERROR); one that parses but nests too deeply for the checks
    to walk is refused as a whole: what they cannot read they cannot let through."""
    from ksearch.instantiate.language import parse_python

    try:
        tree = parse_python(source)
    except SyntaxError:
        return []
    try:
        return _violations(tree, config)
    except RecursionError:
        return [Violation(1, 0, "nesting", "the source nests expressions too deeply for the static checks to read "
                                           "it; write it flatter")]


def _violations(tree: ast.Module, config: StaticCheckConfig | None) -> list[Violation]:
    checker = _Checker(config or StaticCheckConfig())
    checker.bound = _bound_names(tree)
    # Imports first so aliases are known wherever they are used (an import may follow its first use).
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                checker.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:
                if a.name != "*":
                    checker.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    checker.visit(tree)
    seen: set[tuple[int, str]] = set()
    unique = []
    for v in sorted(checker.out, key=lambda v: (v.line, v.col)):
        if (v.line, v.message) not in seen:
            seen.add((v.line, v.message))
            unique.append(v)
    return unique


def refusal_message(violations: Iterable[Violation]) -> str:
    lines = [str(v) for v in violations]
    return ("refused by the static checks (eval.static_checks=false turns them off):\n  " + "\n  ".join(lines[:20])
            + (f"\n  ... and {len(lines) - 20} more" if len(lines) > 20 else ""))
