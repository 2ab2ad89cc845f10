"""Which starter catalog fits a new task: matched by op type and signature, confirmed by running it.

A starter (ksearch/task/starters/<name>/) is a small Triton catalog for one kind of op. A definition is
offered a starter when its op type names that kind and its signature fits: the axes, the inputs, the
outputs and their dtypes the templates are written for. How the reference is *written* does not matter:
whether the match is right is decided by rendering every family of the starter at its defaults and
judging those kernels against the definition's own reference, with the evaluator `ksearch eval` uses, on
the task's tiny workloads. Values a signature cannot tell (RMSNorm's epsilon when it is a literal in the
reference) are taken from the reference's text when it has them, and the run decides among them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ksearch.task.definition import Definition


@dataclass(frozen=True)
class Fit:
    """A starter's verdict on a definition: the template substitutions to try, in order, or why it does not
    fit (`reason`). Several substitutions when the signature leaves a value open (e.g. epsilon)."""

    candidates: tuple[dict[str, str], ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class Starter:
    name: str
    op_types: tuple[str, ...]                  # normalised op types (lowercase, letters and digits) it is for
    fit: Callable[[Definition], Fit]

    def for_op(self, d: Definition) -> bool:
        return _normal(d.op_type) in self.op_types


def _normal(op_type: str) -> str:
    return re.sub(r"[^a-z0-9]", "", op_type.lower())


# ---- RMSNorm -------------------------------------------------------------------------------------------

#: Epsilons tried when the definition gives none as an input and its reference names none.
COMMON_EPS = ("1e-6", "1e-5")
_FLOAT = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?(?:[eE][+-]?\d+)|\d*\.\d+(?:[eE][+-]?\d+)?)(?![\w.])")


def eps_candidates(reference: str) -> list[str]:
    """Small positive float literals in the reference (where an epsilon hides, however it is spelt), in
    order of appearance, then the common defaults."""
    found: list[str] = []
    for text in _FLOAT.findall(reference):
        try:
            value = float(text)
        except ValueError:
            continue
        if 0 < value < 1e-2 and text not in found:
            found.append(text)
    return found + [e for e in COMMON_EPS if not any(float(e) == float(f) for f in found)]


def _fit_rmsnorm(d: Definition) -> Fit:
    """x [..., H] and weight [H] (H a const axis) -> one floating output shaped like x; eps a float scalar
    input or a constant of the reference."""
    tensors = [t for t in d.inputs if not t.is_scalar]
    scalars = [t for t in d.inputs if t.is_scalar]
    if len(tensors) != 2 or len(d.outputs) != 1 or len(scalars) > 1:
        return Fit(reason=f"the rmsnorm starter takes two tensor inputs (x, weight), at most one scalar (eps) "
                          f"and one output; this definition has {len(tensors)} tensor input(s), {len(scalars)} "
                          f"scalar(s) and {len(d.outputs)} output(s)")
    x, w = sorted(tensors, key=lambda t: -len(t.shape or ()))
    w_shape = w.shape or ()
    out = d.outputs[0]
    consts = d.const_axes()
    if len(w_shape) != 1 or not x.shape or x.shape[-1] != w_shape[0] or w_shape[0] not in consts:
        return Fit(reason=f"the rmsnorm starter needs weight [H] with H a const axis and x [..., H]; here "
                          f"{x.name} is {list(x.shape or [])} and {w.name} is {list(w.shape or [])}")
    if out.shape != x.shape:
        return Fit(reason=f"the rmsnorm starter writes an output shaped like {x.name} {list(x.shape)}; "
                          f"{out.name} is {list(out.shape or [])}")
    if not (x.torch_dtype.is_floating_point and out.torch_dtype.is_floating_point):
        return Fit(reason=f"the rmsnorm starter is for floating inputs and outputs ({x.name} is {x.dtype}, "
                          f"{out.name} is {out.dtype})")
    if scalars and not scalars[0].dtype.startswith(("float", "bfloat")):
        return Fit(reason=f"the rmsnorm starter takes eps as a float scalar; {scalars[0].name} is {scalars[0].dtype}")
    base = {"@TASK@": d.name, "@HIDDEN@": str(consts[w_shape[0]]), "@SIGNATURE@": ", ".join(d.input_names),
            "@X@": x.name, "@W@": w.name, "@OUT_DTYPE@": f"torch.{out.dtype}"}
    eps = [scalars[0].name] if scalars else eps_candidates(d.reference)
    return Fit(candidates=tuple({**base, "@EPS@": e} for e in eps))


STARTERS = (Starter("rmsnorm", ("rmsnorm",), _fit_rmsnorm),)


def starter_files(starter: Starter) -> Path:
    from importlib import resources

    return Path(str(resources.files("ksearch.task").joinpath("starters", starter.name)))


def write_starter(starter: Starter, subs: dict[str, str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for item in starter_files(starter).iterdir():
        text = item.read_text()
        for k, v in subs.items():
            text = text.replace(k, v)
        (dest / item.name).write_text(text)


# ---- confirming a match by running it -------------------------------------------------------------------

def check_starter(task_dir: Path) -> str | None:
    """Judge every family of the catalog in `task_dir`/strategies at its defaults against the task's
    reference on its tiny workloads. None when all pass, else what failed (one line). A CUDA family is judged
    only where there is a CUDA device (the starters' catalogs are Triton, which runs anywhere)."""
    from ksearch.eval.parent.evaluator import EvalSettings, Evaluator, resolve_device
    from ksearch.task.catalog import load_catalog
    from ksearch.task.registry import load_task

    task_dir = task_dir.resolve()      # the judge's processes do not share our working directory
    task = load_task(task_dir.name, task_dir.parent)
    catalog = load_catalog(task.strategies_dir, task.name)
    device = resolve_device("auto")
    settings = EvalSettings(device=device, timeout_s=180.0, warmup=0 if device == "cpu" else 3, trials=1,
                            check_trials=1)
    families = catalog.runnable_families(device)
    if not families:
        return f"no family of the catalog runs on {device} (all are CUDA): judge them on a GPU host"
    entries = [(catalog.render(f.name, {}), f"starter_{f.name}") for f in families]
    with Evaluator(task, settings) as ev:
        reports = ev.remeasure(entries, task.workload_set("tiny"), None)
    for family, report in zip(families, reports):
        if not report.passed:
            why = " ".join(report.summary().split(" | Traceback")[0].split())     # the verdict, not a stack
            return f"family {family.name}: {why[:300]}"
    return None
