"""The evaluator end to end on the CPU: worker process, correctness, timeouts, crashes, scoring, noise.

Tricks and attacks live in tests/adversarial/; this file covers the ordinary path and the data types.
"""

import pytest

from ksearch.eval.clocks.noise import (
    compare_reports,
    compare_scores,
    near_tie,
    noise_floor,
    relative_spread,
    score_spread,
)
from ksearch.eval.parent.evaluator import EvalSettings, Evaluator
from ksearch.eval.report import BaselineTimes, EvalReport, WorkloadResult, score_report
from ksearch.task import load_task
from tests.adversarial.kernels import GOOD

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"
CORRECT = GOOD
_RETURN = "    return _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)"
assert _RETURN in CORRECT

ONE_WRONG = CORRECT.replace(_RETURN, "    out, lse = _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)\n"
                                     "    out[0, 3, 7] += 1.0\n    return out, lse")
WRONG_DTYPE = CORRECT.replace(_RETURN, "    out, lse = _attend(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)\n"
                                       "    return out.float(), lse")
HANGS = "import time\ndef run(*args):\n    while True:\n        time.sleep(0.1)\n"
CRASHES = "import os\ndef run(*args):\n    os._exit(3)\n"
RAISES = "def run(*args):\n    raise ValueError('bad launch config')\n"
BROKEN = "def run(*args):\n    return (\n"


def _settings(**kw):
    base = dict(device="cpu", timeout_s=20, warmup=0, trials=3, check_trials=2)
    base.update(kw)
    return EvalSettings(**base)


@pytest.fixture(scope="module")
def evaluator():
    task = load_task(TASK)
    ev = Evaluator(task, _settings())
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def workloads():
    return load_task(TASK).workload_set("tiny")[:2]


@pytest.fixture(scope="module")
def baseline(evaluator, workloads):
    return evaluator.measure_baselines(workloads)


def test_baseline_on_cpu_is_the_reference_with_a_spread(baseline, workloads):
    assert baseline.label == "PyTorch reference (CPU)"
    assert set(baseline.best()) == {w.name for w in workloads}
    assert set(baseline.spread["reference"]) == {w.name for w in workloads}
    assert baseline.env["device"] == "cpu" and "torch" in baseline.env


def test_correct_solution_passes_and_gets_a_score_with_spread(evaluator, workloads, baseline):
    r = evaluator.evaluate(CORRECT, "ok", workloads, baseline)
    assert r.passed, r.log
    assert r.score is not None and r.score > 0 and r.baseline == "PyTorch reference (CPU)"
    assert all(w.latency_ms and w.latency_ms > 0 and len(w.trial_ms) == 3 for w in r.workloads)
    assert all(w.spread >= noise_floor("cpu") for w in r.workloads)
    assert r.score_spread is not None and r.score_spread >= noise_floor("cpu")
    assert r.trials == 3 and r.check_trials == 2 and r.env["mode"].startswith("Triton interpreter")
    assert r.baseline_ms == {}            # the CPU baseline is the run's reference timing, not interleaved


@pytest.mark.parametrize("source,status", [
    (ONE_WRONG, "INCORRECT_NUMERICAL"), (WRONG_DTYPE, "INCORRECT_DTYPE"),
    (RAISES, "RUNTIME_ERROR"), (BROKEN, "COMPILE_ERROR"),
])
def test_failures_are_classified(evaluator, workloads, baseline, source, status):
    r = evaluator.evaluate(source, "bad", workloads, baseline)
    assert r.status == status and r.score is None


def test_wrong_on_one_element_names_it(evaluator, workloads, baseline):
    r = evaluator.evaluate(ONE_WRONG, "bad", workloads, baseline)
    assert "1 of" in r.first_failure().message and "(0, 3, 7)" in r.first_failure().message


def test_hang_times_out_and_the_next_candidate_still_runs(workloads, baseline):
    task = load_task(TASK)
    with Evaluator(task, _settings(timeout_s=3)) as ev:
        r = ev.evaluate(HANGS, "hang", workloads, baseline)
        assert r.status == "TIMEOUT" and "timeout" in r.log
        ev.settings.timeout_s = 60
        assert ev.evaluate(CORRECT, "ok", workloads, baseline).passed


def test_crash_is_contained(workloads, baseline):
    with Evaluator(load_task(TASK), _settings(static_checks=False)) as ev:
        r = ev.evaluate(CRASHES, "crash", workloads, baseline)
        assert r.status == "RUNTIME_ERROR" and "exit code 3" in r.log
        assert ev.evaluate(CORRECT, "ok", workloads, baseline).passed


def test_crash_is_refused_statically_by_default(evaluator, workloads, baseline):
    r = evaluator.evaluate(CRASHES, "crash", workloads, baseline)
    assert r.status == "COMPILE_ERROR" and "line 3: uses os._exit" in r.log


def test_remeasure_returns_one_report_per_entry_in_order(evaluator, workloads, baseline):
    reports = evaluator.remeasure([(CORRECT, "first"), (BROKEN, "broken"), (CORRECT + "\n", "second")],
                                  workloads, baseline)
    assert [r.solution_id for r in reports] == ["first", "broken", "second"]
    assert reports[0].passed and reports[2].passed and reports[1].status == "COMPILE_ERROR"
    assert reports[0].env["input_nonce"] == reports[2].env["input_nonce"]   # the same fresh inputs


