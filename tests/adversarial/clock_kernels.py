"""Candidate kernels that go after the judge's clock, for gqa_paged_decode_h32_kv4_d128_ps1.

Each is written as an attacker who has read ksearch's source would write it: it knows the wire format, the
request names, that fd 3 is the connection to the judge, and where the harness's serve loop lives. They try
to make a call look faster than the work it does: by working before the clock starts, by answering before
the request, by replacing the harness's loop or the connection's methods, by skipping the harness's own
work, or by reporting a time. `ATTEND` (tests.adversarial.kernels) does the actual work where one needs it.
"""

from tests.adversarial.kernels import ATTEND

# A frame in multiprocessing.connection's format (4-byte big-endian length, then the bytes), holding the
# JSON reply the judge expects: "done, no failure, no values".
_FRAME = '''
import json
import os
import struct


def _frame(header):
    data = json.dumps(dict(header, values=[])).encode()
    return struct.pack("!i", len(data)) + data


def _write_reply(header):
    os.write(3, _frame(header))
'''

# ---- working before the clock --------------------------------------------------------------------------
# Hooks what a harness does with tensors it is about to hand over (clone, copy_, view) and computes the
# answer the moment a full set of inputs is in sight; `run` then only returns what was computed "before".
PRECOMPUTE_ON_SIGHT = ATTEND + """
import math

import torch

_pending = {}
_stash = {}
_busy = []


def _look(t):
    if _busy or not isinstance(t, torch.Tensor):
        return t
    shape, kind = tuple(t.shape), None
    if len(shape) == 3 and shape[1:] == (32, 128) and t.dtype == torch.bfloat16:
        kind = "q"
    elif len(shape) == 4 and shape[1:] == (1, 4, 128):
        kind = "k" if "k" not in _pending else "v"
    elif len(shape) == 1 and t.dtype == torch.int32:
        kind = "indptr" if "indptr" not in _pending else "indices"
    if kind == "q":
        _pending.clear()                    # a new set of inputs starts with q
    seen = {v.data_ptr() for v in _pending.values()}
    if kind and kind not in _pending and t.data_ptr() not in seen:
        _pending[kind] = t
    if len(_pending) == 5:
        got = dict(_pending)
        _pending.clear()
        _busy.append(1)
        try:
            _stash[got["q"].data_ptr()] = _attend(got["q"], got["k"], got["v"], got["indptr"], got["indices"],
                                                  1.0 / math.sqrt(128))
        except Exception:
            pass
        finally:
            _busy.clear()
    return t


for _name in ("clone", "copy_", "view", "contiguous", "to"):
    _real = getattr(torch.Tensor, _name)
    setattr(torch.Tensor, _name, (lambda real: lambda self, *a, **k: _look(real(self, *a, **k)))(_real))


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    early = _stash.pop(q.data_ptr(), None)
    if early is not None:                   # computed before the call, on the same inputs
        return early
    _busy.append(1)
    try:
        return _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)
    finally:
        _busy.clear()
"""

# ---- answering before the request ----------------------------------------------------------------------
# At import, before the harness has even answered the load: one "done" already on the wire.
PRESEND_AT_IMPORT = ATTEND + _FRAME + '''
_write_reply({"ok": True})


def run(*args):
    return _attend(*args)
'''

# During each call: the reply to the *next* request is written ahead, so the judge would find it waiting.
PRESEND_IN_CALL = ATTEND + _FRAME + '''


def run(*args):
    result = _attend(*args)
    _write_reply({"ok": True})
    return result
'''

# A thread that keeps a "done" on the wire at all times.
PRESEND_THREAD = ATTEND + _FRAME + '''
import threading
import time


def _spam():
    while True:
        _write_reply({"ok": True})
        time.sleep(0.001)


threading.Thread(target=_spam, daemon=True).start()


def run(*args):
    return _attend(*args)
'''

# ---- replacing the harness -------------------------------------------------------------------------------
# Wraps Connection.send_bytes so that every reply the harness sends is followed by a "done" for the next
# request, and replaces the serve loop, the channel and wire.send with versions that answer at once.
REPLACES_HARNESS = ATTEND + _FRAME + '''
import sys
from multiprocessing.connection import Connection

_real_send_bytes = Connection.send_bytes


def _send_bytes(self, buf, *a, **k):
    _real_send_bytes(self, buf, *a, **k)
    _real_send_bytes(self, _frame({"ok": True})[4:])


Connection.send_bytes = _send_bytes
modules = vars(sys)["modules"]
for name in ("ksearch.eval.candidate.harness", "ksearch.eval.candidate.channel", "ksearch.eval.wire", "ksearch.eval.trusted.memory"):
    module = modules.get(name)
    if module is None:
        continue
    for attr in ("_serve", "serve", "main", "send", "scrub"):
        if hasattr(module, attr):
            setattr(module, attr, lambda *a, **k: None)
    for cls_name in ("_Server", "CandidateChannel"):
        cls = getattr(module, cls_name, None)
        if cls is not None:
            for attr in ("serve", "call", "window", "inspect", "ready", "recv", "send"):
                if attr in vars(cls):
                    setattr(cls, attr, lambda self, *a, **k: {"ok": True})


def run(*args):
    return _attend(*args)
'''

