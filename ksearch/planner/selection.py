"""Which open action runs next: deterministic, difficulty-capped, and (by default) learning from the tree.

K-Search picked greedily on the model's `score` alone (reference section 3.6, weak point 1): the score
is a guess, and the tree's measurements never entered the choice. Two policies are offered:

- "greedy": K-Search's rule, kept for comparison: action.score desc, difficulty asc, rating desc,
  node_id asc. No bonus, no penalties (retired and pruned nodes are simply not on the frontier).
- "learned" (default): the guess becomes a prior, combined with what has been measured:
    prediction  the calibrated expected score of the step, parent score x calibration factor x the
                model's predicted speedup (shrunk towards "no change" by the node's confidence), relative
                to the best score so far;
    parent      the measured quality of the kernel the step starts from (its score / best so far);
    penalty     0.5 per failed cycle and a mild decay per attempt already spent on the node;
    bonus       explore_weight / (1 + tried nodes in the step's kernel family), so untried families are
                looked at before the search deepens where the measurements are.
  The calibration factor is the geometric mean of measured/predicted speedups over closed nodes,
  shrunk towards 1 while there are few of them: a model that keeps over-promising gets discounted.

- "random": a baseline arm that shows what the search's judgement is worth. Uniform over the same
  frontier (the same catalog moves the model proposed, under the same difficulty cap and round budget),
  ignoring every score. The draw is a hash of (run seed, draw number = the round, the sorted candidate
  ids), so a run is reproducible from its seed and a resumed run makes the same choices without
  keeping any generator state.

All are deterministic (ties: difficulty asc, rating desc, node_id asc) and all respect the user's
difficulty cap, which is never raised (K-Search relaxed it upwards, weak point 9).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ksearch.world_model import Node, WorldModel, facts
from ksearch.world_model.facts import BASELINE_SCORE, best_score, family_visits
from ksearch.world_model.facts import family_of as _family_of
from ksearch.world_model.node import Action

POLICIES = ("learned", "greedy", "random")

#: Each failed cycle halves a node's priority (the node is retired after max_failed_cycles).
FAILURE_PENALTY = 0.5
#: Each attempt (one generated kernel) already spent on a still-open node costs a little more.
ATTEMPT_DECAY = 0.95
#: Weights of the learned value; they sum to 1 so the value stays in [0, 1] like action.score.
W_PRIOR, W_PREDICTION, W_PARENT = 0.4, 0.35, 0.25
#: Pseudo-observations at "predictions come true" (ratio 1) that the calibration starts from.
CALIBRATION_PRIOR_N = 2.0
#: One wild measurement (a broken timer, a tiny workload) must not dominate the calibration.
RATIO_CLIP = (0.1, 10.0)
FACTOR_CLIP = (0.25, 4.0)


# ---- measured facts about the tree: owned by ksearch.world_model.facts ---------------------------------
def parent_score(wm: WorldModel, node: Node) -> float:
    """Score of the kernel `node` starts from, the baseline's 1.0 standing in for an unmeasured base."""
    return facts.parent_score_or_baseline(wm, node)


@dataclass(frozen=True)
class CalibrationPair:
    node_id: str
    base_id: str
    predicted: float          # the model's expected_speedup when the node was closed
    measured: float           # node score / base score
    ratio: float              # measured / predicted, clipped to RATIO_CLIP


@dataclass(frozen=True)
class Calibration:
    """How well the model's speedup predictions came true. `factor` multiplies new predictions."""

    factor: float             # shrunk geometric mean of the ratios (1.0 with no evidence)
    n: int                    # closed nodes with a prediction and a measurement
    raw_factor: float         # unshrunk geometric mean (1.0 with no evidence), for reports
    pairs: list[CalibrationPair] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def calibration(wm: WorldModel) -> Calibration:
    """Geometric mean of measured/predicted over closed nodes, shrunk towards 1 with few nodes.

    factor = exp(sum(log ratio) / (n + CALIBRATION_PRIOR_N)): one observation moves it a third of the
    way (in log space), ten observations most of the way.
    """
    pairs: list[CalibrationPair] = []
    for n in sorted(wm.closed_nodes(), key=lambda x: x.node_id):
        if n.is_root or n.solution is None:
            continue
        predicted, measured = facts.predicted_speedup(n), facts.measured_speedup(wm, n)
        if predicted is None or measured is None:
            continue        # no prediction, or the node or its base is unmeasured: nothing to calibrate
        ratio = min(max(measured / predicted, RATIO_CLIP[0]), RATIO_CLIP[1])
        pairs.append(CalibrationPair(n.node_id, wm.base_of(n.node_id).node_id, float(predicted), measured, ratio))
    if not pairs:
        return Calibration(1.0, 0, 1.0, [])
    logs = sum(math.log(p.ratio) for p in pairs)
    factor = math.exp(logs / (len(pairs) + CALIBRATION_PRIOR_N))
    factor = min(max(factor, FACTOR_CLIP[0]), FACTOR_CLIP[1])
    return Calibration(factor, len(pairs), math.exp(logs / len(pairs)), pairs)


def family_of(wm: WorldModel, node: Node) -> Node | None:
    """The node's kernel family (see ksearch.world_model.facts)."""
    return _family_of(wm, node)


# ---- the priority -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Context:
    """What every candidate's priority shares; computed once per selection."""

    calibration: Calibration
    best: float | None


def _context(wm: WorldModel) -> _Context:
    return _Context(calibration(wm), best_score(wm))


