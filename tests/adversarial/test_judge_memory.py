"""The judge's device memory, on a CPU (its readings faked): it gives back what its references took, sizes the
timing input sets by the memory free on the device (every process counted), keeps at least one, and fails a
workload that cannot be timed with the bytes needed and free instead of a CUDA out-of-memory error halfway.

What happened without it (H100, session 25): GQA decode's `full_ragged40_l30-180000` failed for every kernel,
the candidate's process out of memory with 0.8 GiB of 79 GiB free, the judge holding its ~46 GiB reference
reserved in its caching allocator while the candidate built three 2 GiB timing sets."""

import pytest
import torch

from ksearch.eval.report import Metric, Status
from ksearch.eval.trusted import devmem
from ksearch.eval.trusted import judge as judge_module
from ksearch.eval.trusted.devmem import gib
from ksearch.eval.trusted.judge import EvalJob, Judge
from tests.adversarial.kernels import TASK
from tests.adversarial.test_clock_gpu_logic import COSTS, Script, ScriptedSpawner, no_gpu_waits

GiB = 1 << 30


@pytest.fixture(autouse=True)
def fresh_peaks(monkeypatch):
    """No peaks remembered from another test (they are per worker process)."""
    monkeypatch.setattr(judge_module, "_PEAKS", {}, raising=False)


@pytest.fixture
def released(monkeypatch):
    """The judge's releases of its allocator's cache, counted (a no-op here)."""
    calls: list[str] = []
    monkeypatch.setattr(devmem, "release", lambda device: calls.append(device))
    return calls


def fake_free(monkeypatch, *readings):
    """mem_get_info's free bytes: the readings in turn, the last one from then on."""
    left = list(readings)
    monkeypatch.setattr(devmem, "free_bytes", lambda device: left.pop(0) if len(left) > 1 else left[0])


def gpu_judge(task, workloads, script=None, candidates=1):
    job = EvalJob(task=TASK, candidates=[("# scripted", f"c{i}") for i in range(candidates)],
                  workloads=list(workloads), device="cpu", metric=Metric.gpu_time, trials=3, check_trials=1,
                  warmup=1, timeout_s=60, floor_check=False, profile=False)
    j = Judge(job, ScriptedSpawner(task, script or Script()))
    j.on_gpu = True
    return j


def remember(j, w, make_bytes, judge_bytes):
    judge_module._PEAKS[j._peaks_key(w)] = (make_bytes, judge_bytes)


def test_a_large_reference_gives_the_judges_cached_memory_back(monkeypatch, task, workloads, released):
    """The judge's inputs and reference (faked: 2 GiB to make, 2 GiB kept, 40 GiB more to compute) are
    remembered at their peak, and the allocator's cache goes back to the driver before a candidate runs."""
    no_gpu_waits(monkeypatch)
    readings = iter([(2 * GiB, 2 * GiB), (40 * GiB, 0), (1 << 20, 1 << 20), (1 << 20, 0)])

    class FakePeak:
        def __init__(self, device):
            self.peak = self.kept = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.peak, self.kept = next(readings)

    monkeypatch.setattr(devmem, "Peak", FakePeak)
    w = workloads[0]
    j = gpu_judge(task, workloads)
    j.reference(w, 1)
    assert released == ["cpu"]
    assert judge_module._PEAKS[j._peaks_key(w)] == (2 * GiB, 42 * GiB)
    j.reference(w, 2)                           # 1 MiB: nothing worth giving back, and the peaks stay the largest
    assert released == ["cpu"]
    assert judge_module._PEAKS[j._peaks_key(w)] == (2 * GiB, 42 * GiB)
    # the output templates of the stand-in's layout come from the first reference, holding no memory
    assert all(t.device.type == "meta" for t in j._output_templates(w, 3))


@pytest.mark.parametrize("room_sets, sets", [(10.0, 3), (2.5, 2), (1.2, 1)])
def test_timing_sets_are_as_many_as_the_free_memory_holds(monkeypatch, task, workloads, released, room_sets, sets):
    w = workloads[0]
    j = gpu_judge(task, workloads, candidates=2)
    remember(j, w, 3 * GiB, 46 * GiB)
    need = j.memory_need(w)
    assert (need.make_bytes, need.judge_bytes) == (3 * GiB, 46 * GiB)
    besides = need.total(0, 2)          # two candidate processes not started yet
    assert besides == 49 * GiB + need.outputs_bytes + 2 * judge_module.PROCESS_BYTES
    fake_free(monkeypatch, besides + int(room_sets * need.set_bytes))
    assert j.timing_sets(w) == sets
    assert j.timing_sets(w) == sets     # decided once per job
    assert released, "the judge's own cache goes back before it reads what is free"
    assert w.name not in j._no_room
    if sets < 3:
        assert f"timed on {sets} input set" in j._fewer[w.name] and "instead of 3" in j._fewer[w.name]
        assert ("same inputs" in j._fewer[w.name]) == (sets == 1)
    else:
        assert w.name not in j._fewer


