"""What crosses from a candidate's process to the judge: JSON and raw tensor bytes, never a pickle.

Unpickling runs code chosen by whoever wrote the bytes, so the judge never calls `recv` on a candidate's
connection: it reads the frames itself, off the socket, and parses them. One JSON header, then one frame of
raw bytes per tensor it announces (dtype, shape). A reply is bounded three ways, so a candidate's process can
fail only itself, never hang or swell the judge:

- time: one deadline for the whole reply (header and every tensor frame), not for its first byte; a frame
  that is half sent when the deadline passes is a TimeoutError;
- size: the header is at most MAX_HEADER_BYTES, and the tensors it announces together at most the limit
  the judge set for this connection (`limit_replies`; the judge sets none at all, from the moment it spawns
  a candidate, since outputs travel through shared memory), else MAX_REPLY_BYTES; a frame longer than its
  tensor is refused before anything is allocated for it;
- shape: a header that is not JSON, nested too deep, or describes a tensor the judge cannot build is a
  WireError, as is any frame that does not match what the header announced;
- text: a string of the header holds only characters UTF-8 can write. JSON escapes can spell lone UTF-16
  surrogates ("\\ud800"), which no file or terminal accepts: an exception message holding one made the search
  process die printing the report (and again on every resume, from its journal). They become "?".

The other direction (judge -> candidate) is ordinary pickling: the candidate may trust the judge.

Frames are those of multiprocessing.connection (a 4-byte big-endian length, or -1 and an 8-byte length),
so the candidate's side sends with `Connection.send_bytes`.
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import struct
import time
from typing import Any

import torch

MAX_HEADER_BYTES = 1 << 20
MAX_REPLY_BYTES = 8 << 30          # every tensor of one reply together, when the judge set no tighter limit
MAX_DIMS = 16
MAX_DIM = 1 << 40

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
}
_NAMES = {v: k for k, v in DTYPES.items()}
_LIMIT_ATTR = "_ksearch_reply_limit"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class WireError(ValueError):
    """The candidate's process sent something that is not a well-formed message."""


def _describe(value: Any) -> dict[str, Any]:
    if isinstance(value, torch.Tensor):
        if value.dtype not in _NAMES:
            return {"kind": "unsupported", "type": f"tensor of {value.dtype}"}
        return {"kind": "tensor", "dtype": _NAMES[value.dtype], "shape": list(value.shape)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"kind": "scalar", "value": value if not isinstance(value, float) or math.isfinite(value)
                else repr(value)}
    return {"kind": "unsupported", "type": type(value).__name__}


def send(conn: Any, header: dict[str, Any], tensors: list[Any] | None = None) -> None:
    """(Candidate side) one header plus the raw bytes of each tensor in `tensors` (host copies)."""
    tensors = tensors or []
    header = dict(header)
    header["values"] = [_describe(t) for t in tensors]
    conn.send_bytes(json.dumps(header).encode())
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype in _NAMES:
            host = t.detach().to("cpu").contiguous()
            conn.send_bytes(host.reshape(-1).view(torch.uint8).numpy().tobytes() if host.numel() else b"")


def limit_replies(conn: Any, total_bytes: int | None) -> None:
    """(Judge side) the most tensor bytes one reply on `conn` may announce; None: MAX_REPLY_BYTES."""
    setattr(conn, _LIMIT_ATTR, None if total_bytes is None else max(0, int(total_bytes)))


def reply_limit(conn: Any) -> int:
    limit = getattr(conn, _LIMIT_ATTR, None)
    return MAX_REPLY_BYTES if limit is None else min(limit, MAX_REPLY_BYTES)