# ---- data types and noise (no worker) ------------------------------------------------------------------
def test_old_journal_records_still_load():
    old = {"solution_id": "s", "status": "PASSED", "device": "cpu", "log": "", "elapsed_s": 1.0, "score": 2.0,
           "score_name": "geomean_speedup", "baseline": "b", "speedups": {"w": 2.0}, "vs_baselines": {},
           "workloads": [{"workload": "w", "status": "PASSED", "message": "", "latency_ms": 1.0,
                          "max_abs_error": 0.0, "max_rel_error": 0.0, "matched_ratio": 1.0}]}
    r = EvalReport.from_json(old)
    assert r.passed and r.flags == [] and r.score_spread is None and r.workloads[0].trial_ms == []
    assert EvalReport.from_json({**old, "a_field_from_the_future": 1}).score == 2.0
    assert EvalReport.from_json(r.to_json()) == r
    b = BaselineTimes.from_json({"device": "cpu", "variants": {"reference": {"w": 1.0}}, "label": "x"})
    assert b.spread == {} and b.best() == {"w": 1.0}


def _passed(score_ms: dict[str, float], spread: float, device: str = "cpu") -> EvalReport:
    return EvalReport("s", "PASSED", device, [WorkloadResult(w, "PASSED", latency_ms=ms, trial_ms=[ms] * 3,
                                                             spread=spread) for w, ms in score_ms.items()])


def test_score_uses_interleaved_baselines_when_the_job_measured_them():
    base = BaselineTimes("cuda", {"fi": {"a": 10.0, "b": 10.0}}, "FlashInfer best of fi")
    r = _passed({"a": 1.0, "b": 2.0}, 0.01, "cuda")
    r.baseline_ms = {"fi": {"a": 2.0, "b": 4.0}}
    for w in r.workloads:
        w.baseline_ms, w.baseline_spread = r.baseline_ms["fi"][w.workload], 0.02
    score_report(r, base)
    assert r.score == pytest.approx(2.0) and r.speedups == {"a": 2.0, "b": 2.0}
    assert r.score_spread == pytest.approx((0.01 ** 2 + 0.02 ** 2) ** 0.5)
    r2 = score_report(_passed({"a": 1.0, "b": 2.0}, 0.01, "cuda"), base)    # not interleaved: the run's baseline
    assert r2.score == pytest.approx((10.0 * 5.0) ** 0.5)


def test_relative_spread_is_robust_and_floored():
    assert relative_spread([100.0], 0.01) == 0.01
    assert relative_spread([99.0, 101.0], 0.0) == pytest.approx(0.01)
    assert relative_spread([100.0, 100.0, 100.0], 0.02) == 0.02
    assert relative_spread([100.0, 101.0, 300.0], 0.0) == pytest.approx(1.4826 * 1.0 / 101.0)
    assert score_spread([0.03, 0.04], [None, None], "cpu") == pytest.approx(((0.09e-2 + 0.16e-2) / 2) ** 0.5)


def test_compare_scores_needs_the_difference_to_exceed_the_noise():
    assert compare_scores(1.10, 0.02, 1.00, 0.02, margin=0.01) == "better"
    assert compare_scores(1.02, 0.02, 1.00, 0.02, margin=0.01) == "tie"
    assert compare_scores(1.00, 0.02, 1.10, 0.02, margin=0.01) == "worse"
    assert compare_scores(1.10, 0.10, 1.00, 0.10) == "tie"             # 10% apart, 14% combined noise
    assert compare_scores(1.02, 0.0, 1.00, 0.0) == "better"            # no spreads: a bare comparison


def test_compare_reports_handles_failures_old_records_and_shared_baselines():
    a, b = _passed({"w": 1.0}, 0.05), _passed({"w": 1.0}, 0.05)
    a.score, b.score = 1.2, 1.0
    assert compare_reports(a, b) == "better" and compare_reports(b, a) == "worse"
    b.score = 1.15                           # 4% apart, 7% combined noise
    assert compare_reports(a, b) == "tie" and near_tie(a, b)
    failed = EvalReport("f", "RUNTIME_ERROR", "cpu")
    assert compare_reports(a, failed) == "better" and compare_reports(failed, a) == "worse"
    assert compare_reports(failed, failed) == "tie" and not near_tie(failed, a)
    old_a, old_b = EvalReport("a", "PASSED", "cpu", score=1.02), EvalReport("b", "PASSED", "cpu", score=1.0)
    assert compare_reports(old_a, old_b) == "better"                  # records without spreads
    # A shared (non-interleaved) baseline's noise cancels: only the candidates' spreads count.
    a.score_spread = b.score_spread = 0.5
    assert compare_reports(a, b, 0.0) == "tie"
    a.score = 1.3
    assert compare_reports(a, b, 0.0) == "better"


def test_output_capture_keeps_head_and_tail_and_finds_a_split_marker():
    import os

    from ksearch.eval.parent.worker_handle import MARKER, OutputCapture

    r, w = os.pipe()
    cap = OutputCapture(r, head=10, tail=20)
    cap.begin("tok")
    marker = MARKER % b"tok"
    os.write(w, b"H" * 10 + b"x" * 5000 + b"T" * 20 + marker[:7])
    os.write(w, marker[7:] + b"between jobs")
    cap.wait(5)
    text, total = cap.excerpt()
    assert total == 5030 and text.startswith("H" * 10) and text.endswith("T" * 20) and "5000 bytes omitted" in text
    os.close(w)
    cap.eof.wait(5)
