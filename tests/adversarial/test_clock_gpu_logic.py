"""The judge's GPU timing decisions, on a CPU: a scripted candidate speaks the GPU protocol (pool, capture,
window) from a thread, and the judge's CUDA calls are no-ops. What a real GPU adds is in test_clock_gpu.py;
this covers the decisions that do not need one: which clock a kernel gets, what is subtracted, that every
window's outputs are verified and that a window's size is the judge's choice, not the candidate's."""

import contextlib
import math
import os
import socket
import threading
import time
from multiprocessing.connection import Connection

import pytest
import torch

from ksearch.eval import wire
from ksearch.eval.clocks import gputime
from ksearch.eval.report import Metric, Status
from ksearch.eval.trusted import exchange
from ksearch.eval.trusted import judge as judge_module
from ksearch.eval.trusted.judge import EvalJob, Judge, TrustedCosts
from tests.adversarial.kernels import TASK

COSTS = TrustedCosts(reveal_ms=1.0, flush_ms=0.02, flush_sync_ms=0.05)


class Script:
    """How the scripted candidate behaves; every field a way to be honest or not."""

    def __init__(self, **kw):
        self.est_ms = 0.05
        self.per_call_ms = 0.05            # what each timed call "costs" (slept)
        self.captured = True
        self.kernels = {"call_graph": 0, "flush_graph": 0, "one_call": 0}
        self.graph_is_empty = False        # graph windows answer stale outputs
        self.wrong_in = set()              # modes whose outputs are wrong from their second window on
        self.event_ms = None
        self.event_per_call_ms = None      # set: its events claim this per call (flush included) instead
        self.presend_after = None          # after this op, write one reply ahead
        self.on_profile = None             # (conn, request) -> None: answers the advisory profile request
        self.stamps = "honest"             # a window's stamps_ms: "honest" (its perf_counter), or what to send
        self.echo_ms = 0.0                 # what answering an `echo` takes (the judge's stand-in only)
        self.__dict__.update(kw)
        self.log: list[tuple[str, dict]] = []


def _serve(sock: socket.socket, task, script: Script) -> None:
    conn = Connection(os.dup(sock.fileno()))
    names = task.definition.input_names
    placeholders: list = []                # what a graph that never ran would still hold: the capture's outputs
    seen: dict[str, int] = {}

    def outputs(w, seed):
        src = task.make_inputs(w, device="cpu", seed=int(seed))
        with torch.no_grad():
            return list(task.reference(**{n: src[n] for n in names}))

    def send(header):
        wire.send(conn, header)

    send({"ok": True})
    workload = None
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        fd = exchange.receive_fd(sock) if req.get("shared") else None
        arrived = time.perf_counter()
        op = req["op"]
        script.log.append((op, {k: v for k, v in req.items()
                                if k in ("n", "mode", "seeds", "seed", "fetch", "replays")}))
        if op == "stop":
            send({"ok": True})
            return
        if op == "pool":
            workload = req["workload"]
            placeholders[:] = [outputs(workload, seed) for seed in req["seeds"]]
            send({"ok": True, "est_ms": script.est_ms})
        elif op == "capture":
            send({"ok": True, "captured": script.captured, "kernels": script.kernels, "error": "scripted"})
        elif op == "echo":
            shared = exchange.Mapped(fd, req["layout"])
            if req.get("fetch"):
                for slot in shared.outputs:
                    slot.copy_(torch.zeros_like(slot))
            shared.close()
            time.sleep(script.echo_ms / 1e3)
            send({"ok": True})
        elif op == "call":
            shared = exchange.Mapped(fd, req["layout"])
            for slot, value in zip(shared.outputs, outputs(req["workload"], req["seed"])):
                slot.copy_(value)
            shared.close()
            send({"ok": True})
        elif op == "window":
            shared = exchange.Mapped(fd, req["layout"])
            mapped = time.perf_counter()
            mode = req["mode"]
            per_call = script.per_call_ms + {"graph": COSTS.flush_ms, "eager_sync": COSTS.flush_sync_ms}.get(mode, 0.0)
            time.sleep(COSTS.reveal_ms / 1e3)                               # what an honest window costs
            inputs = time.perf_counter()
            time.sleep(req["n"] * req.get("replays", 1) * per_call / 1e3)
            calls = time.perf_counter()
            seen[mode] = seen.get(mode, 0) + 1
            k = len(task.definition.output_names)
            stale = (mode == "graph" and script.graph_is_empty) or (mode in script.wrong_in and seen[mode] > 1)
            for j, seed in enumerate(req["seeds"]):
                got = placeholders[j] if stale else outputs(workload, seed)
                for slot, value in zip(shared.outputs[j * k:(j + 1) * k], got):
                    slot.copy_(value)
            shared.close()
            event = script.event_ms if script.event_per_call_ms is None else req["n"] * script.event_per_call_ms
            stamps = script.stamps
            if stamps == "honest":
                stamps = [t * 1e3 for t in (arrived, mapped, inputs, calls, time.perf_counter(), time.perf_counter())]
            send({"ok": True, "event_ms": event, "stamps_ms": stamps, "inputs_split_ms": [0.6, 0.3, 0.1]})
        elif op == "profile" and script.on_profile is not None:
            if script.on_profile(conn, req) == "exit":
                return
        else:
            send({"ok": True})
        if fd is not None:
            os.close(fd)
        if script.presend_after == op:
            send({"ok": True})


