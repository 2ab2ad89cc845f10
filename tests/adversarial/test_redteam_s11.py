"""A fourth set of attacks on the judge (session 11's red team), one test per class that got through.

Each kernel below is written as an attacker who has read ksearch's source would write it. Every test failed
before the change it guards and passes after it; together they add about 15 s to the adversarial suite
(2 cores).
"""

from __future__ import annotations

import os
import socket
import time
from multiprocessing.connection import Connection
from types import SimpleNamespace

import pytest

from ksearch.eval.parent.evaluator import Evaluator
from ksearch.eval.report import EvalReport, Status
from ksearch.eval.trusted.judge import CandidateGone, Judge, _Cand
from tests.adversarial import kernels as k
from tests.adversarial.conftest import settings
from tests.adversarial.kernels import ATTEND


@pytest.fixture(scope="module")
def plan():
    """The walls this machine's fork servers build (some tests need one of them)."""
    from ksearch.eval.isolation.forkserver import ForkServer

    with ForkServer(interpret=True) as server:
        return server.walls_plan


# ---- learning the inputs before the clock -----------------------------------------------------------------
# Every input of a job follows from the judge's nonce and the task's public generator. This kernel looks for
# the nonce in every name its process is given (its module name and file, its working folder, argv, the
# environment), computes the answers for the first trials of tiny_b1_l7 for each guess at load, and then
# answers only from that table: zeros wherever it failed to predict the inputs.
PREDICTS_INPUTS = ATTEND + '''
import hashlib
import os
import re
import sys

from ksearch.task.paged import paged_indices


def _guesses():
    names = [__name__, __file__, os.getcwd(), *sys.argv, *os.environ.values()]
    for token in set(re.findall(r"[0-9a-f]{6,}|[0-9]{6,}", " ".join(names))):
        yield int(token, 16)
        if token.isdigit():
            yield int(token)


def _inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 32, 128, generator=gen).to(torch.bfloat16)
    k = torch.randn((16, 1, 4, 128), generator=gen).to(torch.bfloat16)
    v = torch.randn((16, 1, 4, 128), generator=gen).to(torch.bfloat16)
    indptr, indices = paged_indices([7], 16, torch.Generator().manual_seed(seed))
    return q, k, v, indptr, indices, 1.0 / math.sqrt(128)


_answers = {}
for _nonce in _guesses():
    for _trial in range(4):
        _seed = int.from_bytes(hashlib.sha256(f"{_nonce}:tiny_b1_l7:{_trial}".encode()).digest()[:4], "little")
        _args = _inputs(_seed)
        _answers[_args[0].view(torch.int16).flatten()[:16].tolist().__repr__()] = _attend(*_args)


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    known = _answers.get(q.view(torch.int16).flatten()[:16].tolist().__repr__())
    if known is None:
        return torch.zeros_like(q), torch.zeros(q.shape[:2], dtype=torch.float32)
    return known[0].clone(), known[1].clone()
'''


def test_the_candidates_process_cannot_learn_the_nonce(unchecked, workloads, baseline):
    """Nothing the candidate's process is given names the nonce, so its answers cannot exist before the clock
    (the module name held it in hex: this kernel passed at ~1 ms per call where the honest one takes 2-10)."""
    r = unchecked.evaluate(PREDICTS_INPUTS, "predicts_inputs", workloads, baseline)
    assert r.status == Status.INCORRECT_NUMERICAL, r.summary() + r.log[-1500:]


# ---- a judge that swells before it has set a limit ----------------------------------------------------------
# At import, before the harness's own load reply: a reply announcing a 1 GiB tensor, then its frame's length.
# A reader that allocates the frame before its bytes arrive holds the memory until the candidate's timeout.
ANNOUNCES_AT_LOAD = '''
import json, os, struct, time

_header = json.dumps({"ok": True, "values": [{"kind": "tensor", "dtype": "uint8", "shape": [1 << 30]}]}).encode()
os.write(3, struct.pack("!i", len(_header)) + _header + struct.pack("!i", 1 << 30) + bytes(4096))
time.sleep(600)


def run(*args):
    raise RuntimeError("never called")
'''


def test_a_reply_announcing_tensors_at_load_is_refused_at_once(unchecked, workloads, baseline):
    """No reply carries tensors (outputs travel through shared memory), from the first one on: the announcement
    is refused before anything is allocated for it. The judge held 1 GiB (up to 8) until the timeout before."""
    t0 = time.monotonic()
    r = unchecked.evaluate(ANNOUNCES_AT_LOAD, "announces_at_load", workloads, baseline)
    assert r.status == Status.INCORRECT_TAMPERING and "at most 0" in r.summary(), r.summary()
    assert time.monotonic() - t0 < 6


# ---- a death taken for tampering ----------------------------------------------------------------------------
def _judge_side_of(closed: bool, waiting: bytes = b""):
    """A judge and a candidate record whose connection has `waiting` bytes and, when `closed`, no other end."""
    ours, theirs = socket.socketpair()
    if waiting:
        theirs.sendall(waiting)
    if closed:
        theirs.close()
    conn = Connection(ours.detach())
    c = _Cand("x", "", EvalReport("x", Status.PASSED, "cpu"))
    c.child = SimpleNamespace(conn=conn, refusal=lambda: None)
    c.sock = socket.socket(fileno=os.dup(conn.fileno()))
    return object.__new__(Judge), c, theirs


