"""One line per run directory for the GPU smoke: did the run end with a PASSED best, how fast did it go.

    PYTHONPATH=. python3 scripts/run_summary.py RUN_DIR [RUN_DIR ...]

Reads only the run's journal and best/report.json. Per run: the task, evaluations and wall time
(evaluations per minute), the best's status and score, what a held-out validation cost next to a
feedback evaluation of the same kernel (each job's elapsed_s as the evaluator recorded it), and per
baseline set whether it was measured or reused from the baseline cache and how long it took (the time
since the record before it: for the first set, the evaluation worker's start is in it). Exits 1 when a run
has no PASSED best, naming it.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import ksearch.store.records as R
from ksearch.eval.report import Status
from ksearch.store.journal import read_records


def baselines(records: list[R.Record]) -> str:
    """e.g. "feedback measured 44 s, validate reused 0.2 s" (partly reused: "3 of 8 timings reused")."""
    parts, last_t = [], None
    for r in records:
        if isinstance(r, R.Baseline):
            times = r.times
            where = times.provenance() if times is not None else ""
            how = "measured" if not where else where.split(" from ")[0]
            took = f" {r.t - last_t:.1f} s" if r.t is not None and last_t is not None else ""
            parts.append(f"{r.workload_set or '?'} {how}{took}")
        if r.t is not None:
            last_t = r.t
    return ", ".join(parts) or "none"


def summarize(run: Path) -> tuple[bool, str]:
    records, _ = read_records(run / "journal.jsonl")     # a torn last line (a killed run) is dropped
    start = next(iter(R.of_kind(records, R.RunStart)), None)
    task = start.task if start is not None and start.task else run.name
    evals = R.of_kind(records, R.Evaluation)
    feedback = {r.solution_id: float(r.value.get("elapsed_s") or 0) for r in evals if r.value}
    ratios, validate_s = [], []
    for r in R.of_kind(records, R.Validate):
        if r.value:
            el = float(r.value.get("elapsed_s") or 0)
            validate_s.append(el)
            if feedback.get(r.solution_id):
                ratios.append(el / feedback[r.solution_id])
    t = [r.t for r in records if r.t is not None]
    wall_min = (max(t) - min(t)) / 60 if len(t) > 1 else 0.0
    best_path = run / "best" / "report.json"
    best = json.loads(best_path.read_text()) if best_path.exists() else {}
    ok = best.get("status") == Status.PASSED
    score = best.get("score")
    fb = [v for v in feedback.values() if v]
    line = (f"{task}: {'PASSED' if ok else 'NO PASSED BEST'} best {score if score is None else f'{score:.4g}x'}"
            f" | {len(evals)} evaluations in {wall_min:.1f} min ({len(evals) / wall_min if wall_min else 0:.1f}/min)"
            f" | feedback eval median {statistics.median(fb) if fb else float('nan'):.1f} s"
            f" | {len(validate_s)} validations, median {statistics.median(validate_s) if validate_s else float('nan'):.1f} s"
            f", cost vs the same kernel's feedback eval: "
            f"{f'max {max(ratios):.2f}x' if ratios else '-'}"
            f" | baselines: {baselines(records)}")
    return ok, line


def main(argv: list[str]) -> int:
    failed = []
    for arg in argv:
        run = Path(arg)
        if not (run / "journal.jsonl").exists():
            print(f"{run}: no journal (the run did not start)")
            failed.append(str(run))
            continue
        ok, line = summarize(run)
        print(line)
        if not ok:
            failed.append(str(run))
    if failed:
        print("run_summary: no PASSED best in " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
