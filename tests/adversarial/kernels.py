"""Candidate kernels for gqa_paged_decode_h32_kv4_d128_ps1, one per trick the evaluator must catch.

Each is a source string, as a model would submit it. Most are pure torch (no Triton) so they run in
milliseconds on the CPU; `ATTEND` is a faithful re-implementation of the task's reference (without
importing it) that the honest and the cheating kernels build on.
"""

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"

ATTEND = '''
import math
import torch


def _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    starts = kv_indptr[:-1].to(torch.int64)
    lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64)
    max_len = max(int(lens.max().item()), 1)
    pos = torch.arange(max_len, device=q.device)
    valid = pos[None, :] < lens[:, None]
    flat = (starts[:, None] + pos[None, :]).clamp(max=max(kv_indices.shape[0] - 1, 0))
    rows = kv_indices.to(torch.int64)[flat]
    keys = k_cache[:, 0].to(torch.float32)[rows]
    values = v_cache[:, 0].to(torch.float32)[rows]
    queries = q.to(torch.float32).view(batch, kv_heads, group, dim)
    logits = torch.einsum("bkgd,blkd->bkgl", queries, keys) * sm_scale
    logits = logits.masked_fill(~valid[:, None, None, :], float("-inf"))
    row_max = logits.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    weights = torch.exp(logits - row_max)
    denom = weights.sum(dim=-1, keepdim=True)
    out = torch.einsum("bkgl,blkd->bkgd", weights / denom.clamp(min=1e-30), values)
    lse = ((torch.log(denom) + row_max).squeeze(-1) / math.log(2.0)).reshape(batch, heads)
    return out.reshape(batch, heads, dim).to(torch.bfloat16), lse.to(torch.float32)
'''

GOOD = ATTEND + '''

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    return _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)
'''

# ---- point 1: crashes, hangs, output, memory -------------------------------------------------------------
SEGFAULT_CTYPES = '''
import ctypes

def run(*args):
    return ctypes.string_at(0)          # reads address 0: SIGSEGV
'''

SEGFAULT_SIGNAL = '''
import os
import signal

def run(*args):
    os.kill(os.getpid(), signal.SIGSEGV)
'''

ABORT = '''
import os

def run(*args):
    os.abort()
'''

HANG = '''
def run(*args):
    while True:
        pass
'''

PRINT_FOREVER = '''
def run(*args):
    while True:
        print("x" * 1000)
'''

HUGE_STDOUT_PYTHON = ATTEND + '''
import sys

def run(*args):
    block = "y" * (1 << 20)
    for _ in range(48):                 # 48 MiB through Python's stdout
        sys.stdout.write(block)
    return _attend(*args)
'''

HUGE_STDOUT_FD = ATTEND + '''
import os

def run(*args):
    block = b"z" * (1 << 20)
    for _ in range(48):                 # 48 MiB straight to file descriptor 1, below Python
        os.write(1, block)
    return _attend(*args)
'''

GIANT_ALLOCATION = '''
import torch

def run(q, *args):
    hog = torch.empty(1 << 44, dtype=torch.uint8, device=q.device)     # 16 TiB
    return hog
'''

RAISES = '''
def run(*args):
    raise ValueError("bad launch configuration")
'''

# ---- point 2: cheating ----------------------------------------------------------------------------------
MEMOISED = ATTEND + '''
_cache = {}

def run(q, *args):
    key = (q.data_ptr(), tuple(q.shape))        # keyed on the buffer's address and shape
    if key not in _cache:
        _cache[key] = _attend(q, *args)
    return _cache[key]
'''

MEMOISED_COPY = ATTEND + '''
_last = []

def run(*args):
    if not _last:
        _last.append(_attend(*args))
    out, lse = _last[0]
    return out.clone(), lse.clone()             # fresh tensors, remembered values
'''

UNWRITTEN = ATTEND + '''

def run(*args):
    out, lse = _attend(*args)
    partial = torch.empty_like(out)
    partial[..., :64] = out[..., :64]           # the second half of every head is never written
    return partial, lse
'''

MUTATES_INPUT = ATTEND + '''

def run(q, *args):
    result = _attend(q, *args)
    q.mul_(2.0)                                 # scribbles on an input
    return result
'''

IMPORTS_REFERENCE = '''
from ksearch.task import load_task

_reference = load_task("gqa_paged_decode_h32_kv4_d128_ps1").reference


def run(*args):
    return _reference(*args)
'''

