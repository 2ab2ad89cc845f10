"""Edits of the world model asked of the model: an invalid script changes nothing and is re-asked with the
reasons, then a deterministic fallback edit is applied (and recorded as such). Every batch of edits ends
with a snapshot of the tree in the journal, which is how readers of the run see the tree."""

from __future__ import annotations

from typing import Any

from ksearch.llm.base import ModelRequest
from ksearch.planner.context import Context
from ksearch.store import records as R
from ksearch.world_model import EditResult
from ksearch.world_model.fallback import fallback_edit


class Editor:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def edit(self, purpose: str, prompt: str, context: dict[str, Any], max_new_nodes: int,
             node_id: str | None = None, first: R.ModelCall | None = None) -> EditResult:
        """Ask for an edit script, re-ask with the reasons, fall back. `first`: the first answer, already
        asked by a cycle's thread (then re-asks belong to that cycle too)."""
        ctx, tree = self.ctx, self.ctx.state.tree
        cycle = first.cycle if first is not None and first.text else None
        errors: list[str] = []
        result = EditResult(ok=False, errors=["not asked"])
        for i in range(1 + ctx.cfg.llm.edit_retries):
            if first is not None and i == 0:
                text = first.text
            else:
                spent = ctx.budget_reason()
                if spent:
                    return EditResult(ok=False, errors=[spent])
                req = ModelRequest("init" if purpose == "init" else "edit", purpose, prompt, context, list(errors))
                text = ctx.ask(req, cycle)
            result = tree.apply_text(text, round_index=ctx.state.rounds.next, max_new_nodes=max_new_nodes)
            ctx.recorder.write(R.Edit(purpose=purpose, ok=result.ok, errors=result.errors,
                                      new_nodes=result.new_node_ids, changed=result.changed_node_ids))
            if result.ok:
                return result
            errors = result.errors
        ctx.progress.message(f"world-model {purpose} edit rejected {1 + ctx.cfg.llm.edit_retries} times: "
                             f"{'; '.join(errors)[:300]}")
        if purpose == "init":
            return result
        script = fallback_edit(tree, purpose, node_id, reasons=errors, max_new_nodes=max_new_nodes)
        fb = tree.apply(script, round_index=ctx.state.rounds.next, max_new_nodes=max_new_nodes)
        ctx.recorder.write(R.EditFallback(purpose=purpose, ok=fb.ok, node_id=node_id, model_errors=errors,
                                          errors=fb.errors, new_nodes=fb.new_node_ids, changed=fb.changed_node_ids))
        return fb

    def snapshot(self) -> None:
        tree = self.ctx.state.tree.to_json()
        self.ctx.recorder.write(R.TreeSnapshot(round=self.ctx.state.rounds.next, tree=tree))
        self.ctx.recorder.run_dir.write_tree(tree)
