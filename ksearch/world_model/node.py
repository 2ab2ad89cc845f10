"""Plan nodes: one optimisation decision each, with beliefs, an optional action and a system-owned result."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum, auto
from typing import Any


class NodeStatus(StrEnum):
    """Where a node stands, in the order views list them."""

    open = auto()               # an action not tried yet
    closed = auto()             # a kernel attached
    failed = auto()             # retired after failed cycles
    pruned = auto()
    decision = auto()           # no action: the root, or a node that groups smaller steps


@dataclass
class Action:
    """A proposed next step. `params` is machine-readable (e.g. family and knob settings for templates)."""

    title: str
    description: str = ""
    rationale: str = ""
    difficulty: int = 3                 # 1 easiest .. 5 hardest
    score: float = 0.5                  # priority, 0..1
    #: Predicted speedup of this node's kernel over its PARENT's kernel (parent score -> this score), e.g.
    #: 1.15 = "15% faster than the kernel it starts from". For a depth-1 node the parent "kernel" is the
    #: baseline (score 1.0), so there it is the vs-baseline factor. Parent-relative because that is what a
    #: step can honestly be judged on, and what selection calibrates against measurements
    #: (ksearch.planner.selection.calibration). None = no prediction.
    expected_speedup: float | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class AttachedSolution:
    """Written only by the planner when a cycle closes a node; never by an edit script."""

    solution_id: str
    parent_solution_id: str | None
    round_index: int
    status: str
    score: float | None
    latency_ms: float | None = None
    score_name: str = "geomean_speedup"
    #: The node's action.expected_speedup when the solution was attached, frozen so that a later edit of
    #: the prediction cannot make the calibration look better than it was. Filled by attach_solution.
    predicted_speedup: float | None = None


@dataclass
class Node:
    node_id: str
    parent_id: str | None
    decision: str | None = None
    choice: str | None = None
    rating: float = 5.0                 # 0..10, quality of the plan root -> here
    confidence: float = 0.4             # 0..1
    impacts: dict[str, float] = field(default_factory=dict)   # e.g. memory_bandwidth: 0..10
    action: Action | None = None
    notes: str = ""
    # system-owned
    solution: AttachedSolution | None = None
    attempts: int = 0
    failed_cycles: int = 0
    pruned: bool = False
    retired: bool = False
    created_round: int = 0

    @property
    def is_root(self) -> bool:
        return self.parent_id is None

    @property
    def is_closed(self) -> bool:
        return self.solution is not None

    @property
    def is_open_action(self) -> bool:
        return self.action is not None and self.solution is None and not self.pruned and not self.retired

    @property
    def step(self) -> str:
        """The step in a few words, as every view names it: the choice it makes, else its action's title."""
        if self.is_root:
            return "root"
        return (self.choice or (self.action.title if self.action else "") or self.decision or "").strip()

    @property
    def status(self) -> NodeStatus:
        if self.pruned:
            return NodeStatus.pruned
        if self.solution is not None:
            return NodeStatus.closed
        if self.retired:
            return NodeStatus.failed
        if self.action is not None:
            return NodeStatus.open
        return NodeStatus.decision

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> Node:
        d = dict(d)
        if d.get("action") is not None:
            d["action"] = Action(**d["action"])
        if d.get("solution") is not None:
            d["solution"] = AttachedSolution(**d["solution"])
        return Node(**d)


#: Fields an edit script may set on a node (everything else is system-owned).
EDITABLE_FIELDS = ("decision", "choice", "rating", "confidence", "impacts", "action", "notes")
ACTION_FIELDS = tuple(Action.__dataclass_fields__)
