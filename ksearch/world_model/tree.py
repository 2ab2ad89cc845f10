"""The world model: a plan tree on networkx plus the kernel summary. This class owns every mutation."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterable

import networkx as nx

from ksearch.world_model.edits import DeleteOp, EditScript, InsertOp, SplitOp, UpdateOp
from ksearch.world_model.node import Action, AttachedSolution, Node

ROOT_ID = "root"


@dataclass
class EditResult:
    ok: bool
    errors: list[str] = field(default_factory=list)
    new_node_ids: list[str] = field(default_factory=list)
    changed_node_ids: list[str] = field(default_factory=list)


class WorldModel:
    """Tree of plan nodes. Reads are free; writes go through `apply`, `attach_solution` and the counters."""

    def __init__(self, kernel_summary: str = "", open_questions: Iterable[str] = ()):
        self.graph = nx.DiGraph()
        self.kernel_summary = kernel_summary
        self.open_questions = list(open_questions)
        self.active_leaf_id = ROOT_ID
        self._add(Node(ROOT_ID, None, notes="root: the task as specified"))

    # ---- reads -------------------------------------------------------------------------------
    def _add(self, node: Node) -> None:
        self.graph.add_node(node.node_id, node=node)
        if node.parent_id is not None:
            self.graph.add_edge(node.parent_id, node.node_id)

    def __contains__(self, node_id: str) -> bool:
        return node_id in self.graph

    def node(self, node_id: str) -> Node:
        try:
            return self.graph.nodes[node_id]["node"]
        except KeyError:
            raise KeyError(f"no node {node_id!r} in the world model") from None

    @property
    def root(self) -> Node:
        return self.node(ROOT_ID)

    def nodes(self) -> list[Node]:
        return [self.graph.nodes[n]["node"] for n in nx.topological_sort(self.graph)]

    def children(self, node_id: str, include_pruned: bool = False) -> list[Node]:
        kids = [self.node(c) for c in self.graph.successors(node_id)]
        return sorted((k for k in kids if include_pruned or not k.pruned), key=lambda n: n.node_id)

    def parent(self, node_id: str) -> Node | None:
        pid = self.node(node_id).parent_id
        return self.node(pid) if pid is not None else None

    def path(self, node_id: str) -> list[Node]:
        return [self.node(n) for n in nx.shortest_path(self.graph, ROOT_ID, node_id)]

    def depth(self, node_id: str) -> int:
        return len(self.path(node_id)) - 1

    def frontier(self) -> list[Node]:
        """Open actions whose parent is the root or a closed node: executable now."""
        out = []
        for n in self.nodes():
            if n.is_open_action:
                parent = self.node(n.parent_id) if n.parent_id else None
                if parent is not None and (parent.is_root or parent.is_closed):
                    out.append(n)
        return out

    def closed_nodes(self) -> list[Node]:
        return [n for n in self.nodes() if n.is_closed]

    def best_closed(self) -> Node | None:
        scored = [n for n in self.closed_nodes() if n.solution and n.solution.score is not None]
        if not scored:
            return None
        return max(scored, key=lambda n: (n.solution.score, n.node_id))

    def solution_ids(self) -> dict[str, str]:
        return {n.node_id: n.solution.solution_id for n in self.closed_nodes()}

    # ---- system-owned writes -------------------------------------------------------------------
    def attach_solution(self, node_id: str, solution: AttachedSolution) -> None:
        node = self.node(node_id)
        node.solution = solution
        self.active_leaf_id = node_id

    def record_attempt(self, node_id: str) -> None:
        self.node(node_id).attempts += 1

    def record_failed_cycle(self, node_id: str, retire_after: int) -> bool:
        """Count a cycle without a passing kernel; retire the node after `retire_after` of them."""
        node = self.node(node_id)
        node.failed_cycles += 1
        if node.failed_cycles >= retire_after:
            node.retired = True
        return node.retired

    # ---- model-driven writes -------------------------------------------------------------------
    def apply(self, script: EditScript, *, round_index: int, max_new_nodes: int) -> EditResult:
        """Validate the whole script on a copy; commit only if every op is valid."""
        trial = copy.deepcopy(self)
        result = EditResult(ok=True)
        errors: list[str] = []
        new_count = 0
        for i, op in enumerate(script.ops):
            where = f"ops[{i}]"
            if isinstance(op, InsertOp):
                new_count += 1
                errors += trial._insert(op.parent_id, op.node, where, round_index, result)
            elif isinstance(op, UpdateOp):
                errors += trial._update(op.node_id, op.patch, where, result)
            elif isinstance(op, SplitOp):
                new_count += len(op.children)
                errors += trial._split(op, where, round_index, result)
            elif isinstance(op, DeleteOp):
                errors += trial._delete(op.node_id, where, result)
        if new_count > max_new_nodes:
            errors.append(f"the script adds {new_count} nodes; at most {max_new_nodes} per edit")
        if script.active_leaf_id is not None:
            if script.active_leaf_id not in trial:
                errors.append(f"active_leaf_id {script.active_leaf_id!r} is not a node")
            else:
                trial.active_leaf_id = script.active_leaf_id
        if errors:
            return EditResult(ok=False, errors=errors)
        if script.kernel_summary is not None:
            trial.kernel_summary = script.kernel_summary
        if script.open_questions is not None:
            trial.open_questions = list(script.open_questions)
        self.graph, self.kernel_summary = trial.graph, trial.kernel_summary
        self.open_questions, self.active_leaf_id = trial.open_questions, trial.active_leaf_id
        return result

    def _fresh_id(self, parent_id: str, round_index: int) -> str:
        k = 0
        while f"n{round_index}_{parent_id}_{k}" in self:
            k += 1
        return f"n{round_index}_{parent_id}_{k}"

    def _live(self, node_id: str, where: str, role: str) -> list[str]:
        if node_id not in self:
            return [f"{where}: {role} {node_id!r} does not exist"]
        if self.node(node_id).pruned:
            return [f"{where}: {role} {node_id!r} was pruned"]
        return []

    def _make_node(self, fields: dict[str, Any], parent_id: str, round_index: int) -> Node:
        fields = dict(fields)
        node_id = fields.pop("node_id", None) or self._fresh_id(parent_id, round_index)
        action = fields.pop("action", None)
        node = Node(node_id=node_id, parent_id=parent_id, created_round=round_index, **fields)
        if action is not None:
            node.action = Action(**action)
        return node

    def _insert(self, parent_id: str, fields: dict[str, Any], where: str, round_index: int,
                result: EditResult) -> list[str]:
        errs = self._live(parent_id, where, "parent")
        if "node_id" in fields and fields["node_id"] in self:
            errs.append(f"{where}: node_id {fields['node_id']!r} already exists")
        if errs:
            return errs
        node = self._make_node(fields, parent_id, round_index)
        self._add(node)
        result.new_node_ids.append(node.node_id)
        return []

    def _update(self, node_id: str, patch: dict[str, Any], where: str, result: EditResult) -> list[str]:
        errs = self._live(node_id, where, "node")
        if errs:
            return errs
        node = self.node(node_id)
        if node.is_root and ({"decision", "choice", "action"} & set(patch)):
            return [f"{where}: the root's decision, choice and action cannot be edited"]
        if "action" in patch and node.is_closed and patch["action"] is None:
            return [f"{where}: {node_id} is closed; its action record stays"]
        for key, value in patch.items():
            if key == "action":
                if value is None:
                    node.action = None
                elif node.action is None:
                    if "title" not in value:
                        return [f"{where}: a new action on {node_id} needs a title"]
                    node.action = Action(**value)
                else:
                    for k, v in value.items():
                        setattr(node.action, k, v)
            elif key == "impacts":
                node.impacts = {**node.impacts, **value}
            else:
                setattr(node, key, value)
        result.changed_node_ids.append(node_id)
        return []

    def _split(self, op: SplitOp, where: str, round_index: int, result: EditResult) -> list[str]:
        errs = self._live(op.node_id, where, "node")
        if errs:
            return errs
        node = self.node(op.node_id)
        if node.is_root or node.is_closed:
            return [f"{where}: only an open, non-root node can be split ({op.node_id} is {node.status})"]
        errs = self._update(op.node_id, op.parent_patch, where, result)
        if errs:
            return errs
        if "action" not in op.parent_patch:
            node.action = None      # the split node becomes a structural decision over its children
        for j, child in enumerate(op.children):
            errs += self._insert(op.node_id, child, f"{where}.children[{j}]", round_index, result)
        return errs

    def _delete(self, node_id: str, where: str, result: EditResult) -> list[str]:
        errs = self._live(node_id, where, "node")
        if errs:
            return errs
        node = self.node(node_id)
        if node.is_root:
            return [f"{where}: the root cannot be deleted"]
        if node.is_closed:
            return [f"{where}: {node_id} holds a measured solution and cannot be deleted"]
        if self.children(node_id):
            return [f"{where}: {node_id} has children; delete only leaves"]
        node.pruned = True      # kept as a tombstone so the tree view and the journal can show it
        result.changed_node_ids.append(node_id)
        return []

    # ---- persistence ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "kernel_summary": self.kernel_summary,
            "open_questions": self.open_questions,
            "active_leaf_id": self.active_leaf_id,
            "nodes": [n.to_json() for n in self.nodes()],
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "WorldModel":
        wm = WorldModel(d.get("kernel_summary", ""), d.get("open_questions", []))
        wm.graph = nx.DiGraph()
        for raw in d["nodes"]:
            wm._add(Node.from_json(raw))
        wm.active_leaf_id = d.get("active_leaf_id", ROOT_ID)
        return wm