def _check(policy: str, explore_weight: float) -> None:
    if policy not in POLICIES:
        raise ValueError(f"unknown selection policy {policy!r}; valid: {', '.join(POLICIES)}")
    if not isinstance(explore_weight, (int, float)) or not math.isfinite(explore_weight) or explore_weight < 0:
        raise ValueError(f"explore_weight must be a finite number >= 0, got {explore_weight!r}")


def _explain(wm: WorldModel, node: Node, policy: str, explore_weight: float, ctx: _Context) -> dict[str, Any]:
    a = node.action
    if a is None:
        raise ValueError(f"node {node.node_id!r} has no action, so it cannot be selected")
    prior = float(a.score)
    base = wm.base_of(node.node_id)
    p_score = parent_score(wm, node)
    best_ref = ctx.best if ctx.best is not None else BASELINE_SCORE
    conf = min(max(float(node.confidence), 0.0), 1.0)
    raw = a.expected_speedup if a.expected_speedup is not None and a.expected_speedup > 0 else None
    calibrated = ctx.calibration.factor * raw if raw is not None else None
    # Confidence shrinks the (calibrated) predicted speedup towards "no change" in log space.
    expected_score = p_score * (calibrated ** conf if calibrated is not None else 1.0)
    r = expected_score / best_ref
    prediction = r * r / (1.0 + r * r)          # 0.5 when the step is expected to match the best so far
    parent_quality = min(1.0, p_score / best_ref)
    fam = family_of(wm, node)
    visits = family_visits(wm, node)
    if policy in ("greedy", "random"):        # random: the components are informative only (the draw decides)
        value, penalty, bonus = prior, 1.0, 0.0
    else:
        value = W_PRIOR * prior + W_PREDICTION * prediction + W_PARENT * parent_quality
        penalty = FAILURE_PENALTY ** node.failed_cycles * ATTEMPT_DECAY ** node.attempts
        bonus = explore_weight / (1 + visits)
    return {
        "policy": policy, "node_id": node.node_id,
        "prior": prior,
        "confidence": conf,
        "expected_speedup": raw,
        "calibration_factor": ctx.calibration.factor,
        "calibration_n": ctx.calibration.n,
        "calibrated_speedup": calibrated,
        "base_id": base.node_id,
        "parent_score": p_score,
        "best_score": ctx.best,
        "expected_score": expected_score,
        "prediction": prediction,
        "parent_quality": parent_quality,
        "value": value,
        "attempts": node.attempts,
        "failed_cycles": node.failed_cycles,
        "penalty": penalty,
        "family": fam.node_id if fam is not None else None,
        "family_visits": visits,
        "bonus": bonus,
        "total": value * penalty + bonus,
        "difficulty": a.difficulty,
        "rating": node.rating,
    }


def explain(wm: WorldModel, node: Node | str, policy: str = "learned", explore_weight: float = 0.0) -> dict[str, Any]:
    """The components of `node`'s priority under `policy` (JSON-ready; the search journals it).

    Keys: prior, confidence, expected_speedup, calibration_factor, calibration_n, calibrated_speedup,
    base_id, parent_score, best_score, expected_score, prediction, parent_quality, value, attempts,
    failed_cycles, penalty, family, family_visits, bonus, total (= value * penalty + bonus), difficulty,
    rating. Under "greedy" the informative components are still filled in, but total = prior.
    """
    _check(policy, explore_weight)
    if isinstance(node, str):
        node = wm.node(node)
    return _explain(wm, node, policy, float(explore_weight), _context(wm))


def priority(wm: WorldModel, node: Node, explore_weight: float = 0.0, policy: str = "learned") -> float:
    """The number selection sorts by (higher first)."""
    return explain(wm, node, policy, explore_weight)["total"]


def random_pick(candidate_ids: list[str], seed: int, draw: int) -> str:
    """A uniform choice among `candidate_ids`, fixed by (seed, draw, the set of ids): no generator state."""
    ids = sorted(candidate_ids)
    h = hashlib.sha256(f"{seed}:{draw}:{','.join(ids)}".encode()).digest()
    return ids[int.from_bytes(h[:8], "little") % len(ids)]


def _action(node: Node) -> Action:
    """A frontier candidate's action (the frontier holds only nodes with one)."""
    assert node.action is not None, node.node_id
    return node.action


def choose_next(wm: WorldModel, max_difficulty: int, explore_weight: float = 0.0,
                policy: str = "learned", exclude: frozenset[str] | set[str] = frozenset(), seed: int = 0,
                draw: int = 0) -> Node | None:
    """The frontier action to run next, or None when nothing on the frontier is within the cap.

    learned: total desc; greedy: action.score desc; then difficulty asc, rating desc, node_id asc;
    random: `random_pick` over the candidates with (seed, draw).
    The difficulty cap is the user's and is never raised; if nothing is under it, nothing is selected
    and the search ends, saying why. Nodes in `exclude` (a parallel run's cycles in flight) are skipped.
    """
    _check(policy, explore_weight)
    candidates = [n for n in wm.frontier() if n.action is not None and n.action.difficulty <= max_difficulty
                  and n.node_id not in exclude]
    if not candidates:
        return None
    if policy == "random":
        return wm.node(random_pick([n.node_id for n in candidates], seed, draw))
    if policy == "greedy":
        return min(candidates, key=lambda n: (-_action(n).score, _action(n).difficulty, -n.rating, n.node_id))
    ctx = _context(wm)
    totals = {n.node_id: _explain(wm, n, policy, float(explore_weight), ctx)["total"] for n in candidates}
    return min(candidates, key=lambda n: (-round(totals[n.node_id], 9), _action(n).difficulty, -n.rating, n.node_id))
