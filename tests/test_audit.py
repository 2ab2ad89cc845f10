"""The audit hook in a candidate's forked process refuses each forbidden class, named; honest code still runs.

Every case runs in a fresh child of one fork server (never in the pytest process: an audit hook cannot be
removed). The candidate's source is written to the scratch directory and imported from there, as the
evaluator does, after the hook is installed.
"""

from __future__ import annotations

import importlib.util
import os
import textwrap
import uuid
from pathlib import Path

import pytest

from ksearch.eval.candidate.audit import AuditPolicy, normalise_exe
from ksearch.eval.isolation.forkserver import ForkServer


# ---- runs in the child ------------------------------------------------------------------------------------
def run_candidate(conn, source: str) -> None:
    """Target: import the candidate from the scratch dir, call its run(), report what happened."""
    from ksearch.eval.candidate import audit

    path = Path.cwd() / f"cand_{uuid.uuid4().hex[:8]}.py"
    path.write_text(source)
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        result = ("ok", repr(module.run()))
    except PermissionError as e:
        result = ("refused", str(e))
    except Exception as e:  # noqa: BLE001  (reported to the test, which names what it expected)
        result = ("error", f"{type(e).__name__}: {e}")
    conn.send((*result, list(audit.violations)))


# ---- runs in pytest ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    with ForkServer(interpret=True) as s:
        yield s


def judge(server: ForkServer, tmp_path: Path, source: str, timeout: float = 120.0):
    scratch = tmp_path / "scratch"
    child = server.spawn("tests.test_audit:run_candidate", textwrap.dedent(source), scratch,
                         audit=AuditPolicy(scratch_dir=str(scratch), fatal=False))
    assert child.conn.poll(timeout), child.output()[0][-3000:]
    kind, message, violations = child.conn.recv()
    assert child.wait(30) == 0, child.output()[0][-3000:]
    return kind, message, violations, child


