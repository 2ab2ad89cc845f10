"""A timed window split by the judge's stamps and the candidate's (ksearch.eval.clocks.stamps): the candidate's are
used only when they can be true, the parts always sum to the judge's clock, and rows keep the split."""

import json
import math

import pytest

from ksearch.eval.clocks.stamps import JUDGE_PARTS, PARTS, breakdown, extremes, why_unusable, words
from ksearch.eval.report import EvalReport, WindowBreakdown, WorkloadResult

JUDGE = [1000.0, 1000.05, 1069.0, 1069.06, 1069.9]          # start, sent, reply, stopped, taken (ms)
HONEST = [1000.1, 1000.2, 1004.4, 1047.2, 1048.3, 1048.31]   # arrived, mapped, inputs, calls, outputs, sending


def test_honest_stamps_split_the_whole_clock():
    b = breakdown(JUDGE, HONEST, [3.9, 0.26, 0.06], calls=465, mode="graph")
    assert b.unusable == "" and list(b.parts_ms) == list(PARTS)
    assert b.ms == pytest.approx(69.9) and sum(b.parts_ms.values()) == pytest.approx(b.ms, abs=1e-3)
    assert b.parts_ms["calls"] == pytest.approx(42.8) and b.parts_ms["to_judge"] == pytest.approx(20.69)
    assert b.candidate_stamps_ms[0] == pytest.approx(0.1) and b.inputs_split_ms == [3.9, 0.26, 0.06]
    assert words(b) == ("window 69.90 ms: send 0.05, request in flight 0.05, map 0.10, inputs 4.20 (make 3.90, "
                        "copy 0.26, wait 0.06), calls 42.80, outputs 1.10, until its reply 0.01, reply in flight "
                        "20.69, stop 0.06, take 0.84")


def test_a_stamp_taken_a_few_us_before_the_judges_send_returned_reads_zero():
    b = breakdown(JUDGE, [1000.049] + HONEST[1:])
    assert b.unusable == "" and b.parts_ms["to_candidate"] < 0 and "request in flight 0.00," in words(b)


@pytest.mark.parametrize("stamps,why", [
    (None, "none sent"),
    ([999.0] + HONEST[1:], "outside the judge's clock"),                 # had the request before it was sent
    (HONEST[:-1] + [1069.5], "outside the judge's clock"),               # sent after the judge received it
    ([s - 5e6 for s in HONEST], "outside the judge's clock"),            # another clock (a time namespace)
    ([HONEST[0], HONEST[2], HONEST[1]] + HONEST[3:], "not in order"),
    (HONEST[:5], "not 6 finite numbers"),
    (HONEST + [1048.4], "not 6 finite numbers"),
    ([math.nan] + HONEST[1:], "not 6 finite numbers"),
    (HONEST[:5] + [math.inf], "not 6 finite numbers"),
    ([True] + HONEST[1:], "not 6 finite numbers"),
    ([10 ** 400] + HONEST[1:], "not 6 finite numbers"),                  # JSON's integers have no bound
    ([str(s) for s in HONEST], "not 6 finite numbers"),
    ({"arrived": 1000.1}, "not 6 finite numbers"),
    ("fast", "not 6 finite numbers"),
])
def test_stamps_that_cannot_be_true_leave_only_the_judges_parts(stamps, why):
    assert why_unusable(JUDGE, stamps) == why
    b = breakdown(JUDGE, stamps, [3.9, 0.26, 0.06])
    assert b.unusable == why and list(b.parts_ms) == list(JUDGE_PARTS) and b.inputs_split_ms == []
    assert b.parts_ms["candidate"] == pytest.approx(JUDGE[2] - JUDGE[1])
    assert sum(b.parts_ms.values()) == pytest.approx(b.ms, abs=1e-3)
    assert words(b).endswith(f"(the candidate's stamps are unusable: {why})") and "calls" not in words(b)
    kept_raw = isinstance(stamps, list) and len(stamps) == 6 and why != "not 6 finite numbers"
    assert (len(b.candidate_stamps_ms) == 6) == kept_raw


def test_the_judges_own_stamps_must_be_five():
    with pytest.raises(ValueError):
        breakdown(JUDGE[:4], HONEST)


def test_the_slowest_and_the_fastest_are_kept():
    a, b, c = (breakdown([0.0, 0.1, ms - 1, ms - 0.5, ms], None) for ms in (30.0, 45.0, 20.0))
    kept = extremes([], a)
    assert [(k.which, k.ms) for k in kept] == [("slowest", 30.0), ("fastest", 30.0)]
    for new in (b, c):
        kept = extremes(kept, new)
    assert [(k.which, k.ms) for k in kept] == [("slowest", 45.0), ("fastest", 20.0)]
    assert words(kept[1]).startswith("fastest 20.00 ms: send 0.10, candidate 18.90, stop 0.50, take 0.50")


def test_rows_keep_the_split_and_old_rows_still_load():
    row = WorkloadResult("w", "PASSED", window_breakdown=extremes([], breakdown(JUDGE, HONEST, calls=465)))
    report = EvalReport("s", "PASSED", "cuda", workloads=[row])
    again = EvalReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again == report and isinstance(again.workloads[0].window_breakdown[0], WindowBreakdown)
    old = WorkloadResult.from_json({"workload": "w", "status": "PASSED", "latency_ms": 1.0})
    assert old.window_breakdown == []
    odd = WorkloadResult.from_json({"workload": "w", "status": "PASSED",
                                    "window_breakdown": [{"ms": 1.0, "from_the_future": 1}, "x", {"ms": 2.0}]})
    assert [b.ms for b in odd.window_breakdown] == [1.0]        # the first two, a malformed one left out
    many = WorkloadResult.from_json({"workload": "w", "status": "PASSED", "window_breakdown": [{"ms": 1.0}] * 9})
    assert len(many.window_breakdown) == 2
    assert WorkloadResult.from_json({"workload": "w", "status": "PASSED", "window_breakdown": "x"}).window_breakdown == []


def test_bench_out_keeps_the_split_per_row():
    from ksearch.cli.bench import summarize
    from ksearch.eval.report import BaselineTimes

    kept = extremes([], breakdown(JUDGE, HONEST, calls=465, mode="graph"))
    report = EvalReport("k", "PASSED", "cuda", [WorkloadResult("w", "PASSED", latency_ms=0.5, window_breakdown=kept)])
    s = summarize("k", report, BaselineTimes("cuda", {"v": {"w": 0.3}}, "x"), {}, None)
    row = json.loads(json.dumps(s["rows"][0]))
    assert [b["which"] for b in row["window_breakdown"]] == ["slowest", "fastest"]
    assert row["window_breakdown"][0]["parts_ms"]["calls"] == pytest.approx(42.8)