class _Spawned:
    def __init__(self, conn, thread):
        self.conn, self._thread, self.pid = conn, thread, None

    def kill(self):
        self.conn.close()

    def exit_description(self):
        return "exited, exit code 0"

    def output(self):
        return "", 0

    def audit_violations(self):
        return []


class ScriptedSpawner:
    def __init__(self, task, script):
        self.task, self.script = task, script

    def spawn(self, target, payload):
        ours, theirs = socket.socketpair()
        thread = threading.Thread(target=_serve, args=(theirs, self.task, self.script), daemon=True)
        thread.start()
        return _Spawned(Connection(ours.detach()), thread)


@pytest.fixture
def gpu_judge(monkeypatch, task, workloads):
    """A judge that takes the GPU path on CPU tensors (its CUDA calls made no-ops)."""
    no_gpu_waits(monkeypatch)

    def make(script, trials=3):
        job = EvalJob(task=TASK, candidates=[("# scripted", "scripted")], workloads=list(workloads), device="cpu",
                      metric=Metric.gpu_time, trials=trials, check_trials=1, warmup=1, timeout_s=60, floor_check=False)
        j = Judge(job, ScriptedSpawner(task, script))
        j.on_gpu = True
        j.costs = {w.name: COSTS for w in workloads}
        j.start(j.cands[0], 0)
        return j, j.cands[0]
    return make


