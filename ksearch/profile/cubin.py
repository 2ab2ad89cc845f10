"""Registers and spills of the kernels in a CUDA cubin, read from its ELF notes (no driver, no GPU).

ptxas records per kernel, in the cubin's `.nv.info` section, the registers per thread (EIATTR_REGCOUNT)
and the per-thread stack frame (EIATTR_FRAME_SIZE): the local memory a kernel without recursion spends on
spilled registers, which is what Triton reports as `n_spills` and `cuobjdump -res-usage` as STACK.

The bytes may come from a candidate's process, so the reader trusts nothing in them: every offset and
size is checked against the data before it is used, the input is capped, and any inconsistency gives an
empty answer rather than an exception.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAX_CUBIN_BYTES = 16 << 20
MAX_SECTIONS = 4096
MAX_RECORDS = 1 << 16

EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F
EIFMT_SVAL = 0x04           # a record with a 2-byte size and that many bytes; others carry 2 bytes in place

_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")


@dataclass(frozen=True)
class KernelResources:
    name: str
    registers: int | None = None
    frame_bytes: int | None = None


def _cstr(data: bytes, offset: int, limit: int = 512) -> str:
    if not 0 <= offset < len(data):
        return ""
    end = data.find(b"\0", offset, offset + limit)
    return data[offset:end if end >= 0 else offset].decode("utf-8", "replace")


def _sections(data: bytes) -> list[tuple[str, int, int, int]]:
    """(name, type, offset, size) per section; empty when the header is not that of a little-endian ELF64."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shentsize != _SECTION.size or not 0 < shnum <= MAX_SECTIONS or shoff + shnum * shentsize > len(data):
        return []
    raw = [_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    if shstrndx >= shnum:
        return []
    names_at, names_size = raw[shstrndx][4], raw[shstrndx][5]
    if names_at + names_size > len(data):
        return []
    names = data[names_at:names_at + names_size]
    out = []
    for name, kind, _flags, _addr, offset, size, *_ in raw:
        if kind != 8 and offset + size > len(data):        # 8: SHT_NOBITS, which occupies no bytes
            return []
        out.append((_cstr(names, name), kind, offset, size))
    return out


def _symbols(data: bytes, sections: list[tuple[str, int, int, int]]) -> dict[int, str]:
    symtab = next((s for s in sections if s[0] == ".symtab"), None)
    strtab = next((s for s in sections if s[0] == ".strtab"), None)
    if symtab is None or strtab is None:
        return {}
    strings = data[strtab[2]:strtab[2] + strtab[3]]
    count = min(symtab[3] // _SYMBOL.size, MAX_RECORDS)
    return {i: _cstr(strings, _SYMBOL.unpack_from(data, symtab[2] + i * _SYMBOL.size)[0]) for i in range(count)}


def cubin_resources(data: bytes) -> list[KernelResources]:
    """Registers per thread and stack frame bytes of each kernel the cubin describes ([] when unreadable)."""
    if not isinstance(data, (bytes, bytearray)) or len(data) > MAX_CUBIN_BYTES:
        return []
    data = bytes(data)
    sections = _sections(data)
    symbols = _symbols(data, sections)
    found: dict[int, dict[str, int]] = {}
    for name, _kind, offset, size in sections:
        if name != ".nv.info" and not name.startswith(".nv.info."):
            continue
        at, end, records = offset, offset + size, 0
        while at + 4 <= end and records < MAX_RECORDS:
            fmt, attr, value = struct.unpack_from("<BBH", data, at)
            records += 1
            body, at = at + 4, at + 4 + (value if fmt == EIFMT_SVAL else 0)
            if at > end:
                break
            if fmt == EIFMT_SVAL and value == 8 and attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE):
                sym, number = struct.unpack_from("<II", data, body)
                key = "registers" if attr == EIATTR_REGCOUNT else "frame_bytes"
                found.setdefault(sym, {})[key] = number
    return [KernelResources(symbols.get(sym, ""), v.get("registers"), v.get("frame_bytes"))
            for sym, v in sorted(found.items()) if symbols.get(sym)]
