"""Where a timed GPU window's time went: the judge's stamps and the candidate's, on one clock.

The judge's clock for a window (ksearch.eval.trusted.judge, `Judge.timed`) has exceeded the candidate's own
account of it by 1.4-21 ms on an H100; this splits the window so one run says where. Both processes stamp
with `time.perf_counter()`, which on Linux is CLOCK_MONOTONIC: one clock for every process of the host,
since no time namespace is unshared for the candidate (ksearch.eval.isolation: PID, network, mount, IPC and
user namespaces only). So the stamps of the two processes compare directly.

The judge's stamps (ms): clock start, request and fd sent, reply received, candidate stopped, outputs taken
(the clock's end). The candidate's (`stamps_ms` in its window reply, ksearch.eval.candidate.harness): request
arrived, shared memory mapped (its inputs start), inputs done, calls done, outputs copied, reply about to be
sent. Its stamps are its process's claims: used only when they are six finite numbers, in order, between the
judge's clock start and the judge receiving the reply; a diagnosis either way, never a number that counts.
"Request in flight" may be a little below zero: the candidate can have the request before the judge's send
call has returned to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ksearch.eval.report import WindowBreakdown

JUDGE_STAMPS = ("start", "sent", "reply", "stopped", "taken")
CANDIDATE_STAMPS = ("arrived", "mapped", "inputs", "calls", "outputs", "sending")

#: The parts of a window with the candidate's stamps, in order, and in words.
PARTS = {"send": "send", "to_candidate": "request in flight", "map": "map", "inputs": "inputs", "calls": "calls",
         "outputs": "outputs", "to_reply": "until its reply", "to_judge": "reply in flight", "stop": "stop",
         "take": "take"}
#: The parts the judge's stamps alone give: "candidate" is from the request sent to the reply received.
JUDGE_PARTS = {"send": "send", "candidate": "candidate", "stop": "stop", "take": "take"}


def finite_number(x: Any) -> float | None:
    """`x` as a float when it is a finite number (JSON from the candidate's process: a bool is no number, nor
    is an integer too large for a float), else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def finite_numbers(value: Any, count: int) -> list[float] | None:
    """`value` as floats when it is a list of `count` finite numbers (`finite_number`), else None."""
    if not isinstance(value, list) or len(value) != count:
        return None
    out = [finite_number(x) for x in value]
    return None if any(f is None for f in out) else out      # type: ignore[return-value]  # no None left


def why_unusable(judge_ms: Sequence[float], stamps: Any) -> str:
    """"" when the candidate's stamps can split the window, else why not."""
    return _why(judge_ms, stamps, finite_numbers(stamps, len(CANDIDATE_STAMPS)))


def _why(judge_ms: Sequence[float], stamps: Any, got: list[float] | None) -> str:
    if stamps is None:
        return "none sent"
    if got is None:
        return f"not {len(CANDIDATE_STAMPS)} finite numbers"
    if any(b < a for a, b in zip(got, got[1:])):
        return "not in order"
    # causally the candidate has the request after the clock started and sends its reply before the judge
    # receives it: anything else is a different clock or made-up numbers
    if got[0] < judge_ms[0] or got[-1] > judge_ms[2]:
        return "outside the judge's clock"
    return ""


def breakdown(judge_ms: Sequence[float], stamps: Any, split: Any = None, *, calls: int = 0,
              mode: str = "") -> WindowBreakdown:
    """One window's parts from the judge's five stamps (ms, `JUDGE_STAMPS`) and the candidate's reply field
    `stamps_ms` (six, `CANDIDATE_STAMPS`; anything at all, it is the candidate's to write). The parts sum to
    the judge's clock."""
    if len(judge_ms) != len(JUDGE_STAMPS):
        raise ValueError(f"the judge's stamps are {len(JUDGE_STAMPS)}, got {len(judge_ms)}")
    start, sent, reply, stopped, taken = (float(x) for x in judge_ms)
    raw = finite_numbers(stamps, len(CANDIDATE_STAMPS))
    why = _why(judge_ms, stamps, raw)
    if why or raw is None:          # (raw is None only with a reason)
        points, names = [start, sent, reply, stopped, taken], list(JUDGE_PARTS)
    else:
        points, names = [start, sent, *raw, reply, stopped, taken], list(PARTS)
    parts = {name: round(b - a, 4) for name, a, b in zip(names, points, points[1:])}
    inputs_split = finite_numbers(split, 3) if not why else None
    return WindowBreakdown(mode=mode, calls=int(calls), ms=round(taken - start, 4), parts_ms=parts, unusable=why,
                           candidate_stamps_ms=[round(x - start, 4) for x in raw] if raw else [],
                           inputs_split_ms=[round(x, 4) for x in inputs_split] if inputs_split else [])


def extremes(kept: Sequence[WindowBreakdown], new: WindowBreakdown) -> list[WindowBreakdown]:
    """[slowest, fastest] of the windows kept so far and `new` (the same window twice while there is one)."""
    every = [*kept, new]
    return [replace(max(every, key=lambda b: b.ms), which="slowest"),
            replace(min(every, key=lambda b: b.ms), which="fastest")]


def _ms(x: float) -> str:
    return f"{round(x, 2) + 0.0:.2f}"        # + 0.0: a few µs below zero read "0.00", not "-0.00"


def words(b: WindowBreakdown) -> str:
    """e.g. "slowest 69.03 ms: send 0.02, request in flight 0.05, ..., take 0.87" (ms; they sum to the first)."""
    labels = JUDGE_PARTS if b.unusable else PARTS
    said = []
    for name, ms in b.parts_ms.items():
        said.append(f"{labels.get(name, name[:24])} {_ms(ms)}")
        if name == "inputs" and len(b.inputs_split_ms) == 3:
            make, copy, wait = b.inputs_split_ms
            said[-1] += f" (make {_ms(make)}, copy {_ms(copy)}, wait {_ms(wait)})"
    text = f"{b.which or 'window'} {_ms(b.ms)} ms: " + ", ".join(said)
    return text + (f" (the candidate's stamps are unusable: {b.unusable})" if b.unusable else "")
