"""The judge's reader of candidate replies is bounded: whole-reply deadline, total size, header shape.

Each case writes raw frames to one end of a socket pair, as a hostile candidate's process could, and the
judge's `wire.receive` on the other end must end quickly with TimeoutError or WireError, never hang, never
allocate what the frames claim, never raise anything else.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from multiprocessing.connection import Connection

import pytest
import torch

from ksearch.eval import wire


@pytest.fixture()
def pair():
    a, b = socket.socketpair()
    judge_end, cand_end = Connection(a.detach()), Connection(b.detach())
    yield judge_end, cand_end
    judge_end.close()
    cand_end.close()


def _raw(conn: Connection, data: bytes) -> None:
    """Bytes straight onto the socket, frame headers and all."""
    view = memoryview(data)
    while view:
        n = os.write(conn.fileno(), view)
        view = view[n:]


def _header(values: list, **extra) -> bytes:
    return json.dumps({"ok": True, "values": values, **extra}).encode()


def test_an_honest_reply_round_trips(pair):
    judge_end, cand_end = pair
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    wire.send(cand_end, {"ok": True, "n": 3}, [t, torch.empty(0, 5, dtype=torch.bfloat16), 2.5])
    header, values = wire.receive(judge_end, 5)
    assert header["n"] == 3 and torch.equal(values[0], t)
    assert values[1].shape == (0, 5) and values[1].dtype == torch.bfloat16 and values[2] == 2.5


def test_a_half_sent_header_ends_at_the_deadline(pair):
    judge_end, cand_end = pair
    _raw(cand_end, struct.pack("!i", 1000) + b'{"ok": tr')
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        wire.receive(judge_end, 0.5)
    assert time.monotonic() - t0 < 3


def test_a_half_sent_tensor_ends_at_the_deadline_of_the_whole_reply(pair):
    """The first byte comes at once and more keep trickling: the deadline is for the reply, not per read."""
    judge_end, cand_end = pair
    cand_end.send_bytes(_header([{"kind": "tensor", "dtype": "uint8", "shape": [4096]}]))
    _raw(cand_end, struct.pack("!i", 4096))
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            try:
                _raw(cand_end, b"x")
            except OSError:
                return
            time.sleep(0.05)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            wire.receive(judge_end, 1.0)
    finally:
        stop.set()
    assert time.monotonic() - t0 < 3


def test_replies_are_bounded_in_total_not_per_tensor(pair):
    judge_end, cand_end = pair
    wire.limit_replies(judge_end, 48 << 10)
    gib = {"kind": "tensor", "dtype": "uint8", "shape": [1 << 30]}
    cand_end.send_bytes(_header([gib, gib, gib]))
    with pytest.raises(wire.WireError, match="at most 49152"):
        wire.receive(judge_end, 5)


def test_a_frame_longer_than_its_tensor_is_refused_before_it_is_read(pair):
    judge_end, cand_end = pair
    cand_end.send_bytes(_header([{"kind": "tensor", "dtype": "float32", "shape": [2]}]))
    _raw(cand_end, struct.pack("!i", -1) + struct.pack("!Q", 1 << 40))
    with pytest.raises(wire.WireError, match="at most 8"):
        wire.receive(judge_end, 5)


def test_an_oversized_header_is_refused(pair):
    judge_end, cand_end = pair
    _raw(cand_end, struct.pack("!i", wire.MAX_HEADER_BYTES + 1))
    with pytest.raises(wire.WireError, match="header"):
        wire.receive(judge_end, 5)


@pytest.mark.parametrize("raw", [
    b"[" * 200_000 + b"]" * 200_000,                 # RecursionError inside json
    b'{"values": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001,
    b'{"values": [1e999999999999]}',
    b'{"values": [{"kind": "scalar", "value": [1, 2]}]}',
    b'{"values": [{"kind": "tensor", "dtype": "float32", "shape": [-1]}]}',
    b'{"values": [{"kind": "tensor", "dtype": "float32", "shape": [1.5]}]}',
    b'{"values": [{"kind": "tensor", "dtype": "float32", "shape": [0, 1099511627777]}]}',
    b'{"values": [{"kind": "tensor", "dtype": "object", "shape": [1]}]}',
    b'{"values": [{"kind": "tensor", "dtype": ["float32"], "shape": [1]}]}',
    b'{"values": "no"}', b"\xff\xfe", b"123", b'{"x": ' + b"9" * 10000 + b"}",
])
def test_a_malformed_header_is_a_wire_error(pair, raw):
    judge_end, cand_end = pair
    threading.Thread(target=cand_end.send_bytes, args=(raw,), daemon=True).start()   # larger than the buffer
    with pytest.raises(wire.WireError):
        wire.receive(judge_end, 5)


def test_a_closed_connection_is_eof(pair):
    judge_end, cand_end = pair
    _raw(cand_end, struct.pack("!i", 100) + b"{")
    cand_end.close()
    with pytest.raises(EOFError):
        wire.receive(judge_end, 5)
