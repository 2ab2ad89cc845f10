"""Predicted against measured speedup per node, in one place so `show` and `report` agree.

A node's `action.expected_speedup` is the model's prediction of how much faster the node's kernel is than
its PARENT's kernel (frozen into `solution.predicted_speedup` when the node is closed). The root's "kernel"
is the baseline (score 1.0 by definition of the score), so for a depth-1 node the parent score is 1.0 and
prediction and measurement are both against the baseline. Measured = node score / parent score, where the
parent is the node whose kernel this one starts from (through structural nodes left by a split). This
mirrors the planner's calibration (ksearch.planner.selection) without importing the planner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ksearch.world_model import Node, WorldModel


@dataclass
class PredictionPoint:
    node_id: str
    family: str            # choice (or id) of the kernel family the node belongs to (see family_of)
    depth: int
    predicted: float
    measured: float
    score: float
    parent_score: float


def base_node(wm: WorldModel, node: Node) -> Node | None:
    """The node whose kernel `node` starts from: its parent, looking through structural (split) nodes."""
    parent = wm.parent(node.node_id)
    while parent is not None and not parent.is_root and _structural(parent):
        parent = wm.parent(parent.node_id)
    return parent


def _structural(node: Node) -> bool:
    """A pure grouping node (no action, no kernel), e.g. what a split leaves above its smaller steps."""
    return not node.is_root and node.action is None and node.solution is None


def parent_score(wm: WorldModel, node: Node) -> float | None:
    base = base_node(wm, node)
    if base is None:
        return None
    if base.is_root:
        return 1.0
    return base.solution.score if base.solution and base.solution.score else None


def predicted_speedup(node: Node) -> float | None:
    """The prediction as frozen when the node was closed (so later edits cannot improve the record), else
    the action's current one."""
    frozen = getattr(node.solution, "predicted_speedup", None) if node.solution else None
    predicted = frozen if frozen is not None else (node.action.expected_speedup if node.action else None)
    return float(predicted) if isinstance(predicted, (int, float)) and predicted > 0 else None


def measured_vs_parent(wm: WorldModel, node: Node) -> float | None:
    if not node.solution or node.solution.score is None:
        return None
    base = parent_score(wm, node)
    return node.solution.score / base if base else None


def family_of(wm: WorldModel, node_id: str) -> Node | None:
    """The kernel family: the first node below the root on the path that is not a pure grouping node."""
    return next((n for n in wm.path(node_id)[1:] if not _structural(n)), None)


def families(wm: WorldModel) -> list[Node]:
    """Every kernel family in the tree (usually the root's children), pruned ones included."""
    return [n for n in wm.nodes() if not n.is_root and family_of(wm, n.node_id) is n]


def prediction_points(wm: WorldModel) -> list[PredictionPoint]:
    """Every closed node with a prediction and a measurable speedup over its parent."""
    out = []
    for n in wm.nodes():
        predicted = predicted_speedup(n)
        measured = measured_vs_parent(wm, n)
        if n.is_root or predicted is None or measured is None:
            continue
        fam = family_of(wm, n.node_id)
        out.append(PredictionPoint(n.node_id, (fam.choice or fam.node_id) if fam else "?", wm.depth(n.node_id),
                                   predicted, measured, float(n.solution.score), float(parent_score(wm, n) or 0.0)))
    return out


def geometric_error(points: list[PredictionPoint]) -> float | None:
    """Median of |log(measured / predicted)| as a factor: 1.25 means predictions are typically 25% off."""
    if not points:
        return None
    errs = sorted(abs(math.log(p.measured / p.predicted)) for p in points)
    mid = len(errs) // 2
    med = errs[mid] if len(errs) % 2 else (errs[mid - 1] + errs[mid]) / 2
    return math.exp(med)


def vs_parent_kernel(wm: WorldModel, node: Node) -> float | None:
    """Score over the score of the kernel the node really started from, for the "vs parent" column.

    Unlike `measured_vs_parent` (the prediction's frame, where a family's parent is the baseline at 1.0),
    this is None when the parent holds no kernel: a family under a root without a seed solution. Showing
    the family's score again there reads as a comparison with a kernel that does not exist (on a CPU it
    read "vs parent 0.004x", which is really the PyTorch reference)."""
    if not node.solution or node.solution.score is None:
        return None
    base = base_node(wm, node)
    if base is None or not base.solution or not base.solution.score:
        return None
    return node.solution.score / base.solution.score
