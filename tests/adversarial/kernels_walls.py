"""Kernels for gqa_paged_decode_h32_kv4_d128_ps1 that go after the sandbox itself (issue 21's classes).

Each either tries to leave the candidate's process (start a process the audit hook does not see, load native
code, write past a path the guard misreads, rewrite the task), hide that it was refused, leave something
behind, or break the judge's reader of replies. They run with static checks off, so every trick reaches the
candidate's process; `*_MARK` names what must not exist on the host afterwards.
"""

from tests.adversarial.kernels import ATTEND

ZEROS_TAIL = '''

def _zeros(q):
    import torch
    batch, heads, dim = q.shape
    return torch.zeros(batch, heads, dim, dtype=torch.bfloat16), torch.zeros(batch, heads, dtype=torch.float32)
'''

ZEROS = ZEROS_TAIL + '''

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    return _zeros(q)
'''

# ---- processes without an audit event --------------------------------------------------------------------
SPAWNV_MARK = "/tmp/ksearch_walls_spawnv.txt"
SPAWNV_SHELL = ZEROS_TAIL + f'''
import time
from multiprocessing import util

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # multiprocessing.util.spawnv_passfds reaches _posixsubprocess.fork_exec, which CPython does not audit
    util.spawnv_passfds(b"/bin/sh", [b"sh", b"-c", b"echo pwned > {SPAWNV_MARK}; mkdir /sys/fs/cgroup/ksearch_walls_cg"],
                        [])
    time.sleep(0.5)
    return _zeros(q)
'''

POSIXSUBPROCESS_SHELL = ZEROS_TAIL + f'''
import os, sys, time

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # a fresh copy of _posixsubprocess, whose fork_exec no wrapper watches
    del sys.modules["_posixsubprocess"]
    import _posixsubprocess
    r, w = os.pipe()
    _posixsubprocess.fork_exec([b"sh", b"-c", b"echo pwned > {SPAWNV_MARK}"], [b"/bin/sh"], True, (), None, None,
                               -1, -1, -1, -1, -1, -1, r, w, False, False, -1, None, None, None, -1, None, False)
    time.sleep(0.5)
    return _zeros(q)
'''

# ---- native code from a Python candidate -------------------------------------------------------------------
NUMPY_CTYPESLIB = ZEROS_TAIL + '''
import glob, os, shutil
import numpy.ctypeslib

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # a shared object written to scratch, loaded by numpy (a library frame asks, not the candidate)
    libm = sorted(glob.glob("/lib/*/libm.so.6") + glob.glob("/usr/lib*/libm.so.6") + glob.glob("/lib*/libm.so.6"))[0]
    shutil.copyfile(libm, "evil.so")
    lib = numpy.ctypeslib.load_library("evil.so", os.getcwd())
    return _zeros(q)
'''

CPP_EXTENSION_AT_RUN_TIME = ZEROS_TAIL + '''
import importlib

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # torch's extension builder, reached at run time (an import statement of it is refused statically)
    builder = importlib.import_module("torch.utils." + "cpp_extension")
    builder.load_inline("ksearch_walls_ext", cpp_sources="int f() { return 1; }", functions=["f"])
    return _zeros(q)
'''

CUDA_BUILDER_FROM_PYTHON = ZEROS_TAIL + '''
from pathlib import Path
from ksearch.instantiate import cuda

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # ksearch's own CUDA builder, asked by a Python candidate for native code of its choosing
    cuda.compile_check("__global__ void k() {}", "run", "/bin/true", Path("build").absolute())
    return _zeros(q)
'''

EXTENSION_FROM_SCRATCH = ZEROS_TAIL + '''
import _json, importlib, os, shutil, sys, sysconfig

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # an extension module (native code) copied into scratch and imported from there
    shutil.copyfile(_json.__file__, "_json" + sysconfig.get_config_var("EXT_SUFFIX"))
    sys.path.insert(0, os.getcwd())
    del sys.modules["_json"]
    importlib.import_module("_json")
    return _zeros(q)
'''

