"""The judge: decides verdicts and numbers in a process where candidate code never runs.

It lives in the trusted evaluation worker (ksearch.eval.trusted.worker). For every candidate it forks a fresh
process from the fork server (ksearch.eval.isolation.forkserver) that runs ksearch.eval.candidate.harness, and talks to it by
requests. The judge:

1. draws the input seeds (a new nonce per job), builds the inputs and computes the reference itself;
2. holds the tolerance and compares every output it receives (JSON + raw bytes, never a pickle);
3. holds the clock. The candidate's process learns a workload's inputs only when the clock starts, and the
   clock stops when the judge holds outputs that it then verifies (ksearch.eval.trusted.exchange): the request and
   a fresh shared-memory file are sent together, the inputs in it (CPU) or the seeds of fresh input sets
   (GPU), the output slots filled with NaN; the window ends when the reply has arrived *and* the judge has
   copied the slots out. Every timed output is verified. A message the candidate sends before it was asked
   is INCORRECT_TAMPERING; a reply sent before the work is done leaves NaN in the slots;
4. trusts nothing the candidate's process reports about time: its event times are a cross-check only, and
   the parts of a GPU window that are not the candidate's calls (generating the fresh inputs, the L2 flushes,
   fetching outputs) are subtracted as the judge measured them in its own process before any candidate
   started (`TrustedCosts`), never as the candidate's process measured them;
5. trusts the clock only within physics: a GPU time below the task's physical floor (fewest bytes over the
   peak bandwidth, FLOPs over the peak rate; ksearch.eval.clocks.roofline) is INCORRECT_TIMING.

Per workload: `check_trials` single calls, each on fresh inputs and verified; then timing.

CPU: every timed call is such a checked single call, clocked from the request to the judge's copy of the
outputs (the inputs are in the shared file, zero-copy for the candidate).

GPU: P timing input sets are built in the candidate's process (placeholder values) and graphs are captured
on them: n x [L2 flush, call(set i % P)] (ksearch.eval.clocks.gputime). Each timed window then reveals P fresh
seeds; the harness generates those inputs into the sets, replays the graph, and copies each set's last
outputs into the slots. GPU time = (window - judge-measured input generation - [protocol + output fetch]
as the judge's stand-in pays them in a process spawned as a candidate's - n x judge-measured flush) / n. Call latency: the same with n eager calls and one synchronisation, no flushes.
Windows are sized so that what is subtracted is at most OVERHEAD_SHARE of them: a graph keeps every call's
outputs alive, so where outputs are large (a long prefill) its n is bounded by memory and the window replays
it R times (n x R calls).
Before a graph is the clock, the judge checks that it holds the work: the capture's kernel counts (n calls
recorded as many kernels as n separate calls would) and a first replay on fresh inputs that must produce
their outputs. A graph that fails either (a kernel launching on a stream of its own records nothing)
is not used: GPU time then comes from windows of n x [flush, call, device synchronisation], clocked by the
judge the same way (`timing_method` "eager_sync").

Profile (GPU, advice only): once every workload is timed, each candidate still passing is asked, per workload,
for one untimed call under the profiler and for what its Triton cache says of the kernels it compiled
(`profile`: ksearch.profile.collect validates and bounds every field, occupancy and % of the physical limit are
computed here). It never changes a verdict or a score: a reply that is late, malformed, too large or not ok,
or a process that ends during it, only leaves a note in `profile_note`.
"""

from __future__ import annotations

import gc
import math
import os
import re
import secrets
import signal
import socket
import statistics
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ksearch.eval import wire
from ksearch.eval.clocks import stamps as window_stamps
from ksearch.eval.clocks.gputime import WAKE_MS, per_call_ms
from ksearch.eval.clocks.hoststall import HostCounters
from ksearch.eval.clocks.noise import noise_floor, relative_spread
from ksearch.eval.isolation import stopping
from ksearch.eval.report import (
    CANDIDATE_STATUSES,
    EvalReport,
    Metric,
    Status,
    TimingMethod,
    WindowBreakdown,
    WorkloadResult,
)
from ksearch.eval.trusted import devmem, exchange
from ksearch.eval.trusted.devmem import gib
from ksearch.eval.trusted.job import Job
from ksearch.eval.trusted.rules import check_outputs, normalize_outputs
from ksearch.task import Task, Workload, load_task

GRAPH_TARGET_MS = 25.0          # GPU time of calls per graph replay: long next to the judge's clock jitter
#: Eager calls per call-latency window, by time. Longer than a graph's: the candidate's own generation of a window's
#: fresh inputs (inside the clock, subtracted as the judge's measurement of it) varied 2.2-4.9 ms from one window
#: to the next in GQA decode's eager windows while their calls varied 0.4% (H100, session 20: window logs in
#: benchmarks/h100-2026-12-06/s20/call2_dec_e55e12e); over ~40 ms of calls that made 4 of 10 `validate` rows'
#: latency halves disagree (reported unstable). 100 ms of calls dilutes it 2.5 times; a graph window's own length
#: is set by GRAPH_TARGET_MS and OVERHEAD_SHARE.
EAGER_TARGET_MS = 100.0
#: What the judge subtracts from a window (its own measured input generation, protocol and output fetch) is
#: sized to be at most this share of it. Those costs are measured in other processes than the candidate's and
#: differ from its own by ~10-20%: on an MLA prefill window of 63 calls (36 ms) beside 130 ms of them, that
#: difference made a 575 µs kernel 870 µs, and on a 1024-token batch it left less than nothing, an honest kernel
#: failed as faster than physics (H100, session 18). Long windows make it a small share of the calls.
#: At 0.1 the part of a window that is not the candidate's calls still decided its stability: on GQA decode's
#: `full` set (H100, session 25, benchmarks/h100-2026-12-07) the calls' own stamps of one row agreed within 0.5%
#: over six windows while the windows varied 5% (the candidate's fresh-input generation took 1.0-1.5 ms of a 32 ms
#: window), and 10 of 12 candidates of a 12-round search had a row reported unstable, so no ratio. 0.04 makes
#: those windows ~80 ms of calls: the same jitter is ~1% of them, under the halves' 2% floor (STEADY_MIN).
OVERHEAD_SHARE = 0.04
MAX_EAGER_CALLS = 2000          # calls per eager loop (a graph holds at most gputime.GRAPH_MAX_CALLS, then replays)
MAX_REPLAYS = 64                # replays of one captured graph in a window
MAX_CALLS_MS = 2500.0           # GPU time of calls a window is sized for, at most
MAX_WINDOW_MS = 4000.0          # a window's length on the judge's clock, at most (its replays bounded by a probe)
TIMING_SETS = 3                 # input sets the timed calls rotate over (fewer when memory is short)
TIMING_SET_BYTES = 6 << 30      # memory the timing sets of one workload may take
#: Device memory each candidate's process is allowed besides its timing sets, its input generation and its
#: graph's outputs, when the sets are sized (`Judge.timing_sets`): its CUDA context (~0.5 GiB), the L2 flush
#: buffer, its kernel's workspace and its caching allocator's slack.
PROCESS_BYTES = 3 << 29
#: After a reference whose inputs and work took at least this much at their peak, the judge gives its caching
#: allocator's unused blocks back: kept reserved, GQA decode's largest `full` reference (~46 GiB) left a
#: candidate's process 0.8 GiB of an 80 GB H100 (session 25).
RELEASE_BYTES = 256 << 20
CROSS_CHECK_TOLERANCE = 0.25    # candidate's own event time vs the judge's clock
STEADY_MIN = 0.02               # halves of a measurement always "agree" within this
WINDOW_SEED_BASE = 1000         # timed windows draw input seeds from trial numbers above the checks'
PLACEHOLDER_SEED_BASE = 900     # the timing sets' first values: never timed, never verified
PROBE_SEED_BASE = 700           # the untimed re-runs of a window's input generation (reveal_probe)
PROFILE_SEED = 950              # the inputs of the profiled call (advice only: never verified)
PROFILE_TIMEOUT_S = 30.0        # one profile reply (a profiler's first start takes a second or two)
PROFILE_WORKLOADS = 2           # profiled per candidate: its longest and shortest (the pass costs ~2 calls + a profiler start each)

UNASKED = ("sent a message before the judge asked for one (a reply ahead of its request): replies are read "
           "only after a request, and only the outputs the judge then copies and verifies count")


@dataclass(kw_only=True)
class EvalJob(Job):
    """Judge one or more candidates (source, solution_id) on `workloads`."""

    candidates: list[tuple[str, str]]
    check_trials: int = 2
    nonce: int | None = None        # seeds the fresh inputs; None draws one at random
    entry: str = "run"
    timeout_s: float = 300.0        # per candidate
    sandbox: bool = True            # audit hooks in the candidate's process
    floor_check: bool = True
    profile: bool = True            # (GPU) the advisory profile pass after timing
    call_latency: bool = True       # (GPU) also time eager calls (their latency) when the score is GPU time


