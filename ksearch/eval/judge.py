"""Judging candidates inside the worker: load, check on fresh inputs, time interleaved, re-check.

Per workload, for every candidate still passing (several only for `Evaluator.remeasure`):

1. Check calls (`check_trials`, round-robin over candidates). Each uses a fresh input set (a new seed
   drawn per job, per workload, per trial) copied into the same input buffers, so a result cached by
   address or remembered from an earlier call is wrong. Freed memory is scrubbed to NaN first, so
   unwritten output elements fail. The outputs are snapshotted as soon as the call returns (on the GPU:
   on the current stream, right after the end event), the inputs are compared with their pristine copy,
   and only then is the reference computed, so no correct answer exists in memory during the call.
   Outputs that change after the snapshot (a side stream, a background thread) or an earlier call's
   outputs that change during a later one (deferred work, a reused output buffer) fail as
   INCORRECT_LATE_WRITE; a wrong answer is diagnosed (remembered result? still being written? written
   by the next call?) so the message says why.
2. Timing (`ksearch.eval.timing.run_trials`): the candidates and, on a GPU, the baseline variants, in
   interleaved rounds. Between timed iterations (outside the events) the two input sets alternate in
   place in the candidate's buffers; one even and one odd iteration per round are kept and checked
   against their reference after the round, as is the snapshot-vs-final equality and the inputs.
3. Latency per workload = median of the round medians; spread = their robust relative spread (noise.py).
   On a CPU, where one interpreter call is slow, each check call also counts as a round, so the default
   (2 checks, 3 trials) costs three calls per workload.

Every piece of candidate code runs inside an integrity window (ksearch.eval.integrity). Inputs and
references live in ksearch.eval.cases; the baselines' own measurement in ksearch.eval.baselines.
"""

from __future__ import annotations

import random
import secrets
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ksearch.eval import integrity
from ksearch.eval.cases import (Case, baseline_case, get_task, plain, reference_of, same_bytes, select_device,
                                snapshot, storage_of, sync)
from ksearch.eval.memory import scrub
from ksearch.eval.noise import noise_floor, relative_spread
from ksearch.eval.report import (COMPILE_ERROR, INCORRECT_INPUT_MODIFIED, INCORRECT_LATE_WRITE,
                                 INCORRECT_NUMERICAL, INCORRECT_TAMPERING, PASSED, RUNTIME_ERROR, EvalReport,
                                 WorkloadResult)
from ksearch.eval.rules import check_outputs, normalize_outputs
from ksearch.eval.timing import Subject, TrialResults, kernel_streams, run_trials
from ksearch.task import Workload

_perf = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize
_median = statistics.median


@dataclass
class EvalJob:
    """Judge one or more candidates (source, solution_id) on `workloads`, interleaved."""

    task: str
    candidates: list[tuple[str, str]]
    workloads: list[Workload]
    device: str
    run_seed: int = 0
    warmup: int = 10
    iterations: int = 50
    trials: int = 3
    check_trials: int = 2
    baseline_variants: list[str] = field(default_factory=list)   # GPU: timed interleaved with the candidates
    nonce: int | None = None               # seeds the fresh inputs; None draws one at random
    tasks_root: str | None = None
    entry: str = "run"
    stream_probe: bool = True              # GPU: look for kernels on other streams (CUPTI), a flag only


# ---- candidates ---------------------------------------------------------------------------------------
@dataclass
class _Call:
    outs: list[Any]
    snap: list[Any]
    ms: float
    wall_ms: float
    reused: bool


@dataclass
class _Cand:
    sid: str
    report: EvalReport
    fn: Callable[..., Any] | None = None
    module: str | None = None
    prev: _Call | None = None                # the last checked call, kept alive to watch for late writes
    check_ms: list[float] = field(default_factory=list)
    gaps_ms: list[float] = field(default_factory=list)   # GPU: synchronised wall time minus event time
    ran_code: bool = True                    # False when the source never executed (a syntax error)

    @property
    def ok(self) -> bool:
        return self.report.status == PASSED

    def flag(self, message: str) -> None:
        if message not in self.report.flags:
            self.report.flags.append(message)

    def fail(self, status: str, message: str, workload: str | None = None, log: str = "") -> None:
        if not self.ok:
            return
        self.report.fail(status, message, workload)
        if log:
            self.report.log = (self.report.log + "\n" + log)[-20000:] if self.report.log else log[-20000:]

    def row(self, w: str) -> WorkloadResult:
        for r in self.report.workloads:
            if r.workload == w:
                return r
        r = WorkloadResult(w, PASSED)
        self.report.workloads.append(r)
        return r