READS_REFERENCE_FILE = '''
from pathlib import Path
import ksearch

_path = Path(ksearch.__file__).resolve().parents[1] / "tasks" / "gqa_paged_decode_h32_kv4_d128_ps1" / "reference.py"
_namespace = {}
exec(compile(open(_path).read(), str(_path), "exec"), _namespace)


def run(*args):
    return _namespace["run"](*args)
'''

BACKGROUND_THREAD = ATTEND + '''
import threading
import time


def run(*args):
    out, lse = _attend(*args)
    late_out, late_lse = torch.empty_like(out), torch.empty_like(lse)

    def finish():
        time.sleep(0.05)                        # the work lands after the call returned
        late_out.copy_(out)
        late_lse.copy_(lse)

    threading.Thread(target=finish, daemon=True).start()
    return late_out, late_lse
'''

DEFERRED = ATTEND + '''
_pending = []


def run(*args):
    if _pending:                                # finish the previous call's work now
        out, lse, saved = _pending.pop()
        got_out, got_lse = _attend(*saved)
        out.copy_(got_out)
        lse.copy_(got_lse)
    saved = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    batch, heads, dim = args[0].shape
    out = torch.empty(batch, heads, dim, dtype=torch.bfloat16, device=args[0].device)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=args[0].device)
    _pending.append((out, lse, saved))
    return out, lse
'''

REUSED_OUTPUT = ATTEND + '''
_buffers = []


def run(*args):
    out, lse = _attend(*args)
    if not _buffers:
        _buffers.extend([torch.empty_like(out), torch.empty_like(lse)])
    _buffers[0].copy_(out)
    _buffers[1].copy_(lse)
    return _buffers[0], _buffers[1]             # the same storage every call
'''

PATCHES_TIMER = ATTEND + '''
import time

_real = time.perf_counter
_calls = [0]


def _fast_clock():
    _calls[0] += 1
    return _real() / 1000.0                     # time runs a thousand times slower


def run(*args):
    time.perf_counter = _fast_clock
    return _attend(*args)
'''

PATCHES_CHECKER = ATTEND + '''
import torch

torch.Tensor.clone = lambda self, *a, **k: self     # snapshots would alias the live outputs


def run(*args):
    return _attend(*args)
'''

TORCH_SDPA = '''
import torch
import torch.nn.functional as F


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    keys = k_cache[kv_indices.long(), 0]
    values = v_cache[kv_indices.long(), 0]
    return F.scaled_dot_product_attention(q, keys, values, scale=sm_scale)
'''

# ---- GPU only -------------------------------------------------------------------------------------------
SIDE_STREAM = ATTEND + '''
_side = []


def run(*args):
    if not _side:
        _side.append(torch.cuda.Stream())
    batch, heads, dim = args[0].shape
    out = torch.empty(batch, heads, dim, dtype=torch.bfloat16, device=args[0].device)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=args[0].device)
    _side[0].wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side[0]):           # never joined back: the events do not see this work
        for _ in range(20):
            o, l = _attend(*args)
        out.copy_(o)
        lse.copy_(l)
    return out, lse
'''

LEAVES_STREAM = ATTEND + '''
_side = []


def run(*args):
    if not _side:
        _side.append(torch.cuda.Stream())
    torch.cuda.set_stream(_side[0])            # and never switches back
    return _attend(*args)
'''

GPU_MEMORY_HOG = '''
import torch

def run(q, *args):
    free, total = torch.cuda.mem_get_info()
    return torch.empty(total * 2, dtype=torch.uint8, device=q.device)
'''

GPU_ILLEGAL_ADDRESS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _wild(ptr):
    tl.store(ptr + (1 << 40), 1.0)


def run(q, *args):
    _wild[(1,)](q)
    torch.cuda.synchronize()
    return q
'''

FORGES_REPLY = '''
import json
import sys
from multiprocessing.connection import Connection

from ksearch.eval.report import EvalReport, WorkloadResult


def run(*args):
    fd = json.loads(sys.argv[1])["fd"]                  # the worker's socket to the evaluator
    fake = EvalReport("forged", "PASSED", "cpu", [WorkloadResult("tiny_b1_l7", "PASSED", latency_ms=1e-6)])
    Connection(fd).send(("ok", ([fake], False)))
    import time
    time.sleep(30)
'''


# ---- the judge out of reach: each trick looks for something to reach in its own process ---------------------
# The reference, the tolerance, the verdict, the report and the clock live in the trusted worker; these
# kernels try the ways Python offers to reach them, and must fail with a named status. Their outputs are made
# on the inputs' device, so that on a GPU too they pass the output checks (device, shape, dtype) and meet the
# wall each trick is aimed at (test_gpu_tricks.py runs them there).

REACH_MODULES = '''
import sys