@dataclass(frozen=True)
class TrustedCosts:
    """The parts of a GPU timing window that are not the candidate's calls, measured by the judge in its own
    process before any candidate of the job started: never a number the candidate's process reports."""

    reveal_ms: float            # P fresh input sets generated and copied in (the judge's own process)
    flush_ms: float             # one L2 flush inside a graph replay
    flush_sync_ms: float        # one eager L2 flush and the synchronisations around a call (eager_sync)
    #: the protocol around a window: request and descriptor sent, shared memory mapped, the P sets' outputs
    #: fetched into it from the GPU, reply, the process stopped, the slots copied; the judge's clock around its
    #: own stand-in's `echo` with `fetch` on the GPU (0: not measured)
    protocol_ms: float = 0.0

    def besides_calls(self, n: int, per_call: float) -> float:
        """What a window of n calls holds besides them: the fresh inputs and fetched outputs, the protocol
        around them, and `per_call` for each call (a flush inside a graph, or an eager flush with its
        synchronisations)."""
        return self.reveal_ms + self.protocol_ms + n * per_call


TRUSTED_SALT = 0x5EED      # the judge's own windows draw their seeds from the nonce ^ this, apart from candidates'
NO_COSTS = TrustedCosts(0.0, 0.0, 0.0)      # subtracting nothing only ever makes a candidate look slower
_TRUSTED: dict[tuple[Any, ...], TrustedCosts] = {}   # per worker process: measured once, reused by later jobs
#: per worker process and workload, measured by the judge in its own process: (one input set's generation at
#: its peak, the judge's inputs and reference for one seed at their peak), in bytes
_PEAKS: dict[tuple[Any, ...], tuple[int, int]] = {}


@dataclass(frozen=True)
class MemoryNeed:
    """What timing one workload takes on the device at once, in bytes, by the judge's own numbers: the
    definition's input shapes and its own measurements (`_PEAKS`), never a number a candidate reports."""

    set_bytes: int          # one timing input set
    make_bytes: int         # a fresh input set's generation at its peak (a window generates one while P are held)
    judge_bytes: int        # the judge's inputs and reference for one seed at their peak (a window's references)
    outputs_bytes: int      # a captured graph's outputs, at most (gputime.iterations_for's bound)

    def total(self, sets: int, processes: int = 0) -> int:
        """With `sets` timing sets, and `processes` candidate processes not started yet (PROCESS_BYTES each)."""
        return (sets * self.set_bytes + self.make_bytes + self.judge_bytes + self.outputs_bytes
                + processes * PROCESS_BYTES)

    def words(self, sets: int, processes: int = 0) -> str:
        starts = (f" and {processes} candidate process{'es' if processes > 1 else ''} at {gib(PROCESS_BYTES)} "
                  f"each") if processes else ""
        return (f"{sets} timing input set{'s' if sets > 1 else ''} of {gib(self.set_bytes)}, a fresh set's "
                f"generation {gib(self.make_bytes)}, the judge's reference {gib(self.judge_bytes)}, a graph's "
                f"outputs {gib(self.outputs_bytes)}{starts} need {gib(self.total(sets, processes))}")


class _Clock(NamedTuple):
    """One reading of the judge's clock besides its ms: where it went and what the host withheld around it."""

    #: perf_counter ms at its start, request sent, reply received, candidate stopped, outputs taken = its end
    #: (ksearch.eval.clocks.stamps.JUDGE_STAMPS)
    stamps_ms: list[float]
    host: dict[str, float]      # ksearch.eval.clocks.hoststall.HostCounters.since


@dataclass
class _Window:
    """One timed GPU window as the judge saw it."""

    ms: float
    header: dict[str, Any]
    stale: bool = False          # the outputs were not those of the revealed inputs (only asked of a probe)
    #: the judge's perf_counter ms: clock start, request sent, reply received, candidate stopped, outputs
    #: taken (ksearch.eval.clocks.stamps.JUDGE_STAMPS)
    clock_ms: list[float] = field(default_factory=list)
    #: what the host withheld around the clock (ksearch.eval.clocks.hoststall.HostCounters.since)
    host: dict[str, float] = field(default_factory=dict)


class CandidateGone(Exception):
    """The candidate's process died, timed out or broke the protocol; `status` says which."""

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class _Cand:
    sid: str
    source: str
    report: EvalReport
    child: Any = None
    deadline: float = 0.0
    prev_outputs: list[Any] | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)
    sock: socket.socket | None = None           # the connection's socket, for handing over shared memory
    windows: dict[str, int] = field(default_factory=dict)    # timed windows drawn per workload
    # per workload, the slowest and the fastest timed window, split by the judge's and the candidate's stamps
    # (a diagnosis kept on the row, quoted in words when the judge's clock and the candidate's events disagree)
    window_parts: dict[str, list[WindowBreakdown]] = field(default_factory=dict)
    died: bool = False      # its process ended on its own (not killed by the judge once it had failed)

    @property
    def ok(self) -> bool:
        return self.report.status == Status.PASSED

    def fail(self, status: Status, message: str, workload: str | None = None, log: str = "") -> None:
        if not self.ok:
            return
        self.report.fail(status, _readable(message), workload)
        if log:
            self.report.log = ((self.report.log + "\n") if self.report.log else "") + _readable(log[-20000:])

    def row(self, w: str) -> WorkloadResult:
        for r in self.report.workloads:
            if r.workload == w:
                return r
        r = WorkloadResult(w, Status.PASSED)
        self.report.workloads.append(r)
        return r