def no_gpu_waits(monkeypatch):
    """The judge's GPU synchronisations and its wake before a clock, made no-ops (CPU tensors here)."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(gputime, "wake", lambda *a, **k: None)


def _timed(j, c, w):
    j._guarded(c, w, lambda: j.check(c, w, 0))
    j._guarded(c, w, lambda: j.time_gpu(c, w))
    return c.report.status, c.row(w.name)


def test_a_graph_that_holds_the_work_is_the_clock_less_the_judges_own_costs(gpu_judge, workloads):
    w = workloads[0]
    script = Script(kernels={"call_graph": 0, "flush_graph": 0, "one_call": 0}, event_ms=0.0)
    j, c = gpu_judge(script)
    status, row = _timed(j, c, w)
    assert status == Status.PASSED, c.report.summary()
    assert row.timing_method == "cuda_graph"
    windows = [(op, r) for op, r in script.log if op == "window"]
    graph = [r for op, r in windows if r["mode"] == "graph"]
    n = graph[0]["n"]
    # every window on fresh seeds, none seen twice
    seeds = [s for _, r in windows for s in r["seeds"]]
    assert len(seeds) == len(set(seeds))
    # (window - reveal - n x flush) / n: at least what the call slept, never less
    assert script.per_call_ms * 0.9 < row.gpu_time_ms < script.per_call_ms * 3, row.gpu_time_ms
    assert row.self_reported_ms == 0.0 and row.call_latency_ms > 0
    # windows are long enough for what the judge subtracts to be a small share of them
    share = judge_module.OVERHEAD_SHARE
    assert n * script.per_call_ms >= COSTS.reveal_ms * (1 - share) / share * 0.9


def test_a_graph_bounded_by_its_outputs_memory_is_replayed_until_the_subtracted_costs_are_a_small_share(
        gpu_judge, workloads, monkeypatch):
    """A long prefill: each call's outputs are large, so a graph holds only a few calls; the judge's own costs
    (input generation and protocol, 30 ms here) would be most of a window of them, and the difference between
    what it measured and what the candidate's process pays became the kernel's time (H100, session 18)."""
    w = workloads[0]
    costs = TrustedCosts(reveal_ms=10.0, flush_ms=0.02, flush_sync_ms=0.05, protocol_ms=20.0)
    script = Script(per_call_ms=2.0, est_ms=2.0)
    j, c = gpu_judge(script)
    j.costs = {w.name: costs}
    monkeypatch.setattr(j, "output_bytes", lambda _w: 1 << 30)        # 1 GiB a call: a graph of a few calls
    status, row = _timed(j, c, w)
    assert status == Status.PASSED, c.report.summary()
    timed = [r for op, r in script.log if op == "window" and r["mode"] == "graph"]
    n = timed[0]["n"]
    assert n <= 2 * j.timing_sets(w), n           # the memory bound (rounded up to whole rotations of the sets)
    replayed = [r for r in timed if r.get("replays", 1) > 1]
    assert replayed, timed
    calls_ms = n * replayed[-1]["replays"] * script.per_call_ms
    share = judge_module.OVERHEAD_SHARE
    assert calls_ms >= (costs.reveal_ms + costs.protocol_ms) * (1 - share) / share * 0.9, (n, replayed[-1])
    assert calls_ms <= judge_module.MAX_WINDOW_MS
    # every call of every replay is counted: the time per call is what a call slept, not R times it
    assert script.per_call_ms * 0.9 < row.gpu_time_ms < script.per_call_ms * 1.5, row.gpu_time_ms


def test_a_few_microsecond_kernel_is_timed_in_graphs_no_longer_than_the_baselines(gpu_judge, workloads):
    """The same work costs more per call in a longer graph (H100, session 20: n x [flush, 2 MiB copy] 35.9 us a
    call up to n = 500, 36.6 us from 1000): a candidate's graphs hold no more calls than the baselines' (whose
    graphs come from iterations_for's default bound), and its window reaches its length by replays."""
    w = workloads[0]
    script = Script(per_call_ms=0.005, est_ms=0.005)
    j, c = gpu_judge(script)
    status, row = _timed(j, c, w)
    assert status == Status.PASSED, c.report.summary()
    graph = [r for op, r in script.log if op == "window" and r["mode"] == "graph"]
    cap = gputime.GRAPH_MAX_CALLS
    assert gputime.iterations_for(25.0, 0.001) == cap           # the baselines' bound (baselines.time_subject)
    assert all(r["n"] <= cap + j.timing_sets(w) for r in graph), [r["n"] for r in graph]
    timed = graph[-1]
    share = judge_module.OVERHEAD_SHARE
    calls_ms = timed["n"] * timed.get("replays", 1) * (script.per_call_ms + COSTS.flush_ms)
    assert timed.get("replays", 1) > 1 and calls_ms >= COSTS.reveal_ms * (1 - share) / share * 0.9, timed


def test_counts_that_miss_calls_send_the_kernel_to_the_judges_eager_clock(gpu_judge, workloads):
    w = workloads[0]
    script = Script(kernels={"call_graph": 60, "flush_graph": 50, "one_call": 2})
    j, c = gpu_judge(script)
    status, row = _timed(j, c, w)
    assert status == Status.PASSED and row.timing_method == "eager_sync", (c.report.summary(), row)
    assert "were not recorded" in row.message
    assert all(r["mode"] != "graph" for op, r in script.log if op == "window")


def test_a_graph_replay_that_does_not_compute_fresh_outputs_is_not_the_clock(gpu_judge, workloads):
    """The honest kernel on a stream of its own: its graph replays stale outputs, its eager calls are right."""
    w = workloads[0]
    script = Script(graph_is_empty=True)
    j, c = gpu_judge(script)
    status, row = _timed(j, c, w)
    assert status == Status.PASSED and row.timing_method == "eager_sync", (c.report.summary(), row)
    assert "did not produce their outputs" in row.message
    assert row.gpu_time_ms > 0.5 * script.per_call_ms


def test_not_capturable_also_goes_to_the_eager_clock(gpu_judge, workloads):
    script = Script(captured=False)
    j, c = gpu_judge(script)
    status, row = _timed(j, c, workloads[0])
    assert status == Status.PASSED and row.timing_method == "eager_sync" and "not capturable" in row.message


@pytest.mark.parametrize("mode", ["graph", "eager", "eager_sync"])
def test_every_timed_window_is_verified(gpu_judge, workloads, mode):
    script = Script(wrong_in={mode}, captured=mode != "eager_sync")
    j, c = gpu_judge(script)
    status, _ = _timed(j, c, workloads[0])
    assert status == Status.INCORRECT_NUMERICAL, c.report.summary()
    assert "timed call" in c.report.summary()


def test_a_claimed_slow_estimate_cannot_shrink_the_windows(gpu_judge, workloads):
    """est_ms claims each call takes 100 ms: the judge's own clock says otherwise, and it captures again."""
    script = Script(est_ms=100.0)
    j, c = gpu_judge(script)
    status, row = _timed(j, c, workloads[0])
    assert status == Status.PASSED, c.report.summary()
    captures = [r["n"] for op, r in script.log if op == "capture"]
    assert len(captures) == 2 and captures[1] > 1.5 * captures[0], captures
    windows = [r["n"] for op, r in script.log if op == "window" and r["mode"] == "graph"]
    assert windows[-1] == captures[1]


def test_a_reply_written_ahead_fails_on_the_gpu_path(gpu_judge, workloads):
    script = Script(presend_after="capture")
    j, c = gpu_judge(script)
    status, _ = _timed(j, c, workloads[0])
    assert status in (Status.INCORRECT_TAMPERING, Status.INCORRECT_NUMERICAL), c.report.summary()


def test_a_disagreement_between_clock_and_events_is_quoted_with_where_the_window_went():
    from ksearch.eval.clocks.stamps import breakdown, extremes
    from ksearch.eval.trusted.judge import TrustedCosts, window_note

    costs = TrustedCosts(reveal_ms=0.5, flush_ms=0.03, flush_sync_ms=0.05, protocol_ms=1.25)
    judge = [100.0, 100.1, 130.0, 130.1, 131.0]
    honest = breakdown(judge, [100.2, 100.3, 104.3, 129.3, 129.8, 129.9], [3.0, 0.5, 0.5], calls=300, mode="graph")
    lying = breakdown([0.0, 0.1, 25.0, 25.1, 25.2], [1.0, 2.0, 3.0, 2.0, 4.0, 5.0], calls=300, mode="graph")
    note = window_note(extremes([honest], lying), costs, costs.flush_ms)
    assert note.startswith("windows of 300 calls, less the judge's own 0.50 ms of inputs, 1.25 ms of "
                           "protocol and output fetch (its stand-in's) and 300 x "
                           "30.0 µs of flushes; slowest 31.00 ms: send 0.10, request in flight 0.10, map 0.10, "
                           "inputs 4.00 (make 3.00, copy 0.50, wait 0.50), calls 25.00, outputs 0.50, until its "
                           "reply 0.10, reply in flight 0.10, stop 0.10, take 0.90; fastest 25.20 ms: "), note
    assert note.endswith("send 0.10, candidate 24.90, stop 0.10, take 0.10 (the candidate's stamps are unusable: "
                         "not in order)"), note
    assert window_note([], costs, costs.flush_ms) == "no timed window"


def test_the_probe_of_the_input_generation_is_quoted_bounded_and_only_when_well_formed():
    from ksearch.eval.trusted.judge import probe_note

    run = {"host_ms": 12.0, "make_ms": 2.0, "copy_ms": 0.5, "sync_ms": 9.5, "gpu_ms": 11.0,
           "allocator": {"num_device_alloc": 2, "num_device_free": 2, "num_sync_all_streams": 0}}
    note = probe_note({"ok": True, "runs": [run]})
    assert "12.00 ms (make 2.00, copy 0.50, wait 9.50; GPU 11.00) [num_device_alloc 2, num_device_free 2]" in note
    flood = probe_note({"ok": True, "runs": [dict(run, allocator={"x" * 10_000: 1})] * 10_000})
    assert len(flood) < 1000
    huge = dict(run, gpu_ms=10 ** 400)          # a JSON integer no float holds: refused, not an OverflowError
    for lie in (None, {"ok": False}, {"ok": True, "runs": "fast"}, {"ok": True, "runs": [{"host_ms": "1"}]},
                {"ok": True, "runs": [huge]}):
        assert probe_note(lie) == "no probe of its input generation"


def test_a_flagged_disagreement_asks_the_candidate_where_its_input_generation_went(gpu_judge, workloads):
    script = Script(event_per_call_ms=COSTS.flush_ms + 0.01)     # its events claim 10 µs, the clock says ~50
    j, c = gpu_judge(script)
    _, row = _timed(j, c, workloads[0])
    assert any(op == "reveal_probe" for op, _ in script.log), script.log
    flag = next(f for f in c.report.flags if "own events say" in f)
    assert "no probe of its input generation" in flag and "; slowest " in flag and "; fastest " in flag, flag
    assert "request in flight" in flag and "unusable" not in flag, flag
    # the same split, without a flag, on the row: the slowest and the fastest of the timed graph windows
    slow, fast = row.window_breakdown
    assert (slow.which, fast.which, slow.mode, slow.unusable, fast.unusable) == ("slowest", "fastest", "graph", "", "")
    assert slow.ms >= fast.ms and abs(sum(slow.parts_ms.values()) - slow.ms) < 1e-3
    assert slow.parts_ms["calls"] >= slow.calls * script.per_call_ms * 0.9, slow


def test_stamps_that_lie_leave_only_the_judges_parts(gpu_judge, workloads):
    script = Script(stamps=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])    # in order, but not on the judge's clock
    j, c = gpu_judge(script)
    status, row = _timed(j, c, workloads[0])
    assert status == Status.PASSED, c.report.summary()       # a diagnosis: never a verdict
    assert [b.unusable for b in row.window_breakdown] == ["outside the judge's clock"] * 2
    assert list(row.window_breakdown[0].parts_ms) == ["send", "candidate", "stop", "take"]