# ---- a write guard that trusts realpath -------------------------------------------------------------------
PATH_MAX_MARK = "/tmp/ksearch_walls_path_max.txt"
PATH_MAX_ESCAPE = ZEROS_TAIL + f'''
import os

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # folders deeper than PATH_MAX and, at the bottom, a link out: non-strict realpath stops resolving there
    base = os.getcwd()
    if not os.path.exists("deep"):
        for _ in range(20):
            os.mkdir("d" * 250)
            os.chdir("d" * 250)
        os.symlink("/tmp", "out")
        os.chdir(base)
        os.symlink(base + ("/" + "d" * 250) * 20, "deep")
    with open("deep/out/{PATH_MAX_MARK.rsplit('/', 1)[1]}", "w") as f:
        f.write("pwned")
    return _zeros(q)
'''

# ---- escapes that last: the task's own files ----------------------------------------------------------------
REWRITES_TASK = ZEROS_TAIL + '''
import sys

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # the task folder this process was told about: loosen its tolerance for whoever reads it next
    registry = vars(sys)["modules"]["ksearch.task.registry"]
    folder = registry.load_task("gqa_paged_decode_h32_kv4_d128_ps1").dir
    with open(folder / "task.yaml", "w") as f:
        f.write("correctness: {atol: 1.0e+30, rtol: 1.0e+30}\\n")
    return _zeros(q)
'''

# ---- refusals the candidate silences ------------------------------------------------------------------------
SILENCED_REFUSAL = ATTEND + '''
import os

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # stderr and stdout onto /dev/null, then a refused call: the refusal's report line goes nowhere
    devnull = os.open("/dev/null", os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        import ctypes
        ctypes.CDLL("libc.so.6")
    except Exception:
        pass
    return _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)
'''

CLOSED_STDERR_REFUSAL = ATTEND + '''
import os

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    os.close(2)
    try:
        open("/tmp/ksearch_walls_closed_stderr.txt", "w")
    except Exception:
        pass
    return _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)
'''

# ---- leftovers -----------------------------------------------------------------------------------------------
SHM_NAME = "ksearch_walls_leftover"
SHM_LEFTOVER = ZEROS_TAIL + f'''
import os
import _posixshmem

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # a named shared-memory segment (no open event): a channel to the next candidate, host memory leaked
    fd = _posixshmem.shm_open("/{SHM_NAME}", os.O_CREAT | os.O_RDWR, 0o666)
    os.ftruncate(fd, 1 << 20)
    os.write(fd, b"a message for the next candidate")
    return _zeros(q)
'''

SHM_LEFTOVER_NATIVE = ZEROS_TAIL + f'''
import os

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # the same through the file system path, as native code would (tested with the audit hook off)
    fd = os.open("/dev/shm/{SHM_NAME}", os.O_CREAT | os.O_RDWR, 0o666)
    os.ftruncate(fd, 1 << 20)
    return _zeros(q)
'''

# ---- a judge that hangs or swells ----------------------------------------------------------------------------
HALF_FRAME = '''
import os, struct, time

def run(*args):
    # a frame announcing 1000 bytes, 11 sent: a reader that waits only for the first byte hangs here
    os.write(3, struct.pack("!i", 1000) + b'{"ok": true')
    time.sleep(600)
'''

HUGE_REPLY = ZEROS_TAIL + '''
import json, os, struct

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # a reply announcing three 1 GiB tensors for outputs of a few KiB
    values = [{"kind": "tensor", "dtype": "uint8", "shape": [1 << 30]}] * 3
    header = json.dumps({"ok": True, "values": values}).encode()
    os.write(3, struct.pack("!i", len(header)) + header)
    chunk = b"\\0" * (1 << 20)
    os.write(3, struct.pack("!i", 1 << 30))
    for _ in range(64):
        os.write(3, chunk)
    return _zeros(q)
'''

NESTED_HEADER = ZEROS_TAIL + '''
import os, struct, threading

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # a header nested deeper than json's recursion limit
    header = b"[" * 100000 + b"]" * 100000
    threading.Thread(target=os.write, args=(3, struct.pack("!i", len(header)) + header), daemon=True).start()
    return _zeros(q)
'''

# ---- coverage ------------------------------------------------------------------------------------------------
FIRST_THREE_SEQUENCES = ATTEND + '''
import torch

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # only the first three sequences of a batch are computed; the rest get zeros
    out, lse = _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)
    out[3:] = 0
    lse[3:] = 0
    return out, lse
'''
