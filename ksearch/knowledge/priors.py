"""How recalled evidence sets where a run starts: its first proposals and its beliefs about families.

For each catalog family, its start is a blend of the catalog author's prior and the evidence:

- strong evidence (same task, same GPU) weighs STRONG_WEIGHT: the family's priority and rating move
  towards its measured rank, its confidence rises with the number of evaluations, its predicted speedup
  becomes the best score it measured, and its first action carries the knob settings that scored best,
  so the best family, at its best settings, is the first thing the run tries;
- a family without strong evidence while others have it keeps its catalog guess, scaled by how far
  the catalog's guess for the best family was from what it measured (one calibration for all);
- weak evidence (same op type elsewhere) weighs WEAK_WEIGHT and moves priority and rating only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ksearch.knowledge.recall import Recall, knobs_text

STRONG_WEIGHT = 0.8
WEAK_WEIGHT = 0.3
MAX_CONFIDENCE = 0.9


@dataclass(frozen=True)
class CatalogPrior:
    """A family's catalog prior (the fields of ksearch.task.catalog.Prior that a start moves)."""

    family: str
    score: float
    rating: float
    confidence: float
    expected_speedup: float


@dataclass(frozen=True)
class FamilyStart:
    family: str
    score: float
    rating: float
    confidence: float
    expected_speedup: float
    knobs: dict[str, Any] = field(default_factory=dict)    # the first action's settings (strong evidence only)
    note: str = ""


def _blend(prior: float, evidence: float, weight: float) -> float:
    return (1 - weight) * prior + weight * evidence


def _confidence(prior: float, evaluations: int) -> float:
    """Measurements raise confidence towards MAX_CONFIDENCE: one evaluation a third of the way."""
    return prior + (MAX_CONFIDENCE - prior) * evaluations / (evaluations + 2) if prior < MAX_CONFIDENCE else prior


def family_starts(priors: Sequence[CatalogPrior], recall: Recall) -> dict[str, FamilyStart]:
    """Each family's start; the catalog prior unchanged where the recall has nothing about it."""
    best = recall.best()
    by_name = {p.family: p for p in priors}
    calibration = None
    if best is not None and best.family in by_name and by_name[best.family].expected_speedup > 0:
        calibration = best.best_score / by_name[best.family].expected_speedup      # type: ignore[operator]
    out = {}
    for p in priors:
        strong, weak = recall.strong_for(p.family), recall.weak_for(p.family)
        if strong is not None:
            expected = strong.best_score if strong.best_score is not None else p.expected_speedup * (calibration or 1.0)
            result = (f"best {strong.best_score:.4g}x with {knobs_text(strong.best_knobs)}"
                      if strong.best_score is not None else "never passed")
            out[p.family] = FamilyStart(
                p.family, round(_blend(p.score, strong.relative, STRONG_WEIGHT), 4),
                round(_blend(p.rating, 10 * strong.relative, STRONG_WEIGHT), 3),
                round(_confidence(p.confidence, strong.evaluations), 3), round(expected, 6),
                dict(strong.best_knobs) if strong.best_score is not None else {},
                f"MEMORY ({recall.gpu}): {strong.evaluations} evaluations in {strong.runs} earlier run(s), {result}")
        elif weak is not None:
            out[p.family] = FamilyStart(
                p.family, round(_blend(p.score, weak.relative, WEAK_WEIGHT), 4),
                round(_blend(p.rating, 10 * weak.relative, WEAK_WEIGHT), 3), p.confidence,
                round(p.expected_speedup * (calibration or 1.0), 6), {},
                f"MEMORY (same op type elsewhere): ranked {weak.relative:.2f} of the best there")
        else:
            out[p.family] = FamilyStart(p.family, p.score, p.rating, p.confidence,
                                        round(p.expected_speedup * (calibration or 1.0), 6))
    return out