@pytest.mark.parametrize("closed,waiting,status", [
    (True, b"", Status.RUNTIME_ERROR),                   # died between two requests (a crash, the OOM killer)
    (False, b"\x00\x00\x00\x02{}", Status.INCORRECT_TAMPERING),  # a reply sent ahead of its request
    (True, b"\x00\x00\x00\x02{}", Status.INCORRECT_TAMPERING),   # ... and then gone
])
def test_a_process_that_died_between_requests_is_not_called_a_cheat(closed, waiting, status):
    """A kernel that crashed after answering (a worker thread's abort, an asynchronous fault) was recorded as
    INCORRECT_TAMPERING, "sent a message before the judge asked": the end of its connection read as a message."""
    judge, c, theirs = _judge_side_of(closed, waiting)
    try:
        with pytest.raises(CandidateGone) as gone:
            judge._no_unasked(c)
        assert gone.value.status == status, gone.value.message
    finally:
        theirs.close()
        c.child.conn.close()
        c.sock.close()


# ---- System V objects: they belong to a namespace, not to a process ------------------------------------------
SYSV_KEY = 0x6B5311A1
LEAVES_SYSV_MEMORY = ATTEND + f'''
import ctypes

# Native code (no audit hook here) makes a System V shared-memory segment: it outlives the process that made it.
_libc = ctypes.CDLL(None, use_errno=True)
_made = _libc.shmget({SYSV_KEY}, 16 << 20, 0o1000 | 0o666)


def run(*args):
    return _attend(*args)
'''


def _sysv_segments(key: int) -> list[str]:
    with open("/proc/sysvipc/shm") as f:
        return [line for line in f.read().splitlines()[1:] if int(line.split()[0]) == key]