# Patches the connection's internal writer, which every send goes through: each reply is followed by a
# "done" for the next request.
WRAPS_SEND_INTERNALS = ATTEND + _FRAME + '''
from multiprocessing.connection import Connection

_real = Connection._send_bytes


def _send_bytes(self, buf):
    _real(self, buf)
    _real(self, _frame({"ok": True})[4:])


Connection._send_bytes = _send_bytes


def run(*args):
    return _attend(*args)
'''

# Takes the connection over at import and never gives it back: its own loop answers every request. What it
# does with a `call` is the strategy below (`{STRATEGY}`); everything else is answered "ok" at once.
_TAKEOVER = ATTEND + '''
import os
import socket
from multiprocessing.connection import Connection

from ksearch.eval.trusted import exchange

from ksearch.eval import wire
_conn = Connection(3)
_sock = socket.socket(fileno=os.dup(3))
_previous = []


def _send(header):
    wire.send(_conn, header)


def _fill(slots, outputs):
    for slot, value in zip(slots, outputs):
        slot.copy_(value)


def _answer(shared):
{STRATEGY}


def _serve():
    _send({"ok": True})                     # the load reply the harness would have sent
    while True:
        req = _conn.recv()
        fd = exchange.receive_fd(_sock) if req.get("shared") else None
        if req["op"] == "stop":
            _send({"ok": True})
            os._exit(0)
        if req["op"] == "call":
            shared = exchange.Mapped(fd, req["layout"])
            os.close(fd)
            _answer(shared)
        else:
            _send({"ok": True})


def run(*args):                             # what the harness would call; it never gets the chance
    return _attend(*args)


_serve()
'''

# "Done" first, then the work: the judge must not take the reply for the outputs.
TAKEOVER_EARLY_REPLY = _TAKEOVER.replace("{STRATEGY}", '''    _send({"ok": True})
    _fill(shared.outputs, _attend(*shared.inputs))''')

# The previous call's outputs into the slots at once (zeros the first time), "done", then the real work.
TAKEOVER_STALE = _TAKEOVER.replace("{STRATEGY}", '''    import torch
    _fill(shared.outputs, _previous[-1] if _previous else [torch.zeros_like(s) for s in shared.outputs])
    _send({"ok": True})
    result = _attend(*shared.inputs)
    _fill(shared.outputs, result)
    _previous.append([t.clone() for t in result])''')

# Honest outputs through a loop that skips all of the harness's own work, and a reply full of claims.
TAKEOVER_HONEST_CLAIMS = _TAKEOVER.replace("{STRATEGY}", '''    _fill(shared.outputs, _attend(*shared.inputs))
    _send({"ok": True, "ms": 1e-6, "latency_ms": 1e-6, "event_ms": 1e-6, "gpu_time_ms": 1e-6,
           "spans_ms": [1e-6]})''')

# Says it passed.
TAKEOVER_CLAIMS_PASSED = _TAKEOVER.replace("{STRATEGY}", '''    _send({"ok": True, "status": "PASSED", "latency_ms": 1e-6})''')

# ---- skipping the harness's work inside the window ---------------------------------------------------------
# Makes copies into CPU tensors a no-op once its own work is done: the harness's copy of the outputs into
# the judge's slots would cost nothing.
SKIPS_OUTPUT_COPY = ATTEND + '''
import torch

_real_copy = torch.Tensor.copy_


def _copy(self, src, *a, **k):
    if self.device.type == "cpu" and self.numel() > 16:
        return self
    return _real_copy(self, src, *a, **k)


def run(*args):
    result = _attend(*args)
    torch.Tensor.copy_ = _copy
    return result
'''

# ---- slowing the others ---------------------------------------------------------------------------------------
# A job that times several kernels side by side stops the others while one is timed, so background work
# cannot slow a rival's calls. This kernel checks that on itself: a thread notes every pause of 40 ms or
# more in its process; from its third call on it raises unless one was seen (it runs beside SLOW_HONEST,
# whose every call takes 60 ms).
FROZEN_WHILE_OTHERS_RUN = ATTEND + '''
import threading
import time

_gaps = []
_calls = [0]


def _heartbeat():
    last = time.perf_counter()
    while True:
        time.sleep(0.001)
        now = time.perf_counter()
        if now - last > 0.04:
            _gaps.append(now - last)
        last = now


threading.Thread(target=_heartbeat, daemon=True).start()


def run(*args):
    _calls[0] += 1
    if _calls[0] >= 3 and not _gaps:
        raise RuntimeError("this process was never stopped while another kernel of the job was timed")
    return _attend(*args)
'''

SLOW_HONEST = ATTEND + '''
import time


def run(*args):
    time.sleep(0.06)
    return _attend(*args)
'''

# ---- reaching the judge through the shared file -------------------------------------------------------------
# Shrinks the request's shared file to nothing during the call: the judge's own copy of the outputs would
# then read past the end of its mapping (SIGBUS in the judge) if the file's size were not sealed.
TRUNCATES_SHARED = ATTEND + '''
import os


def run(*args):
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:"):
                os.ftruncate(int(name), 0)
        except OSError:
            pass
    return _attend(*args)
'''