class Judge:
    def __init__(self, job: EvalJob, spawner: Any):
        self.job = job
        self.spawner = spawner
        self.task: Task = load_task(job.task, Path(job.tasks_root) if job.tasks_root else None)
        self.device = job.device
        self.on_gpu = job.device.startswith("cuda")
        if self.on_gpu and ":" in job.device:
            torch.cuda.set_device(torch.device(job.device))
        self.nonce = job.nonce if job.nonce is not None else secrets.randbits(48)
        self.names = self.task.definition.output_names
        self.corr = self.task.correctness
        self.cands = [_Cand(sid, src, EvalReport(sid, Status.PASSED, job.device, trials=job.trials,
                                                 check_trials=job.check_trials)) for src, sid in job.candidates]
        self._datasheet: Any = None
        self._references: dict[tuple[str, int], list[Any]] = {}
        self._templates: dict[str, list[Any]] = {}     # per workload: its outputs' shapes and dtypes (meta tensors)
        self._sets: dict[str, int] = {}                # per workload: timing input sets, sized once per job
        self._no_room: dict[str, str] = {}             # per workload that cannot be timed on this device: why
        self._fewer: dict[str, str] = {}               # per workload timed on fewer sets than its cap: why
        self.costs: dict[str, TrustedCosts] = {}       # per workload, measured before the candidates start
        self._probe: _Window | None = None

    # ---- talking to a candidate -------------------------------------------------------------------------
    def _remaining(self, c: _Cand) -> float:
        return max(0.0, c.deadline - time.monotonic())

    def _no_unasked(self, c: _Cand) -> None:
        """Before every request: nothing may be waiting on the connection (a reply sent ahead). A connection
        that is readable only because it ended is a process that died between two requests, not a message."""
        try:
            waiting = c.child.conn.poll(0)
            ended = waiting and c.sock is not None and _ended(c.sock)
        except (EOFError, OSError):
            ended = True
        if ended:
            c.died = True
            raise self._died(c)
        if waiting:
            raise CandidateGone(Status.INCORRECT_TAMPERING, UNASKED)

    def _receive(self, c: _Cand) -> tuple[dict[str, Any], list[Any]]:
        try:
            return wire.receive(c.child.conn, self._remaining(c))
        except TimeoutError:
            raise CandidateGone(Status.TIMEOUT, f"no answer within eval.timeout_s={self.job.timeout_s:g}s; the "
                                         f"candidate's process and everything it started were killed") from None
        except (EOFError, OSError, BrokenPipeError):
            c.died = True
            raise self._died(c) from None
        except wire.WireError as e:
            raise CandidateGone(Status.INCORRECT_TAMPERING,
                                f"the candidate's process sent a malformed reply: {e}") from None

    def request(self, c: _Cand, req: dict[str, Any]) -> tuple[dict[str, Any], list[Any], float]:
        """Send a request, wait for the reply; returns (header, values, the judge's wall ms for it)."""
        self._no_unasked(c)
        t0 = time.perf_counter()
        try:
            c.child.conn.send(req)
        except (EOFError, OSError, BrokenPipeError):
            c.died = True
            raise self._died(c) from None
        header, values = self._receive(c)
        return header, values, (time.perf_counter() - t0) * 1e3

    def timed(self, c: _Cand, req: dict[str, Any], shared: exchange.SharedCall, inputs: dict[str, Any] | None = None,
              wake_ms: float = 0.0) -> tuple[dict[str, Any], list[torch.Tensor], float, str | None, _Clock]:
        """The judge's clock: from handing over the request and its shared memory to holding a copy of the
        output slots. The candidate's process is stopped from its reply until the judge has also compared the
        shared inputs with `inputs`: whatever it does after the clock cannot touch what the judge reads.
        On the GPU the clock starts after a wake of at least `wake_ms` (gputime.wake; 0: one round of writes).
        Returns (the reply's header, the outputs' copy, ms, the first input the call changed or None, the
        clock's `_Clock`: its stamps, a few hundred ns of the clock, to say where a window's time went, and what
        the host withheld around it)."""
        self._no_unasked(c)
        frozen = self._freeze_others(c)
        held = _Held()
        collecting = gc.isenabled()
        gc.disable()        # no collection pause of the judge's own inside its clock
        if self.on_gpu:
            # The judge's own GPU work (the window's references) is done and the GPU is back at speed before
            # the clock starts: on the H200 a window's input generation, run on a GPU idle since the last
            # window, took 6-53 ms where the judge's own measurement of it said 3, and the difference was
            # charged to the candidate's calls (GQA decode scored 0.7x instead of ~1.2x).
            from ksearch.eval.clocks.gputime import wake
            wake(min_ms=wake_ms)
        try:
            host0 = HostCounters.read()         # outside the clock: what the host withheld during it
            t0 = time.perf_counter()
            try:
                c.child.conn.send(dict(req, shared=True))
                shared.hand_over(c.sock)    # type: ignore[arg-type]  # start() opened it before any request
            except (EOFError, OSError, BrokenPipeError):
                c.died = True
                raise self._died(c) from None
            sent = time.perf_counter()
            header, _ = self._receive(c)
            replied = time.perf_counter()
            # Inside the clock: two listings of the candidate's processes (its cgroup.procs; without a control
            # group, its PID namespace's tree, every thread's children), a pidfd and a signal per process
            # (tests/adversarial/test_stop_by_cgroup.py prints it: 30-90 µs median by control group on the
            # shared 2-core CPU host, 130-140 µs by the tree for a candidate of 20 threads, where stopping the
            # process group took 4-13 µs). Waiting until the signals have landed (settle, 35-80 µs more
            # there, a few hundred for 20 threads) comes after the clock, before the judge reads the inputs.
            held = self._stop([c])
            stopped = time.perf_counter()
            outs = shared.take_outputs()
            taken = time.perf_counter()
            ms = (taken - t0) * 1e3
            host = HostCounters.read().since(host0)
            held.settle()
            return (header, outs, ms, shared.changed_input(inputs) if inputs is not None else None,
                    _Clock([t * 1e3 for t in (t0, sent, replied, stopped, taken)], host))
        finally:
            if collecting:
                gc.enable()
            held.resume()
            frozen.resume()

    def _freeze_others(self, c: _Cand) -> _Held:
        """While one candidate is timed, the others of the job are stopped, every process they started included
        (`_stop`): a candidate's background threads and processes cannot slow a rival's window. The clock
        starts only once they have all stopped. Returns what was stopped."""
        held = self._stop([other for other in self.cands if other is not c])
        held.settle()
        return held

    def _stop(self, cands: list[_Cand]) -> _Held:
        """SIGSTOP these candidates by what holds every process they started (ksearch.eval.isolation.stopping):
        their control groups, else their PID namespaces' process trees (the child's `holder`, picked in that
        order by stopping.holder_for); a candidate with neither by its process group, which a process it
        started can leave (setsid, setpgid)."""
        held, by_process_group = _Held(), []
        for c in cands:
            holder = getattr(c.child, "holder", None) if c.child is not None else None
            if holder is not None:
                held.stopped.append(stopping.stop(holder))
            else:
                by_process_group.append(c)
        held.process_groups = self._groups(by_process_group)
        _signal_groups(held.process_groups, signal.SIGSTOP)
        return held

    @staticmethod
    def _groups(cands: list[_Cand]) -> list[int]:
        """The process groups of these candidates' processes (each leads its own; a shared group is never named)."""
        groups = []
        for c in cands:
            pid = getattr(c.child, "pid", None) if c.child is not None else None
            if not pid:
                continue
            try:
                if os.getpgid(pid) == pid:
                    groups.append(pid)
            except OSError:
                continue
        return groups

    def _died(self, c: _Cand) -> CandidateGone:
        """The candidate's process is gone: a refusal of the sandbox (which ends it) is tampering."""
        refusal = getattr(c.child, "refusal", lambda: None)()
        if refusal:
            return CandidateGone(Status.INCORRECT_TAMPERING, f"the sandbox refused: {refusal}")
        return CandidateGone(Status.RUNTIME_ERROR, "the candidate's process died")

    def expect_ok(self, c: _Cand, header: dict[str, Any], workload: str | None) -> bool:
        if header.get("ok") is True and not header.get("status"):
            return True
        c.fail(_claimed(header, Status.RUNTIME_ERROR), str(header.get("message", ""))[:1500], workload,
               log=str(header.get("log", ""))[:6000])
        return False

    # ---- reference side -------------------------------------------------------------------------------------
    def inputs(self, w: Workload, seed: int) -> dict[str, Any]:
        return self.task.make_inputs(w, device=self.device, seed=seed)

    def reference(self, w: Workload, seed: int) -> list[Any]:
        """The reference outputs for (workload, seed), computed once per job: the graph's and the eager loop's
        outputs of one input set, and every candidate of a re-measurement, are checked against the same."""
        key = (w.name, seed)
        if key not in self._references:
            if self._references and next(iter(self._references))[0] != w.name:
                self._references.clear()            # one workload's references at a time (memory)
            with torch.no_grad():
                with devmem.Peak(self.device) as made:
                    inputs = self.inputs(w, seed)
                with devmem.Peak(self.device) as ran:
                    out = normalize_outputs(self.task.reference(**inputs), self.names)
                del inputs
            self._references[key] = out
            self._templates.setdefault(w.name, [torch.empty_like(r, device="meta") if isinstance(r, torch.Tensor)
                                                else r for r in out])
            if self.on_gpu:
                torch.cuda.synchronize()
                self._after_reference(w, made, ran)
        return self._references[key]

    def _after_reference(self, w: Workload, made: devmem.Peak, ran: devmem.Peak) -> None:
        """Remember what the judge's inputs and reference took at their peak, and give the allocator's cached
        blocks back when that was large: the judge waits next while a candidate's process runs, and memory it
        keeps reserved is missing there."""
        if made.peak is None or ran.peak is None:
            return
        judge_bytes = max(made.peak, (made.kept or 0) + ran.peak)
        key = self._peaks_key(w)
        make0, judge0 = _PEAKS.get(key, (0, 0))
        _PEAKS[key] = (max(make0, made.peak), max(judge0, judge_bytes))
        if judge_bytes >= RELEASE_BYTES:
            devmem.release(self.device)

    def verify(self, c: _Cand, w: Workload, got: list[Any], ref: list[Any], what: str) -> bool:
        got = [g.to(r.device) if isinstance(g, torch.Tensor) and isinstance(r, torch.Tensor) else g
               for g, r in zip(got, ref)]
        bad = next((g for g in got if isinstance(g, wire.Unsupported)), None)
        if bad is not None:
            c.fail(Status.INCORRECT_SHAPE, f"{what}: an output is {bad!r}, not a plain tensor", w.name)
            return False
        chk = check_outputs(got, ref, self.names, atol=self.corr.atol, rtol=self.corr.rtol,
                            required_matched_ratio=self.corr.required_matched_ratio, rule=self.corr.rule)
        row = c.row(w.name)
        row.max_abs_error = max(row.max_abs_error or 0.0, chk.max_abs_error)
        row.max_rel_error = max(row.max_rel_error or 0.0, chk.max_rel_error)
        row.matched_ratio = min(row.matched_ratio if row.matched_ratio is not None else 1.0, chk.matched_ratio)
        if chk.passed:
            return True
        why = ""
        if c.prev_outputs is not None and len(c.prev_outputs) == len(got) and all(
                isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and
                a.dtype == b.dtype and torch.equal(a.reshape(-1).view(torch.uint8).cpu(),
                                                   b.reshape(-1).view(torch.uint8).cpu())
                for a, b in zip(got, c.prev_outputs)):
            why = "; it is identical to its output for the previous, different inputs: a result remembered " \
                  "from an earlier call"
        c.fail(chk.status, f"{what}: {chk.message}{why}", w.name)
        return False

    # ---- steps ----------------------------------------------------------------------------------------------
    def start(self, c: _Cand, index: int) -> None:
        """Spawn the candidate's process and load its source. The payload holds nothing derived from the nonce
        (not even a module name): from the nonce and the task's public generator every input of the job
        follows, and a candidate that knew it would compute its answers before the clock."""
        c.deadline = time.monotonic() + self.job.timeout_s
        payload = {"task": self.job.task, "tasks_root": self.job.tasks_root, "device": self.device,
                   "source": c.source, "entry": self.job.entry, "name_hint": f"c{index}",
                   "sandbox": self.job.sandbox}
        c.child = self.spawner.spawn("ksearch.eval.candidate.harness:main", payload)
        wire.limit_replies(c.child.conn, 0)     # outputs come through shared memory: no reply carries a tensor
        c.sock = socket.socket(fileno=os.dup(c.child.conn.fileno()))
        try:
            header, _, _ = self._first_reply(c)
        except CandidateGone as e:
            c.fail(e.status if e.status != Status.RUNTIME_ERROR else Status.COMPILE_ERROR,
                   f"{e.message} while loading the source", None)
            return
        if not header.get("ok"):
            c.fail(_claimed(header, Status.COMPILE_ERROR), str(header.get("message", "")), None,
                   log=str(header.get("log", "")))

    def _first_reply(self, c: _Cand) -> tuple[dict[str, Any], list[Any], float]:
        t0 = time.perf_counter()
        try:
            header, values = wire.receive(c.child.conn, self._remaining(c))
        except TimeoutError:
            raise CandidateGone(Status.TIMEOUT, f"no answer within eval.timeout_s={self.job.timeout_s:g}s") from None
        except (EOFError, OSError):
            c.died = True
            raise self._died(c) from None
        except wire.WireError as e:
            raise CandidateGone(Status.INCORRECT_TAMPERING, f"malformed reply: {e}") from None
        return header, values, (time.perf_counter() - t0) * 1e3

    def ready(self, c: _Cand, w: Workload, layout: exchange.Layout) -> bool:
        """Untimed: the candidate scrubs freed memory so output elements it never writes read as NaN."""
        header, _, _ = self.request(c, {"op": "ready", "output_bytes": layout.output_bytes})
        return self.expect_ok(c, header, w.name)

    def inspect(self, c: _Cand, w: Workload, changed: str | None) -> bool:
        """Untimed, after the judge holds the outputs: the judge's own finding that the call changed a shared
        input (`changed`, taken while the candidate stood still), then the candidate's diagnosis of its own call
        (claims that can only fail it)."""
        if changed:
            c.fail(Status.INCORRECT_INPUT_MODIFIED, f"input {changed} changed during the call (inputs are read-only; "
                                               f"the call must leave them as it found them)", w.name)
            return False
        header, _, _ = self.request(c, {"op": "inspect"})
        return self.expect_ok(c, header, w.name)

    def check(self, c: _Cand, w: Workload, trial: int) -> float | None:
        """One call on fresh inputs, verified; returns the judge's wall ms from the request to holding its outputs."""
        seed = w.input_seed(self.nonce, trial)
        ref = self.reference(w, seed)
        inputs = None if self.on_gpu else self.inputs(w, seed)
        layout = exchange.plan(inputs, self.task.definition.input_names, ref, self.names)
        if not self.ready(c, w, layout):
            return None
        req: dict[str, Any] = {"op": "call", "layout": layout}
        if self.on_gpu:     # the inputs are generated in the candidate's process from the seed revealed now
            req.update(workload=w, seed=seed)
        with exchange.SharedCall(layout, inputs) as shared:
            header, outs, ms, changed, _ = self.timed(c, req, shared, inputs)
            if not self.expect_ok(c, header, w.name) or not self.inspect(c, w, changed):
                return None
        if not self.verify(c, w, outs, ref, f"check {trial + 1}"):
            return None
        c.prev_outputs = outs
        return ms

    def _bytes(self, specs: Sequence[Any], w: Workload) -> int:
        axes = {**self.task.definition.const_axes(), **w.axes}
        total = 0
        for spec in specs:
            try:
                n = math.prod(spec.concrete_shape(axes)) if not spec.is_scalar else 1
                total += n * torch.empty((), dtype=spec.torch_dtype).element_size()
            except (KeyError, ValueError, AttributeError):
                pass
        return total

    def timing_sets(self, w: Workload) -> int:
        """How many input sets the timed calls rotate over, decided once per job (`_size_sets`)."""
        if w.name not in self._sets:
            self._sets[w.name] = self._size_sets(w)
        return self._sets[w.name]

    def _size_sets(self, w: Workload) -> int:
        """Up to TIMING_SETS within TIMING_SET_BYTES (2 at least, so that consecutive calls see different
        inputs), and on a GPU no more than fit in the memory free now (torch.cuda.mem_get_info: every process
        counted) beside what the rest of the workload's timing takes (`memory_need`) and a context for each
        candidate of the job; 1 where only one fits. Where not even one fits, the workload is recorded as
        not timeable here (`_no_room`), with the bytes needed and free."""
        cap = min(TIMING_SETS, max(2, TIMING_SET_BYTES // max(self._bytes(self.task.definition.inputs, w), 1)))
        if not self.on_gpu:
            return cap
        if self._peaks_key(w) not in _PEAKS:
            try:
                self.reference(w, self._trusted_seed(w))    # the judge's own peaks; reused by `_trusted_layout`
            except torch.OutOfMemoryError as e:
                self._no_room[w.name] = (f"{w.name}: the judge's own inputs and reference for it do not fit in the "
                                         f"GPU's free memory ({str(e)[:300]})")
                return 1
            except Exception:  # noqa: BLE001 - the judge's reference fails again, reported, in the guarded steps
                return cap
            finally:
                self._references.clear()
                devmem.release(self.device)
        devmem.release(self.device)     # what the judge's allocator holds unused would count as taken
        free = devmem.free_bytes(self.device)
        if free is None:
            return cap
        need, starts = self.memory_need(w), len(self.cands)
        sets = min(cap, (free - need.total(0, starts)) // need.set_bytes)
        if sets < 1:
            self._no_room[w.name] = (f"{w.name}: not enough free GPU memory to time it: {need.words(1, starts)}; "
                                     f"{gib(free)} is free (every process on the device counted)")
            return 1
        if sets < cap:
            self._fewer[w.name] = (f"{w.name}: timed on {sets} input set{'s' if sets > 1 else ''} instead of {cap}: "
                                   f"{gib(free)} of GPU memory was free, and {need.words(sets + 1, starts)}"
                                   + ("; consecutive calls see the same inputs" if sets == 1 else ""))
        return int(sets)

    def _peaks_key(self, w: Workload) -> tuple[Any, ...]:
        return (self.task.name, str(self.task.dir), w.name, self.device)

    def _trusted_seed(self, w: Workload) -> int:
        return w.input_seed(self.nonce ^ TRUSTED_SALT, 800)

    def memory_need(self, w: Workload) -> MemoryNeed:
        """What timing `w` takes on the device besides its timing sets, by the judge's own numbers."""
        from ksearch.eval.clocks.gputime import GRAPH_MAX_CALLS, GRAPH_OUTPUT_BYTES

        make_bytes, judge_bytes = _PEAKS.get(self._peaks_key(w), (0, 0))
        out = self.output_bytes(w)
        return MemoryNeed(max(self._bytes(self.task.definition.inputs, w), 1), make_bytes, judge_bytes,
                          min(GRAPH_MAX_CALLS * out, max(GRAPH_OUTPUT_BYTES, TIMING_SETS * out)))

    def _room_now(self, c: _Cand, w: Workload, n_sets: int) -> bool:
        """Before a candidate's timing sets are built: it gives back what it no longer needs (`release`), the
        judge too, and the memory free now must hold the sets and the rest of the workload's timing. Where it
        does not, the candidate fails with the bytes needed and free rather than a CUDA out-of-memory error
        halfway (a candidate that keeps memory to itself fails itself)."""
        if not self._release(c, w):
            return False
        devmem.release(self.device)
        free = devmem.free_bytes(self.device)
        need = self.memory_need(w)
        if free is None or free >= need.total(n_sets):
            return True
        c.fail(Status.RUNTIME_ERROR, f"{w.name}: not enough free GPU memory for its timing: {need.words(n_sets)}; "
                                     f"{gib(free)} is free (every process on the device counted)", w.name)
        return False

    def _release(self, c: _Cand, w: Workload) -> bool:
        """Untimed: the candidate's process drops its timing sets and graphs and empties its allocator's cache."""
        header, _, _ = self.request(c, {"op": "release"})
        return self.expect_ok(c, header, w.name)

    def output_bytes(self, w: Workload) -> int:
        return self._bytes(self.task.definition.outputs, w)

    # ---- GPU timing ---------------------------------------------------------------------------------------
    def _costs_key(self, w: Workload) -> tuple[Any, ...]:
        return (self.task.name, str(self.task.dir), w.name, self.timing_sets(w), self.device,
                self.spawner is not None)

    def trusted(self, w: Workload, stand_in: _Cand | None = None) -> TrustedCosts:
        """What a window costs besides the candidate's calls, measured here (cached per worker process); the
        protocol's part through `stand_in` (`_protocol_ms`), none without one."""
        n_sets = self.timing_sets(w)
        key = self._costs_key(w)
        if key not in _TRUSTED:
            from ksearch.eval.clocks.gputime import flush_costs

            flush_key = ("flush", self.device)
            if flush_key not in _TRUSTED:
                f = flush_costs()
                _TRUSTED[flush_key] = TrustedCosts(0.0, f.in_graph_ms, f.eager_sync_ms)
            flush = _TRUSTED[flush_key]
            protocol = self._protocol_ms(stand_in, w) if stand_in is not None and stand_in.ok else 0.0
            costs = TrustedCosts(self._reveal_ms(w, n_sets), flush.flush_ms, flush.flush_sync_ms, protocol)
            if self.spawner is not None and not protocol:
                return costs        # the stand-in failed: nothing subtracted for it now, measured again next job
            _TRUSTED[key] = costs
        return _TRUSTED[key]

    def _stand_in(self) -> _Cand:
        """The judge's own stand-in for a candidate: the candidates' harness in a process spawned as theirs are
        (the same walls, CPUs and stop), loading a no-op the judge wrote. Only it is ever sent `echo`."""
        entry = self.job.entry if self.job.entry.isidentifier() else "run"
        stand = _Cand("judge-stand-in", f"def {entry}(*args, **kwargs):\n    return None\n",
                      EvalReport("judge-stand-in", Status.PASSED, self.device))
        self.start(stand, -1)
        return stand

    def _protocol_ms(self, stand: _Cand, w: Workload, trials: int = 7) -> float:
        """The judge's clock around `echo` windows of its stand-in with this workload's shared layout (P sets'
        output slots): what a candidate's window holds for the protocol and, on the GPU, for fetching the P
        outputs into the slots (`fetch`: done in a process spawned as a candidate's, with its own fresh mapping
        of the slots, as a candidate's window does it; the same copy in the judge's process measured 7x faster
        on a 268 MB output, and the difference was counted as the candidate's: H100, session 17). The median
        after a warm-up, as the candidate's windows are read by their median; 0 when the stand-in fails."""
        layout = self._trusted_layout(w, self.timing_sets(w))
        walls = []
        request = {"op": "echo", "layout": layout, "fetch": bool(self.on_gpu)}
        try:
            for _ in range(trials + 1):
                with exchange.SharedCall(layout) as shared:
                    header, _, ms, _, _ = self.timed(stand, request, shared,
                                                     wake_ms=WAKE_MS if self.on_gpu else 0.0)
                if not header.get("ok"):
                    return 0.0
                walls.append(ms)
        except CandidateGone:
            return 0.0
        return statistics.median(walls[1:])

    def _reveal_ms(self, w: Workload, n_sets: int, trials: int = 3) -> float:
        """The judge's own time for the inputs of a window: fresh inputs generated into P sets, one
        synchronisation (the outputs' fetch and the judge's copy of them are in the protocol's part,
        `_protocol_ms`, measured through the stand-in). The fastest of `trials` (after a warm-up)."""
        from ksearch.eval.clocks.gputime import reveal, wake

        names = self.task.definition.input_names

        def make(seed: int) -> list[Any]:
            src = self.task.make_inputs(w, device=self.device, seed=seed)
            return [src[n] for n in names]

        salt = self.nonce ^ TRUSTED_SALT
        sets = [make(w.input_seed(salt, 800 + j)) for j in range(n_sets)]
        walls = []
        for t in range(trials + 1):
            wake()              # as before a window (Judge.timed)
            t0 = time.perf_counter()
            reveal(sets, make, [w.input_seed(salt, 810 + t * n_sets + j) for j in range(n_sets)])
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e3)
        del sets
        torch.cuda.empty_cache()
        return min(walls[1:])

    def _trusted_layout(self, w: Workload, n_sets: int) -> exchange.Layout:
        """The shared layout of P sets' output slots, for the stand-in's windows (`_protocol_ms`)."""
        outs = [t for _ in range(n_sets) for t in self._output_templates(w, self._trusted_seed(w))]
        return exchange.plan(None, (), outs, self.names * n_sets)

    def _output_templates(self, w: Workload, seed: int) -> list[torch.Tensor]:
        """Tensors shaped like a call's outputs, holding no memory (the reference's: a definition's axes may be
        overridden by a workload; kept from the workload's first reference)."""
        if w.name not in self._templates:
            self.reference(w, seed)
        return list(self._templates[w.name])

    @staticmethod
    def _target_ms(target_ms: float, costs: TrustedCosts) -> float:
        """GPU time of calls a window should hold: `target_ms`, and enough for what the judge subtracts (its
        own measured input generation and protocol) to be at most OVERHEAD_SHARE of the window."""
        fixed = costs.reveal_ms + costs.protocol_ms
        return min(MAX_CALLS_MS, max(target_ms, fixed * (1 - OVERHEAD_SHARE) / OVERHEAD_SHARE))

    def _calls(self, w: Workload, per_call_ms: float, target_ms: float, costs: TrustedCosts, lo: int,
               graph: bool = True) -> int:
        """Calls in one graph capture or eager loop: enough for `_target_ms`; a graph's bounded by the memory its
        calls' outputs hold (the rest of its window comes from replaying it, `_replays`)."""
        from ksearch.eval.clocks.gputime import GRAPH_MAX_CALLS, iterations_for

        n_sets = self.timing_sets(w)
        n = iterations_for(self._target_ms(target_ms, costs), per_call_ms, lo=max(lo, n_sets),
                           hi=GRAPH_MAX_CALLS if graph else MAX_EAGER_CALLS,
                           out_bytes=self.output_bytes(w) if graph else 0)
        return n - n % n_sets + n_sets if n % n_sets else n

    def _replays(self, n: int, per_call_ms: float, probe_ms: float, costs: TrustedCosts) -> int:
        """Replays of a captured graph of n calls per window: enough for `_target_ms` of calls, and no more than
        keep the window under MAX_WINDOW_MS by the probe window's length (a trusted upper bound of one replay
        with its window's costs)."""
        want = math.ceil(self._target_ms(GRAPH_TARGET_MS, costs) / max(n * per_call_ms, 1e-6))
        bound = max(1, int(MAX_WINDOW_MS // max(probe_ms, 1e-6)))
        return max(1, min(MAX_REPLAYS, want, bound))

    def window(self, c: _Cand, w: Workload, mode: str, n: int, probe: bool = False,
               replays: int = 1) -> _Window | None:
        """One timed window on P fresh input sets, every set's outputs verified (None: the candidate failed).
        A graph window replays the captured graph of n calls `replays` times.

        A `probe` whose outputs are not those of the revealed inputs is reported as stale rather than failed:
        the graph did not hold the work, and the caller times the kernel another way."""
        n_sets = self.timing_sets(w)
        seeds = []
        for _ in range(n_sets):
            i = c.windows.get(w.name, 0)
            c.windows[w.name] = i + 1
            seeds.append(w.input_seed(self.nonce, WINDOW_SEED_BASE + i))
        refs = [self.reference(w, s) for s in seeds]
        flat = [r for ref in refs for r in ref]
        layout = exchange.plan(None, (), flat, self.names * n_sets)
        with exchange.SharedCall(layout) as shared:
            # A window is the GPU-time clock: the GPU is kept busy long enough before it for its clocks to be
            # back at speed (gputime.WAKE_MS), as when the judge measured its own costs (`_reveal_ms`).
            request = {"op": "window", "mode": mode, "seeds": seeds, "n": n, "layout": layout}
            if mode == "graph" and replays > 1:
                request["replays"] = replays
            header, outs, ms, _, clock = self.timed(c, request, shared, wake_ms=WAKE_MS)
        if not self.expect_ok(c, header, w.name):
            return None
        k = len(self.names)
        label = {"graph": "CUDA graph", "eager": "eager", "eager_sync": "eager, synchronised"}[mode]
        for j, ref in enumerate(refs):
            got = outs[j * k:(j + 1) * k]
            if probe:
                if not self._matches(got, ref):
                    return _Window(ms, header, stale=True, clock_ms=clock.stamps_ms, host=clock.host)
            elif not self.verify(c, w, got, ref, f"timed call ({label}, input set {j + 1})"):
                return None
        return _Window(ms, header, clock_ms=clock.stamps_ms, host=clock.host)

    def _matches(self, got: list[Any], ref: list[Any]) -> bool:
        got = [g.to(r.device) if isinstance(g, torch.Tensor) and isinstance(r, torch.Tensor) else g
               for g, r in zip(got, ref)]
        return check_outputs(got, ref, self.names, atol=self.corr.atol, rtol=self.corr.rtol,
                             required_matched_ratio=self.corr.required_matched_ratio, rule=self.corr.rule).passed

    def _capture(self, c: _Cand, w: Workload, n: int) -> str | None:
        """Capture n calls and probe the graph on fresh inputs: "" when it can be the clock, else why not
        (None: the candidate failed). Sets `self._probe` to the probe window."""
        header, _, _ = self.request(c, {"op": "capture", "n": n})
        if not self.expect_ok(c, header, w.name):
            return None
        why = graph_unusable(header, n)
        self._probe = None
        if not why:
            probe = self.window(c, w, "graph", n, probe=True)     # also pays the first replay's one-time costs
            if probe is None:
                return None
            if probe.stale:
                return ("a replay of its CUDA graph on fresh inputs did not produce their outputs: the work is not "
                        "in the graph (a kernel launching on a stream of its own is not captured)")
            self._probe = probe
        return why

    def _probed_per_call(self, n: int, costs: TrustedCosts) -> float:
        """GPU time per call by the judge's clock around the probe of the graph of n calls just captured."""
        assert self._probe is not None      # set whenever _capture returns ""
        return per_call_ms(self._probe.ms, n, costs.besides_calls(n, costs.flush_ms))

    def time_gpu(self, c: _Cand, w: Workload) -> None:
        """GPU time and call latency, each from the judge's clock around windows on fresh inputs, all verified.

        How many calls a window holds is first guessed from the candidate's own estimate, then set from the
        judge's clock (a graph is captured again when the guess was far too small): a wrong estimate can cost
        the candidate time, never make the windows so short that the input generation dominates them."""
        job = self.job
        n_sets = self.timing_sets(w)
        if not self._room_now(c, w, n_sets):
            return
        if w.name in self._fewer:
            c.report.flags.append(self._fewer[w.name])
        costs = self.costs.get(w.name, NO_COSTS)
        placeholders = [w.input_seed(self.nonce, PLACEHOLDER_SEED_BASE + j) for j in range(n_sets)]
        header, _, _ = self.request(c, {"op": "pool", "workload": w, "seeds": placeholders,
                                        "warmup": max(job.warmup, n_sets)})
        if not self.expect_ok(c, header, w.name):
            return
        est = max(float(header.get("est_ms") or 0.01), 1e-4)
        # Calls per window by time, however long one call is (~25 ms, more where the judge's own costs are large:
        # `_target_ms`): a fixed count of calls made a 50 ms prefill call cost 2.5 s per replay for no better a
        # median (issue 20).
        n = self._calls(w, est, GRAPH_TARGET_MS, costs, 1)
        why = self._capture(c, w, n)
        if why is None:
            return
        if not why:
            judged = self._probed_per_call(n, costs)
            need = self._calls(w, max(judged, 1e-4), GRAPH_TARGET_MS, costs, 1)
            if need > 1.5 * n:
                n = need
                why = self._capture(c, w, n)
                if why is None:
                    return
                if not why:
                    judged = self._probed_per_call(n, costs)        # the new graph's probe
        row = c.row(w.name)
        gpu: list[float] = []
        claimed: list[float] = []
        replays = 1
        if not why:
            method, mode, per_call_extra = TimingMethod.cuda_graph, "graph", costs.flush_ms
            replays = self._replays(n, max(judged, 1e-4) + per_call_extra,
                                    self._probe.ms, costs)  # type: ignore[union-attr]  # set when _capture returns ""
        else:
            method, mode, per_call_extra = TimingMethod.eager_sync, "eager_sync", costs.flush_sync_ms
            row.message = f"GPU time from the judge's clock around synchronised eager calls: {why}"
            n = self._calls(w, est + costs.flush_sync_ms, GRAPH_TARGET_MS, costs, n_sets, graph=False)
            first = self.window(c, w, mode, n)           # a warm-up that also tells how long a call takes
            if first is None:
                return
            judged = per_call_ms(first.ms, n, costs.besides_calls(n, per_call_extra))
            n = self._calls(w, max(judged, 1e-4) + per_call_extra, GRAPH_TARGET_MS, costs, n_sets, graph=False)
        calls = n * replays

        def rounds(count: int) -> bool:
            for _ in range(count):
                got = self.window(c, w, mode, n, replays=replays)
                if got is None:
                    return False
                gpu.append(per_call_ms(got.ms, calls, costs.besides_calls(calls, per_call_extra)))
                parts = window_stamps.breakdown(got.clock_ms, got.header.get("stamps_ms"),
                                                got.header.get("inputs_split_ms"), calls=calls, mode=mode)
                c.window_parts[w.name] = window_stamps.extremes(c.window_parts.get(w.name, []), parts)
                _log_window(w.name, got, parts, calls)
                event = window_stamps.finite_number(got.header.get("event_ms"))
                if event is not None:
                    claimed.append(per_call_ms(event, calls, calls * costs.flush_ms))
            return True

        # Measured twice (two halves of the rounds); halves that disagree beyond the spread are re-measured
        # once, and a row still unsteady after that is reported as unstable.
        count = max(2, job.trials)
        if not rounds(count):
            return
        if not steady(gpu, self.device):
            if not rounds(count):
                return
            row.unstable = not steady(gpu[count:], self.device)
            gpu[:] = gpu[count:] if not row.unstable else gpu
        # Call latency: eager calls, host included, no flushes; as many as the judge's GPU time says fill a window.
        if not job.call_latency and job.metric == Metric.gpu_time:
            self.record(c, w, gpu, [], method, claimed)        # a confirmation that needs only the score's clock
            return
        n_eager = self._calls(w, max(statistics.median(gpu), 0.005), EAGER_TARGET_MS, costs, n_sets, graph=False)
        lat: list[float] = []
        for _ in range(max(1, job.trials)):
            got = self.window(c, w, "eager", n_eager)
            if got is None:
                return
            lat.append(per_call_ms(got.ms, n_eager, costs.besides_calls(n_eager, 0.0)))
        self.record(c, w, gpu, lat, method, claimed)

    def record(self, c: _Cand, w: Workload, gpu: list[float], lat: list[float], method: TimingMethod,
               claimed: list[float]) -> None:
        floor = noise_floor(self.device)
        row = c.row(w.name)
        row.gpu_time_ms = statistics.median(gpu) if gpu else None
        row.gpu_time_spread = relative_spread(gpu, floor) if gpu else None
        row.call_latency_ms = statistics.median(lat) if lat else None
        row.call_latency_spread = relative_spread(lat, floor) if lat else None
        row.timing_method = method
        row.self_reported_ms = statistics.median(claimed) if claimed else None
        row.window_breakdown = list(c.window_parts.get(w.name, []))
        use_gpu = self.job.metric == Metric.gpu_time and row.gpu_time_ms is not None
        samples = gpu if use_gpu else lat
        row.trial_ms = [round(x, 6) for x in samples]
        row.latency_ms = statistics.median(samples) if samples else None
        row.spread = relative_spread(samples, floor) if samples else None
        if row.self_reported_ms and row.gpu_time_ms and method == TimingMethod.cuda_graph:
            gap = abs(row.self_reported_ms - row.gpu_time_ms) / max(row.gpu_time_ms, 1e-9)
            if gap > CROSS_CHECK_TOLERANCE and abs(row.self_reported_ms - row.gpu_time_ms) > 0.002:
                costs = self.costs.get(w.name, NO_COSTS)          # a graph window: a flush per call
                kept = c.window_parts.get(w.name)
                c.report.flags.append(f"{w.name}: the candidate's own events say {row.self_reported_ms * 1e3:.1f} µs, "
                                      f"the judge's clock {row.gpu_time_ms * 1e3:.1f} µs (the judge's counts)"
                                      + (f"; {window_note(kept, costs, costs.flush_ms)}" if kept else "")
                                      + self.reveal_probe(c, w))
        self.floor_check(c, w, row)

    def reveal_probe(self, c: _Cand, w: Workload) -> str:
        """Where a window's input generation went in the candidate's process, asked (untimed) only when the
        judge's clock and the candidate's events disagree: quoted in the flag, never used."""
        seeds = [w.input_seed(self.nonce, PROBE_SEED_BASE + 16 * j) for j in range(3)]
        header, _, _ = self.request(c, {"op": "reveal_probe", "seeds": seeds})
        return "; " + probe_note(header)

    def floor_check(self, c: _Cand, w: Workload, row: WorkloadResult) -> None:
        if not self.job.floor_check or row.latency_ms is None or not self.on_gpu:
            return
        floor_ms = self.floor_ms(w)
        measured = row.gpu_time_ms if row.gpu_time_ms is not None else row.latency_ms
        if floor_ms and measured < floor_ms:
            c.fail(Status.INCORRECT_TIMING, f"{measured * 1e3:.3f} µs of GPU time is below the physical floor of "
                                     f"{floor_ms * 1e3:.3f} µs for this workload (its fewest bytes at the HBM "
                                     f"datasheet bandwidth, its FLOPs at the highest tensor peak, x0.8): the "
                                     f"timing cannot be real", w.name)

    def floor_ms(self, w: Workload) -> float | None:
        """The task's physical floor on `w` on this GPU (None: a GPU without a datasheet entry, or no floor)."""
        from ksearch.eval.clocks.roofline import datasheet_for, physical_floor_ms

        if self._datasheet is None:
            self._datasheet = datasheet_for(torch.cuda.get_device_name()) or False
        if not self._datasheet:
            return None         # a GPU without a datasheet entry: no floor rather than a wrong one
        return physical_floor_ms(self.task, w, self._datasheet, device=self.device) or None

    def time_cpu(self, c: _Cand, w: Workload, check_ms: list[float]) -> None:
        """On a CPU every timed call is a checked call on fresh inputs, clocked by the judge."""
        samples = list(check_ms)
        t = len(samples)
        while c.ok and len(samples) < max(1, self.job.trials):
            ms = self.check(c, w, t)
            t += 1
            if ms is not None:
                samples.append(ms)
        if c.ok:
            self.record(c, w, [], samples, TimingMethod.wall_clock_cpu, [])

    # ---- the job --------------------------------------------------------------------------------------------
    def run(self) -> list[EvalReport]:
        t_start = time.perf_counter()
        if self.on_gpu:
            self._measure_trusted()
        try:
            for i, c in enumerate(self.cands):
                self.start(c, i)
            for w in self.job.workloads:
                alive = [c for c in self.cands if c.ok]
                if not alive:
                    break
                for c in alive:
                    c.row(w.name)
                    c.prev_outputs = None
                if w.name in self._no_room:         # the device cannot time it: one clear failure, not an OOM
                    for c in alive:
                        c.fail(Status.RUNTIME_ERROR, self._no_room[w.name], w.name)
                        self._end(c)
                    continue
                check_ms: dict[str, list[float]] = {c.sid: [] for c in alive}
                for t in range(self.job.check_trials):
                    k = t % len(alive)
                    for c in alive[k:] + alive[:k]:
                        self._guarded(c, w, lambda c=c: check_ms[c.sid].append(ms)  # noqa: B023 - run at once
                                      if (ms := self.check(c, w, t)) is not None else None)  # noqa: B023 - run at once
                for c in alive:
                    if c.ok:
                        if self.on_gpu:
                            self._guarded(c, w, lambda c=c: self.time_gpu(c, w))  # noqa: B023 - run at once
                            # its timing sets are done with: room for the next candidate's and workload's
                            self._guarded(c, w, lambda c=c: self._release(c, w))  # noqa: B023 - run at once
                        else:
                            self._guarded(c, w,
                                          lambda c=c: self.time_cpu(c, w, check_ms[c.sid]))  # noqa: B023 - run at once
            if self.on_gpu and self.job.profile:
                for c in self.cands:
                    try:
                        self.profile(c)
                    except Exception as e:  # noqa: BLE001 - the judge's own profiling failed: a note, never a verdict
                        c.report.profile = None
                        c.report.profile_note = f"the judge could not build the profile ({type(e).__name__}: {e})"[:1500]
        finally:
            for c in self.cands:
                self._end(c)
            self._references.clear()
            if self.on_gpu:             # the worker lives on: its cached blocks would starve the next candidate
                torch.cuda.empty_cache()
        self.finish(t_start)
        return [c.report for c in self.cands]

    def _measure_trusted(self) -> None:
        """The judge's own costs for every workload, before any candidate runs (nothing else on the GPU).
        Where that fails, nothing is subtracted: candidates can then only look slower, never faster. The
        protocol's part is measured through a stand-in process, started only when some workload's costs are
        not known to this worker yet. First every workload's timing sets are sized (`timing_sets`) by the memory
        free now, before any candidate starts; a workload the device cannot time gets no costs."""
        stand = None
        for w in self.job.workloads:
            self.timing_sets(w)
        timed = [w for w in self.job.workloads if w.name not in self._no_room]
        try:
            if self.spawner is not None and any(self._costs_key(w) not in _TRUSTED for w in timed):
                try:
                    stand = self._stand_in()
                except Exception as e:      # noqa: BLE001 - no stand-in: the protocol is not subtracted (safe)
                    for c in self.cands:
                        c.report.flags.append(f"the judge's stand-in did not start ({type(e).__name__}: {e}); "
                                              f"GPU times include the protocol and the output fetch around each window")
            for w in timed:
                try:
                    self.costs[w.name] = self.trusted(w, stand)
                except Exception as e:      # noqa: BLE001 - the judge's own GPU work; the timing stays safe
                    self.costs[w.name] = NO_COSTS
                    for c in self.cands:
                        c.report.flags.append(f"{w.name}: the judge could not measure its own window costs "
                                              f"({type(e).__name__}: {e}); GPU times include them")
        finally:
            if stand is not None:
                self._end(stand)

    def _guarded(self, c: _Cand, w: Workload, step: Any) -> None:
        if not c.ok:
            return
        t0 = time.perf_counter()
        try:
            step()
        except CandidateGone as e:
            c.fail(e.status, e.message, w.name, log=e.message)
            self._end(c)
        except Exception as e:      # noqa: BLE001 - the judge's own step failed (its reference, a CUDA error here)
            c.fail(Status.RUNTIME_ERROR, f"evaluation failed on {w.name}: {type(e).__name__}: {e}"[:1500], w.name,
                   log=traceback.format_exc())
            self._end(c)
        finally:
            row = c.row(w.name)     # what an evaluation's time went on, per workload (issue 20: its cost)
            row.judged_s = round((row.judged_s or 0.0) + time.perf_counter() - t0, 3)

    def _end(self, c: _Cand) -> None:
        """Stop the candidate's process (and everything it started); collect its output and audit findings."""
        child = c.child
        if child is None:
            return
        c.child = None
        if c.sock is not None:
            c.sock.close()
            c.sock = None
        if c.ok:
            try:
                child.conn.send({"op": "stop"})
                wire.receive(child.conn, 5.0)
            except Exception:  # noqa: BLE001 - teardown of a child that may be gone: best effort
                pass
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - teardown of a child that may be gone: best effort
            pass
        exit_note = ""
        try:
            exit_note = child.exit_description()
        except Exception:  # noqa: BLE001 - teardown of a child that may be gone: best effort
            pass
        out = ""
        try:
            out, nbytes = child.output()
        except Exception:  # noqa: BLE001 - teardown of a child that may be gone: best effort
            nbytes = 0
        try:
            refused = list(child.audit_violations())
        except Exception:  # noqa: BLE001 - teardown of a child that may be gone: best effort
            refused = []
        if refused:
            why = "the sandbox refused: " + "; ".join(sorted(set(refused)))[:1200]
            if c.report.status != Status.TIMEOUT:
                c.report.status = Status.PASSED
                c.fail(Status.INCORRECT_TAMPERING, why)
        # how it ended says why only when it ended by itself; else the judge's own SIGKILL would be blamed
        if not c.ok and c.died and c.report.status == Status.RUNTIME_ERROR and exit_note \
                and "exit code 0" not in exit_note:
            c.report.log = (c.report.log + "\n" if c.report.log else "") + f"the candidate's process {exit_note}"
        if out.strip():
            c.report.log = (c.report.log + "\n" if c.report.log else "") + \
                f"--- candidate output ({nbytes} bytes; first and last KB) ---\n{_readable(out)}"
            if nbytes > (1 << 20):
                c.report.flags.append(f"wrote {nbytes / 2**20:.1f} MiB to stdout/stderr (kept the first and last KB)")

    def finish(self, t_start: float) -> None:
        from ksearch.eval.clocks.environment import describe

        try:
            env = describe(self.device)
        except Exception as e:  # noqa: BLE001 - the environment is a note: its failure is recorded
            env = {"device": self.device, "error": f"{type(e).__name__}: {e}"}
        env["input_nonce"] = self.nonce
        env["metric"] = self.job.metric
        for c in self.cands:
            c.report.env = dict(env)
            c.report.elapsed_s = time.perf_counter() - t_start
            if c.report.profile is None and not c.report.profile_note:
                c.report.profile_note = ("no profile on a CPU: the Triton interpreter compiles nothing" if not self.on_gpu
                                         else "no profile: the profile pass is off (EvalJob.profile)"
                                         if not self.job.profile else "no profile: the kernel did not pass")

    # ---- the profile (advice only) ---------------------------------------------------------------------------
    def profile(self, c: _Cand) -> None:
        """Per workload, the launches of one untimed call and the compiled kernels, as the candidate's process
        reports them, validated and bounded; occupancy and % of the limit computed here. Never a verdict:
        whatever goes wrong ends in `profile_note`."""
        from ksearch.profile.collect import assemble, kernels_from_reply, launches_from_reply, workload_profile
        from ksearch.profile.occupancy import limits_for

        if not c.ok or c.child is None:
            return
        notes: list[str] = []
        rows = []
        kernels_raw: Any = None
        for w in self._profiled(c):
            header, why = self._advisory(c, {"op": "profile", "workload": w,
                                             "seed": w.input_seed(self.nonce, PROFILE_SEED)})
            if header is None:
                notes.append(f"{w.name}: {why}")
                break
            kernels_raw = header.get("kernels", kernels_raw)
            launches, bad = launches_from_reply(header.get("launches"))
            if bad:
                notes.append(f"{w.name}: {bad}")
            row = c.row(w.name)
            try:
                floor = self.floor_ms(w)
            except Exception as e:  # noqa: BLE001 - the floor is advice here; the timing check has its own
                floor = None
                notes.append(f"{w.name}: no physical floor ({type(e).__name__})")
            wp, note = workload_profile(w.name, launches, row.gpu_time_ms, row.gpu_time_spread, floor)
            rows.append(wp)
            if note:
                notes.append(note)
        try:
            limits = limits_for(tuple(torch.cuda.get_device_capability(torch.device(self.device))))  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - no limits: no occupancy rather than a wrong one
            limits = None
        if rows:
            c.report.profile = assemble(kernels_from_reply(kernels_raw, limits), rows).to_json()
        c.report.profile_note = "; ".join(notes)[:1500]

    def _profiled(self, c: _Cand) -> list[Workload]:
        """The workloads worth a profile: the candidate's longest and shortest by the judge's GPU time (the two
        ends of the shape space behave most differently; profiling every workload would add seconds per
        candidate to a search)."""
        gpu_ms = {r.workload: r.gpu_time_ms for r in c.report.workloads if r.gpu_time_ms is not None}
        timed = sorted((gpu_ms[w.name], i) for i, w in enumerate(self.job.workloads) if w.name in gpu_ms)
        picks = sorted({timed[-1][1], timed[0][1]}) if timed else list(range(min(PROFILE_WORKLOADS,
                                                                                     len(self.job.workloads))))
        return [self.job.workloads[i] for i in picks[:PROFILE_WORKLOADS]]

    def _advisory(self, c: _Cand, req: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        """One advisory request: (its reply, "") or (None, why there is none). Never fails the candidate; a
        process that is late or gone is left to `_end`, which stops it as usual."""
        try:
            if c.child.conn.poll(0):
                return None, "skipped: a message was waiting before the profile request"
            c.child.conn.send(req)
            header, _ = wire.receive(c.child.conn, min(self._remaining(c), PROFILE_TIMEOUT_S))
        except TimeoutError:
            return None, f"the profile pass gave no answer within {PROFILE_TIMEOUT_S:g} s"
        except (EOFError, OSError):
            return None, "the candidate's process ended during the profile pass"
        except wire.WireError as e:
            return None, f"the profile reply was malformed ({str(e)[:200]})"
        if header.get("ok") is not True:
            return None, f"the profile pass failed: {str(header.get('message', ''))[:300]}"
        return header, ""


def probe_note(header: Any) -> str:
    """The candidate process's reveal_probe reply in words (bounded: it is the candidate's to write)."""
    runs = header.get("runs") if isinstance(header, dict) and header.get("ok") else None
    if not isinstance(runs, list) or not runs:
        return "no probe of its input generation"
    parts = []
    for run in runs[:4]:
        if not isinstance(run, dict):
            continue
        got = window_stamps.finite_numbers([run.get(k) for k in ("host_ms", "make_ms", "copy_ms", "sync_ms", "gpu_ms")], 5)
        if got is None:
            continue
        alloc = run.get("allocator")
        alloc = alloc if isinstance(alloc, dict) else {}
        counts = ", ".join(f"{str(k)[:24]} {int(v)}" for k, v in list(alloc.items())[:4]
                           if isinstance(v, int) and not isinstance(v, bool) and v)
        parts.append(f"{got[0]:.2f} ms (make {got[1]:.2f}, copy {got[2]:.2f}, wait {got[3]:.2f}; GPU {got[4]:.2f})"
                     + (f" [{counts}]" if counts else ""))
    return ("its input generation re-run untimed: " + "; ".join(parts)) if parts else "no probe of its input generation"


#: A diagnosis: with KSEARCH_WINDOW_LOG=path every timed GPU window is appended there as a JSON line (its
#: parts, what the host withheld around it); read by scripts/window_log_summary.py.
WINDOW_LOG = os.environ.get("KSEARCH_WINDOW_LOG", "")


def _log_window(workload: str, got: _Window, parts: WindowBreakdown, calls: int) -> None:
    if not WINDOW_LOG:
        return
    import json

    line = {"workload": workload, "calls": calls, "ms": round(got.ms, 4), "parts_ms": parts.parts_ms,
            "unusable": parts.unusable, "inputs_split_ms": parts.inputs_split_ms, "host": got.host}
    with open(WINDOW_LOG, "a") as f:
        f.write(json.dumps(line) + "\n")


def window_note(kept: Sequence[WindowBreakdown], costs: TrustedCosts, per_call: float) -> str:
    """The slowest and the fastest timed window in words: what the judge subtracted from each, and where its
    time went by the judge's stamps and the candidate's (ksearch.eval.clocks.stamps). Quoted only, never used."""
    if not kept:
        return "no timed window"
    n = kept[0].calls
    return (f"windows of {n} calls, less the judge's own {costs.reveal_ms:.2f} ms of inputs, "
            f"{costs.protocol_ms:.2f} ms of protocol and output fetch (its stand-in's) and {n} x "
            f"{per_call * 1e3:.1f} µs of flushes; " + "; ".join(window_stamps.words(b) for b in kept))


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _readable(text: str) -> str:
    """Text the candidate's process wrote, as a report may show it: control characters (a terminal's escape
    sequences, carriage returns) become "?", so what it wrote cannot redraw the judge's verdict on a screen."""
    return _CONTROL.sub("?", text)


def _ended(sock: socket.socket) -> bool:
    """Whether the other end of `sock` has closed it with nothing left to read."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False


@dataclass
class _Held:
    """What the judge stopped: candidates by their control groups or PID namespaces, else by process groups."""

    stopped: list[stopping.Stopped] = field(default_factory=list)
    process_groups: list[int] = field(default_factory=list)

    def settle(self) -> None:
        """Wait until every process stopped by its holder has stopped (see stopping.Stopped.settle)."""
        for held in self.stopped:
            held.settle()

    def resume(self) -> None:
        for held in self.stopped:
            held.resume()
        _signal_groups(self.process_groups, signal.SIGCONT)
        self.stopped, self.process_groups = [], []


def _signal_groups(groups: list[int], sig: int) -> None:
    """The fallback where a candidate has neither a control group nor a PID namespace: its process group."""
    for group in groups:
        try:
            os.killpg(group, sig)
        except OSError:
            pass


def graph_unusable(capture_reply: dict[str, Any], n: int) -> str:
    """Why a captured graph cannot be the clock, from the capture's reply ("" when it can, as far as the
    capture tells: the first replay on fresh inputs must still produce their outputs)."""
    from ksearch.eval.clocks.gputime import KernelCounts

    if not capture_reply.get("captured"):
        return f"not capturable in a CUDA graph ({str(capture_reply.get('error', ''))[:300]})"
    counts = capture_reply.get("kernels")
    if not isinstance(counts, dict):
        return ""
    fields = []
    for name in ("call_graph", "flush_graph", "one_call"):
        value = counts.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            return ""               # not a count: the replay on fresh inputs decides
        fields.append(value)
    return KernelCounts(*fields).missing_work(n)


def steady(samples: list[float], device: str) -> bool:
    """Do the two halves of a measurement (alternate rounds) agree within its spread?"""
    if len(samples) < 2:
        return True
    a, b = statistics.median(samples[::2]), statistics.median(samples[1::2])
    mid = statistics.median(samples)
    if mid <= 0:
        return True
    return abs(a - b) / mid <= max(relative_spread(samples, noise_floor(device)), STEADY_MIN)


def _claimed(header: dict[str, Any], default: Status) -> Status:
    """The failure a candidate's reply names, when it is one a candidate may claim about itself; else `default`."""
    status = str(header.get("status") or "")
    return Status(status) if status in CANDIDATE_STATUSES else default


def judge(job: EvalJob, spawner: Any) -> list[EvalReport]:
    """Reports in candidate order."""
    return Judge(job, spawner).run()
