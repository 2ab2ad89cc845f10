"""The judge: decides verdicts and numbers in a process where candidate code never runs.

It lives in the trusted evaluation worker (ksearch.eval.worker). For every candidate it forks a fresh
process from the fork server (ksearch.eval.forkserver: own PID and network namespaces where the OS allows,
audit hooks, nothing outlives it) that runs ksearch.eval.candidate, and talks to it by requests. The judge:

1. draws the input seeds (a new nonce per job) and builds the same inputs itself, so the reference is
   computed here, from inputs the candidate never touched, after the candidate's call;
2. holds the tolerance and compares every output it receives (JSON + raw bytes, never a pickle);
3. holds the clock: a latency is the judge's own wall-clock measurement of a request (a CUDA-graph replay,
   an eager loop, a CPU call), never a number the candidate reports. The candidate's own event times are
   kept only as a cross-check;
4. trusts the clock only within physics: a latency below the task's physical floor (fewest bytes over the
   peak bandwidth, FLOPs over the peak rate; ksearch.eval.roofline) is INCORRECT_TIMING;
5. times on input sets that differ from the check inputs: a pool of fresh sets the calls rotate over,
   whose outputs are checked too.

Per workload: `check_trials` fresh-input checks; then timing. On a GPU: GPU time = (wall(replay of a graph
of n x [L2 flush, call]) - wall(replay of n flushes)) / n, per trial (ksearch.eval.gputime); call latency =
wall(n eager calls + one sync) / n. When the call cannot be captured in a graph, GPU time falls back to
CUPTI kernel spans measured in the candidate's process, accepted only when the judge's clock agrees that
the loop took at least that long. On a CPU every timed call is a checked call on fresh inputs, clocked by
the judge around the request.
"""

from __future__ import annotations

import math
import secrets
import statistics
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ksearch.eval import wire
from ksearch.eval.noise import noise_floor, relative_spread
from ksearch.eval.report import (COMPILE_ERROR, INCORRECT_LATE_WRITE, INCORRECT_NUMERICAL, INCORRECT_TAMPERING,
                                 INCORRECT_TIMING, PASSED, RUNTIME_ERROR, TIMEOUT, EvalReport, WorkloadResult)
from ksearch.eval.rules import check_outputs, normalize_outputs
from ksearch.task import Task, Workload, load_task

GRAPH_TARGET_MS = 25.0          # GPU time of calls per graph replay: long next to the judge's clock jitter
EAGER_TARGET_MS = 25.0
TIMING_SETS = 3                 # input sets the timed calls rotate over (fewer when memory is short)
TIMING_SET_BYTES = 6 << 30      # memory the timing sets of one workload may take
CROSS_CHECK_TOLERANCE = 0.25    # candidate's own event time vs the judge's clock
STEADY_MIN = 0.02               # halves of a measurement always "agree" within this


@dataclass
class EvalJob:
    """Judge one or more candidates (source, solution_id) on `workloads`."""

    task: str
    candidates: list[tuple[str, str]]
    workloads: list[Workload]
    device: str
    run_seed: int = 0
    warmup: int = 10
    iterations: int = 50            # not used: a GPU replay holds ~25 ms of calls (eval.iterations stays a key)
    trials: int = 3
    check_trials: int = 2
    nonce: int | None = None        # seeds the fresh inputs; None draws one at random
    tasks_root: str | None = None
    entry: str = "run"
    metric: str = "gpu_time"        # gpu_time | call_latency: which one becomes latency_ms (the score's)
    timeout_s: float = 300.0        # per candidate
    sandbox: bool = True            # audit hooks in the candidate's process
    floor_check: bool = True