def test_a_confirmation_that_scores_gpu_time_times_no_eager_windows(gpu_judge, workloads):
    """A held-out confirmation (validation) needs only the score's clock: the graph windows, not the eager
    call-latency ones (which cost a validation a quarter of its windows)."""
    script = Script()
    j, c = gpu_judge(script)
    j.job.call_latency = False
    status, row = _timed(j, c, workloads[0])
    assert status == Status.PASSED, c.report.summary()
    modes = [args.get("mode") for op, args in script.log if op == "window"]
    assert modes and set(modes) == {"graph"}, modes
    assert row.gpu_time_ms is not None and row.call_latency_ms is None and row.latency_ms == row.gpu_time_ms


def test_the_evaluator_confirms_without_profile_or_call_latency(monkeypatch):
    """Evaluator.confirm asks the judge for a lean job; evaluate keeps both."""
    from ksearch.eval.parent import evaluator as evaluator_module
    from ksearch.eval.parent.evaluator import EvalSettings, Evaluator
    from ksearch.task import load_task

    jobs = []

    class Reply:
        kind, value, output, output_bytes = "error", None, "", 0

    def capture(self, kind, job, timeout, what):
        jobs.append(job)
        return Reply()

    monkeypatch.setattr(Evaluator, "_request", capture)
    ev = Evaluator.__new__(Evaluator)
    ev.task, ev.settings = load_task(TASK), EvalSettings(device="cpu")
    ev.static_config = None
    monkeypatch.setattr(evaluator_module, "check_source", lambda src, cfg: [])
    w = ev.task.workload_set("tiny")[:1]
    ev.evaluate("def run(): pass", "a", w, None)
    ev.confirm("def run(): pass", "b", w, None)
    assert (jobs[0].profile, jobs[0].call_latency) == (True, True)
    assert (jobs[1].profile, jobs[1].call_latency) == (False, False)


