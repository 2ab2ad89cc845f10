"""Tree facts (world_model/facts.py) on scores that are not measurements, and the views that read them.

A NaN, an infinity, zero or a negative number in a node's score (an old journal, a broken measurement) is
not a speedup: no view may print it or divide by it, and a prediction of infinity is no prediction.
"""

import math

import pytest

from ksearch.store.short_ids import ShortIds
from ksearch.viz.node_rows import node_rows
from ksearch.viz.speedups import prediction_points
from ksearch.viz.tree_view import family_table
from ksearch.world_model import Action, AttachedSolution, Node, WorldModel
from ksearch.world_model.facts import facts, measured_score, predicted_speedup

UNUSABLE = [math.nan, math.inf, -math.inf, 0.0, -1.5]


def _tree(a_score, b_score=1.8, root_score=None, a_expected=1.5):
    def node(node_id, parent, score, expected=None, sid=None):
        return Node(node_id, parent, decision="step", choice=f"choice {node_id}",
                    action=Action(f"do {node_id}", expected_speedup=expected) if parent else None,
                    solution=AttachedSolution(sid or f"s{node_id}", None, 1, "PASSED", score)
                    if score is not None else None).to_json()
    return WorldModel.from_json({"nodes": [node("root", None, root_score), node("a", "root", a_score, a_expected),
                                           node("b", "a", b_score, 2.0)]})


@pytest.mark.parametrize("bad", UNUSABLE)
def test_an_unusable_score_is_no_measurement(bad):
    wm = _tree(bad)
    a, b = facts(wm, wm.node("a")), facts(wm, wm.node("b"))
    assert a.score is None and a.measured is None and a.parent_score == 1.0 and a.predicted == 1.5
    # b starts from a's kernel, which has no usable score: nothing about b is measured against it
    assert b.score == 1.8 and b.parent_score is None and b.measured is None and b.vs_base_kernel is None
    assert [p.node_id for p in prediction_points(wm)] == []
    rows = node_rows(wm, ShortIds.from_world_model(wm), None)
    assert rows["a"].score is None and rows["a"].measured is None
    assert rows["b"].vs_parent is None and rows["b"].measured is None


@pytest.mark.parametrize("bad", UNUSABLE)
def test_the_family_table_never_tops_with_an_unusable_score(bad):
    wm = _tree(1.2, b_score=bad)
    table = family_table(wm, width=120)
    top_score = list(table.columns[1].cells)[0]
    assert top_score == "1.2x"


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -2.0])
def test_an_unusable_prediction_is_no_prediction(bad):
    wm = _tree(1.2, a_expected=bad)
    assert predicted_speedup(wm.node("a")) is None
    assert [p.node_id for p in prediction_points(wm)] == ["b"]


def test_a_family_is_against_the_baseline_unless_the_root_holds_a_kernel():
    wm = _tree(1.2)
    a = facts(wm, wm.node("a"))
    assert a.against_baseline and a.vs_base_kernel is None and a.measured == pytest.approx(1.2)
    seeded = _tree(1.2, root_score=0.6)
    a = facts(seeded, seeded.node("a"))
    # predictions of a family stay against the baseline; the kernel it started from is the seed
    assert not a.against_baseline and a.measured == pytest.approx(1.2) and a.vs_base_kernel == pytest.approx(2.0)
    assert measured_score(seeded.node("root")) == 0.6
