"""Predicted against measured speedup over the whole tree, for `report`'s calibration plot and table.

The per-node facts (base, family, prediction, measurement, and their treatment of unusable scores) are
ksearch.world_model.facts'; this module only collects them into points and summarises their error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ksearch.world_model import WorldModel
from ksearch.world_model.facts import facts


@dataclass(frozen=True)
class PredictionPoint:
    node_id: str
    family: str            # choice (or id) of the kernel family the node belongs to (see facts.family_of)
    depth: int
    predicted: float
    measured: float
    score: float
    parent_score: float


def prediction_points(wm: WorldModel) -> list[PredictionPoint]:
    """Every closed node with a prediction and a measurable speedup over its parent."""
    out = []
    for n in wm.nodes():
        f = facts(wm, n)
        if n.is_root or f.predicted is None or f.measured is None or f.score is None or f.parent_score is None:
            continue
        fam = wm.node(f.family_id) if f.family_id else None
        out.append(PredictionPoint(n.node_id, (fam.choice or fam.node_id) if fam else "?", wm.depth(n.node_id),
                                   f.predicted, f.measured, f.score, f.parent_score))
    return out


def geometric_error(points: list[PredictionPoint]) -> float | None:
    """Median of |log(measured / predicted)| as a factor: 1.25 means predictions are typically 25% off."""
    if not points:
        return None
    errs = sorted(abs(math.log(p.measured / p.predicted)) for p in points)
    mid = len(errs) // 2
    med = errs[mid] if len(errs) % 2 else (errs[mid - 1] + errs[mid]) / 2
    return math.exp(med)
