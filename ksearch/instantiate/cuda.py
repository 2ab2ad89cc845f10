"""CUDA C++ solutions: find the host entry point, generate its Python binding, build it, or say why not.

A CUDA solution is one .cu translation unit holding `__global__` kernels and a host function
`run(...)` that takes and returns torch::Tensor (or a std::vector / std::tuple of them). It is built
with torch.utils.cpp_extension.load_inline for the GPU in this machine (sm_90a on an H200): the .cu goes
in as the CUDA source, and unless it has its own PYBIND11_MODULE, a generated main.cpp declares `run`
and binds it. Builds are cached by source hash in a build directory, so a kernel evaluated twice (or by
two workers) compiles once.

On a machine without a usable GPU the source cannot run. If nvcc is on PATH it is still compiled (the
same flags, headers and target as the real build) so syntax and type errors reach the model; either way
the loader raises SolutionLoadError saying exactly why it cannot run here. Nothing fails silently.

The text helpers at the top import nothing heavy: code extraction uses them to reject a reply whose
entry point could never be bound, before anything is compiled.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksearch.instantiate.loader import SolutionLoadError

# Headers load_inline puts in front of every CUDA source (kept identical for the CPU compile check), and
# a #line directive so compiler errors name main.cu and the model's own line numbers.
IMPLICIT_CUDA_HEADERS = ("#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>")
LINE_DIRECTIVE = '#line 1 "main.cu"\n'
_QUALIFIERS_DROPPED = ("__host__", "__forceinline__", "__noinline__")
_DEVICE_ONLY = ("__global__", "__device__")
_NO_EXTERNAL_LINKAGE = ("static", "inline", "constexpr", "consteval", "template")


class CudaSourceError(ValueError):
    """The CUDA text cannot work as a solution (no bindable entry point, cut off); says what to change."""


# ---- text ------------------------------------------------------------------------------------------
def blank_comments_and_strings(src: str) -> str:
    """The source with comments and string/char literal contents replaced by spaces (offsets kept)."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif c == "/" and nxt == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            # raw strings R"x(...)x" are rare in kernels; treat them like ordinary strings
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def unbalanced(src: str) -> str | None:
    """A message when braces/parentheses do not balance (a reply cut off mid-function), else None."""
    text = blank_comments_and_strings(src)
    for open_, close in (("{", "}"), ("(", ")")):
        depth = 0
        for ch in text:
            if ch == open_:
                depth += 1
            elif ch == close:
                depth -= 1
                if depth < 0:
                    return f"a '{close}' closes nothing"
        if depth > 0:
            return f"{depth} '{open_}' never closed (the code looks cut off)"
    return None


@dataclass(frozen=True)
class HostSignature:
    """The entry point's definition, as written: `<return_type> <name>(<params>)`."""

    return_type: str
    name: str
    params: str
    qualifiers: tuple[str, ...]          # static/inline/__global__ ... found before the return type
    trailing: str = ""                   # `-> T` of `auto run(...) -> T`
    depth: int = 0                       # brace depth of the definition (0 = file scope)

    def declaration(self) -> str:
        kept = " ".join(q for q in self.qualifiers if q not in _QUALIFIERS_DROPPED)
        tail = f" -> {self.trailing}" if self.trailing else ""
        return f"{kept + ' ' if kept else ''}{self.return_type} {self.name}({self.params}){tail};"


