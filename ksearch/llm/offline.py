"""The built-in offline model: no network, deterministic, driven by the task's strategy catalog.

It answers the three requests the way a careful engineer with a playbook would:
- initial world model: one depth-1 node per kernel family, ranked by the catalog's priors;
- tree edits: after a measured kernel it re-rates the node from the evidence, raises or lowers the
  family's open actions by how the family measures against the best so far, and proposes the next
  tactics (catalog tactics first, then single-knob moves) as children; after a failed cycle it lowers
  the action's score and confidence and raises its difficulty;
- code: renders the family's template with the knob settings of the base kernel plus the step's
  changes; debug/improve attempts try the nearest untried knob move from the cycle's best kernel.
Two kinds of evidence beyond the catalog, when a request carries them:
- memory (the initial request's `memory`, ksearch/knowledge): earlier runs' measurements set each
  family's starting beliefs, and the best family starts at the knob settings that measured best;
- a hardware profile (`profile`, ksearch/profile) of the kernel a step builds on: spills or low
  occupancy put smaller tiles / fewer stages first, several launches per call raise the families that
  fuse them into one, small shapes far from the physical limit put more splits first.
Every kernel it writes starts with a plan header recording its family and knobs (`# ksearch-plan: {...}` in
a Triton module, `// ksearch-plan: {...}` in a CUDA source, where `#` starts a preprocessor line), which is
how it reads back what a base kernel was. Families the evaluation device cannot run (CUDA on the CPU; the
initial request's `device`) get no node; without a `device` every family does, as before it was sent.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from typing import Any

from ksearch.instantiate.language import CUDA
from ksearch.knowledge.priors import CatalogPrior, FamilyStart, family_starts
from ksearch.knowledge.recall import Recall, knobs_text
from ksearch.llm.base import ModelError, ModelReply, ModelRequest, Usage
from ksearch.profile import Advice, Hint, advise, context_profile, hint_change
from ksearch.profile.advice import NO_ADVICE
from ksearch.task import load_task
from ksearch.task.catalog import Catalog, Family, load_catalog

PLAN_HEADER = "# ksearch-plan: "
#: The header in a CUDA source: a `#` line there is a preprocessor directive and breaks the build.
CUDA_PLAN_HEADER = "// ksearch-plan: "
_HEADER_RE = re.compile(r"^(?:#|//) ksearch-plan: (\{.*\})\s*$", re.MULTILINE)
_ONE_LAUNCH = re.compile(r"\b(one|single)[- ]launch", re.IGNORECASE)
#: Priority of a step the profile asks for (above the catalog's tactics, which top out at 0.7).
PROFILE_STEP_SCORE = 0.75
#: How much a fused family's open actions gain when a kernel launches several kernels per call.
FUSED_BOOST = 0.25


def plan_header(family: Family, knobs: dict[str, Any]) -> str:
    """The header line a kernel of `family` starts with, as a comment of the family's language."""
    prefix = CUDA_PLAN_HEADER if family.language == CUDA else PLAN_HEADER
    return prefix + json.dumps({"family": family.name, "knobs": knobs}, sort_keys=True) + "\n"


def read_plan_header(code: str | None) -> dict[str, Any] | None:
    """The plan of a kernel the offline model wrote (either header form), else None."""
    if not code:
        return None
    m = _HEADER_RE.search(code)
    if not m:
        return None
    try:
        plan = json.loads(m.group(1))
    except json.JSONDecodeError:
        return None
    return plan if isinstance(plan, dict) and "family" in plan else None


def knob_moves(family: Family, knobs: dict[str, Any]) -> list[dict[str, Any]]:
    """Single-knob moves to the neighbouring listed values, in catalog order."""
    moves = []
    for k in family.knobs.values():
        cur = knobs.get(k.name, k.default)
        i = k.values.index(cur) if cur in k.values else k.values.index(k.default)
        for j in (i + 1, i - 1):
            if 0 <= j < len(k.values):
                moves.append({k.name: k.values[j]})
    return moves


def is_fused(family: Family) -> bool:
    """A family whose kernel is one launch per call (by its name or its own description)."""
    return "fused" in family.name.lower() or bool(_ONE_LAUNCH.search(f"{family.title} {family.description}"))