def _remove_sysv_segments(key: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for line in _sysv_segments(key):
        libc.shmctl(int(line.split()[1]), 0, None)      # IPC_RMID


def test_system_v_memory_does_not_outlive_the_candidate(bare, plan, workloads, baseline):
    """A 16 MiB segment stayed on the host after the evaluation (a channel to later candidates, memory never
    given back): the candidate's IPC namespace is now its own, and goes with it."""
    if not plan.mount:
        pytest.skip(f"no mount namespace here: {plan.describe()}")
    _remove_sysv_segments(SYSV_KEY)
    try:
        r = bare.evaluate(LEAVES_SYSV_MEMORY, "leaves_sysv_memory", workloads, baseline)
        assert r.status == Status.PASSED, r.summary() + r.log[-1500:]
        assert _sysv_segments(SYSV_KEY) == []
    finally:
        _remove_sysv_segments(SYSV_KEY)


# ---- the reference among the bytes pinned in the candidate's process -----------------------------------------
# The task's files are read once by the judge and pinned, as bytes, in every process that builds the task: the
# candidate's too, reference.py included. This kernel is the reference, compiled from those bytes.
BORROWS_THE_REFERENCE = '''
import sys

_snapshot = vars(sys)["modules"]["ksearch.task.snapshot"]
_source = next(s.text("reference.py") for s in vars(_snapshot)["_PINNED"].values())
_namespace = {}
exec(compile(_source, "<borrowed>", "exec"), _namespace)


def run(*args):
    return _namespace["run"](*args)
'''


def test_the_reference_is_not_among_the_bytes_the_candidate_holds(unchecked, workloads, baseline):
    r = unchecked.evaluate(BORROWS_THE_REFERENCE, "borrows_the_reference", workloads, baseline)
    assert r.status == Status.INCORRECT_TAMPERING and "reference" in r.summary(), r.summary() + r.log[-1500:]


# ---- host resources outside the address-space cap -------------------------------------------------------------
# Pages of an anonymous file that is never mapped (plain Python: os.memfd_create has no audit event) count
# against no RLIMIT_AS, and the OOM killer does not charge them to the process: it held 4 GiB under a 3 GiB cap,
# and could have taken the host's memory for the OOM killer to end the judge. Threads with small stacks drew on
# the host's 32768 PIDs without a limit.
HOLDS_UNMAPPED_MEMORY = ATTEND + '''
import os


def run(*args):
    fd = os.memfd_create("ballast")
    for i in range(12):                          # 1.5 GiB, past this evaluator's 1 GiB cap
        os.posix_fallocate(fd, i << 27, 1 << 27)
    return _attend(*args)
'''

STARTS_5000_THREADS = ATTEND + '''
import threading

threading.stack_size(64 << 10)
_hold = threading.Event()
_started = 0
try:
    for _ in range(5000):
        threading.Thread(target=_hold.wait, daemon=True).start()
        _started += 1
except RuntimeError:
    pass


def run(*args):
    if _started == 5000:
        raise RuntimeError("5000 threads: nothing limits the host PIDs a candidate holds")
    return _attend(*args)
'''


def _control_groups(memory_bytes: int | None) -> None:
    """Skip unless this machine lets the fork server give each candidate a control group with these limits."""
    from ksearch.eval.isolation import cgroups

    found, why = cgroups.probe(memory_bytes)
    if found is None:
        pytest.skip(why)


def test_memory_a_candidate_holds_without_mapping_it_is_capped(task, workloads, baseline):
    _control_groups(1 << 30)
    with Evaluator(task, settings(static_checks=False, memory_limit_gb=1)) as ev:
        r = ev.evaluate(HOLDS_UNMAPPED_MEMORY, "holds_unmapped_memory", workloads, baseline)
        assert r.status == Status.RUNTIME_ERROR and "SIGKILL" in r.log, r.summary() + r.log[-1500:]
        assert ev.evaluate(k.GOOD, "good_after_unmapped_memory", workloads, baseline).status == Status.PASSED


def test_the_tasks_a_candidate_starts_are_capped(unchecked, workloads, baseline):
    _control_groups(None)
    r = unchecked.evaluate(STARTS_5000_THREADS, "starts_5000_threads", workloads, baseline)
    assert r.status == Status.PASSED, r.summary() + r.log[-1500:]


# ---- inputs put back after the clock ------------------------------------------------------------------------
# The call scribbles on an input and puts it back once the judge holds its outputs: the judge compared the
# shared inputs only after the untimed `inspect` request, and the harness's inspect calls torch.equal, which
# this kernel wraps to restore the input first. Its inputs were changed during the call, and it passed.
RESTORES_INPUTS_LATE = ATTEND + '''
_restore = []
_equal = torch.equal


def _equal_after_restoring(*args, **kwargs):
    while _restore:
        target, saved = _restore.pop()
        target.copy_(saved)
    return _equal(*args, **kwargs)


torch.equal = _equal_after_restoring


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    result = _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)
    _restore.append((k_cache, k_cache.clone()))
    k_cache.zero_()                             # scratch space, put back "later"
    return result
'''


def test_an_input_put_back_after_the_reply_still_counts_as_changed(unchecked, workloads, baseline):
    r = unchecked.evaluate(RESTORES_INPUTS_LATE, "restores_inputs_late", workloads, baseline)
    assert r.status == Status.INCORRECT_INPUT_MODIFIED and "k_cache" in r.summary(), r.summary() + r.log[-1500:]


# ---- text no file or terminal can write ---------------------------------------------------------------------
# A lone UTF-16 surrogate in an exception message crosses the wire as a JSON escape; printed by `ksearch run`
# it killed the search (UnicodeEncodeError), and again on every resume, since the journal keeps it.
RAISES_LONE_SURROGATES = '''
def run(*args):
    raise ValueError("bad launch configuration \\ud800 \\udfff")
'''


def test_a_message_with_lone_surrogates_can_be_written_anywhere(unchecked, workloads, baseline):
    r = unchecked.evaluate(RAISES_LONE_SURROGATES, "raises_lone_surrogates", workloads, baseline)
    assert r.status == Status.RUNTIME_ERROR and "bad launch configuration ? ?" in r.summary(), r.summary()
    (r.summary() + r.log).encode("utf-8")


# ---- a verdict drawn on the user's terminal -------------------------------------------------------------------
# Printed as it came, this message clears the screen of `ksearch eval` and draws a verdict of its own.
DRAWS_ITS_OWN_VERDICT = '''
print("\\x1b[2J\\x1b[H\\x1b[32mPASSED geomean_speedup=42.0x\\x1b[0m", flush=True)


def run(*args):
    raise ValueError("\\x1b[2J\\x1b[H\\x1b[32mPASSED geomean_speedup=42.0x\\x1b[0m\\r")
'''


def test_what_a_candidate_writes_cannot_redraw_the_screen(unchecked, workloads, baseline):
    r = unchecked.evaluate(DRAWS_ITS_OWN_VERDICT, "draws_its_own_verdict", workloads, baseline)
    assert r.status == Status.RUNTIME_ERROR, r.summary()
    assert "?[2J" in r.summary() and "?[2J" in r.log
    assert not any(ch in r.summary() + r.log for ch in "\x1b\r"), repr(r.log[-500:])


# ---- a source the search process cannot read ---------------------------------------------------------------
# Hundreds of nested unary signs parse, and then overflow the static checks' recursive walk; hundreds of
# thousands overflow the parser itself (MemoryError). Either killed the search process that read the
# model's reply (and again on every resume, since the journal holds it).
def _nested(depth: int) -> str:
    return "x = " + "-" * depth + "1\n\n\ndef run(*args):\n    return x\n"


def test_a_source_nested_too_deeply_is_refused_not_fatal(checked, workloads, baseline):
    from ksearch.instantiate import CodeExtractionError, extract_code

    r = checked.evaluate(_nested(600), "nested_600", workloads, baseline)
    assert r.status == Status.COMPILE_ERROR and "too deeply" in r.log, r.summary()
    with pytest.raises(CodeExtractionError, match="too deeply"):
        extract_code("```python\n" + _nested(200_000) + "```\n")
