"""The advisory profile pass, on a CPU with a scripted candidate (tests/adversarial/test_clock_gpu_logic.py):
an honest reply becomes a typed profile with the judge's own occupancy and % of the limit; a reply that is a
lie, malformed, oversized, late, failed, or a process that dies during the pass leaves a note and never
changes the verdict or the timing."""

import time

import pytest

from ksearch.eval import wire
from ksearch.eval.report import Status
from ksearch.eval.trusted import judge as judge_module
from ksearch.profile import read_profile, render_profile
from tests.adversarial.test_clock_gpu_logic import Script, _timed, gpu_judge  # noqa: F401 - a fixture

KERNEL = {"name": "_attn", "registers_per_thread": 128, "spilled_bytes": 0, "shared_memory_bytes": 65536,
          "num_warps": 4, "num_stages": 2}


def honest(conn, req):
    wire.send(conn, {"ok": True, "launches": [["_attn", 3.0], ["_combine", 1.0]],
                     "kernels": [KERNEL, {"name": "_touch", "num_warps": 1}]})


@pytest.fixture
def profiled(gpu_judge, workloads, monkeypatch):  # noqa: F811 - the imported fixture
    """Time the first workload, then run the profile pass; returns the report and the row as timed."""
    monkeypatch.setattr(judge_module.torch.cuda, "get_device_capability", lambda *a: (9, 0))

    def run(on_profile):
        j, c = gpu_judge(Script(on_profile=on_profile), trials=2)
        j.job.workloads = j.job.workloads[:1]
        j.floor_ms = lambda w: 0.001                        # the task's floor as a datasheet would give it
        status, row = _timed(j, c, workloads[0])
        assert status == Status.PASSED, c.report.summary()
        before = (row.latency_ms, row.trial_ms, list(c.report.flags))
        j.profile(c)
        assert c.report.status == Status.PASSED and (row.latency_ms, row.trial_ms, c.report.flags) == before
        j._end(c)
        assert c.report.status == Status.PASSED
        return c.report, row
    return run


def test_an_honest_reply_becomes_a_typed_profile(profiled):
    report, row = profiled(honest)
    reading = read_profile(report.to_json())
    p = reading.profile
    assert p is not None, reading.reason
    assert [k.name for k in p.kernels] == ["_attn"]                  # the launched kernels only
    assert p.kernels[0].occupancy == pytest.approx(3 * 4 / 64)       # computed by the judge
    [w] = p.workloads
    assert [(x.kernel, x.gpu_time_us) for x in w.launches] == [("_attn", 3.0), ("_combine", 1.0)]
    assert w.pct_of_limit == pytest.approx(100 * 0.001 / row.gpu_time_ms)
    assert report.profile_note == ""
    table = render_profile(reading)
    assert "_attn" in table and "19%" in table and "% of limit" in table


def _lies(conn, req):
    wire.send(conn, {"ok": True, "launches": [["_attn", 1e6]], "kernels": [dict(KERNEL, registers_per_thread=999)]})


def _malformed(conn, req):
    conn.send_bytes(b"{not json")


def _tensor(conn, req):
    import torch
    wire.send(conn, {"ok": True}, [torch.zeros(4)])


def _fails(conn, req):
    wire.send(conn, {"ok": False, "status": "INCORRECT_NUMERICAL", "message": "profiler unavailable"})


def _dies(conn, req):
    conn.close()
    return "exit"


def _late(conn, req):
    time.sleep(0.6)
    wire.send(conn, {"ok": True, "launches": [], "kernels": []})


@pytest.mark.parametrize("reply, note", [
    (_lies, "more than the judge's"), (_malformed, "malformed"), (_tensor, "malformed"),
    (_fails, "profiler unavailable"), (_dies, "ended during the profile pass"), (_late, "no answer within")])
def test_a_bad_reply_is_a_note_never_a_verdict(profiled, monkeypatch, reply, note):
    monkeypatch.setattr(judge_module, "PROFILE_TIMEOUT_S", 0.3)
    report, _ = profiled(reply)
    assert note in report.profile_note, report.profile_note
    p = read_profile(report.to_json()).profile
    if reply is _lies:
        assert p is not None and p.workloads[0].launches == [] and p.kernels[0].registers_per_thread is None
    else:
        assert p is None


def test_a_report_without_a_profile_says_why():
    from ksearch.eval.report import EvalReport

    cpu = EvalReport("s", Status.PASSED, "cpu", profile_note="no profile on a CPU: the Triton interpreter compiles "
                                                              "nothing")
    assert "interpreter" in read_profile(cpu.to_json()).reason


def test_a_job_profiles_every_passing_candidate_after_timing(task, monkeypatch):
    from ksearch.eval.report import Metric
    from ksearch.eval.trusted.judge import EvalJob, Judge
    from tests.adversarial.test_clock_gpu_logic import COSTS, ScriptedSpawner, no_gpu_waits

    no_gpu_waits(monkeypatch)
    monkeypatch.setattr(judge_module.torch.cuda, "get_device_capability", lambda *a: (9, 0))
    workloads = list(task.workload_set("tiny"))[:3]
    script = Script(on_profile=honest)
    job = EvalJob(task=task.name, candidates=[("# scripted", "scripted")], workloads=list(workloads), device="cpu",
                  metric=Metric.gpu_time, trials=2, check_trials=1, warmup=1, timeout_s=60, floor_check=False)
    j = Judge(job, ScriptedSpawner(task, script))
    j.on_gpu = True
    j._measure_trusted = lambda: j.costs.update({w.name: COSTS for w in workloads})
    j.floor_ms = lambda w: None
    [report] = j.run()
    assert report.passed, report.summary()
    ops = [op for op, _ in script.log]
    assert ops.index("profile") > max(i for i, op in enumerate(ops) if op == "window")     # after all timing
    p = read_profile(report.to_json()).profile
    gpu_ms = {r.workload: r.gpu_time_ms for r in report.workloads}
    ends = {min(gpu_ms, key=gpu_ms.__getitem__), max(gpu_ms, key=gpu_ms.__getitem__)}
    assert len(workloads) > 2 and ops.count("profile") == len(ends)     # its longest and shortest only
    assert p is not None and [w.workload for w in p.workloads] == [w.name for w in workloads if w.name in ends]
    assert p.workloads[0].pct_of_limit is None                       # no floor known: no % of it