def find_entry_definition(src: str, entry: str = "run") -> HostSignature | None:
    """The definition (not a call or prototype) of the free function `entry`, or None."""
    text = blank_comments_and_strings(src)
    for m in re.finditer(rf"(?<![\w.:>]){re.escape(entry)}\s*\(", text):
        # the matching ')' of the parameter list
        depth, j = 0, m.end() - 1
        while j < len(text):
            if text[j] == "(":
                depth += 1
            elif text[j] == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= len(text):
            continue
        rest = text[j + 1:]
        after = re.match(r"\s*(?:noexcept\s*)?(?:->\s*([^{;]+))?\{", rest)
        if not after:
            continue                              # a call or a prototype
        # the return type: back to the previous statement end, block edge or preprocessor line
        start = m.start()
        k = start
        while k > 0 and text[k - 1] not in ";{}":
            k -= 1
        head_lines = text[k:start].split("\n")
        head = " ".join(line for line in head_lines if not line.lstrip().startswith("#"))
        head = re.sub(r'extern\s+" *"', 'extern "C"', head)    # the literal's content was blanked
        words = head.split()
        if not words or words[-1] in ("return", "=", "else", "do", ","):
            continue
        qualifiers = tuple(w for w in words if w in _QUALIFIERS_DROPPED + _DEVICE_ONLY + _NO_EXTERNAL_LINKAGE
                           or w.startswith("template"))
        ret = " ".join(w for w in words if w not in qualifiers)
        if 'extern "C"' in head:
            qualifiers = ('extern "C"',) + qualifiers
            ret = ret.replace('extern "C"', "").strip()
        params = " ".join(text[m.end():j].split())  # comments blanked (a `//` would swallow the rest)
        trailing = " ".join((after.group(1) or "").split())
        depth = text.count("{", 0, start) - text.count("}", 0, start)
        return HostSignature(" ".join(ret.split()), entry, params, qualifiers, trailing, depth)
    return None


def binds_entry(src: str, entry: str = "run") -> bool:
    """Whether the source has its own PYBIND11_MODULE that defines `entry`."""
    if not re.search(r"\bPYBIND11_MODULE\s*\(", src):
        return False
    return re.search(rf"\.\s*def\s*\(\s*\"{re.escape(entry)}\"", src) is not None


def check_source(src: str, entry: str = "run") -> HostSignature | None:
    """Reject what can never load; returns the entry's signature (None when the source binds it itself)."""
    problem = unbalanced(src)
    if problem:
        raise CudaSourceError(f"the CUDA code does not balance: {problem}")
    if binds_entry(src, entry):
        return None
    if re.search(r"\bPYBIND11_MODULE\s*\(", src):
        raise CudaSourceError(f'the CUDA code has a PYBIND11_MODULE that does not define "{entry}"; bind it '
                              f'(m.def("{entry}", &{entry});) or drop the module and let ksearch generate it')
    sig = find_entry_definition(src, entry)
    if sig is None:
        raise CudaSourceError(f"the CUDA code defines no host function `{entry}`; write e.g. "
                              f"`torch::Tensor {entry}(torch::Tensor q, ...)` (returning a tensor, or a "
                              f"std::vector/std::tuple of tensors) that launches the kernels")
    if sig.depth:
        raise CudaSourceError(f"`{entry}` is defined inside a namespace or block: define it at file scope so the "
                              f"generated Python binding can find it")
    bad = [q for q in sig.qualifiers if q in _DEVICE_ONLY]
    if bad:
        raise CudaSourceError(f"`{entry}` is declared {bad[0]}: it must be a host function that launches the "
                              f"kernels (kernels are the __global__ functions it calls)")
    bad = [q for q in sig.qualifiers if q.startswith("template") or q in _NO_EXTERNAL_LINKAGE]
    if bad:
        raise CudaSourceError(f"`{entry}` is declared {bad[0]}: it must be a plain non-template host function "
                              f"with external linkage, because the generated Python binding calls it from "
                              f"another file")
    return sig


def binding_source(src: str, entry: str = "run") -> str:
    """main.cpp for load_inline (which puts `#include <torch/extension.h>` before it): a declaration of
    the entry point and its pybind11 module, or nothing when the .cu binds the entry point itself."""
    sig = check_source(src, entry)
    if sig is None:
        return "// the CUDA source defines its own PYBIND11_MODULE\n"
    return ("// generated by ksearch: declare the CUDA source's entry point and bind it for Python\n"
            f"{sig.declaration()}\n\n"
            "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
            f'  m.def("{entry}", torch::wrap_pybind_function({entry}), "ksearch solution entry point");\n'
            "}\n")


def source_digest(src: str, entry: str = "run") -> str:
    return hashlib.sha1(f"{entry}\0{src}".encode()).hexdigest()[:16]


# ---- building ---------------------------------------------------------------------------------------
class CudaBuildError(SolutionLoadError):
    """The CUDA source is unusable, or nvcc / the extension build rejected it; the message has the errors."""


