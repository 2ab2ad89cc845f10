"""Which open action runs next: deterministic, difficulty-capped, failure-aware, with a family bonus.

K-Search picked greedily on the model's score alone, so a first family that measured well could starve
its untried siblings forever. Here each candidate's priority is its score, halved per failed cycle,
plus an exploration bonus that shrinks with the number of cycles already spent in its depth-1 family
subtree: untried families get looked at early, then the search deepens where the measurements are.
"""

from __future__ import annotations

import networkx as nx

from ksearch.world_model import Node, WorldModel

#: Each failed cycle halves a node's effective priority (the node is retired after max_failed_cycles).
FAILURE_PENALTY = 0.5


def family_visits(wm: WorldModel, node: Node) -> int:
    """Cycles spent so far in the subtree of the node's depth-1 ancestor (its kernel family)."""
    path = wm.path(node.node_id)
    if len(path) < 2:
        return 0
    top = path[1].node_id
    subtree = nx.descendants(wm.graph, top) | {top}
    return sum(1 for n in subtree if wm.node(n).attempts > 0)


def priority(wm: WorldModel, node: Node, explore_weight: float) -> float:
    assert node.action is not None
    base = node.action.score * (FAILURE_PENALTY ** node.failed_cycles)
    return base + explore_weight / (1 + family_visits(wm, node))


def choose_next(wm: WorldModel, max_difficulty: int, explore_weight: float = 0.0) -> Node | None:
    """Best frontier action by (priority desc, difficulty asc, rating desc, id asc).

    The difficulty cap is the user's and is never raised (K-Search relaxed it upwards); if nothing on
    the frontier is under the cap, nothing is selected and the search ends, saying why.
    """
    candidates = [n for n in wm.frontier() if n.action and n.action.difficulty <= max_difficulty]
    if not candidates:
        return None
    return min(candidates, key=lambda n: (-round(priority(wm, n, explore_weight), 9), n.action.difficulty,
                                          -n.rating, n.node_id))

