"""Prompts and their context: what the model is told, rendered from jinja2 templates.

Every request carries the same header (hardware, language, task definition, baseline and its targets);
the code request adds the plan step, the kernel it starts from and the cycle's attempts so far; the
close-of-cycle requests add the evidence. The machine-readable `context` travels with each request (the
offline model reads it; the journal keeps it)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import jinja2

from ksearch.eval.report import BaselineTimes, EvalReport
from ksearch.instantiate.language import CUDA, language_of
from ksearch.llm.base import ModelRequest
from ksearch.profile import read_profile, render_profile
from ksearch.task import Task

if TYPE_CHECKING:
    from ksearch.planner.cycle import CycleState

_PROMPTS = jinja2.Environment(
    loader=jinja2.ChoiceLoader([jinja2.PackageLoader("ksearch.world_model", "prompts"),
                                jinja2.PackageLoader("ksearch.instantiate", "prompts")]),
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def hardware_for(device: str) -> str:
    return "NVIDIA H200 (Hopper, sm_90a)" if device.startswith("cuda") else \
        "an NVIDIA Hopper GPU (checked here on a CPU with the Triton interpreter)"


class Prompts:
    """Renders the templates for one task on one device; the baseline is known once measured."""

    def __init__(self, task: Task, device: str):
        self.task = task
        self.hardware = hardware_for(device)
        self.baseline: BaselineTimes | None = None      # the search set's, once measured

    def render(self, name: str, language: str, **kw: Any) -> str:
        b = self.baseline
        targets = ", ".join(f"{w}: {ms:.4g} ms" for w, ms in (b.best() if b else {}).items())
        base = {"hardware": self.hardware, "language": language, "task": self.task.name,
                "definition": self.task.definition.render_text(),
                "baseline": b.label if b else "the baseline", "targets": targets or "-", "regions": "-"}
        return _PROMPTS.get_template(name).render(**{**base, **kw})

    def code_request(self, state: CycleState, language: str) -> ModelRequest:
        """The request for the cycle's next attempt (action, debug or improve)."""
        node, mode, attempt = state.node, state.mode, state.k + 1
        a = node.action
        assert a is not None
        action_text = f"[{node.node_id}] {a.title}: {a.description} (why: {a.rationale})"
        current = state.codes[-1] if state.codes else ""
        best_code = state.best[0] if state.best else ""
        # improving: what the hardware said about the kernel the next attempt starts from
        profile = read_profile(state.best[1].to_json()) if mode == "improve" and state.best else None
        if profile is not None and profile.profile is None:
            profile = None          # nothing measured: the request stays what it was before profiles
        prompt = self.render(
            "code.j2", language, entry="run",
            signature=", ".join(self.task.definition.input_names),
            outputs=" and ".join(self.task.definition.output_names), mode=mode, action=action_text,
            base_code=state.base.code, base_score=fmt(state.base.score), base_fence=fence(state.base.code),
            current_code=current, current_fence=fence(current),
            last_result=state.last.summary() if state.last else "",
            cycle_best_code=best_code, cycle_best_fence=fence(best_code),
            cycle_best_score=fmt(state.best[1].score if state.best else None),
            profile=render_profile(profile) if profile else "")
        context = {"task": self.task.name, "node_id": node.node_id, "action_params": a.params, "mode": mode,
                   "attempt": attempt, "base_code": state.base.code, "cycle_codes": list(state.codes),
                   "cycle_best_code": state.best[0] if state.best else None,
                   **(profile.to_context() if profile else {})}
        return ModelRequest("code", mode, prompt, context)


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def fence(code: str | None) -> str:
    return "cuda" if code and language_of(code) == CUDA else "python"


def mean_latency(report: EvalReport) -> float | None:
    lat = [w.latency_ms for w in report.workloads if w.latency_ms is not None]
    return sum(lat) / len(lat) if lat and report.passed else None


def evidence(report: EvalReport) -> str:
    per = {w.workload: w.latency_ms for w in report.workloads}
    return json.dumps({"status": report.status, "score": report.score, "score_name": report.score_name,
                       "baseline": report.baseline, "latency_ms": per, "speedups": report.speedups})
