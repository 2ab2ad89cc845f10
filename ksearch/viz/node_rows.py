"""What each view (`show`, the TUI, the HTML report) says about a node on its one line, computed once.

Three numbers per node, each in one frame only:
- `score`: against the baseline (the run's score);
- `vs_parent`: against the kernel the node started from; None for a family under a root without a kernel;
- `predicted` / `measured`: the model's prediction and the measurement in the prediction's own frame
  (against the parent's kernel, or against the baseline for a family; see world_model/facts.py).

The run's best (best/manifest.json) marks its node: `is_best` when best/ holds that node's kernel, whose
row then shows the best's own score (the one best number every view prints), or `in_best` for each node
whose kernel is a member of a best that is a shape dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ksearch.store.best_manifest import BestKind, BestManifest
from ksearch.store.short_ids import ShortIds
from ksearch.world_model import Node, WorldModel
from ksearch.world_model.facts import facts
from ksearch.world_model.node import NodeStatus


@dataclass(frozen=True)
class NodeRow:
    node_id: str
    short: str
    parent_id: str | None
    depth: int
    status: NodeStatus
    title: str
    family: str | None          # the family's full node id
    score: float | None
    vs_parent: float | None
    predicted: float | None
    measured: float | None
    attempts: int
    failed_cycles: int
    on_best_path: bool
    is_best: bool               # best/ holds this node's kernel
    in_best: bool = False       # best/ is a shape dispatch with this node's kernel among its members

    @property
    def is_family(self) -> bool:
        return self.family == self.node_id


def node_title(node: Node) -> str:
    """The step in a few words: the choice it makes, else its action's title."""
    return node.step


def node_rows(wm: WorldModel, ids: ShortIds, best: BestManifest | str | None) -> dict[str, NodeRow]:
    """One row per node of the tree, in tree order (parents before children). `best`: the run's best
    (a node id alone stands for that node's kernel, at the node's own score)."""
    kernel_node, members, best_score = _best_marks(best)
    best_path = {n.node_id for m in ([kernel_node] if kernel_node else members) if m in wm for n in wm.path(m)}
    ids.covering(wm)
    rows: dict[str, NodeRow] = {}
    for node in wm.nodes():
        f = facts(wm, node)
        score = f.score
        is_best = node.node_id == kernel_node
        # the best kernel's row is about the best's own measurement (a near-tie re-measurement, say)
        rescale = best_score / score if is_best and best_score is not None and score else 1.0
        rows[node.node_id] = NodeRow(
            node_id=node.node_id, short=ids.short(node.node_id), parent_id=node.parent_id,
            depth=wm.depth(node.node_id), status=node.status, title=node_title(node), family=f.family_id,
            score=best_score if is_best and best_score is not None else score,
            vs_parent=f.vs_base_kernel * rescale if f.vs_base_kernel is not None else None,
            predicted=f.predicted, measured=f.measured * rescale if f.measured is not None else None,
            attempts=node.attempts, failed_cycles=node.failed_cycles,
            on_best_path=node.node_id in best_path, is_best=is_best, in_best=node.node_id in members)
    return rows


def _best_marks(best: BestManifest | str | None) -> tuple[str | None, set[str], float | None]:
    """(node whose kernel is the best, nodes whose kernels a dispatch best is made of, the best's score)."""
    if best is None:
        return None, set(), None
    if isinstance(best, str):
        return best, set(), None
    if best.kind is BestKind.KERNEL:
        return best.members[0].node_id, set(), best.score
    return None, set(best.node_ids), None


def best_mark(row: NodeRow) -> str:
    """'* ' before the best kernel's step, '+ ' before a dispatch member's, else nothing."""
    return "* " if row.is_best else ("+ " if row.in_best else "")


def speedup(v: float | None) -> str:
    """1.23x, 0.00307x; '-' for none. Three significant digits: finer than timing noise anyway."""
    return f"{v:.3g}x" if v is not None else "-"


def pred_meas(row: NodeRow) -> str:
    """Predicted -> measured, e.g. '1.1->1.55x'; just the prediction for a node not measured yet."""
    if row.predicted is None and row.measured is None:
        return "-"
    pred = f"{row.predicted:.3g}" if row.predicted is not None else "?"
    return f"{pred}->{row.measured:.3g}x" if row.measured is not None else f"{pred}->?"
