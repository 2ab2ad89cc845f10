"""What the knowledge store contributes to a new run: evidence per kernel family, strong and weak.

- strong: the same task signature on the same GPU. The family and knob settings that scored best there
  are where a new run starts (ksearch/knowledge/priors.py), and its beliefs about every family start
  from what was measured.
- weak: a task of the same op type (another signature, or this one on another GPU). Scores do not
  compare across tasks or GPUs, so each family is ranked relative to the best family of its own
  (task, GPU) group, and that rank only nudges the catalog's priors.

A `Recall` is plain data: it is journaled when a run starts (record kind "memory"), and a resumed or
replayed run reads it from there, never from the live store, so it asks exactly what it asked before.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ksearch.knowledge.store import ALL_REGIONS, EvaluationRow

#: Families listed per kind of evidence (prompts stay short; the best ones are kept).
MAX_FAMILIES = 8
MAX_REGIONS = 8


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FamilyEvidence(_Data):
    family: str
    evaluations: int
    passed: int
    runs: int
    best_score: float | None = None          # strong evidence only: a score on this GPU
    best_knobs: dict[str, Any] = Field(default_factory=dict)
    relative: float = Field(0.0, ge=0, le=1)  # best score / the best of its (task, GPU) group; 0: never passed


class RegionEvidence(_Data):
    region: str
    family: str
    knobs: dict[str, Any] = Field(default_factory=dict)
    score: float


class Recall(_Data):
    """The record a run journals at its start (kind "memory")."""

    source: str = "none"                     # where it came from: the store's path, a recording, or none
    signature: str = ""
    op_type: str = ""
    gpu: str = ""
    strong: list[FamilyEvidence] = Field(default_factory=list)
    strong_runs: int = 0
    strong_regions: list[RegionEvidence] = Field(default_factory=list)
    weak: list[FamilyEvidence] = Field(default_factory=list)
    weak_groups: list[str] = Field(default_factory=list)     # "task on gpu" the weak evidence comes from
    note: str = ""

    @property
    def empty(self) -> bool:
        return not self.strong and not self.weak

    def best(self) -> FamilyEvidence | None:
        """The strong family with the highest score, if any passed."""
        scored = [f for f in self.strong if f.best_score is not None]
        return max(scored, key=lambda f: (f.best_score, f.family)) if scored else None

    def strong_for(self, family: str) -> FamilyEvidence | None:
        return next((f for f in self.strong if f.family == family), None)

    def weak_for(self, family: str) -> FamilyEvidence | None:
        return next((f for f in self.weak if f.family == family), None)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def context(self) -> dict[str, Any]:
        """What the initial world-model request's context carries: nothing when there is no evidence, so a
        run with an empty memory asks exactly what a run without memory asks."""
        return {} if self.empty else {"memory": self.to_json()}


def _families(rows: Sequence[EvaluationRow], keep_scores: bool) -> list[FamilyEvidence]:
    """Per family over (task, GPU) groups: counts, best knobs, and the mean relative rank."""
    groups: dict[tuple[str, str], list[EvaluationRow]] = defaultdict(list)
    for r in rows:
        groups[(r.signature, r.gpu)].append(r)
    per: dict[str, dict[str, Any]] = {}
    for group_rows in groups.values():
        top = max((r.score for r in group_rows if r.score is not None), default=None)
        by_family: dict[str, list[EvaluationRow]] = defaultdict(list)
        for r in group_rows:
            by_family[r.family].append(r)
        for fam, frs in by_family.items():
            acc = per.setdefault(fam, {"evaluations": 0, "passed": 0, "runs": set(), "relatives": [],
                                       "best": None})
            acc["evaluations"] += len(frs)
            acc["runs"].update(r.run_id for r in frs)
            scored = [(r.score, r) for r in frs if r.score is not None]
            acc["passed"] += len(scored)
            top_row = max(scored, key=lambda sr: sr[0]) if scored else None     # first of equals: the oldest
            best = top_row[1] if top_row else None
            rel = top_row[0] / top if top_row is not None and top else 0.0
            acc["relatives"].append(rel)
            if best is not None and (acc["best"] is None or rel > acc["best"][0]):
                acc["best"] = (rel, best)
    out = []
    for fam, acc in per.items():
        best = acc["best"][1] if acc["best"] else None
        out.append(FamilyEvidence(
            family=fam, evaluations=acc["evaluations"], passed=acc["passed"], runs=len(acc["runs"]),
            best_score=best.score if best is not None and keep_scores else None,
            best_knobs=dict(best.knobs) if best is not None else {},
            relative=round(min(1.0, sum(acc["relatives"]) / len(acc["relatives"])), 6)))
    out.sort(key=lambda f: (-f.relative, -f.passed, f.family))
    return out[:MAX_FAMILIES]


def _regions(rows: Iterable[EvaluationRow]) -> list[RegionEvidence]:
    best: dict[str, tuple[float, EvaluationRow]] = {}
    for r in rows:
        if r.region != ALL_REGIONS and r.score is not None and (r.region not in best or r.score > best[r.region][0]):
            best[r.region] = (r.score, r)
    return [RegionEvidence(region=k, family=r.family, knobs=dict(r.knobs), score=s)
            for k, (s, r) in sorted(best.items())][:MAX_REGIONS]


def build_recall(rows: Sequence[EvaluationRow], signature: str, op_type: str, gpu: str, source: str) -> Recall:
    """The evidence `rows` (any rows of the op type) hold for a run of `signature` on `gpu`."""
    same_op = [r for r in rows if r.op_type == op_type]
    strong = [r for r in same_op if r.signature == signature and r.gpu == gpu]
    weak = [r for r in same_op if not (r.signature == signature and r.gpu == gpu)]
    whole = lambda rs: [r for r in rs if r.region == ALL_REGIONS]       # noqa: E731
    groups = sorted({f"{r.task} on {r.gpu}" for r in whole(weak)})
    return Recall(source=source, signature=signature, op_type=op_type, gpu=gpu,
                  strong=_families(whole(strong), keep_scores=True),
                  strong_runs=len({r.run_id for r in strong}), strong_regions=_regions(strong),
                  weak=_families(whole(weak), keep_scores=False), weak_groups=groups)


def knobs_text(knobs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(knobs.items())) or "default settings"


def render_recall(recall: Recall) -> str:
    """The "what earlier runs found" section of the initial world-model prompt ("" when there is none)."""
    if recall.empty:
        return ""
    lines = ["What earlier runs found (ksearch's knowledge store: measurements, use them as evidence):"]
    if recall.strong:
        evals = sum(f.evaluations for f in recall.strong)
        lines.append(f"This kernel on this GPU ({recall.gpu}): {recall.strong_runs} earlier run(s), {evals} "
                     f"evaluations. Best score per family (geomean speedup over the baseline):")
        for f in recall.strong:
            best = f"{f.best_score:.4g}x with {knobs_text(f.best_knobs)}" if f.best_score is not None \
                else "never passed"
            lines.append(f"- {f.family}: {best} ({f.passed} of {f.evaluations} evaluations passed)")
        if recall.strong_regions:
            lines.append("Best per region of the shape space: " + "; ".join(
                f"{r.region}: {r.family} {r.score:.4g}x ({knobs_text(r.knobs)})" for r in recall.strong_regions))
    if recall.weak:
        lines.append(f"Kernels of the same op type ({recall.op_type}) elsewhere ({', '.join(recall.weak_groups)}): "
                     f"families ranked by their best relative to the best of their task and GPU "
                     f"(1 = the best there; scores do not carry over):")
        lines.append("; ".join(f"{f.family} {f.relative:.2f}" for f in recall.weak))
    lines.append("Start from what measured best (as a first action, with its settings) and do not repeat what "
                 "failed; it may still be beaten.")
    return "\n".join(lines)