class CudaNotRunnable(SolutionLoadError):
    """This machine cannot run CUDA code. `compiled`: True if nvcc compiled it here, None if unchecked."""

    def __init__(self, message: str, compiled: bool | None):
        super().__init__(message)
        self.compiled = compiled


def default_build_root() -> Path:
    return Path(os.environ.get("KSEARCH_CUDA_BUILD_DIR") or Path(tempfile.gettempdir()) / "ksearch_cuda_builds")


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    return None


def target_arch() -> str:
    """`90a` on an H200 (the arch-specific target unlocks wgmma/TMA); KSEARCH_CUDA_ARCH overrides.
    Without a visible GPU: 90a, the machine the solutions are meant for."""
    forced = os.environ.get("KSEARCH_CUDA_ARCH")
    if forced:
        return forced.replace("sm_", "").replace(".", "")
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}{minor}{'a' if major >= 9 else ''}"
    return "90a"


def nvcc_flags(name: str, arch: str) -> list[str]:
    """The flags load_inline gives nvcc (for the compile check to judge the same code the same way)."""
    return [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
            "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
            "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr",
            f"-gencode=arch=compute_{arch},code=sm_{arch}", "-O3", "-lineinfo", "-std=c++20",
            "--compiler-options", "-fPIC"]


def _tail(text: str, limit: int = 6000) -> str:
    text = text.strip()
    return text if len(text) <= limit else "...\n" + text[-limit:]