REFUSED = {
    "builtins_open_via_vars": ('''
        import sys
        def run():
            vars(sys)["modules"]["builtins"].open("/tmp/ksearch_audit_evil.txt", "w").write("x")
    ''', "opening for writing '/tmp/ksearch_audit_evil.txt'"),
    "os_open_via_modules": ('''
        import sys
        def run():
            os = vars(sys)["modules"]["os"]
            os.open("/tmp/ksearch_audit_evil2.txt", os.O_WRONLY | os.O_CREAT)
    ''', "opening for writing '/tmp/ksearch_audit_evil2.txt'"),
    "directory_fd": ('''
        import os
        def run():
            root = os.open("/", os.O_RDONLY)
            os.open("tmp/ksearch_audit_evil3.txt", os.O_WRONLY | os.O_CREAT, dir_fd=root)
    ''', "os.open of the directory '/'"),
    "rename_out": ('''
        import os
        def run():
            open("x", "w").close()
            os.rename("x", "/tmp/ksearch_audit_moved")
    ''', "os.rename"),
    "proc_of_another_process": ('''
        import os
        def run():
            return open(f"/proc/{os.getppid() or 1}/environ", "rb").read()
    ''', "other processes' /proc entries"),
    "socket_inet": ('''
        import socket
        def run():
            socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", 9))
    ''', "creating a socket"),
    "socket_unix_connect": ('''
        import socket
        def run():
            socket.socket(socket.AF_UNIX).connect("/run/docker.sock")
    ''', "socket.connect"),
    "getaddrinfo": ('''
        import socket
        def run():
            socket.getaddrinfo("example.com", 80)
    ''', "socket.getaddrinfo"),
    "subprocess": ('''
        import subprocess
        def run():
            subprocess.run(["echo", "hi"])
    ''', "starting a process (subprocess.Popen"),
    "compiler_from_candidate": ('''
        import subprocess
        def run():
            subprocess.run(["gcc", "--version"])
    ''', "may only be started by the toolchain's own code"),
    "os_system": ('''
        import os
        def run():
            os.system("true")
    ''', "os.system"),
    "fork": ('''
        import sys
        def run():
            vars(sys)["modules"]["os"].fork()
    ''', "os.fork"),
    "kill": ('''
        import os, signal
        def run():
            os.kill(os.getppid() or 1, signal.SIGTERM)
    ''', "os.kill"),
    "ctypes_cdll": ('''
        import ctypes
        def run():
            ctypes.CDLL("libc.so.6")
    ''', "ctypes.dlopen"),
    "ctypes_existing_handle": ('''
        import ctypes
        def run():
            ctypes.pythonapi.Py_GetVersion
    ''', "ctypes.dlsym"),
    "ctypes_memory": ('''
        import ctypes
        def run():
            ctypes.string_at(id(1), 8)
    ''', "ctypes.string_at"),
    "gc_objects": ('''
        import gc
        def run():
            return len(gc.get_objects())
    ''', "gc.get_objects"),
    "gc_referrers": ('''
        import gc, sys
        def run():
            return gc.get_referrers(sys.modules)
    ''', "gc.get_referrers"),
    "getframe_via_vars": ('''
        import sys
        def run():
            return vars(sys)["_getframe"](1).f_globals
    ''', "sys._getframe"),
    "current_frames": ('''
        import sys
        def run():
            return sys._current_frames()
    ''', "sys._current_frames"),
    "traceback_tb_frame": ('''
        def run():
            try:
                1 / 0
            except ZeroDivisionError as e:
                return e.__traceback__.tb_frame.f_back.f_globals
    ''', "reading .tb_frame"),
    "generator_frame": ('''
        def run():
            g = (i for i in range(3))
            return g.gi_frame
    ''', "reading .gi_frame"),
    "inspect_currentframe": ('''
        import inspect
        def run():
            return inspect.currentframe().f_back.f_locals
    ''', "sys._getframe"),
    "inspect_stack": ('''
        import inspect
        def run():
            return [f.frame.f_globals.get("__name__") for f in inspect.stack()]
    ''', "sys._getframe"),
    "settrace": ('''
        import sys
        def run():
            sys.settrace(lambda *a: None)
    ''', "sys.settrace"),
    "forged_library_filename": ('''
        import torch
        def run():
            fake = torch.__file__.replace("__init__.py", "fake.py")
            exec(compile("import sys; f = sys._getframe()", fake, "exec"), {})
    ''', "code may not claim"),
    "code_replace": ('''
        import json
        def run():
            def f():
                pass
            return f.__code__.replace(co_filename=json.__file__)
    ''', "code.__new__"),
    "marshal": ('''
        import marshal
        def run():
            return marshal.loads(marshal.dumps(compile("1", "x", "eval")))
    ''', "marshal.loads"),
    "spawnv_passfds": ('''
        from multiprocessing import util
        def run():
            return util.spawnv_passfds("/bin/true", ["true"], [])
    ''', "starting a process (ksearch.fork_exec '/bin/true')"),
    "posixsubprocess_fork_exec": ('''
        import _posixsubprocess, os, subprocess
        def run():
            r, w = os.pipe()
            return _posixsubprocess.fork_exec([b"true"], [b"/bin/true"], True, (), None, None, -1, -1, -1, -1, -1, -1,
                                              r, w, False, False, -1, None, None, None, -1, None, False)
    ''', "starting a process (ksearch.fork_exec"),
    "subprocess_private_fork_exec": ('''
        import os, subprocess
        def run():
            r, w = os.pipe()
            return subprocess._fork_exec([b"true"], [b"/bin/true"], True, (), None, None, -1, -1, -1, -1, -1, -1,
                                         r, w, False, False, -1, None, None, None, -1, None, False)
    ''', "starting a process (ksearch.fork_exec"),
    "reimported_posixsubprocess": ('''
        import sys
        def run():
            del sys.modules["_posixsubprocess"]
            import _posixsubprocess
            return _posixsubprocess.fork_exec
    ''', "importing _posixsubprocess afresh"),
    "fresh_posixsubprocess_from_its_file": ('''
        import importlib.util, sys
        def run():
            spec = importlib.util.find_spec("_posixsubprocess")
            return importlib.util.module_from_spec(spec).fork_exec
    ''', "creating the module _posixsubprocess afresh"),
    "cuda_builder_asked_by_a_python_candidate": ('''
        from pathlib import Path
        from ksearch.instantiate import cuda
        def run():
            return cuda.compile_check("__global__ void k() {}", "run", "/bin/true", Path("build").absolute())
    ''', "may only be started by the toolchain's own code"),
    "numpy_ctypeslib_scratch_library": ('''
        import glob, os, shutil
        import numpy.ctypeslib
        def run():
            libm = sorted(glob.glob("/lib/*/libm.so.6") + glob.glob("/usr/lib*/libm.so.6"))[0]
            shutil.copyfile(libm, "evil.so")
            return numpy.ctypeslib.load_library("evil.so", os.getcwd())
    ''', "the candidate wrote this file itself"),
    "extension_module_from_scratch": ('''
        import _json, importlib, os, shutil, sys, sysconfig
        def run():
            shutil.copyfile(_json.__file__, "_json" + sysconfig.get_config_var("EXT_SUFFIX"))
            sys.path.insert(0, os.getcwd())
            del sys.modules["_json"]
            return importlib.import_module("_json")
    ''', "the candidate wrote this file itself"),
    "shared_memory_segment": ('''
        from multiprocessing import shared_memory
        def run():
            return shared_memory.SharedMemory(create=True, size=4096).name
    ''', "creating shared memory"),
    "path_past_path_max": ('''
        import os
        def run():
            # a chain of folders longer than PATH_MAX, and at its end a link out of the scratch folder: non-strict
            # realpath stops resolving past PATH_MAX, so link/evil looked inside scratch and opened /tmp/evil
            base = os.getcwd()
            for _ in range(20):
                os.mkdir("d" * 250)
                os.chdir("d" * 250)
            os.symlink("/tmp", "out")
            os.chdir(base)
            os.symlink(base + ("/" + "d" * 250) * 20, "deep")
            open("deep/out/ksearch_audit_path_max.txt", "w").write("x")
    ''', "cannot"),
    "replace_code": ('''
        import json
        def run():
            json.dumps.__code__ = (lambda *a, **k: "forged").__code__
    ''', "replacing a function's __code__"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_forbidden_operation_is_refused_and_named(server, tmp_path, name):
    source, expected = REFUSED[name]
    kind, message, violations, child = judge(server, tmp_path, source)
    assert kind == "refused", (name, kind, message)
    assert message.startswith("ksearch-audit: refused") and expected in message, message
    assert message in violations
    assert message in child.audit_violations()          # the parent saw it on the child's stderr


def test_a_second_audit_hook_is_not_added(server, tmp_path):
    # CPython swallows an Exception raised for sys.addaudithook (the hook is simply not added)
    kind, message, violations, child = judge(server, tmp_path, '''
        import sys
        seen = []
        def run():
            sys.addaudithook(lambda e, a: seen.append(e))
            open(__file__).close()
            return len(seen)
    ''')
    assert kind == "ok" and message == "0", message
    assert any("sys.addaudithook" in v for v in violations) and violations == child.audit_violations()


def test_refusal_is_reported_even_if_the_candidate_clears_the_list(server, tmp_path):
    kind, message, violations, child = judge(server, tmp_path, '''
        import gc
        from ksearch.eval.candidate import audit
        def run():
            try:
                gc.get_objects()
            except PermissionError:
                pass
            audit.violations.clear()
            return "cleared"
    ''')
    assert kind == "ok" and violations == []
    assert any("gc.get_objects" in line for line in child.audit_violations())


def test_writes_inside_scratch_and_honest_stdlib_use_pass(server, tmp_path):
    kind, message, violations, _ = judge(server, tmp_path, '''
        import dataclasses, logging, tempfile, typing, warnings, collections, os
        Point = collections.namedtuple("Point", "x y")

        class P(typing.NamedTuple):
            a: int

        @dataclasses.dataclass
        class D:
            b: int = 1

        def run():
            open("out.txt", "w").write("ok")
            os.makedirs("sub/dir", exist_ok=True)
            with tempfile.NamedTemporaryFile("w", delete=False) as f:
                f.write("t")
            warnings.warn("just a warning")
            logging.getLogger("cand").warning("a log line")
            return (Point(1, 2).x, P(3).a, D().b, open("out.txt").read(), f.name.startswith(os.getcwd()))
    ''')
    assert kind == "ok", message
    assert message == "(1, 3, 1, 'ok', True)" and violations == []


def test_triton_kernel_and_torch_ops_work_under_the_hook(server, tmp_path):
    kind, message, violations, child = judge(server, tmp_path, '''
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

        def run():
            x, y = torch.randn(100), torch.randn(100)
            out = torch.empty_like(x)
            add[(triton.cdiv(100, 32),)](x, y, out, 100, BLOCK=32)
            ref = torch.nn.functional.softmax(torch.outer(x, y), dim=0)
            return bool(torch.allclose(out, x + y)), tuple(ref.shape)
    ''')
    assert kind == "ok", (message, child.output()[0][-3000:])
    assert message == "(True, (100, 100))" and violations == []


def test_torch_extension_builder_asked_by_a_python_candidate_is_refused(server, tmp_path):
    """torch's extension builder starts compilers for ksearch's CUDA builder only: a Python candidate that
    calls it at run time (the import statement is refused statically) must not get native code that way."""
    kind, message, violations, _ = judge(server, tmp_path, '''
        from torch.utils import cpp_extension
        def run():
            return cpp_extension.check_compiler_ok_for_platform("/bin/true")
    ''')
    assert kind == "refused" and "may only be started by the toolchain's own code" in message, (kind, message)


def test_what_triton_starts_for_its_cache_key_is_allowed(server, tmp_path):
    """The GPU's call path: triton's build cache key calls platform.architecture(), which starts `file`.

    On the H200 this refused every candidate (INCORRECT_TAMPERING); the process is triton's, so it runs."""
    kind, message, violations, _ = judge(server, tmp_path, '''
        from triton.runtime import build
        def run():
            build.platform_key.cache_clear()
            return build.platform_key()
    ''')
    assert kind == "ok" and violations == [], (message, violations)
    assert "Linux" in message


def test_the_same_probe_asked_by_the_candidate_is_refused(server, tmp_path):
    """platform.architecture() swallows the refusal (an OSError), but the violation is on record."""
    kind, message, violations, _ = judge(server, tmp_path, '''
        import platform
        def run():
            return platform.architecture("/bin/true")
    ''')
    assert any("may only be started by the toolchain's own code" in v and "'file'" in v for v in violations), \
        (kind, message, violations)


STEERED = {
    # The toolchain is asked (Triton's C build, as for its launcher), but pointed at a program that runs what
    # the candidate hands it.
    "shell_as_compiler": ('''
        import os
        from triton.runtime import build
        def run():
            os.environ["CC"] = "/bin/sh"
            build._find_compiler.cache_clear()
            return build._build("m", "x.c", os.getcwd(), [], [], [], [])
    ''', "command interpreters"),
    "python_as_compiler": ('''
        import os, sys
        from triton.runtime import build
        def run():
            os.environ["CC"] = sys.executable
            build._find_compiler.cache_clear()
            return build._build("m", "x.c", os.getcwd(), [], [], [], [])
    ''', "command interpreters"),
    "program_written_to_scratch": ('''
        import os, shutil
        from triton.runtime import build
        def run():
            shutil.copyfile("/bin/true", "mycc")
            os.chmod("mycc", 0o755)
            os.environ["CC"] = os.path.abspath("mycc")
            build._find_compiler.cache_clear()
            return build._build("m", "x.c", os.getcwd(), [], [], [], [])
    ''', "inside the scratch directory"),
}


@pytest.mark.parametrize("name", sorted(STEERED))
def test_a_steered_toolchain_is_refused(server, tmp_path, name):
    source, expected = STEERED[name]
    kind, message, violations, _ = judge(server, tmp_path, source)
    assert kind == "refused" and expected in message, (kind, message)
    assert any(expected in v for v in violations), violations


def test_nothing_was_written_outside(tmp_path):
    for name in ("ksearch_audit_evil.txt", "ksearch_audit_evil2.txt", "ksearch_audit_evil3.txt",
                 "ksearch_audit_moved", "ksearch_audit_path_max.txt"):
        assert not os.path.exists(f"/tmp/{name}"), name


@pytest.mark.parametrize("name,expected", [("x86_64-linux-gnu-gcc-12", "gcc"), ("g++-13", "g++"), ("ptxas", "ptxas"),
                                           ("ld.bfd", "ld.bfd"), ("sh", "sh")])
def test_executable_names_are_normalised(name, expected):
    assert normalise_exe("/usr/bin/" + name) == expected
