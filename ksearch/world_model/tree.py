"""The world model: a plan tree on networkx plus the kernel summary. This class owns every mutation.

Edit scripts are checked in two stages (see edits.py for the first: shape, types, ranges). `apply` is
the second, against the tree, on a copy, committing only when every op is valid:
- references name existing, not deleted nodes; new ids are unused (deleted ones stay as tombstones);
- the root is fixed: no update, split or delete (inserting under it is how families are added);
- a new node's action title, or its (decision, choice), must not duplicate a live sibling's (case- and
  whitespace-insensitive), and an update may not rename a node into a duplicate either;
- nothing is inserted under a retired action (its children could never run);
- delete only open leaves: not closed, not retired, no live children; deletion leaves a tombstone;
- split only an open or retired, non-closed leaf; it becomes a structural node over the new steps,
  which run from the kernel the split step would have used (`base_of`);
- at most `max_new_nodes` inserts + split children; an optional parent_solution_id must match;
- solutions, counters and flags are never written by a script (the parser refuses those keys).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from ksearch.world_model.edits import (
    MAX_ID_CHARS,
    DeleteOp,
    EditScript,
    EditScriptError,
    InsertOp,
    SplitOp,
    UpdateOp,
    parse_edit_text,
)
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
        self.graph: nx.DiGraph[str] = nx.DiGraph()
        self.kernel_summary = kernel_summary
        self.open_questions = list(open_questions)
        self.active_leaf_id = ROOT_ID
        self._add(Node(ROOT_ID, None, notes="root: the task as specified"))

    # ---- reads -------------------------------------------------------------------------------
    def _add(self, node: Node) -> None:
        self.graph.add_node(node.node_id, node=node)
        if node.parent_id is not None:
            self.graph.add_edge(node.parent_id, node.node_id)

    def __contains__(self, node_id: object) -> bool:
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

    @staticmethod
    def is_structural(node: Node) -> bool:
        """A pure grouping node: no action, no kernel, not the root (e.g. a node that was split)."""
        return not node.is_root and node.action is None and node.solution is None

    def base_of(self, node_id: str) -> Node:
        """The node whose kernel `node_id` builds on: its parent, looking through structural nodes.

        A split turns a step into a structural node over smaller steps; those steps start from the kernel
        the split step would have started from, so they are executable when that kernel exists.
        """
        cur = self.node(node_id)
        while cur.parent_id is not None:
            parent = self.node(cur.parent_id)
            if not self.is_structural(parent):
                return parent
            cur = parent
        return cur

    def frontier(self) -> list[Node]:
        """Open actions whose base (parent, through structural nodes) is the root or a closed node."""
        out = []
        for n in self.nodes():
            if n.is_open_action and n.parent_id is not None:
                base = self.base_of(n.node_id)
                if base.is_root or base.is_closed:
                    out.append(n)
        return out

    def closed_nodes(self) -> list[Node]:
        return [n for n in self.nodes() if n.is_closed]

    def best_closed(self) -> Node | None:
        scored = [(n.solution.score, n.node_id, n) for n in self.closed_nodes()
                  if n.solution is not None and n.solution.score is not None]
        return max(scored, key=lambda s: s[:2])[2] if scored else None

    def solution_ids(self) -> dict[str, str]:
        return {n.node_id: n.solution.solution_id for n in self.nodes() if n.solution is not None}

    # ---- system-owned writes -------------------------------------------------------------------
    def attach_solution(self, node_id: str, solution: AttachedSolution) -> None:
        """Close a node. Its current prediction is frozen on the solution for calibration."""
        node = self.node(node_id)
        if solution.predicted_speedup is None and node.action is not None:
            solution.predicted_speedup = node.action.expected_speedup
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
    def apply(self, script: EditScript, *, round_index: int, max_new_nodes: int,
              dry_run: bool = False) -> EditResult:
        """Validate the whole script on a copy; commit only if every op is valid (and not `dry_run`).

        Ops run in order on the copy, so a later op sees the nodes an earlier one inserted; an op that
        is invalid is skipped on the copy and checking goes on, so every reason is reported at once.
        """
        trial = copy.deepcopy(self)
        result = EditResult(ok=True)
        errors: list[str] = []
        new_count = 0
        for i, op in enumerate(script.ops):
            where = f"ops[{i}]"
            if isinstance(op, InsertOp):
                new_count += 1
                errors += trial._insert(op.parent_id, op.node, where, round_index, result,
                                        parent_solution_id=op.parent_solution_id, flawed=op.flawed)
            elif isinstance(op, UpdateOp):
                errors += trial._update(op.node_id, op.patch, where, result, flawed=op.flawed)
            elif isinstance(op, SplitOp):
                new_count += len(op.children)
                errors += trial._split(op, where, round_index, result)
            elif isinstance(op, DeleteOp):
                errors += trial._delete(op.node_id, where, result)
            else:
                errors.append(f"{where}: {type(op).__name__} is not an edit op")
        if new_count > max_new_nodes:
            errors.append(f"the script adds {new_count} nodes (inserts plus split children); at most "
                          f"{max_new_nodes} per edit: keep the best {max_new_nodes}")
        if script.active_leaf_id is not None:
            if script.active_leaf_id not in trial:
                errors.append(f"active_leaf_id {script.active_leaf_id!r} is not a node of the tree")
            elif trial.node(script.active_leaf_id).pruned:
                errors.append(f"active_leaf_id {script.active_leaf_id!r} was deleted")
            else:
                trial.active_leaf_id = script.active_leaf_id
        if errors:
            return EditResult(ok=False, errors=_unique(errors))
        if dry_run:
            return result
        if script.kernel_summary is not None:
            trial.kernel_summary = script.kernel_summary
        if script.open_questions is not None:
            trial.open_questions = list(script.open_questions)
        self.graph, self.kernel_summary = trial.graph, trial.kernel_summary
        self.open_questions, self.active_leaf_id = trial.open_questions, trial.active_leaf_id
        return result

    def apply_text(self, text: str, *, round_index: int, max_new_nodes: int) -> EditResult:
        """Parse a model reply and apply it: never raises for a bad reply, and reports the reasons of
        both stages together (shape/type problems, and what the readable part would do to the tree)."""
        try:
            script = parse_edit_text(text)
        except EditScriptError as e:
            reasons = list(e.reasons)
            if e.script is not None:
                dry = self.apply(e.script, round_index=round_index, max_new_nodes=max_new_nodes, dry_run=True)
                reasons += dry.errors
            return EditResult(ok=False, errors=_unique(reasons))
        return self.apply(script, round_index=round_index, max_new_nodes=max_new_nodes)

    def _fresh_id(self, parent_id: str, round_index: int) -> str:
        stem = f"n{round_index}_{parent_id}"
        if len(stem) > MAX_ID_CHARS - 4:
            stem = f"n{round_index}"
        k = 0
        while f"{stem}_{k}" in self:
            k += 1
        return f"{stem}_{k}"

    def _live(self, node_id: str, where: str, role: str) -> list[str]:
        if node_id not in self:
            return [f"{where}: {role} {node_id!r} does not exist (use an id from the tree)"]
        if self.node(node_id).pruned:
            return [f"{where}: {role} {node_id!r} was deleted"]
        return []

    def _sibling_clash(self, parent_id: str, where: str, *, exclude: str | None = None, title: str | None = None,
                       decision: str | None = None, choice: str | None = None) -> list[str]:
        """Why a node with this action title or (decision, choice) would duplicate a live sibling."""
        if parent_id not in self:
            return []
        errs = []
        for sib in self.children(parent_id):
            if sib.node_id == exclude:
                continue
            if title and sib.action is not None and _norm(sib.action.title) == _norm(title):
                errs.append(f"{where}: action title {title!r} duplicates sibling {sib.node_id!r}; siblings must be "
                            f"distinct alternatives (update {sib.node_id} instead, or change the title)")
            if choice and sib.choice and _norm(sib.choice) == _norm(choice) and \
                    _norm(sib.decision or "") == _norm(decision or ""):
                errs.append(f"{where}: (decision, choice) = ({decision!r}, {choice!r}) duplicates sibling "
                            f"{sib.node_id!r}; siblings must be distinct alternatives")
        return errs

    def _make_node(self, fields: dict[str, Any], parent_id: str, round_index: int) -> Node:
        fields = copy.deepcopy(fields)      # the tree never shares mutable state with a script
        node_id = fields.pop("node_id", None) or self._fresh_id(parent_id, round_index)
        action = fields.pop("action", None)
        node = Node(node_id=node_id, parent_id=parent_id, created_round=round_index, **fields)
        if action is not None:
            node.action = Action(**{"title": "", **action})
        return node

    def _insert(self, parent_id: str, fields: dict[str, Any], where: str, round_index: int,
                result: EditResult, parent_solution_id: str | None = None, flawed: bool = False) -> list[str]:
        errs = self._live(parent_id, where, "parent")
        node_id = fields.get("node_id")
        if node_id is not None and node_id in self:
            errs.append(f"{where}: node_id {node_id!r} already exists; pick a new id or leave node_id out")
        action = fields.get("action")
        if action is not None and not action.get("title") and not flawed:
            errs.append(f"{where}: a new node's action needs a title")
        if errs:
            return errs
        parent = self.node(parent_id)
        if parent.retired and parent.action is not None:
            errs.append(f"{where}: parent {parent_id!r} was retired after failed cycles, so its children could "
                        f"never run; insert under {parent.parent_id!r} instead, or split {parent_id!r}")
        if parent_solution_id is not None:
            have = parent.solution.solution_id if parent.solution else None
            if have != parent_solution_id:
                errs.append(f"{where}: parent_solution_id {parent_solution_id!r} does not match parent "
                            f"{parent_id!r} (its solution is {have!r}); leave parent_solution_id out")
        node = self._make_node(fields, parent_id, round_index)
        errs += self._sibling_clash(parent_id, where, title=node.action.title if node.action else None,
                                    decision=node.decision, choice=node.choice)
        if errs:
            return errs
        self._add(node)
        result.new_node_ids.append(node.node_id)
        return []

    def _update(self, node_id: str, patch: dict[str, Any], where: str, result: EditResult,
                flawed: bool = False) -> list[str]:
        errs = self._live(node_id, where, "node")
        if errs:
            return errs
        node = self.node(node_id)
        if node.is_root:
            return [f"{where}: the root is fixed and cannot be edited; edit or insert its children instead"]
        if "action" in patch and node.is_closed and patch["action"] is None:
            return [f"{where}: {node_id} is closed; its action record stays (patch its fields instead)"]
        new_action = None
        patch = copy.deepcopy(patch)
        if "action" in patch and patch["action"] is not None:
            value = patch["action"]
            if node.action is None:
                if not value.get("title") and not flawed:
                    return [f"{where}: {node_id} has no action; a new action needs a title"]
                new_action = Action(**{"title": "", **value})
            else:
                new_action = copy.deepcopy(node.action)
                for k, v in value.items():
                    setattr(new_action, k, v)
        title_changed = new_action is not None and (node.action is None or new_action.title != node.action.title)
        pair_changed = bool({"decision", "choice"} & set(patch))
        if (title_changed or pair_changed) and node.parent_id is not None:
            errs = self._sibling_clash(node.parent_id, where, exclude=node_id,
                                       title=new_action.title if title_changed and new_action else None,
                                       decision=patch.get("decision", node.decision),
                                       choice=patch.get("choice", node.choice) if pair_changed else None)
            if errs:
                return errs
        for key, value in patch.items():
            if key == "action":
                node.action = new_action if value is not None else None
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
            return [f"{where}: only an open or failed, non-root node can be split ({op.node_id} is {node.status}); "
                    f"insert children under it instead"]
        if self.children(op.node_id):
            return [f"{where}: {op.node_id} already has children; split only a leaf (or insert under it)"]
        if not op.children:
            return [f"{where}: a split needs at least one child"]
        errs = self._update(op.node_id, op.parent_patch, where, result, flawed=op.flawed) if op.parent_patch else []
        if errs:
            return errs
        if "action" not in op.parent_patch:
            node.action = None      # the split node becomes a structural decision over its children
        if op.node_id not in result.changed_node_ids:
            result.changed_node_ids.append(op.node_id)
        for j, child in enumerate(op.children):
            errs += self._insert(op.node_id, child, f"{where}.children[{j}]", round_index, result, flawed=op.flawed)
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
        if node.retired:
            return [f"{where}: {node_id} was retired after failed cycles and stays as a record; it is no longer "
                    f"selected, so leave it"]
        if self.children(node_id):
            return [f"{where}: {node_id} has children; delete only open leaves"]
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
    def from_json(d: dict[str, Any]) -> WorldModel:
        wm = WorldModel(d.get("kernel_summary", ""), d.get("open_questions", []))
        wm.graph = nx.DiGraph()
        for raw in d["nodes"]:
            wm._add(Node.from_json(raw))
        wm.active_leaf_id = d.get("active_leaf_id", ROOT_ID)
        return wm


def _norm(text: str) -> str:
    """Case- and whitespace-insensitive form used to compare sibling titles and choices."""
    return " ".join(text.split()).casefold()


def _unique(reasons: list[str]) -> list[str]:
    return list(dict.fromkeys(reasons))