def listed_settings(family: Family, knobs: dict[str, Any]) -> dict[str, Any]:
    """Those of `knobs` that the family lists (name and value)."""
    return {k: v for k, v in knobs.items() if k in family.knobs and v in family.knobs[k].values}


def profile_moves(family: Family, knobs: dict[str, Any], advice: Advice) -> list[tuple[Hint, dict[str, Any]]]:
    """The knob changes the profile's hints ask for, in the hints' order (each non-empty, from `knobs`)."""
    values: dict[str, Sequence[Any]] = {k.name: k.values for k in family.knobs.values()}
    out = []
    for hint in advice.hints:
        change = hint_change(hint, knobs, values)
        if change:
            out.append((hint, change))
    return out


def valid_knobs(family: Family, knobs: dict[str, Any]) -> dict[str, Any]:
    """The family's defaults overridden by those of `knobs` that the catalog lists (a base kernel written
    elsewhere may carry settings the catalog does not know; they are ignored, not trusted)."""
    out = family.defaults()
    out.update({k: v for k, v in knobs.items() if k in family.knobs and v in family.knobs[k].values})
    return out


def _open_actions_of(nodes: dict[str, Any], families: set[str],
                     ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes with an action of one of `families` still to try (no solution, not retired) that no op of
    this edit updates already: the ones a boost of those families may raise."""
    touched = {op.get("node_id") for op in ops if op.get("op") == "update_node"}
    return [n for n in nodes.values()
            if n.get("action") and not n.get("solution") and not n.get("retired") and n["node_id"] not in touched
            and n["action"].get("params", {}).get("family") in families]


class OfflineModel:
    """Deterministic catalog-driven model. `name` appears in the journal and on solutions."""

    name = "offline"

    def __init__(self, max_new_nodes: int = 3):
        self.max_new_nodes = max_new_nodes
        self._catalogs: dict[str, Catalog] = {}

    def catalog(self, task: str) -> Catalog:
        if task not in self._catalogs:
            t = load_task(task)
            self._catalogs[task] = load_catalog(t.strategies_dir, task)
        return self._catalogs[task]

    def complete(self, request: ModelRequest) -> ModelReply:
        started = time.monotonic()
        ctx = request.context
        cat = self.catalog(ctx["task"])
        if request.kind == "init":
            text = json.dumps(self._init(cat, ctx), indent=1)
        elif request.kind == "edit":
            text = json.dumps(self._edit(cat, request.purpose, ctx), indent=1)
        elif request.kind == "code":
            fam, code = self._code(cat, ctx)
            text = f"```{fam.language}\n{code}```\n"          # python or cuda: the tag extraction reads
        else:
            raise ValueError(f"offline model cannot answer a {request.kind!r} request")
        # free and local: zero tokens, a known cost of 0
        return ModelReply(text=text, model=self.name, usage=Usage(latency_s=time.monotonic() - started).to_dict())

    # ---- initial world model -------------------------------------------------------------------
    def _init(self, cat: Catalog, ctx: dict[str, Any]) -> dict[str, Any]:
        starts = self._starts(cat, ctx)         # of every family: memory's calibration may rest on any of them
        device = ctx.get("device")
        families = cat.runnable_families(device)
        if not families:
            raise ModelError(f"{ctx['task']}: every family of its strategy catalog is CUDA, which {device} cannot "
                             f"run; evaluate on a GPU (eval.device=cuda)")
        ops = []
        for fam in sorted(families, key=lambda f: -(starts[f.name].score if starts else f.prior.score)):
            p = fam.prior
            node = {
                "node_id": f"fam_{fam.name}",
                "decision": "kernel family", "choice": fam.title,
                "rating": p.rating, "confidence": p.confidence,
                "notes": fam.description.strip(),
                "action": {"title": f"Implement {fam.title}", "description": fam.description.strip(),
                           "rationale": "catalog family, default knobs", "difficulty": p.difficulty,
                           "score": p.score, "expected_speedup": p.expected_speedup,
                           "params": {"family": fam.name, "set": {}}},
            }
            if starts:
                self._start_from_memory(node, fam, starts[fam.name])
            ops.append({"op": "insert_node", "parent_id": "root", "node": node})
        summary = (f"{ctx['task']}: {len(families)} candidate families from the strategy catalog "
                   f"({', '.join(f.name for f in families)}). Beliefs start at the catalog priors and "
                   f"move with each measurement.")
        left_out = [f.name for f in cat.families if not f.runs_on(device)]
        if left_out:
            summary += f" Left out, as {ctx['device']} cannot run them: {', '.join(left_out)} (CUDA)."
        if starts:
            summary += " Earlier runs' measurements (memory) moved the starting beliefs."
        questions = ["Which family is fastest across the workload mix?",
                     "How much does tile size matter once the family is fixed?",
                     "Is the kernel latency-bound (small batches) or bandwidth-bound (large ones)?"]
        return {"kernel_summary": summary, "open_questions": questions, "ops": ops}

    @staticmethod
    def _starts(cat: Catalog, ctx: dict[str, Any]) -> dict[str, FamilyStart] | None:
        """Each family's start from the recalled evidence (None without memory)."""
        if not ctx.get("memory"):
            return None
        recall = Recall.model_validate(ctx["memory"])
        priors = [CatalogPrior(f.name, f.prior.score, f.prior.rating, f.prior.confidence, f.prior.expected_speedup)
                  for f in cat.families]
        return family_starts(priors, recall)

    @staticmethod
    def _start_from_memory(node: dict[str, Any], fam: Family, start: FamilyStart) -> None:
        act = node["action"]
        settings = listed_settings(fam, start.knobs)
        node.update(rating=start.rating, confidence=start.confidence)
        if start.note:
            node["notes"] += "\n" + start.note
        act.update(score=start.score, expected_speedup=start.expected_speedup)
        if settings:
            changed = {k: v for k, v in settings.items() if v != fam.knobs[k].default}
            act["title"] += ", at its best settings so far"
            act["description"] = (f"Start at the settings that measured best in earlier runs "
                                  f"({knobs_text(changed) if changed else 'the defaults'}). {act['description']}")
            act["rationale"] = "catalog family at the knob settings that measured best in earlier runs"
            act["params"]["set"] = settings

    # ---- tree edits ----------------------------------------------------------------------------
    def _edit(self, cat: Catalog, purpose: str, ctx: dict[str, Any]) -> dict[str, Any]:
        wm = ctx["world_model"]
        nodes = {n["node_id"]: n for n in wm["nodes"] if not n["pruned"]}
        best = ctx.get("best_score")
        ops: list[dict[str, Any]] = []
        budget = self.max_new_nodes
        if purpose == "after_success":
            node = nodes[ctx["node_id"]]
            score = ctx["score"]
            plan = read_plan_header(ctx.get("node_code")) or {}
            advice = advise(context_profile(ctx))
            ops.append({"op": "update_node", "node_id": node["node_id"], "patch": self._rerate(node, score, best, ctx)})
            ops += self._family_beliefs(nodes, plan.get("family"), score, best)
            ops += self._fused_boost(cat, nodes, plan.get("family"), advice, ops)
            ops += self._children(cat, nodes, node, plan, score, budget, advice)
        elif purpose == "after_failure":
            node = nodes[ctx["node_id"]]
            act = node["action"] or {}
            ops.append({"op": "update_node", "node_id": node["node_id"], "patch": {
                "confidence": round(max(0.05, node["confidence"] * 0.6), 3),
                "rating": round(max(0.0, node["rating"] - 1.5), 3),
                "notes": (node["notes"] + f"\nFAILED cycle: {ctx.get('failure', 'no passing kernel')[:300]}").strip(),
                "action": {"score": round(act.get("score", 0.5) * 0.5, 4),
                           "difficulty": min(5, int(act.get("difficulty", 3)) + 1)}}})
        elif purpose == "propose":
            target = nodes.get(ctx.get("best_node_id") or "")
            if target is not None:
                plan = read_plan_header(ctx.get("best_code")) or {}
                score = (target.get("solution") or {}).get("score") or 0.0
                ops += self._children(cat, nodes, target, plan, score, budget)
        if purpose in ("after_success", "propose"):
            ops += self._weakest_region_boost(nodes, ctx.get("weakest_region_family"), ops)
        return {"ops": ops}

    @staticmethod
    def _weakest_region_boost(nodes: dict[str, Any], family: str | None,
                              ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Open actions of the family that did best on the weakest region gain a little priority (x1.15):
        improving that region improves the shape-dispatched solution most."""
        if not family:
            return []
        out = []
        for n in _open_actions_of(nodes, {family}, ops):
            act = n["action"]
            new = round(min(1.0, act["score"] * 1.15), 4)
            if abs(new - act["score"]) > 1e-4:
                out.append({"op": "update_node", "node_id": n["node_id"], "patch": {"action": {"score": new}}})
        return out

    @staticmethod
    def _fused_boost(cat: Catalog, nodes: dict[str, Any], family: str | None, advice: Advice,
                     ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several launches per call: open actions of the other families that are one launch gain priority."""
        if Hint.FUSED_FAMILY not in advice.hints:
            return []
        fused = {f.name for f in cat.families if is_fused(f) and f.name != family}
        return [{"op": "update_node", "node_id": n["node_id"], "patch": {
                    "action": {"score": round(min(1.0, n["action"]["score"] + FUSED_BOOST), 4)},
                    "notes": (n.get("notes", "") + f"\nPROFILE of a sibling family: {'; '.join(advice.reasons)}; "
                              f"this family is one launch per call").strip()}}
                for n in _open_actions_of(nodes, fused, ops)]

    @staticmethod
    def _rerate(node: dict[str, Any], score: float, best: float | None, ctx: dict[str, Any]) -> dict[str, Any]:
        ref = max(best or score, score, 1e-12)
        rating = 10.0 * min(1.0, score / ref) ** 0.5 * min(1.0, 0.5 + 0.5 * min(score, 1.0))
        parent_score = ctx.get("parent_score")
        delta = f" ({score / parent_score:.2f}x the parent)" if parent_score else ""
        predicted = (node.get("action") or {}).get("expected_speedup")
        measured = score / parent_score if parent_score else score
        gap = f"; predicted x{predicted:.3g} over the parent, measured x{measured:.3g}" if predicted else ""
        return {"rating": round(max(0.0, min(10.0, rating)), 3),
                "confidence": round(min(0.95, node["confidence"] + 0.25), 3),
                "notes": (node["notes"] + f"\nMEASURED score {score:.4g}{delta}{gap}").strip()}

    @staticmethod
    def _family_beliefs(nodes: dict[str, Any], family: str | None, score: float,
                        best: float | None) -> list[dict[str, Any]]:
        """Open actions of a family that measures well gain priority; of one that lags, lose it."""
        if not family or not best:
            return []
        strength = min(1.0, score / best)
        ops = []
        for n in nodes.values():
            act = n.get("action")
            if not act or n.get("solution") or n.get("retired"):
                continue
            if act.get("params", {}).get("family") == family:
                new = round(min(1.0, max(0.01, act["score"] * (0.6 + 0.4 * strength))), 4)
                if abs(new - act["score"]) > 1e-4:
                    ops.append({"op": "update_node", "node_id": n["node_id"], "patch": {"action": {"score": new}}})
        return ops

    def _children(self, cat: Catalog, nodes: dict[str, Any], parent: dict[str, Any], plan: dict[str, Any],
                  score: float, budget: int, advice: Advice = NO_ADVICE) -> list[dict[str, Any]]:
        """Up to `budget` next steps under a closed node: what its profile asks for, then untried catalog
        tactics, then single-knob moves."""
        fam_name = plan.get("family") or (parent.get("action") or {}).get("params", {}).get("family")
        if not fam_name:
            return []
        fam = cat.family(fam_name)
        knobs = valid_knobs(fam, plan.get("knobs", {}) if plan.get("family") == fam_name else {})
        existing = [(n.get("action") or {}).get("params", {}) for n in nodes.values()
                    if n.get("parent_id") == parent["node_id"]]
        taken = {json.dumps(p.get("set", {}), sort_keys=True) for p in existing}
        # A tactic already taken on the way here is not proposed again, even if a later knob move undid it.
        on_path: set[Any] = set()
        cur: dict[str, Any] | None = parent
        while cur is not None:
            on_path.add((cur.get("action") or {}).get("params", {}).get("tactic"))
            cur = nodes.get(cur.get("parent_id") or "")
        candidates: list[tuple[float, str, str, dict[str, Any], Any, str | None]] = []
        why = "; ".join(advice.reasons)
        for i, (hint, change) in enumerate(profile_moves(fam, knobs, advice)):
            title = f"{hint.value.replace('_', ' ').capitalize()}: {knobs_text(change)}"
            candidates.append((PROFILE_STEP_SCORE - 0.01 * i, title, f"profile: {why}", change, None, None))
        for t in fam.tactics:
            change = {k: v for k, v in t.settings.items() if knobs.get(k) != v}
            if change and t.name not in on_path:
                candidates.append((t.prior.score, t.title, t.rationale, change, t.prior, t.name))
        for move in knob_moves(fam, knobs):
            (k, v), = move.items()
            candidates.append((0.3, f"Retune {k} to {v}", "single-knob move from the measured kernel", move, None,
                               None))
        ops = []
        for prior_score, title, rationale, change, prior, tactic in sorted(candidates, key=lambda c: -c[0]):
            key = json.dumps(change, sort_keys=True)
            if key in taken:
                continue
            taken.add(key)
            gain = prior.expected_speedup if prior else 1.02
            ops.append({"op": "insert_node", "parent_id": parent["node_id"], "node": {
                "decision": "next step", "choice": title,
                "rating": round(min(10.0, 5.0 + 2.0 * math.tanh(score)), 3),
                "confidence": prior.confidence if prior else 0.3,
                "action": {"title": title, "rationale": rationale,
                           "description": "set " + ", ".join(f"{k}={v}" for k, v in change.items()),
                           "difficulty": prior.difficulty if prior else 1,
                           "score": round(min(1.0, prior_score), 4),
                           "expected_speedup": round(gain, 4),     # over the parent's kernel
                           "params": {"family": fam.name, "set": change, "tactic": tactic}},
            }})
            if len(ops) >= budget:
                break
        return ops

    # ---- code ----------------------------------------------------------------------------------
    def _code(self, cat: Catalog, ctx: dict[str, Any]) -> tuple[Family, str]:
        """The family and the kernel (plan header first) for a code request."""
        params = ctx.get("action_params") or {}
        base = read_plan_header(ctx.get("base_code"))
        fam_name = params.get("family") or (base or {}).get("family") or self._any_family(cat, ctx).name
        fam = cat.family(fam_name)
        knobs = valid_knobs(fam, base.get("knobs", {}) if base and base.get("family") == fam_name else {})
        knobs = valid_knobs(fam, {**knobs, **params.get("set", {})})
        if ctx.get("mode") in ("debug", "improve"):
            start = read_plan_header(ctx.get("cycle_best_code")) if ctx.get("mode") == "improve" else None
            if start and start.get("family") == fam_name:
                knobs = valid_knobs(fam, start.get("knobs", {}))
            tried = [read_plan_header(c) for c in ctx.get("cycle_codes", [])]
            tried_keys = {json.dumps(t.get("knobs", {}), sort_keys=True) for t in tried if t}
            asked = [{k: v} for _, change in profile_moves(fam, knobs, advise(context_profile(ctx)))
                     for k, v in change.items()]
            for move in asked + knob_moves(fam, knobs):
                cand = {**knobs, **move}
                if json.dumps(cand, sort_keys=True) not in tried_keys:
                    knobs = cand
                    break
        return fam, plan_header(fam, knobs) + cat.render(fam_name, knobs)

    @staticmethod
    def _any_family(cat: Catalog, ctx: dict[str, Any]) -> Family:
        """The family for a step that names none (a seed kernel without a plan header): the first Triton family,
        which runs on any device, else the first the device runs."""
        runnable = cat.runnable_families(ctx.get("device"))
        return next((f for f in runnable if f.language != CUDA), runnable[0] if runnable else cat.families[0])
