"""What each view (`show`, the TUI, the HTML report) says about a node on its one line, computed once.

Three numbers per node, each in one frame only:
- `score`: against the baseline (the run's score);
- `vs_parent`: against the kernel the node started from; None for a family under a root without a kernel;
- `predicted` / `measured`: the model's prediction and the measurement in the prediction's own frame
  (against the parent's kernel, or against the baseline for a family; see viz/speedups.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ksearch.viz.short_ids import ShortIds
from ksearch.viz.speedups import family_of, measured_vs_parent, predicted_speedup, vs_parent_kernel
from ksearch.world_model import Node, WorldModel


@dataclass(frozen=True)
class NodeRow:
    node_id: str
    short: str
    parent_id: str | None
    depth: int
    status: str                 # Node.status: open, closed, failed, pruned, decision
    title: str
    family: str | None          # the family's full node id
    score: float | None
    vs_parent: float | None
    predicted: float | None
    measured: float | None
    attempts: int
    failed_cycles: int
    on_best_path: bool
    is_best: bool

    @property
    def is_family(self) -> bool:
        return self.family == self.node_id


def node_title(node: Node) -> str:
    """The step in a few words: the choice it makes, else its action's title."""
    if node.is_root:
        return "root"
    return (node.choice or (node.action.title if node.action else "") or node.decision or "").strip()


def node_rows(wm: WorldModel, ids: ShortIds, best_node_id: str | None) -> dict[str, NodeRow]:
    """One row per node of the tree, in tree order (parents before children)."""
    best_path = {n.node_id for n in wm.path(best_node_id)} if best_node_id and best_node_id in wm else set()
    ids.covering(wm)
    rows: dict[str, NodeRow] = {}
    for node in wm.nodes():
        fam = family_of(wm, node.node_id) if not node.is_root else None
        rows[node.node_id] = NodeRow(
            node_id=node.node_id, short=ids.short(node.node_id), parent_id=node.parent_id,
            depth=wm.depth(node.node_id), status=node.status, title=node_title(node),
            family=fam.node_id if fam else None,
            score=node.solution.score if node.solution and node.solution.score is not None else None,
            vs_parent=None if node.is_root else vs_parent_kernel(wm, node),
            predicted=None if node.is_root else predicted_speedup(node),
            measured=None if node.is_root else measured_vs_parent(wm, node),
            attempts=node.attempts, failed_cycles=node.failed_cycles,
            on_best_path=node.node_id in best_path, is_best=node.node_id == best_node_id)
    return rows


def speedup(v: float | None) -> str:
    """1.23x, 0.00307x; '-' for none. Three significant digits: finer than timing noise anyway."""
    return f"{v:.3g}x" if v is not None else "-"


def pred_meas(row: NodeRow) -> str:
    """Predicted -> measured, e.g. '1.1->1.55x'; just the prediction for a node not measured yet."""
    if row.predicted is None and row.measured is None:
        return "-"
    pred = f"{row.predicted:.3g}" if row.predicted is not None else "?"
    return f"{pred}->{row.measured:.3g}x" if row.measured is not None else f"{pred}->?"