class Judge:
    def __init__(self, job: EvalJob):
        self.job = job
        self.guard = integrity.install()
        self.task = get_task(job.task, job.tasks_root)
        self.guard.protect_dir(self.task.dir)
        self.device = job.device
        self.on_gpu = job.device.startswith("cuda")
        select_device(job.device)
        self.nonce = job.nonce if job.nonce is not None else secrets.randbits(48)
        self.rng = random.Random(self.nonce)
        self.names = self.task.definition.output_names
        self.corr = self.task.correctness
        self.dirty = False
        self.cands = [_Cand(sid, EvalReport(sid, PASSED, job.device, trials=job.trials,
                                            check_trials=job.check_trials)) for _, sid in job.candidates]
        self.baseline_flags: list[str] = []
        self.baseline_ms: dict[str, dict[str, float]] = {}
        self.baseline_spread: dict[str, dict[str, float]] = {}

    # ---- windows --------------------------------------------------------------------------------------
    def _close_window(self, c: _Cand, workload: str | None) -> bool:
        """Leave the integrity window; record flags; fail on tampering. True when still passing."""
        f = self.guard.leave()
        self.dirty = self.dirty or f.dirty
        for m in f.flags:
            c.flag(m)
        if f.failures:
            c.fail(INCORRECT_TAMPERING, "; ".join(f.failures), workload)
            return False
        return True

    # ---- loading ----------------------------------------------------------------------------------------
    def load(self, c: _Cand, source: str) -> None:
        from ksearch.instantiate.loader import load_entry_point

        hint = f"{self.nonce:x}_{self.cands.index(c)}"
        self.guard.enter()
        err: BaseException | None = None
        tb = ""
        try:
            c.fn = load_entry_point(source, self.job.entry, name_hint=hint)
            c.module = getattr(c.fn, "__module__", None)
        except BaseException as e:       # noqa: BLE001 - a module body may raise anything, SystemExit too
            if isinstance(e, KeyboardInterrupt):
                raise
            self.guard.pause()           # formatting the traceback reads source files: not the candidate's doing
            err, tb = e, traceback.format_exc()
        if not self._close_window(c, None):
            return
        if err is not None:
            c.fail(COMPILE_ERROR, f"{type(err).__name__}: {err}"[:1500], None, log=tb)
            c.ran_code = not isinstance(err.__cause__ or err, SyntaxError)

    # ---- check calls --------------------------------------------------------------------------------------
    def checked_call(self, c: _Cand, case: Case, k: int) -> _Call | None:
        w = case.w.name
        case.load(k)
        sync(self.device)
        scrub(self.device, case.output_bytes)
        start = end = None
        if self.on_gpu:
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _synchronize()
        err: BaseException | None = None
        tb = ""
        outs: list[Any] = []
        snap: list[Any] = []
        self.guard.enter()
        t0 = t_ret = t1 = _perf()
        try:
            if start is not None:
                _record(start)
            with torch.no_grad():
                raw = c.fn(*case.arg_list)
            if end is not None:
                _record(end)
            t_ret = _perf()
            outs = plain(normalize_outputs(raw, self.names), self.names)
            snap = snapshot(outs)
            del raw
            sync(self.device)
            t1 = _perf()
        except BaseException as e:      # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            self.guard.pause()
            err, tb = e, traceback.format_exc()
        if not self._close_window(c, w):
            return None
        if err is not None:
            hint = " (out of memory)" if isinstance(err, (torch.OutOfMemoryError, MemoryError)) else ""
            c.fail(RUNTIME_ERROR, f"{type(err).__name__}{hint}: {err}"[:1500], w, log=tb)
            return None
        ms = _elapsed(start, end) if self.on_gpu else (t_ret - t0) * 1e3
        prev = c.prev
        reused = prev is not None and bool({storage_of(o) for o in outs} - {None} & {storage_of(o) for o in prev.outs})
        bad = case.modified_input(k)
        if bad is not None:
            c.fail(INCORRECT_INPUT_MODIFIED, f"input {bad} changed during the call (inputs are read-only; "
                                             f"the call must leave them as it found them)", w)
            return None
        if prev is not None and not reused and not all(same_bytes(o, s) for o, s in zip(prev.outs, prev.snap)):
            c.fail(INCORRECT_LATE_WRITE, "the outputs of the previous call changed during this call: work "
                                         "deferred to a later call is not timed with the call that needs it", w)
            return None
        return _Call(outs, snap, ms, (t1 - t0) * 1e3, reused)

    def verify_call(self, c: _Cand, case: Case, k: int, call: _Call) -> None:
        w = case.w.name
        sync(self.device)
        if not all(same_bytes(o, s) for o, s in zip(call.outs, call.snap)):
            c.fail(INCORRECT_LATE_WRITE, "outputs changed after the call returned: work ran on a stream the "
                                         "timer does not see, or in a background thread", w)
            return
        ref = case.reference(k)
        chk = check_outputs(call.snap, ref, self.names, atol=self.corr.atol, rtol=self.corr.rtol,
                            required_matched_ratio=self.corr.required_matched_ratio, rule=self.corr.rule)
        row = c.row(w)
        row.max_abs_error = max(row.max_abs_error or 0.0, chk.max_abs_error)
        row.max_rel_error = max(row.max_rel_error or 0.0, chk.max_rel_error)
        row.matched_ratio = min(row.matched_ratio if row.matched_ratio is not None else 1.0, chk.matched_ratio)
        if call.reused:
            if not chk.passed:
                c.fail(INCORRECT_NUMERICAL, f"{chk.message}; it returned the very tensors it returned from the "
                                            f"previous call (a result remembered from an earlier call)", w)
            else:
                c.fail(INCORRECT_LATE_WRITE, "returned the output storage of the previous call: an earlier "
                                             "result is overwritten by a later call (allocate outputs per call)", w)
            return
        if not chk.passed:
            status, why = self.diagnose(c, case, k, call)
            c.fail(status or chk.status, chk.message + (f"; {why}" if why else ""), w)
            return
        c.prev = call
        c.check_ms.append(call.ms)
        if self.on_gpu:
            c.gaps_ms.append(call.wall_ms - call.ms)

    def diagnose(self, c: _Cand, case: Case, k: int, call: _Call) -> tuple[str | None, str]:
        """Why a check failed, when the failure looks deliberate (the status stays unless it is a late write)."""
        if c.prev is not None and all(same_bytes(s, p) for s, p in zip(call.snap, c.prev.snap)):
            return None, "it is identical to its output for the previous, different inputs: a result " \
                         "remembered from an earlier call"
        time.sleep(0.2)
        sync(self.device)
        if not all(same_bytes(o, s) for o, s in zip(call.outs, call.snap)):
            return INCORRECT_LATE_WRITE, "the outputs were still being written after the call returned " \
                                         "(a side stream or a background thread the timer does not see)"
        try:
            case.load(1000 + k)
            self.guard.enter()
            try:
                with torch.no_grad():
                    extra = c.fn(*case.arg_list)
                sync(self.device)
                del extra
            finally:
                self.guard.leave()
        except Exception:
            return None, ""
        if not all(same_bytes(o, s) for o, s in zip(call.outs, call.snap)):
            return INCORRECT_LATE_WRITE, "the outputs were written during the next call: work deferred to a " \
                                         "later call is not timed with the call that needs it"
        return None, ""

    # ---- timing ---------------------------------------------------------------------------------------------
    def candidate_subject(self, c: _Cand, case: Case, kept: list[tuple[int, int, list[Any], list[Any]]]) -> Subject:
        it = self.job.iterations
        state = {"pos": 0, "picks": set(), "last": 0}

        def pick() -> set[int]:
            if it <= 4:
                return set(range(it))
            half = it // 2
            even = [i for i in range(half) if i % 2 == 0] or [0]
            odd = [i for i in range(half, it) if i % 2 == 1] or [it - 1]
            return {self.rng.choice(even), self.rng.choice(odd)}

        def begin() -> None:
            state["pos"], state["picks"] = 0, pick()
            self.guard.enter()

        def before(i: int) -> None:
            case.load(i % 2)
            state["last"] = i % 2
            if not self.on_gpu:
                scrub(self.device, case.output_bytes)

        def call() -> Any:
            return c.fn(*case.arg_list)

        def after(i: int, result: Any) -> None:
            if state["pos"] in state["picks"]:
                outs = plain(normalize_outputs(result, self.names), self.names)
                kept.append((i, i % 2, outs, snapshot(outs)))
            state["pos"] += 1

        def done(t: int) -> None:
            if not self._close_window(c, case.w.name):
                raise RuntimeError("tampering detected")
            bad = case.modified_input(state["last"])
            if bad is not None:
                c.fail(INCORRECT_INPUT_MODIFIED, f"input {bad} changed during a timed call (inputs are read-only)",
                       case.w.name)
                raise RuntimeError("input modified")

        return Subject(c.sid, call, before, after, done, begin)

    def timing(self, case: Case, alive: list[_Cand], baselines: list[Subject]) -> TrialResults:
        trials = self.job.trials if self.on_gpu else max(0, self.job.trials - self.job.check_trials)
        kept: dict[str, list[tuple[int, int, list[Any], list[Any]]]] = {c.sid: [] for c in alive}
        if (trials == 0 and not baselines) or (not alive and not baselines):
            return TrialResults()
        case.inputs(0), case.inputs(1)
        subjects = [self.candidate_subject(c, case, kept[c.sid]) for c in alive] + baselines
        with torch.no_grad():
            res = run_trials(subjects, device=self.device, warmup=self.job.warmup, iterations=self.job.iterations,
                             trials=trials)
        sync(self.device)
        w = case.w.name
        for c in alive:
            if c.sid in res.errors:
                c.fail(RUNTIME_ERROR, "while timing: " + res.errors[c.sid].split("\n", 1)[0][:1000], w,
                       log=res.errors[c.sid])
                continue
            for i, k, outs, snap in kept[c.sid]:
                if not all(same_bytes(o, s) for o, s in zip(outs, snap)):
                    c.fail(INCORRECT_LATE_WRITE, f"timed call {i}: outputs changed after the timed region ended "
                                                 f"(work on a stream the CUDA events do not see, or a background "
                                                 f"thread)", w)
                    break
                chk = check_outputs(snap, case.reference(k), self.names, atol=self.corr.atol, rtol=self.corr.rtol,
                                    required_matched_ratio=self.corr.required_matched_ratio, rule=self.corr.rule)
                if not chk.passed:
                    c.fail(chk.status, f"timed call {i} (input set {'AB'[k]}, copied into the same buffers): "
                                       f"{chk.message}; the result depends on an earlier call (cached by address, "
                                       f"or work deferred to a later call)", w)
                    break
        return res

    def gpu_extras(self, c: _Cand, case: Case) -> None:
        """Flags only: a device still busy after the end event, or kernels on other streams (CUPTI)."""
        later = c.gaps_ms[1:] or c.gaps_ms
        if later and all(g > 0.1 and g > 2 * ms for g, ms in zip(later, c.check_ms[-len(later):])):
            c.flag(f"the device stayed busy {max(later):.3f} ms after the end event of a {c.check_ms[-1]:.3f} ms "
                   f"call: work may run on a stream the events do not bracket")
        if not self.job.stream_probe:
            return
        case.load(0)
        self.guard.enter()
        info = kernel_streams(lambda: c.fn(*case.arg_list))
        if not self._close_window(c, case.w.name):
            return
        if info and info["other_streams"]:
            us = sum(info["other_streams"].values())
            c.flag(f"ran {us:.0f} µs of kernels on {len(info['other_streams'])} stream(s) other than the current "
                   f"one; the CUDA events see that work only if it is joined back before returning")

    # ---- baselines (GPU, interleaved) -------------------------------------------------------------------------
    def baseline_subjects(self, w: Workload) -> list[Subject]:
        if not self.on_gpu or not self.job.baseline_variants:
            return []
        factories = dict(self.task.baselines())
        out = []
        for v in self.job.baseline_variants:
            try:
                inputs, ref = baseline_case(self.task, w, self.job.run_seed, self.device)
                if v == "reference":
                    fn = reference_of(self.task)
                    call: Callable[[], Any] = lambda fn=fn, inputs=inputs: fn(**inputs)
                elif v in factories:
                    call = factories[v](inputs)
                else:
                    raise KeyError(f"the task has no baseline {v!r}")
                got = normalize_outputs(call(), self.names)
                sync(self.device)
                chk = check_outputs(got, ref, self.names, atol=self.corr.atol, rtol=self.corr.rtol,
                                    required_matched_ratio=self.corr.required_matched_ratio, rule=self.corr.rule)
                if not chk.passed:
                    raise RuntimeError(f"disagrees with the reference: {chk.message}")
                out.append(Subject(f"baseline:{v}", call))
            except Exception as e:
                self.baseline_flags.append(f"baseline {v} left out on {w.name}: {type(e).__name__}: {e}"[:300])
        return out

    # ---- the job ----------------------------------------------------------------------------------------------
    def run(self) -> list[EvalReport]:
        t_start = _perf()
        for c, (source, _) in zip(self.cands, self.job.candidates):
            self.load(c, source)
        floor = noise_floor(self.device)
        for wi, w in enumerate(self.job.workloads):
            alive = [c for c in self.cands if c.ok]
            if not alive:
                break
            case = Case(self.task, w, self.device, self.nonce)
            for c in alive:
                c.prev, c.check_ms, c.gaps_ms = None, [], []
                c.row(w.name)
            try:
                for t in range(self.job.check_trials):
                    order = [c for c in alive if c.ok]
                    order = order[t % len(order):] + order[:t % len(order)] if order else []
                    pending = [(c, self.checked_call(c, case, t)) for c in order]
                    for c, call in pending:
                        if call is not None and c.ok:
                            self.verify_call(c, case, t, call)
                if self.on_gpu and wi == 0:
                    for c in alive:
                        if c.ok:
                            self.gpu_extras(c, case)
                timed = [c for c in alive if c.ok]
                res = self.timing(case, timed, self.baseline_subjects(w) if timed else [])
                self.collect(case, [c for c in timed if c.ok], res, floor)
            except Exception as e:       # the evaluator's own step failed (e.g. a poisoned CUDA context)
                tb = traceback.format_exc()
                for c in alive:
                    c.fail(RUNTIME_ERROR, f"evaluation failed on {w.name}: {type(e).__name__}: {e}"[:1500],
                           w.name, log=tb)
            finally:
                for c in alive:
                    c.prev = None
                del case
        self.finish(t_start)
        return [c.report for c in self.cands]

    def collect(self, case: Case, alive: list[_Cand], res: TrialResults, floor: float) -> None:
        w = case.w.name
        base_best: tuple[float, float] | None = None
        for name in res.samples:
            if not name.startswith("baseline:") or name in res.errors or not res.samples[name]:
                if name in res.errors and name.startswith("baseline:"):
                    self.baseline_flags.append(f"{name} failed while timing on {w}")
                continue
            medians = res.trial_medians(name)
            ms, spread = _median(medians), relative_spread(medians, floor)
            v = name.split(":", 1)[1]
            self.baseline_ms.setdefault(v, {})[w] = ms
            self.baseline_spread.setdefault(v, {})[w] = spread
            if base_best is None or ms < base_best[0]:
                base_best = (ms, spread)
        for c in alive:
            trial_ms = ([] if self.on_gpu else list(c.check_ms)) + res.trial_medians(c.sid)
            row = c.row(w)
            row.trial_ms = [round(x, 6) for x in trial_ms]
            row.latency_ms = _median(trial_ms) if trial_ms else None
            row.spread = relative_spread(trial_ms, floor) if trial_ms else None
            if base_best is not None:
                row.baseline_ms, row.baseline_spread = base_best
            if row.latency_ms is None:
                c.fail(RUNTIME_ERROR, "no timing sample (eval.trials and eval.check_trials are both 0)", w)

    def finish(self, t_start: float) -> None:
        from ksearch.eval.environment import describe

        try:
            env = describe(self.device)
        except Exception as e:
            env = {"device": self.device, "error": f"{type(e).__name__}: {e}"}
        env["input_nonce"] = self.nonce
        for c in self.cands:
            c.report.env = dict(env)
            c.report.elapsed_s = _perf() - t_start
            for f in self.baseline_flags:
                c.flag(f)
            if c.ok and self.baseline_ms:
                c.report.baseline_ms = {v: dict(t) for v, t in self.baseline_ms.items()
                                        if all(r.workload in t for r in c.report.workloads)}
            if not c.ok and c.ran_code:
                self.dirty = True
            c.fn = None
            c.prev = None
            if c.module:
                sys.modules.pop(c.module, None)


def judge(job: EvalJob) -> tuple[list[EvalReport], bool]:
    """Reports in candidate order, and whether the process may carry state a candidate left behind."""
    j = Judge(job)
    reports = j.run()
    return reports, j.dirty