class CandidateGone(Exception):
    """The candidate's process died, timed out or broke the protocol; `status` says which."""

    def __init__(self, status: str, message: str):
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
    ran_code: bool = True
    samples: dict[str, list[float]] = field(default_factory=dict)
    died: bool = False      # its process ended on its own (not killed by the judge once it had failed)

    @property
    def ok(self) -> bool:
        return self.report.status == PASSED

    def fail(self, status: str, message: str, workload: str | None = None, log: str = "") -> None:
        if not self.ok:
            return
        self.report.fail(status, message, workload)
        if log:
            self.report.log = ((self.report.log + "\n") if self.report.log else "") + log[-20000:]

    def row(self, w: str) -> WorkloadResult:
        for r in self.report.workloads:
            if r.workload == w:
                return r
        r = WorkloadResult(w, PASSED)
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
        self.cands = [_Cand(sid, src, EvalReport(sid, PASSED, job.device, trials=job.trials,
                                                 check_trials=job.check_trials)) for src, sid in job.candidates]
        self._datasheet: Any = None
        self._references: dict[tuple[str, int], list[Any]] = {}

    # ---- talking to a candidate -------------------------------------------------------------------------
    def _remaining(self, c: _Cand) -> float:
        return max(0.0, c.deadline - time.monotonic())

    def request(self, c: _Cand, req: dict[str, Any]) -> tuple[dict[str, Any], list[Any], float]:
        """Send a request, wait for the reply; returns (header, values, the judge's wall ms for it)."""
        t0 = time.perf_counter()
        try:
            c.child.conn.send(req)
            header, values = wire.receive(c.child.conn, self._remaining(c))
        except TimeoutError:
            raise CandidateGone(TIMEOUT, f"no answer within eval.timeout_s={self.job.timeout_s:g}s; the "
                                         f"candidate's process and everything it started were killed") from None
        except (EOFError, OSError, BrokenPipeError):
            c.died = True
            raise CandidateGone(RUNTIME_ERROR, "the candidate's process died") from None
        except wire.WireError as e:
            raise CandidateGone(INCORRECT_TAMPERING, f"the candidate's process sent a malformed reply: {e}") from None
        return header, values, (time.perf_counter() - t0) * 1e3

    def expect_ok(self, c: _Cand, header: dict[str, Any], workload: str | None) -> bool:
        if header.get("ok") is True and not header.get("status"):
            return True
        status = str(header.get("status") or RUNTIME_ERROR)
        if status not in _CANDIDATE_STATUSES:
            status = RUNTIME_ERROR
        c.fail(status, str(header.get("message", ""))[:1500], workload, log=str(header.get("log", ""))[:6000])
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
                self._references[key] = normalize_outputs(self.task.reference(**self.inputs(w, seed)), self.names)
            if self.on_gpu:
                torch.cuda.synchronize()
        return self._references[key]

    def verify(self, c: _Cand, w: Workload, got: list[Any], ref: list[Any], what: str) -> bool:
        got = [g.to(r.device) if isinstance(g, torch.Tensor) and isinstance(r, torch.Tensor) else g
               for g, r in zip(got, ref)]
        bad = next((g for g in got if isinstance(g, wire.Unsupported)), None)
        if bad is not None:
            c.fail("INCORRECT_SHAPE", f"{what}: an output is {bad!r}, not a plain tensor", w.name)
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
        c.deadline = time.monotonic() + self.job.timeout_s
        payload = {"task": self.job.task, "tasks_root": self.job.tasks_root, "device": self.device,
                   "source": c.source, "entry": self.job.entry, "name_hint": f"{self.nonce:x}_{index}",
                   "sandbox": self.job.sandbox}
        c.child = self.spawner.spawn("ksearch.eval.candidate:main", payload)
        try:
            header, _, _ = self._first_reply(c)
        except CandidateGone as e:
            c.fail(e.status if e.status != RUNTIME_ERROR else COMPILE_ERROR,
                   f"{e.message} while loading the source", None)
            return
        if not header.get("ok"):
            c.ran_code = bool(header.get("ran_code", True))
            status = str(header.get("status") or COMPILE_ERROR)
            c.fail(status if status in _CANDIDATE_STATUSES else COMPILE_ERROR, str(header.get("message", "")),
                   None, log=str(header.get("log", "")))

    def _first_reply(self, c: _Cand) -> tuple[dict[str, Any], list[Any], float]:
        t0 = time.perf_counter()
        try:
            header, values = wire.receive(c.child.conn, self._remaining(c))
        except TimeoutError:
            raise CandidateGone(TIMEOUT, f"no answer within eval.timeout_s={self.job.timeout_s:g}s") from None
        except (EOFError, OSError):
            c.died = True
            raise CandidateGone(RUNTIME_ERROR, "the candidate's process died") from None
        except wire.WireError as e:
            raise CandidateGone(INCORRECT_TAMPERING, f"malformed reply: {e}") from None
        return header, values, (time.perf_counter() - t0) * 1e3

    def check(self, c: _Cand, w: Workload, trial: int) -> float | None:
        """One checked call on fresh inputs; returns the judge's wall ms of the call request."""
        seed = w.input_seed(self.nonce, trial)
        header, _, _ = self.request(c, {"op": "prepare", "workload": w, "seed": seed})
        if not self.expect_ok(c, header, w.name):
            return None
        header, outs, ms = self.request(c, {"op": "call"})
        if header.get("ok") is True and header.get("status") == INCORRECT_LATE_WRITE:
            c.fail(INCORRECT_LATE_WRITE, str(header.get("message", "")), w.name)
            return None
        if not self.expect_ok(c, header, w.name):
            return None
        if len(outs) != len(self.names):
            c.fail("INCORRECT_SHAPE", f"returned {len(outs)} outputs, expected {len(self.names)}", w.name)
            return None
        if not self.verify(c, w, outs, self.reference(w, seed), f"check {trial + 1}"):
            return None
        c.prev_outputs = outs
        return ms

    def _bytes(self, specs: list[Any], w: Workload) -> int:
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
        """How many input sets the timed calls rotate over: up to TIMING_SETS within a memory budget."""
        total = self._bytes(self.task.definition.inputs, w)
        return max(2, min(TIMING_SETS, TIMING_SET_BYTES // max(total, 1)))

    def output_bytes(self, w: Workload) -> int:
        return self._bytes(self.task.definition.outputs, w)

    def time_gpu(self, c: _Cand, w: Workload) -> None:
        """GPU time (graph replay, judge's clock) and call latency (eager loop, judge's clock); outputs checked."""
        from ksearch.eval.gputime import iterations_for

        job = self.job
        n_sets = self.timing_sets(w)
        seeds = [w.input_seed(self.nonce, 100 + j) for j in range(n_sets)]
        header, _, _ = self.request(c, {"op": "pool", "workload": w, "seeds": seeds, "warmup": max(job.warmup, n_sets)})
        if not self.expect_ok(c, header, w.name):
            return
        est = float(header.get("est_ms") or 0.01)
        # As many calls as make ~25 ms of GPU time (at least 3): a floor of `iterations` calls would cost a
        # 50 ms prefill call 2.5 s per replay, for no better a median.
        n = iterations_for(GRAPH_TARGET_MS, est, out_bytes=self.output_bytes(w))
        n = n - n % n_sets + n_sets if n % n_sets else n
        row = c.row(w.name)
        header, _, _ = self.request(c, {"op": "capture", "n": n})
        gpu: list[float] = []
        claimed: list[float] = []
        if header.get("ok") is True:
            method = "cuda_graph"
            self.request(c, {"op": "replay", "which": "call"})        # first replays pay one-time costs
            self.request(c, {"op": "replay", "which": "flush"})

            def rounds(count: int) -> bool:
                for t in range(count):
                    walls: dict[str, float] = {}
                    events: dict[str, float] = {}
                    for which in (("call", "flush") if t % 2 == 0 else ("flush", "call")):
                        h, _, ms = self.request(c, {"op": "replay", "which": which})
                        if not self.expect_ok(c, h, w.name):
                            return False
                        walls[which] = ms
                        events[which] = float(h.get("event_ms") or 0.0)
                    gpu.append(max(walls["call"] - walls["flush"], 0.0) / n)
                    claimed.append(max(events["call"] - events["flush"], 0.0) / n)
                return True

            # Measured twice (two halves of the rounds); halves that disagree beyond the spread are
            # re-measured once, and a row still unsteady after that is reported as unstable.
            count = max(2, job.trials)
            if not rounds(count):
                return
            if not steady(gpu, self.device):
                if not rounds(count):
                    return
                row.unstable = not steady(gpu[count:], self.device)
                gpu[:] = gpu[count:] if not row.unstable else gpu
            source = "graph"
        else:
            method = "cupti"
            row.message = f"not capturable in a CUDA graph ({str(header.get('error', ''))[:300]}); GPU time from CUPTI"
            n = min(n, 50)
            for _ in range(max(1, job.trials)):
                h, _, wall = self.request(c, {"op": "cupti", "n": n})
                if not self.expect_ok(c, h, w.name):
                    return
                spans = h.get("spans_ms")
                if not isinstance(spans, list) or len(spans) != n or not all(isinstance(s, (int, float)) for s in spans):
                    c.fail(INCORRECT_TAMPERING, "the CUPTI timing reply is malformed", w.name)
                    return
                if sum(spans) > wall * (1 + CROSS_CHECK_TOLERANCE):
                    c.fail(INCORRECT_TAMPERING, f"reported {sum(spans):.3f} ms of kernel time in a loop the "
                                                f"judge clocked at {wall:.3f} ms", w.name)
                    return
                gpu.append(statistics.median(spans))
            claimed = list(gpu)
            source = "eager"
        # Call latency: eager calls, host included.
        n_eager = max(n_sets, min(n, iterations_for(EAGER_TARGET_MS, max(est, 0.005))))
        n_eager = n_eager - n_eager % n_sets + n_sets if n_eager % n_sets else n_eager
        lat: list[float] = []
        for _ in range(max(1, job.trials)):
            h, _, ms = self.request(c, {"op": "eager", "n": n_eager})
            if not self.expect_ok(c, h, w.name):
                return
            lat.append(ms / n_eager)
        # Every pool set's last output, from the timed graph and from the eager loop, is checked.
        for src in ([source, "eager"] if source == "graph" else ["eager"]):
            h, outs, _ = self.request(c, {"op": "pool_outputs", "source": src})
            if not self.expect_ok(c, h, w.name):
                return
            k = len(self.names)
            if len(outs) != k * n_sets:
                c.fail("INCORRECT_SHAPE", f"timed calls returned {len(outs)} outputs, expected {k * n_sets}", w.name)
                return
            for j, seed in enumerate(seeds):
                if not self.verify(c, w, outs[j * k:(j + 1) * k], self.reference(w, seed),
                                   f"timed call ({'CUDA graph' if src == 'graph' else 'eager'}, input set {j + 1})"):
                    return
        self.record(c, w, gpu, lat, method, claimed)

    def record(self, c: _Cand, w: Workload, gpu: list[float], lat: list[float], method: str,
               claimed: list[float]) -> None:
        floor = noise_floor(self.device)
        row = c.row(w.name)
        row.gpu_time_ms = statistics.median(gpu) if gpu else None
        row.gpu_time_spread = relative_spread(gpu, floor) if gpu else None
        row.call_latency_ms = statistics.median(lat) if lat else None
        row.call_latency_spread = relative_spread(lat, floor) if lat else None
        row.timing_method = method
        row.self_reported_ms = statistics.median(claimed) if claimed else None
        use_gpu = self.job.metric == "gpu_time" and row.gpu_time_ms is not None
        samples = gpu if use_gpu else lat
        row.trial_ms = [round(x, 6) for x in samples]
        row.latency_ms = statistics.median(samples) if samples else None
        row.spread = relative_spread(samples, floor) if samples else None
        if row.self_reported_ms and row.gpu_time_ms and method == "cuda_graph":
            gap = abs(row.self_reported_ms - row.gpu_time_ms) / max(row.gpu_time_ms, 1e-9)
            if gap > CROSS_CHECK_TOLERANCE and abs(row.self_reported_ms - row.gpu_time_ms) > 0.002:
                c.report.flags.append(f"{w.name}: the candidate's own events say {row.self_reported_ms * 1e3:.1f} µs, "
                                      f"the judge's clock {row.gpu_time_ms * 1e3:.1f} µs (the judge's counts)")
        self.floor_check(c, w, row)

    def floor_check(self, c: _Cand, w: Workload, row: WorkloadResult) -> None:
        if not self.job.floor_check or row.latency_ms is None or not self.on_gpu:
            return
        from ksearch.eval.roofline import datasheet_for, physical_floor_ms

        if self._datasheet is None:
            self._datasheet = datasheet_for(torch.cuda.get_device_name()) or False
        if not self._datasheet:
            return              # a GPU without a datasheet entry: no floor rather than a wrong one
        floor_ms = physical_floor_ms(self.task, w, self._datasheet, device=self.device)
        measured = row.gpu_time_ms if row.gpu_time_ms is not None else row.latency_ms
        if floor_ms and measured < floor_ms:
            c.fail(INCORRECT_TIMING, f"{measured * 1e3:.3f} µs of GPU time is below the physical floor of "
                                     f"{floor_ms * 1e3:.3f} µs for this workload (its fewest bytes at the HBM "
                                     f"datasheet bandwidth, its FLOPs at the highest tensor peak, x0.8): the "
                                     f"timing cannot be real", w.name)

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
            self.record(c, w, [], samples, "wall_clock_cpu", [])

    # ---- the job --------------------------------------------------------------------------------------------
    def run(self) -> list[EvalReport]:
        t_start = time.perf_counter()
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
                check_ms: dict[str, list[float]] = {c.sid: [] for c in alive}
                for t in range(self.job.check_trials):
                    k = t % len(alive)
                    for c in alive[k:] + alive[:k]:
                        self._guarded(c, w, lambda c=c: check_ms[c.sid].append(ms)
                                      if (ms := self.check(c, w, t)) is not None else None)
                for c in alive:
                    if c.ok:
                        if self.on_gpu:
                            self._guarded(c, w, lambda c=c: self.time_gpu(c, w))
                        else:
                            self._guarded(c, w, lambda c=c: self.time_cpu(c, w, check_ms[c.sid]))
        finally:
            for c in self.cands:
                self._end(c)
            self._references.clear()
            if self.on_gpu:             # the worker lives on: its cached blocks would starve the next candidate
                torch.cuda.empty_cache()
        self.finish(t_start)
        return [c.report for c in self.cands]

    def _guarded(self, c: _Cand, w: Workload, step: Any) -> None:
        if not c.ok:
            return
        try:
            step()
        except CandidateGone as e:
            c.fail(e.status, e.message, w.name, log=e.message)
            self._end(c)
        except Exception as e:      # the judge's own step failed (its reference, a CUDA error here)
            c.fail(RUNTIME_ERROR, f"evaluation failed on {w.name}: {type(e).__name__}: {e}"[:1500], w.name,
                   log=traceback.format_exc())
            self._end(c)

    def _end(self, c: _Cand) -> None:
        """Stop the candidate's process (and everything it started); collect its output and audit findings."""
        child = c.child
        if child is None:
            return
        c.child = None
        if c.ok:
            try:
                child.conn.send({"op": "stop"})
                wire.receive(child.conn, 5.0)
            except Exception:
                pass
        try:
            child.kill()
        except Exception:
            pass
        exit_note = ""
        try:
            exit_note = child.exit_description()
        except Exception:
            pass
        out = ""
        try:
            out, nbytes = child.output()
        except Exception:
            nbytes = 0
        try:
            refused = list(child.audit_violations())
        except Exception:
            refused = []
        if refused:
            why = "the sandbox refused: " + "; ".join(sorted(set(refused)))[:1200]
            if c.report.status != TIMEOUT:
                c.report.status = PASSED
                c.fail(INCORRECT_TAMPERING, why)
        # how it ended says why only when it ended by itself; else the judge's own SIGKILL would be blamed
        if not c.ok and c.died and c.report.status == RUNTIME_ERROR and exit_note and "exit code 0" not in exit_note:
            c.report.log = (c.report.log + "\n" if c.report.log else "") + f"the candidate's process {exit_note}"
        if out.strip():
            c.report.log = (c.report.log + "\n" if c.report.log else "") + \
                f"--- candidate output ({nbytes} bytes; first and last KB) ---\n{out}"
            if nbytes > (1 << 20):
                c.report.flags.append(f"wrote {nbytes / 2**20:.1f} MiB to stdout/stderr (kept the first and last KB)")

    def finish(self, t_start: float) -> None:
        from ksearch.eval.environment import describe

        try:
            env = describe(self.device)
        except Exception as e:
            env = {"device": self.device, "error": f"{type(e).__name__}: {e}"}
        env["input_nonce"] = self.nonce
        env["metric"] = self.job.metric
        for c in self.cands:
            c.report.env = dict(env)
            c.report.elapsed_s = time.perf_counter() - t_start


def steady(samples: list[float], device: str) -> bool:
    """Do the two halves of a measurement (alternate rounds) agree within its spread?"""
    if len(samples) < 2:
        return True
    a, b = statistics.median(samples[::2]), statistics.median(samples[1::2])
    mid = statistics.median(samples)
    if mid <= 0:
        return True
    return abs(a - b) / mid <= max(relative_spread(samples, noise_floor(device)), STEADY_MIN)


_NUMERIC = ("INCORRECT_SHAPE", "INCORRECT_DTYPE", INCORRECT_NUMERICAL)
_CANDIDATE_STATUSES = {COMPILE_ERROR, RUNTIME_ERROR, "INCORRECT_SHAPE", "INCORRECT_DTYPE", INCORRECT_NUMERICAL,
                       "INCORRECT_INPUT_MODIFIED", INCORRECT_LATE_WRITE}


def judge(job: EvalJob, spawner: Any) -> list[EvalReport]:
    """Reports in candidate order."""
    return Judge(job, spawner).run()
