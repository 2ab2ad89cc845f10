"""Run-to-run noise of timings, and comparisons that respect it.

A latency is measured in several trials (each the median of its iterations) and reported as their
median; its *relative spread* is the scaled median absolute deviation of the trial values over their
median (1.4826 * MAD: a standard deviation for normal noise, yet one cold or disturbed trial does not
inflate it, just as it does not move the median), half the range for two trials, and never below a
per-device floor (three trials can agree by chance; the floor keeps that luck from turning into false
precision). A score's spread combines
the spreads of its workloads (root mean square, which assumes their errors move together, the
conservative case) with the baseline's.

`compare_reports(a, b, margin)` is what the planner uses instead of `a.score > b.score`: A is "better"
only when its score exceeds B's by more than `margin` plus the combined spread, "worse" symmetrically,
and otherwise a "tie" (re-measure the two side by side with `Evaluator.remeasure` to resolve it).

When neither report carries interleaved baseline timings (the CPU path, old records) both scores divide
by the same baseline measurement, whose noise then cancels in the comparison; only the candidates'
spreads count. Reports with no spread at all (records written before spreads existed) compare as bare
numbers plus the margin.

Pure functions of floats and reports; no torch, so the planner can import this cheaply.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, Literal

Verdict = Literal["better", "worse", "tie"]

# Smallest relative spread claimed per device kind. GPU: CUDA-event medians over tens of iterations with
# a cold L2 repeat to well under 1%, but clocks and neighbours move them by about that much. CPU: one
# wall-clock call of the Triton interpreter per trial; repeated calls differ by several percent.
NOISE_FLOOR = {"cuda": 0.01, "cpu": 0.05}


def noise_floor(device: str) -> float:
    return NOISE_FLOOR["cuda"] if device.startswith("cuda") else NOISE_FLOOR["cpu"]


def relative_spread(values: Sequence[float], floor: float = 0.0) -> float:
    """1.4826 * MAD / median of `values` (half the range for two), at least `floor` (just `floor` for one)."""
    vals = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if len(vals) < 2:
        return floor
    mid = statistics.median(vals)
    if len(vals) == 2:
        return max(floor, (max(vals) - min(vals)) / (2.0 * mid))
    mad = statistics.median(abs(v - mid) for v in vals)
    return max(floor, 1.4826 * mad / mid)


def score_spread(candidate: Sequence[float | None], baseline: Sequence[float | None], device: str) -> float:
    """Relative uncertainty of a geometric-mean speedup from per-workload spreads (RMS, both sides).

    A missing candidate spread counts as the device's floor; a missing baseline spread as zero (a
    baseline measured once per run is common to every score of that run).
    """
    floor = noise_floor(device)
    terms = [(c if c is not None else floor) ** 2 + (b or 0.0) ** 2 for c, b in zip(candidate, baseline)]
    if not terms:
        return floor
    return math.sqrt(sum(terms) / len(terms))


def candidate_spread(report: Any) -> float:
    """RMS of the per-workload spreads of the candidate alone (0.0 when the report has none)."""
    spreads = [w.spread for w in report.workloads if getattr(w, "spread", None) is not None]
    return math.sqrt(sum(s * s for s in spreads) / len(spreads)) if spreads else 0.0


def compare_scores(a: float, a_spread: float, b: float, b_spread: float, margin: float = 0.0,
                   z: float = 1.0) -> Verdict:
    """'better' when a > b * (1 + margin + z * combined spread), 'worse' symmetrically, else 'tie'.

    Scores are higher-is-better (speedups); spreads are relative (0.02 = 2%).
    """
    if a <= 0 or b <= 0:
        raise ValueError(f"scores must be positive, got {a} and {b}")
    threshold = math.log1p(max(0.0, margin) + z * math.hypot(a_spread or 0.0, b_spread or 0.0))
    diff = math.log(a / b)
    if diff > threshold:
        return "better"
    if -diff > threshold:
        return "worse"
    return "tie"


def _spreads(a: Any, b: Any) -> tuple[float, float]:
    if a.baseline_ms and b.baseline_ms:      # each divided by its own interleaved baseline: both noises count
        return (a.score_spread if a.score_spread is not None else candidate_spread(a),
                b.score_spread if b.score_spread is not None else candidate_spread(b))
    return candidate_spread(a), candidate_spread(b)


def compare_reports(a: Any, b: Any, margin: float = 0.0, z: float = 1.0) -> Verdict:
    """Is EvalReport `a` better than `b`? A passing, scored report beats one that is not."""
    a_ok = a.passed and a.score is not None and a.score > 0
    b_ok = b.passed and b.score is not None and b.score > 0
    if a_ok != b_ok:
        return "better" if a_ok else "worse"
    if not a_ok:
        return "tie"
    sa, sb = _spreads(a, b)
    return compare_scores(a.score, sa, b.score, sb, margin, z)


def near_tie(a: Any, b: Any, margin: float = 0.0, z: float = 1.0) -> bool:
    """Both scored and indistinguishable within the noise: worth re-measuring side by side."""
    return a.passed and b.passed and a.score is not None and b.score is not None and \
        compare_reports(a, b, margin, z) == "tie"