class _FrameReader:
    """Reads whole frames off a connection's socket, every byte before one deadline."""

    def __init__(self, conn: Any, deadline: float):
        self.fd = conn.fileno()
        self.deadline = deadline
        self.poller = select.poll()
        self.poller.register(self.fd, select.POLLIN | select.POLLPRI)

    def _wait(self) -> None:
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if self.poller.poll(max(1, int(left * 1000))):
                return

    def _into(self, buf: bytearray | memoryview) -> None:
        view = memoryview(buf)
        got = 0
        while got < len(view):
            self._wait()
            n = os.readv(self.fd, [view[got:]])
            if n == 0:
                raise EOFError
            got += n

    def frame(self, limit: int, what: str) -> bytearray:
        """One frame of at most `limit` bytes (a longer one is refused before anything is allocated)."""
        head = bytearray(4)
        self._into(head)
        (size,) = struct.unpack("!i", head)
        if size == -1:
            big = bytearray(8)
            self._into(big)
            (size,) = struct.unpack("!Q", big)
        if size < 0 or size > limit:
            raise WireError(f"{what} of {size} bytes where at most {limit} may come")
        data = bytearray(size)
        self._into(data)
        return data


def _tensor_spec(spec: dict[str, Any]) -> tuple[torch.dtype, list[int], int]:
    dtype_name = spec.get("dtype")
    dtype = DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    shape = spec.get("shape")
    if dtype is None or not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
            type(s) is int and 0 <= s <= MAX_DIM for s in shape):
        raise WireError(f"bad tensor description {str(spec)[:200]}")
    return dtype, shape, math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def _header(raw: bytearray) -> dict[str, Any]:
    try:
        text = raw.decode()
        header = json.loads(text)
        if _SURROGATE_ESCAPE.search(text):      # pairs were joined by json.loads; what is left alone becomes "?"
            header = json.loads(json.dumps(header, ensure_ascii=False).encode("utf-8", "replace"))
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError) as e:
        raise WireError(f"unreadable message header ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(header, dict) or not isinstance(header.get("values", []), list):
        raise WireError("message header is not an object with a list of values")
    return header


def receive(conn: Any, timeout_s: float) -> tuple[dict[str, Any], list[Any]]:
    """(Judge side) a header and its values: CPU tensors rebuilt from raw bytes, scalars as sent.

    Raises TimeoutError when the whole reply has not arrived within `timeout_s`, EOFError when the process
    is gone and WireError when the message is malformed or over its limits.
    """
    reader = _FrameReader(conn, time.monotonic() + max(0.0, timeout_s))
    header = _header(reader.frame(MAX_HEADER_BYTES, "a message header"))
    specs = header.get("values", [])
    plan: list[Any] = []
    total, limit = 0, reply_limit(conn)
    for spec in specs:
        if not isinstance(spec, dict):
            raise WireError("a value description is not an object")
        kind = spec.get("kind")
        if kind == "tensor":
            dtype, shape, nbytes = _tensor_spec(spec)
            total += nbytes
            plan.append((dtype, shape, nbytes))
        elif kind == "scalar":
            value = spec.get("value")
            if value is not None and not isinstance(value, (bool, int, float, str)):
                raise WireError("a scalar value is not a plain number or string")
            plan.append(("scalar", value))
        else:
            plan.append(("unsupported", str(spec.get("type", "?"))[:100]))
    if total > limit:
        raise WireError(f"the reply announces {total} bytes of tensors; the outputs this request may return "
                        f"take at most {limit}")
    values: list[Any] = []
    for item in plan:
        if item[0] == "scalar":
            values.append(item[1])
        elif item[0] == "unsupported":
            values.append(Unsupported(item[1]))
        else:
            dtype, shape, nbytes = item
            data = reader.frame(nbytes, "a tensor frame")
            if len(data) != nbytes:
                raise WireError(f"tensor announced {nbytes} bytes, {len(data)} arrived")
            if nbytes:
                values.append(torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape))
            else:
                values.append(torch.empty(shape, dtype=dtype))
    return header, values


class Unsupported:
    """A value the candidate returned that is neither a plain tensor nor a scalar."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"
