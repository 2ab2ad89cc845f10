"""Measured facts about plan nodes, defined once: the planner's selection and the views read them here.

A node's kernel builds on its BASE: its parent, looking through structural (split) nodes. The root's
"kernel" is the baseline, whose score is 1.0 by the definition of the score (a speedup over the baseline).
A node's FAMILY is the first non-structural node below the root on its path. The model's PREDICTION is
the speedup of the node's kernel over its base's kernel (frozen when the node is closed, so a later edit
cannot improve the record); the MEASURED speedup is node score / base score.

An unmeasured base (a closed node whose kernel has no usable score) has no parent score: `parent_score`
says None and nothing measured against it is defined. Selection, which must rank a step whose base is
unmeasured anyway, uses `parent_score_or_baseline` and says so in its name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from ksearch.world_model.node import Node
from ksearch.world_model.tree import WorldModel

#: The score of the root's "kernel": scores are speedups over the baseline, so the baseline is 1.0.
BASELINE_SCORE = 1.0


def is_structural(node: Node) -> bool:
    """A pure grouping node (no action, no kernel, not the root), e.g. what a split leaves above its steps."""
    return WorldModel.is_structural(node)


def base_node(wm: WorldModel, node: Node) -> Node | None:
    """The node whose kernel `node` starts from (None for the root itself)."""
    if node.is_root:
        return None
    return wm.base_of(node.node_id)


def measured_score(node: Node) -> float | None:
    """The node's kernel's score when it is a usable measurement (finite and > 0), else None."""
    s = node.solution.score if node.solution is not None else None
    return float(s) if isinstance(s, (int, float)) and math.isfinite(s) and s > 0 else None


def parent_score(wm: WorldModel, node: Node) -> float | None:
    """Score of the kernel `node` starts from: 1.0 for a depth-1 step (the baseline), its base's measured
    score otherwise, None when that base has no usable measurement (or `node` is the root)."""
    base = base_node(wm, node)
    if base is None:
        return None
    if base.is_root:
        return BASELINE_SCORE          # predictions for depth-1 steps are against the baseline, seeded or not
    return measured_score(base)


def parent_score_or_baseline(wm: WorldModel, node: Node) -> float:
    """`parent_score`, with the baseline's 1.0 standing in for an unmeasured base (selection's prior)."""
    s = parent_score(wm, node)
    return s if s is not None else BASELINE_SCORE


def predicted_speedup(node: Node) -> float | None:
    """The prediction as frozen when the node was closed, else the action's current one (None if absent)."""
    frozen = node.solution.predicted_speedup if node.solution is not None else None
    predicted = frozen if frozen is not None else (node.action.expected_speedup if node.action else None)
    return float(predicted) if isinstance(predicted, (int, float)) and math.isfinite(predicted) \
        and predicted > 0 else None


def measured_speedup(wm: WorldModel, node: Node) -> float | None:
    """Node score / parent score; None when either is not measured."""
    score, base = measured_score(node), parent_score(wm, node)
    return score / base if score is not None and base else None


def family_of(wm: WorldModel, node: Node) -> Node | None:
    """The node's kernel family: the first node below the root on its path that is not structural."""
    return next((n for n in wm.path(node.node_id)[1:] if not is_structural(n)), None)


def families(wm: WorldModel) -> list[Node]:
    """Every kernel family in the tree (usually the root's children), pruned ones included."""
    return [n for n in wm.nodes() if not n.is_root and family_of(wm, n) is n]


def family_visits(wm: WorldModel, node: Node) -> int:
    """Nodes tried so far (at least one attempt) in the subtree of the node's family."""
    fam = family_of(wm, node)
    if fam is None:
        return 0
    ids = nx.descendants(wm.graph, fam.node_id) | {fam.node_id}
    return sum(1 for i in ids if wm.node(i).attempts > 0)


def best_score(wm: WorldModel) -> float | None:
    """The best measured score in the tree (a seeded root included), or None before any measurement."""
    scores = [s for s in (measured_score(n) for n in wm.closed_nodes()) if s is not None]
    return max(scores) if scores else None


def base_kernel_score(wm: WorldModel, node: Node) -> float | None:
    """Score of the kernel `node` really started from: its base's measured score, the root's only when the
    root holds a (seed) kernel. Unlike `parent_score`, the baseline never stands in for it."""
    base = base_node(wm, node)
    return measured_score(base) if base is not None else None


@dataclass(frozen=True)
class NodeFacts:
    """Everything above for one node, for views that show a node's numbers together."""

    node_id: str
    base_id: str | None
    base_is_root: bool
    family_id: str | None
    score: float | None
    parent_score: float | None
    base_kernel_score: float | None
    predicted: float | None
    measured: float | None

    @property
    def against_baseline(self) -> bool:
        """The node starts from the root, which holds no kernel: its prediction and measurement are against
        the baseline."""
        return self.base_is_root and self.base_kernel_score is None

    @property
    def vs_base_kernel(self) -> float | None:
        """Score over the score of the kernel the node really started from (None when that base holds no
        kernel: a family under a root without a seed, whose only comparison is the baseline)."""
        if self.score is None or self.base_kernel_score is None:
            return None
        return self.score / self.base_kernel_score


def facts(wm: WorldModel, node: Node) -> NodeFacts:
    """The node's facts, computed together."""
    base, fam = base_node(wm, node), family_of(wm, node)
    return NodeFacts(node_id=node.node_id, base_id=base.node_id if base else None,
                     base_is_root=base is not None and base.is_root, family_id=fam.node_id if fam else None,
                     score=measured_score(node), parent_score=parent_score(wm, node),
                     base_kernel_score=base_kernel_score(wm, node), predicted=predicted_speedup(node),
                     measured=measured_speedup(wm, node))
