"""Short node ids (n0, n1, n12 ...) for everything a user reads, stable across re-renders, resumes and a
growing journal.

Full node ids grow with depth (`n10_n7_n4_fam_grouped_heads_0_0_0`, where `n7` is the round that made the
node), which is what makes a tree hard to read at 100 columns, and a full id may even start like the
short id of another node. A node's short id is its rank in the order nodes first appear in the run's tree
snapshots. The journal is append-only, so that order never changes: a node keeps its number when the run
is resumed or the view is redrawn, and a node that is later deleted keeps its number too (it stays in the
tree as pruned). The search numbers nodes the same way as it records its snapshots, so its progress log
and best/manifest.json name nodes exactly as `ksearch show` does.

Wherever a node id is taken (`show --node`, `fork.node=`), a short id is looked up first, then a full id:
an id `show` printed always means the node `show` printed it for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ksearch.world_model import WorldModel

_SHORT = re.compile(r"n\d+")


@dataclass
class ShortIds:
    """Full id <-> short id. Nodes not seen in any snapshot yet get numbers after the known ones."""

    by_full: dict[str, str] = field(default_factory=dict)
    by_short: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_snapshots(cls, snapshots: Iterable[dict[str, Any]]) -> ShortIds:
        """From tree snapshots (the `tree` field of the journal's `tree` records), oldest first."""
        ids = cls()
        for tree in snapshots:
            ids.add_snapshot(tree)
        return ids

    @classmethod
    def from_history(cls, history: Any) -> ShortIds:
        """From a RunHistory: every `tree` record of its journal, in order."""
        from ksearch.store.records import TreeSnapshot

        return cls.from_snapshots(r.tree for r in history.of(TreeSnapshot) if r.tree)

    @classmethod
    def from_world_model(cls, wm: WorldModel) -> ShortIds:
        """Without a journal (a tree in memory): creation round, then depth, then tree order."""
        order = sorted(enumerate(wm.nodes()), key=lambda p: (p[1].created_round, wm.depth(p[1].node_id), p[0]))
        ids = cls()
        for _, node in order:
            ids._add(node.node_id)
        return ids

    def add_snapshot(self, tree: dict[str, Any]) -> None:
        """Number the nodes of one tree snapshot that no earlier snapshot held, in the snapshot's order."""
        for node in tree.get("nodes") or []:
            if isinstance(node, dict) and isinstance(node.get("node_id"), str):
                self._add(node["node_id"])

    def _add(self, full: str) -> str:
        short = self.by_full.get(full)
        if short is None:
            short = f"n{len(self.by_full)}"
            self.by_full[full] = short
            self.by_short[short] = full
        return short

    def covering(self, wm: WorldModel) -> ShortIds:
        """These ids, plus numbers for any node of `wm` that no snapshot held yet."""
        for node in wm.nodes():
            self._add(node.node_id)
        return self

    def short(self, full: str) -> str:
        return self.by_full.get(full) or self._add(full)

    def resolve(self, text: str, wm: WorldModel) -> str:
        """A full id, from a short id (looked up first) or a full id. KeyError, with what to pass, when
        neither names a node."""
        text = text.strip()
        if _SHORT.fullmatch(text):
            full = self.by_short.get(text)
            if full is not None and full in wm:
                return full
        if text in wm:
            return text
        raise KeyError(f"no node {text!r} in this run; pass a short id (n12) or a full id, as "
                       f"`ksearch show RUN_DIR` prints them")