def compile_check(src: str, entry: str, nvcc: str, build_root: Path, arch: str = "90a",
                  timeout_s: float | None = None) -> None:
    """Compile the .cu as load_inline would (object file only). Returns if it compiles; raises
    CudaBuildError with the compiler's errors if it does not, and CudaNotRunnable (compiled=None) when the
    compile failed only because this machine lacks GPU-host headers. Results are cached by source hash."""
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    digest = source_digest(src, entry)
    name = f"ksearch_cuda_{digest}"
    d = build_root / f"check_{digest}_{arch}"
    ok, failed, unknown = d / "compiled.ok", d / "compile_errors.txt", d / "inconclusive.txt"
    if ok.is_file():
        return
    if failed.is_file():
        raise CudaBuildError(failed.read_text())
    if unknown.is_file():
        raise CudaNotRunnable(unknown.read_text(), None)
    d.mkdir(parents=True, exist_ok=True)
    cu = d / "cuda.cu"
    cu.write_text("\n".join([*IMPLICIT_CUDA_HEADERS, LINE_DIRECTIVE + src]))
    includes = [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    cmd = [nvcc, "-c", str(cu), "-o", str(d / "cuda.o"), *includes, *nvcc_flags(name, arch)]
    limit = timeout_s if timeout_s is not None else float(os.environ.get("KSEARCH_NVCC_TIMEOUT_S", "900"))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise CudaBuildError(f"nvcc did not finish within {limit:.0f} s (KSEARCH_NVCC_TIMEOUT_S)") from None
    if proc.returncode != 0:
        log = proc.stdout + proc.stderr
        header = missing_environment_header(log)
        if header:
            unknown.write_text(f"CUDA solution not runnable here, and it could not be compile-checked: this "
                               f"machine's torch/CUDA headers lack {header} (a CPU build of torch has no "
                               f"c10/cuda headers; a partial CUDA toolkit may lack library headers). "
                               f"Evaluate it on a GPU host.")
            raise CudaNotRunnable(unknown.read_text(), None)
        failed.write_text(f"the CUDA code does not compile (nvcc, sm_{arch}):\n{_tail(_only_errors(log))}")
        raise CudaBuildError(failed.read_text())
    ok.write_text(_tail(proc.stdout + proc.stderr))


# Headers a GPU host has but a CPU-only one may not: torch's CUDA parts and the toolkit's libraries.
_ENV_HEADERS = re.compile(r"^(c10/cuda/|ATen/cuda/|ATen/native/cuda/|torch/csrc/cuda/|cublas|cublasLt|cusparse|"
                          r"cusolver|curand|cufft|cudnn|nccl|nvrtc|nvtx|cutlass/|cute/)")
_MISSING = (re.compile(r"^(?P<file>[^\n:]+):\d+(?::\d+)?: fatal error: (?P<hdr>[^:\n]+): No such file or directory",
                       re.MULTILINE),
            re.compile(r'^(?P<file>[^\n(]+)\(\d+\): catastrophic error: cannot open source file "(?P<hdr>[^"]+)"',
                       re.MULTILINE))


def missing_environment_header(log: str) -> str | None:
    """The header this machine lacks when a compile failed only for that reason, not the source's fault:
    one included by torch's or the toolkit's own headers, or a GPU-host header the source includes."""
    for pattern in _MISSING:
        for m in pattern.finditer(log):
            where, header = m.group("file").strip(), m.group("hdr").strip()
            if os.path.basename(where) != "main.cu" or _ENV_HEADERS.match(header):
                return header
    return None


def _only_errors(log: str, context: int = 2) -> str:
    """The compiler's error lines (and the source lines it quotes after each), without header warnings."""
    lines = log.splitlines()
    keep: list[str] = []
    for i, ln in enumerate(lines):
        if re.search(r"\berror\b", ln, re.IGNORECASE):
            keep.extend(lines[i:i + 1 + context])
    return "\n".join(keep) if keep else log


_LOADED: dict[tuple[str, str], Callable[..., Any]] = {}


def load_cuda_entry_point(src: str, entry: str = "run", *, build_root: Path | None = None,
                          verbose: bool = False) -> Callable[..., Any]:
    """Build (or reuse) the extension for `src` and return its `entry`. Raises CudaBuildError when the
    source is unusable or does not compile, CudaNotRunnable when this machine cannot run it (both are
    SolutionLoadErrors)."""
    try:
        cpp = binding_source(src, entry)          # validates the entry point first
    except CudaSourceError as e:
        raise CudaBuildError(str(e)) from None
    import torch

    root = Path(build_root) if build_root else default_build_root()
    digest = source_digest(src, entry)
    if not (torch.cuda.is_available() and torch.version.cuda):
        nvcc = find_nvcc()
        why = "this torch has no CUDA support" if not torch.version.cuda else "no CUDA device is visible"
        if nvcc is None:
            raise CudaNotRunnable(f"CUDA solution not runnable here: no nvcc/CUDA toolkit, and {why}. Evaluate "
                                  f"it on a GPU host (or put nvcc on PATH to at least compile-check it).", None)
        arch = target_arch()
        compile_check(src, entry, nvcc, root, arch)
        raise CudaNotRunnable(f"CUDA solution not runnable here: it compiled with nvcc for sm_{arch}, but {why} "
                              f"(no GPU). Evaluate it on a GPU host.", True)
    arch = target_arch()
    key = (digest, arch)
    if key in _LOADED:
        return _LOADED[key]
    from torch.utils import cpp_extension

    if find_nvcc() is None and not cpp_extension.CUDA_HOME:
        raise CudaNotRunnable("CUDA solution not runnable here: no nvcc/CUDA toolkit to build it (put nvcc on "
                              "PATH or set CUDA_HOME)", None)
    if not cpp_extension.is_ninja_available():
        raise CudaNotRunnable("CUDA solution not runnable here: torch builds extensions with ninja, which is not "
                              "installed (pip install ninja)", None)
    name = f"ksearch_cuda_{digest}_{arch}"
    build_dir = root / name
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        module = cpp_extension.load_inline(
            name=name, cpp_sources=[cpp], cuda_sources=[LINE_DIRECTIVE + src], functions=None,
            extra_cuda_cflags=[f"-gencode=arch=compute_{arch},code=sm_{arch}", "-O3", "-lineinfo"],
            build_directory=str(build_dir), verbose=verbose, with_cuda=True)
    except Exception as e:          # noqa: BLE001 - ninja/nvcc output is in the message: hand it back, shortened
        raise CudaBuildError(f"the CUDA code does not build (sm_{arch}):\n"
                             f"{_tail(str(e).replace(str(build_dir) + os.sep, ''))}") from None
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise CudaBuildError(f"the built CUDA extension has no callable `{entry}`")
    _LOADED[key] = fn
    sys.modules.setdefault(name, module)
    return fn
