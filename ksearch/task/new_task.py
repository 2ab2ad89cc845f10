"""`ksearch task new DEFINITION.json`: a task folder from a FlashInfer-Bench definition.

Written: definition.json (as given, less the reference), reference.py (the definition's reference),
workloads.py (var-axis values for the tiny / feedback / full sets, random inputs by ksearch.task.synth),
task.yaml (correctness rule and default sets), baseline.py (an empty hook to fill with a faster library
call), and, when a starter fits (ksearch/task/starter_match.py: by op type and signature, confirmed by
running its kernels against the reference), strategies/ with a Triton catalog the offline model searches
at once. Everything is plain text to edit afterwards.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ksearch.task.definition import Definition, DefinitionError, parse_definition
from ksearch.task.starter_match import STARTERS, check_starter, write_starter

# Var-axis values per workload set: tiny runs under the CPU interpreter, feedback is what a GPU search
# scores, full is a wider sweep to confirm on. Several var axes take the values of one list together.
AXIS_VALUES = {
    "tiny": [1, 3, 7],
    "feedback": [1, 16, 128, 1024],
    "full": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
}


class TaskExistsError(FileExistsError):
    pass


@dataclass
class NewTask:
    name: str
    path: Path
    has_catalog: bool
    on_search_path: bool
    notes: list[str] = field(default_factory=list)


def read_definition_file(path: Path) -> tuple[dict[str, Any], Definition]:
    if not path.is_file():
        raise DefinitionError(f"{path} does not exist; pass a FlashInfer-Bench definition JSON")
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DefinitionError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise DefinitionError(f"{path}: a definition is a JSON object (name, op_type, axes, inputs, outputs, reference)")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(doc.get("name", ""))):
        raise DefinitionError(f"{path}: name {doc.get('name')!r} must be a plain identifier (letters, digits, _ . -)")
    return doc, parse_definition(doc)


# ---- the task folder ----------------------------------------------------------------------------------

def _workload_axes(d: Definition) -> dict[str, list[dict[str, int]]]:
    var = d.var_axes()
    return {name: [{a: v for a in var} for v in values] for name, values in AXIS_VALUES.items()}


def _default_scalar(dtype: str) -> Any:
    return True if dtype == "bool" else (1.0 if dtype.startswith(("float", "bfloat")) else 1)


WORKLOADS_PY = '''"""Workloads for {name}, written by `ksearch task new`: edit the axis values and scalars freely.

SETS: workload set -> list of var-axis values ({var}). Inputs are random (ksearch.task.synth), seeded
per run, workload and trial.{constraints}
"""

from pathlib import Path

from ksearch.task import Workload
from ksearch.task.definition import load_definition
from ksearch.task.synth import random_inputs

SETS = {sets}

# Values of the definition's scalar (shape null) inputs.
SCALARS = {scalars}

_DEFINITION = load_definition(Path(__file__).parent)


def _name(set_name: str, axes: dict) -> str:
    return "_".join([set_name, *(f"{{k}}{{v}}" for k, v in axes.items())])


def workload_sets() -> dict[str, list[Workload]]:
    return {{s: [Workload(_name(s, axes), dict(axes)) for axes in values] for s, values in SETS.items()}}


def make_inputs(workload: Workload, *, device: str, seed: int) -> dict:
    return random_inputs(_DEFINITION, workload.axes, device=device, seed=seed, scalars=SCALARS)
'''

BASELINE_PY = '''"""Baselines for {name} (GPU only): the library calls a kernel must beat. Optional.

With BASELINES empty, the PyTorch reference is the baseline. To add one, map a name to a factory that
takes the inputs dict, does any planning once, and returns a zero-argument call producing the outputs:

    def _library(inputs):
        import flashinfer
        x, w = inputs["hidden_states"], inputs["weight"]
        return lambda: flashinfer.norm.rmsnorm(x, w, eps=1e-6)

    BASELINES = {{"flashinfer": _library}}