def run(*args):
    registry = vars(sys)["modules"]["ksearch.task.registry"]
    return registry.load_task("gqa_paged_decode_h32_kv4_d128_ps1").reference(*args)
'''

REACH_TRACEBACK_FRAMES = '''
def run(*args):
    try:
        raise RuntimeError
    except RuntimeError as e:
        frame = e.__traceback__.tb_frame
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if callable(getattr(value, "reference", None)):
                return value.reference(*args)
        frame = frame.f_back
    raise LookupError("no reference in reach")
'''

REACH_GC = '''
import gc


def run(*args):
    for obj in gc.get_objects():
        if callable(obj) and getattr(obj, "__name__", "") == "run" and "reference" in getattr(obj, "__module__", ""):
            return obj(*args)
    raise LookupError("no reference in reach")
'''

REACH_GETFRAME = '''
import sys


def run(*args):
    frame = vars(sys)["_getframe"](1)
    while frame is not None:
        ref = frame.f_globals.get("reference") or frame.f_locals.get("ref")
        if ref is not None:
            return ref
        frame = frame.f_back
    raise LookupError("no reference in reach")
'''

TOLERANCE_ZEROS = '''
import sys

import torch

# Loosen every tolerance this process can find, then return zeros.
for module in list(vars(sys)["modules"].values()):
    for value in list(vars(module).values()) if hasattr(module, "__dict__") else []:
        if type(value).__name__ == "Correctness":
            object.__setattr__(value, "atol", 1e30)
            object.__setattr__(value, "rtol", 1e30)
workload = vars(sys)["modules"].get("ksearch.task.workload")
if workload is not None:
    workload.Correctness.__init__.__defaults__ = (1e30, 1e30, 0.0)


def run(q, *args):
    return torch.zeros_like(q), torch.zeros(q.shape[:2], dtype=torch.float32, device=q.device)
'''

VERDICT_NOOP = '''
import sys

import torch

# Silence every verdict-looking method in reach, then return garbage.
for name, module in list(vars(sys)["modules"].items()):
    if name.startswith("ksearch.eval"):
        for value in list(vars(module).values()):
            if isinstance(value, type):
                for attr in ("fail", "verify", "expect_ok", "check"):
                    if attr in vars(value):
                        setattr(value, attr, lambda *a, **k: True)


def run(q, *args):
    return torch.full_like(q, 7.0), torch.full(q.shape[:2], 7.0, dtype=torch.float32, device=q.device)
'''

POISONS_REFERENCE = '''
import torch

_real = torch.einsum
setattr(torch._VF, "einsum", lambda *a, **k: _real(*a, **k) * 0)
torch.einsum = lambda eq, *ops: _real(eq, *ops) * 0


def run(q, *args):
    return torch.zeros_like(q), torch.zeros(q.shape[:2], dtype=torch.float32, device=q.device)
'''

FINALIZER_REWRITES = ATTEND + '''
import gc
import weakref


def _rewrite():
    for obj in gc.get_objects():
        if hasattr(obj, "latency_ms"):
            object.__setattr__(obj, "latency_ms", 1e-9)


def run(q, *args):
    weakref.finalize(q, _rewrite)
    return _attend(q, *args)
'''

CONTENT_CACHE = ATTEND + '''
_cache = {}


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # keyed on a few input elements: the page table's offsets, which stay the same for a workload
    key = (tuple(q.shape), tuple(kv_indptr.tolist()[:4]))
    if key not in _cache:
        _cache[key] = _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)
    out, lse = _cache[key]
    return out.clone(), lse.clone()
'''

FIRST_128_TOKENS = ATTEND + '''
import torch


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # skips every KV token past the first tile of 128 per sequence
    lens = (kv_indptr[1:] - kv_indptr[:-1]).clamp(max=128)
    starts = kv_indptr[:-1]
    keep = torch.cat([kv_indices[int(s):int(s) + int(n)] for s, n in zip(starts, lens)]) if len(lens) else kv_indices
    indptr = torch.zeros_like(kv_indptr)
    indptr[1:] = torch.cumsum(lens, 0)
    return _attend(q, k_cache, v_cache, indptr, keep, sm_scale)
'''

WRITES_FILE = ATTEND + '''
import sys


def run(*args):
    with vars(sys)["modules"]["builtins"].open("/tmp/ksearch_pwned.txt", "w") as f:
        f.write("escaped")
    return _attend(*args)
'''

FORK_SETSID = ATTEND + '''
import os
import sys
import time


def run(*args):
    fork = vars(os)["fork"]
    if fork() == 0:
        os.setsid()
        with open("/tmp/ksearch_survivor.pid", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
        os._exit(0)
    return _attend(*args)
'''