def _harness_serves(sock: socket.socket, task, w) -> None:
    """The harness's own serve loop and window op, in a thread, on CPU tensors: the GPU parts it binds only on a
    GPU (input generation into the sets, the eager loop) bound here to their CPU-capable selves."""
    from ksearch.eval.candidate.channel import CandidateChannel
    from ksearch.eval.candidate.harness import _Kernel, _Server

    k = _Kernel({"device": "cpu"})
    k.task, k.workload = task, w
    k.names, k.input_names = task.definition.output_names, task.definition.input_names
    k.fn = lambda *args: task.reference(**dict(zip(k.input_names, args)))
    channel = CandidateChannel(Connection(sock.detach()))
    server = _Server(k, channel)
    server._reveal, server._eager_sync_loop, server._flush = gputime.reveal, gputime.eager_sync_loop, lambda: None
    k.pool = [server._make(900 + j) for j in range(2)]
    channel.send({"ok": True})
    server.serve()


def test_the_harness_stamps_a_window_on_the_judges_clock(monkeypatch, task, workloads):
    """The real harness answers a window with six stamps that split the judge's clock (ksearch.eval.clocks.stamps)."""
    from ksearch.eval.clocks.stamps import breakdown

    no_gpu_waits(monkeypatch)
    w = workloads[0]

    class HarnessSpawner:
        def spawn(self, target, payload):
            ours, theirs = socket.socketpair()
            thread = threading.Thread(target=_harness_serves, args=(theirs, task, w), daemon=True)
            thread.start()
            return _Spawned(Connection(ours.detach()), thread)

    job = EvalJob(task=TASK, candidates=[("# the harness", "h")], workloads=[w], device="cpu", metric=Metric.gpu_time,
                  trials=1, check_trials=1, warmup=1, timeout_s=60, floor_check=False)
    monkeypatch.setattr(Judge, "timing_sets", lambda self, w: 2)
    j = Judge(job, HarnessSpawner())
    c = j.cands[0]
    j.start(c, 0)
    got = j.window(c, w, "eager_sync", 2)
    j._end(c)
    assert got is not None and c.ok, c.report.summary()
    stamps = got.header["stamps_ms"]
    assert len(stamps) == 6 and got.clock_ms[0] <= stamps[0] and stamps[-1] <= got.clock_ms[2], (got.clock_ms, stamps)
    parts = breakdown(got.clock_ms, stamps, got.header.get("inputs_split_ms"), calls=2, mode="eager_sync")
    assert parts.unusable == "" and parts.calls == 2 and len(parts.inputs_split_ms) == 3, parts
    assert abs(sum(parts.parts_ms.values()) - got.ms) < 1e-3 and parts.parts_ms["calls"] > 0, parts