"""

BASELINES: dict = {{}}
'''

TASK_YAML = """# Evaluation settings for {name} (FlashInfer-Bench's element rule: abs > atol and rel > rtol fails).
correctness: {{atol: 0.01, rtol: 0.01, required_matched_ratio: 1.0}}
default_sets: {{cpu: tiny, gpu: feedback}}
"""


def _py_literal(value: Any) -> str:
    """A dict as Python source, one key per line (values are JSON-compatible: numbers, strings, bools)."""
    def one(v: Any) -> str:
        return json.dumps(v).replace("true", "True").replace("false", "False").replace("null", "None")
    if not value:
        return "{}"
    return "{\n" + "".join(f"    {json.dumps(k)}: {one(v)},\n" for k, v in value.items()) + "}"


def new_task(definition_path: Path, parent: Path, *, force: bool = False) -> NewTask:
    from ksearch.task.registry import task_roots

    doc, d = read_definition_file(definition_path)
    dest = parent / d.name
    if dest.exists():
        if not force:
            raise TaskExistsError(f"{dest} already exists; pass --force to replace it, or --dir another folder")
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    notes: list[str] = []
    (dest / "definition.json").write_text(json.dumps({k: v for k, v in doc.items() if k != "reference"}, indent=2)
                                          + "\n")
    (dest / "reference.py").write_text(d.reference.rstrip("\n") + "\n")
    scalars = {t.name: _default_scalar(t.dtype) for t in d.inputs if t.is_scalar}
    constraints = ("\nThe definition's constraints must hold for every workload:\n" +
                   "\n".join(f"    {c}" for c in d.constraints)) if d.constraints else ""
    (dest / "workloads.py").write_text(WORKLOADS_PY.format(
        name=d.name, var=", ".join(d.var_axes()) or "none", constraints=constraints,
        sets=_py_literal(_workload_axes(d)), scalars=_py_literal(scalars)))
    (dest / "task.yaml").write_text(TASK_YAML.format(name=d.name))
    (dest / "baseline.py").write_text(BASELINE_PY.format(name=d.name))
    if scalars:
        notes.append(f"scalar inputs {', '.join(scalars)} are set to placeholder values in workloads.py "
                     f"(SCALARS): set the real ones")
    if d.constraints:
        notes.append("the definition has constraints; check that the workloads in workloads.py satisfy them")
    problem = _try_reference(dest, d.name)
    if problem:
        notes.append(f"warning: the reference failed on the first tiny workload: {problem}; edit workloads.py")
    has_catalog = False if problem else _add_starter(d, dest, notes)
    on_path = dest.parent.resolve() in task_roots()
    return NewTask(d.name, dest, has_catalog, on_path, notes)


def _add_starter(d: Definition, dest: Path, notes: list[str]) -> bool:
    """strategies/ from the starter whose op type and signature fit `d`, kept only when its kernels pass
    against the definition's reference (see ksearch/task/starter_match.py). Says why when there is none."""
    llm = (f"search it with an LLM, e.g. `ksearch run task={d.name} llm=litellm llm.model=openai/gpt-5.2`, or "
           f"write strategies/catalog.yaml yourself (layout in ksearch/task/catalog.py)")
    starter = next((s for s in STARTERS if s.for_op(d)), None)
    if starter is None:
        notes.append(f"no starter catalog for op type {d.op_type!r} (starters exist for op types: "
                     f"{', '.join(o for s in STARTERS for o in s.op_types)}): {llm}")
        return False
    fit = starter.fit(d)
    if not fit.candidates:
        notes.append(f"op type {d.op_type!r} has a starter ({starter.name}), but it does not fit this definition: "
                     f"{fit.reason}; {llm}")
        return False
    failures = []
    for subs in fit.candidates:
        write_starter(starter, subs, dest / "strategies")
        failure = check_starter(dest)
        if failure is None:
            eps = f" (eps {subs['@EPS@']})" if "@EPS@" in subs else ""
            notes.append(f"starter catalog: {starter.name} Triton families in {dest / 'strategies'}{eps}, each "
                         f"checked against the reference on the tiny workloads (the offline model searches them)")
            return True
        failures.append(failure)
    shutil.rmtree(dest / "strategies")
    notes.append(f"op type {d.op_type!r} has a starter ({starter.name}) whose signature fits, but its kernels do "
                 f"not reproduce this reference ({failures[0]}): {llm}")
    return False


def _try_reference(dest: Path, name: str) -> str | None:
    """Run the reference once on the smallest generated workload, so bad inputs show up now."""
    from ksearch.task.registry import load_task

    try:
        task = load_task(name, dest.parent)
        w = task.workload_set("tiny")[0]
        task.reference(**task.make_inputs(w, device="cpu", seed=0))
    except Exception as e:       # noqa: BLE001 - reported as a note: the folder is written and can be fixed by hand
        return f"{type(e).__name__}: {e}"[:300]
    return None