def test_a_workload_the_device_cannot_time_fails_with_the_bytes_needed_and_free(monkeypatch, task, released):
    """Two workloads: the first is timed, the second's reference alone takes more than is free. It fails with
    one message naming it and the bytes, and no candidate builds its timing sets."""
    no_gpu_waits(monkeypatch)
    w1, w2 = task.workload_set("tiny")[:2]
    script = Script()
    j = gpu_judge(task, [w1, w2], script)
    monkeypatch.setattr(Judge, "trusted", lambda self, w, stand=None: COSTS)
    remember(j, w1, 1 << 20, 1 << 20)
    remember(j, w2, 1 << 20, 80 * GiB)
    free = 70 * GiB
    fake_free(monkeypatch, free)
    report = j.run()[0]
    assert report.status == Status.RUNTIME_ERROR, report.summary()
    failure = report.first_failure()
    assert failure is not None and failure.workload == w2.name
    need = j.memory_need(w2).total(1, 1)
    for words in (w2.name, "not enough free GPU memory", gib(need), f"{gib(free)} is free", "80.00 GiB"):
        assert words in failure.message, failure.message
    row1 = next(r for r in report.workloads if r.workload == w1.name)
    assert row1.status == Status.PASSED and row1.gpu_time_ms is not None
    ops = [op for op, _ in script.log]
    assert ops.count("pool") == 1, ops                  # only the first workload's sets were built
    first_pool = ops.index("pool")
    assert ops[first_pool - 1] == "release"             # the candidate gives back what it held first
    assert "release" in ops[first_pool + 1:]            # and its sets once they are timed


def test_memory_taken_since_the_sets_were_sized_fails_the_candidate_before_it_builds_them(
        monkeypatch, task, workloads, released):
    """At sizing 3 sets fit; when the candidate's turn comes (after its check call, and after it was asked to
    give back what it held) less is free: a clear failure with the numbers, not an out-of-memory halfway."""
    no_gpu_waits(monkeypatch)
    w = workloads[0]
    script = Script()
    j = gpu_judge(task, workloads, script)
    j.costs = {w.name: COSTS}
    remember(j, w, 1 << 20, 1 << 20)
    need = j.memory_need(w)
    fake_free(monkeypatch, 64 * GiB, need.total(3) - 1)
    assert j.timing_sets(w) == 3
    c = j.cands[0]
    j.start(c, 0)
    j._guarded(c, w, lambda: j.check(c, w, 0))
    j._guarded(c, w, lambda: j.time_gpu(c, w))
    assert c.report.status == Status.RUNTIME_ERROR, c.report.summary()
    assert "not enough free GPU memory for its timing" in c.report.summary()
    assert gib(need.total(3)) in c.report.summary()
    ops = [op for op, _ in script.log]
    assert "release" in ops and "pool" not in ops, ops


def test_with_enough_memory_nothing_changes(monkeypatch, task, workloads, released):
    """Plenty free: the sets are the fixed cap's, and the workload is timed as before."""
    no_gpu_waits(monkeypatch)
    w = workloads[0]
    script = Script()
    j = gpu_judge(task, workloads, script)
    j.costs = {w.name: COSTS}
    fake_free(monkeypatch, 64 * GiB)
    c = j.cands[0]
    j.start(c, 0)
    j._guarded(c, w, lambda: j.check(c, w, 0))
    j._guarded(c, w, lambda: j.time_gpu(c, w))
    assert c.ok and c.row(w.name).gpu_time_ms is not None, c.report.summary()
    windows = [r for op, r in script.log if op == "window"]
    assert windows and all(len(r["seeds"]) == 3 for r in windows)
    assert not any("input set" in f for f in c.report.flags), c.report.flags


def _server():
    """The harness's server on a CPU, its channel unused."""
    from ksearch.eval.candidate.harness import _Kernel, _Server

    class Channel:
        def recv(self):
            raise EOFError

        def send(self, header, tensors=None):
            pass

    return _Server(_Kernel({"device": "cpu"}), Channel())


def test_the_harness_drops_a_workloads_sets_before_building_the_next_and_on_release(monkeypatch, task, workloads):
    server = _server()
    k = server.k
    k.task, k.names, k.input_names = task, task.definition.output_names, task.definition.input_names
    k.fn = lambda *args: task.reference(**dict(zip(k.input_names, args)))
    emptied = []
    server._empty_cache = lambda: emptied.append(True)
    held_while_making = []
    make = server._make
    server._make = lambda seed: (held_while_making.append(len(k.pool)), make(seed))[1]

    class Event:                    # the warm-up's CUDA events, on a CPU
        def __init__(self, **kw):
            pass

        def record(self):
            pass

        def elapsed_time(self, other):
            return 0.01

    monkeypatch.setattr(torch.cuda, "Event", Event)
    k.pool, k.timer, k.prev = [["old set"], ["old set"]], object(), (["out"], ["copy"])
    assert server.pool({"workload": workloads[0], "seeds": [1, 2], "warmup": 1}, None)["ok"]
    assert held_while_making == [0, 0], "the previous workload's sets were still held"
    assert len(k.pool) == 2 and k.timer is None and emptied
    emptied.clear()
    assert server.ops["release"]({"op": "release"}, None) == {"ok": True}
    assert k.pool == [] and k.timer is None and k.prev is None and emptied