def test_the_protocol_around_a_window_is_measured_through_the_judges_stand_in(monkeypatch, task, workloads):
    """The judge's clock around its own stand-in's `echo` is what a window holds for the protocol alone; it is
    subtracted with the inputs and the flushes, and measured before any candidate starts."""
    no_gpu_waits(monkeypatch)
    script = Script(echo_ms=4.0)
    job = EvalJob(task=TASK, candidates=[("# scripted", "scripted")], workloads=list(workloads[:1]), device="cpu",
                  metric=Metric.gpu_time, trials=3, check_trials=1, warmup=1, timeout_s=60)
    j = Judge(job, ScriptedSpawner(task, script))
    j.on_gpu = True
    stand = j._stand_in()
    assert stand.ok and "def run(" in stand.source
    ms = j._protocol_ms(stand, workloads[0], trials=3)
    j._end(stand)
    assert 4.0 <= ms < 60.0
    assert [op for op, _ in script.log].count("echo") == 4            # a warm-up and three
    # on the GPU the stand-in also fetches outputs into the slots, as a candidate's window does in its process
    assert all(req.get("fetch") is True for op, req in script.log if op == "echo")
    costs = TrustedCosts(reveal_ms=1.0, flush_ms=0.02, flush_sync_ms=0.05, protocol_ms=ms)
    assert costs.besides_calls(100, costs.flush_ms) == pytest.approx(1.0 + ms + 2.0)


