"""The candidate's end of its connection to the judge, with everything it uses bound before candidate code runs.

The candidate's harness (ksearch.eval.candidate.harness) builds one `CandidateChannel` before it imports the
candidate's module. Its methods call functions and bound methods captured here, at construction: a candidate
that later replaces `Connection.send_bytes`, `wire.send`, `socket.recv_fds` or a module attribute of the
harness changes nothing the harness calls. This is a courtesy to honest kernels, not the guarantee: the
candidate owns its process and can always write frames to the connection's descriptor itself. The guarantee
is on the judge's side (ksearch.eval.trusted.judge, ksearch.eval.trusted.exchange): a frame nobody asked for fails the
candidate, and a reply counts only through the outputs the judge then copies and verifies.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ksearch.eval import wire
from ksearch.eval.trusted import exchange


class _Sender:
    """What wire.send needs from a connection: a send_bytes bound now."""

    def __init__(self, send_bytes: Any):
        self.send_bytes = send_bytes


class CandidateChannel:
    def __init__(self, conn: Any):
        self._recv = conn.recv
        self._sender = _Sender(conn.send_bytes)
        self._send = wire.send
        self._receive_fd = exchange.receive_fd
        self._sock = socket.socket(fileno=os.dup(conn.fileno()))     # the same socket, for SCM_RIGHTS

    def recv(self) -> tuple[dict[str, Any], int | None]:
        """The next request, and the descriptor of its shared memory when it comes with one."""
        req = self._recv()
        fd = self._receive_fd(self._sock) if isinstance(req, dict) and req.get("shared") else None
        return req, fd

    def send(self, header: dict[str, Any], tensors: list[Any] | None = None) -> None:
        self._send(self._sender, header, tensors)
