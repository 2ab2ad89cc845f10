"""What crosses from a candidate's process to the judge: JSON and raw tensor bytes, never a pickle.

Unpickling runs code chosen by whoever wrote the bytes, so the judge only ever calls `recv_bytes` on a
candidate's connection and parses the frames itself: one JSON header, then one frame of raw bytes per
tensor it announces (dtype, shape). Sizes are bounded, dtypes come from a fixed table, and anything that
does not parse is the candidate's failure, never the judge's.

The other direction (judge -> candidate) is ordinary pickling: the candidate may trust the judge.
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

MAX_HEADER_BYTES = 1 << 20
MAX_TENSOR_BYTES = 8 << 30

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
}
_NAMES = {v: k for k, v in DTYPES.items()}


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


def receive(conn: Any, timeout_s: float) -> tuple[dict[str, Any], list[Any]]:
    """(Judge side) a header and its values: CPU tensors rebuilt from raw bytes, scalars as sent.

    Raises TimeoutError when nothing arrives within `timeout_s`, EOFError when the process is gone and
    WireError when the message is malformed.
    """
    if not conn.poll(timeout_s):
        raise TimeoutError
    raw = conn.recv_bytes(MAX_HEADER_BYTES)
    try:
        header = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"unreadable message header ({e})") from None
    if not isinstance(header, dict) or not isinstance(header.get("values", []), list):
        raise WireError("message header is not an object with a list of values")
    values: list[Any] = []
    for spec in header.get("values", []):
        if not isinstance(spec, dict):
            raise WireError("a value description is not an object")
        kind = spec.get("kind")
        if kind == "scalar":
            values.append(spec.get("value"))
        elif kind == "tensor":
            dtype = DTYPES.get(spec.get("dtype"))  # type: ignore[arg-type]
            shape = spec.get("shape")
            if dtype is None or not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
                raise WireError(f"bad tensor description {spec}")
            nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            if nbytes > MAX_TENSOR_BYTES:
                raise WireError(f"tensor of {nbytes} bytes is over the limit")
            if not conn.poll(timeout_s):
                raise TimeoutError
            data = conn.recv_bytes(max(nbytes, 1) + 1)
            if len(data) != nbytes:
                raise WireError(f"tensor announced {nbytes} bytes, {len(data)} arrived")
            t = torch.frombuffer(bytearray(data), dtype=torch.uint8) if nbytes else torch.empty(0, dtype=torch.uint8)
            values.append(t.view(dtype).reshape(shape) if nbytes else torch.empty(shape, dtype=dtype))
        else:
            values.append(Unsupported(str(spec.get("type", "?"))))
    return header, values


class Unsupported:
    """A value the candidate returned that is neither a plain tensor nor a scalar."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"