@contextlib.contextmanager
def _real_stand_in(task, workloads):
    """A judge on the CPU with its stand-in spawned through the real spawner and harness: (judge, stand-in)."""
    from ksearch.eval.isolation.spawn import CandidateSpawner

    spawner = CandidateSpawner(interpret=True)
    try:
        job = EvalJob(task=TASK, candidates=[], workloads=list(workloads[:1]), device="cpu",
                      metric=Metric.gpu_time, timeout_s=60, tasks_root=str(task.dir.parent))
        j = Judge(job, spawner)
        stand = j._stand_in()
        try:
            assert stand.ok, stand.report.summary()
            yield j, stand
        finally:
            j._end(stand)
    finally:
        spawner.close()


def test_the_real_harness_answers_echo_for_the_stand_in(task, workloads):
    """The stand-in through the real spawner and harness (CPU): spawned like a candidate, a no-op loaded,
    `echo` answered within the judge's clock."""
    with _real_stand_in(task, workloads) as (j, stand):
        ms = j._protocol_ms(stand, workloads[0], trials=3)
    assert 0.0 < ms < 500.0


@pytest.mark.parametrize("fetch", [True, False])
def test_the_stand_ins_echo_fetches_outputs_into_the_slots_only_when_asked(task, workloads, fetch):
    """`echo` with `fetch` fills every output slot (NaN until then) from the stand-in's device buffers, as a
    window's output copy does: what the judge subtracts for the output fetch is paid in a process spawned as a
    candidate's, with its own mapping of the slots. Without it the slots stay as the judge left them."""
    with _real_stand_in(task, workloads) as (j, stand):
        layout = j._trusted_layout(workloads[0], 2)
        for _ in range(2):                  # the second echo reuses the first one's buffers
            with exchange.SharedCall(layout) as shared:
                header, outs, _, _, _ = j.timed(stand, {"op": "echo", "layout": layout, "fetch": fetch}, shared)
            assert header.get("ok"), header
            assert outs and all(bool((o == 0).all()) if fetch else bool(o.float().isnan().all())
                                for o in outs if o.is_floating_point()), outs


def test_replays_are_as_many_as_the_costs_need_and_bounded_by_the_probe_window(gpu_judge):
    j, _ = gpu_judge(Script())
    heavy = TrustedCosts(reveal_ms=10.0, flush_ms=0.02, flush_sync_ms=0.05, protocol_ms=500.0)
    # 2.5 s of calls wanted (the cap), 12 ms per replay: bounded by MAX_REPLAYS, or by a long probe window
    assert j._replays(6, 2.0, 10.0, heavy) == judge_module.MAX_REPLAYS
    assert j._replays(6, 2.0, 600.0, heavy) == int(judge_module.MAX_WINDOW_MS // 600.0)
    # a graph that already holds enough calls is replayed once
    assert j._replays(1000, 0.05, 60.0, COSTS) == 1
    # the share: a 30 ms overhead wants 270 ms of calls, 12 ms per replay -> 23 replays
    mid = TrustedCosts(reveal_ms=10.0, flush_ms=0.02, flush_sync_ms=0.05, protocol_ms=20.0)
    share = judge_module.OVERHEAD_SHARE
    assert j._replays(6, 2.0, 50.0, mid) == math.ceil(30.0 * (1 - share) / share / 12.0)
