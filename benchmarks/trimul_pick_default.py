"""TriMul's next gemm_input_pass defaults from a trimul_sweep.json, written into the catalog (issue 25).

    python3 benchmarks/trimul_pick_default.py SWEEP_JSON [--margin 1.03]      # the winner's knobs as JSON, or nothing
    python3 benchmarks/trimul_pick_default.py SWEEP_JSON --apply [--strategies DIR]
    python3 benchmarks/trimul_pick_default.py --set '{"input_mode": "stationary"}' [--strategies DIR]

A subject wins when it is a gemm_input_pass setting whose GPUMode geomean beats `gemm_defaults` in the same sweep
(same call, same GPU) by MARGIN, and it passed the 18 test cases (the sweep checks its best two). `--apply` sets
the winner's knobs as the family's defaults in DIR/catalog.yaml (default: the task's), editing each knob's
`default:` line inside the gemm_input_pass block so the catalog's comments and anchors stay, and reloads the
catalog to check; `--set` applies the given knobs without a sweep (a later call of a run that began from them).
A knob the family shares through a YAML anchor cannot be set for one family and is refused.
What it decided goes to stderr; exit 2 on unusable input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TASK = "trimul_outgoing_h128"
FAMILY = "gemm_input_pass"


def pick(doc: dict[str, Any], margin: float) -> tuple[dict[str, Any] | None, str]:
    """(the winner's knobs or None, why)."""
    subjects = {k: v for k, v in doc.get("subjects", {}).items() if v.get("geomean_ms")}
    base = subjects.get("gemm_defaults")
    if base is None:
        return None, "gemm_defaults has no time in this sweep: nothing to compare with"
    ours = [(v["geomean_ms"], k) for k, v in subjects.items() if v.get("family") == FAMILY]
    best_ms, label = min(ours)
    fails = doc.get("test_set_failures", {}).get(label)
    why = (f"best {label} {best_ms:.4f} ms against gemm_defaults {base['geomean_ms']:.4f} ms "
           f"(margin {margin}); test set: {'not checked' if fails is None else fails or 'all pass'}")
    if label == "gemm_defaults" or best_ms * margin > base["geomean_ms"] or fails != []:
        return None, why
    return dict(subjects[label]["knobs"]), why


def apply(catalog_path: Path, knobs: dict[str, Any]) -> None:
    """Set `knobs` as the family's defaults in the catalog text (raises ValueError where it cannot)."""
    lines = catalog_path.read_text().splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.strip() == f"- name: {FAMILY}"), None)
    if start is None:
        raise ValueError(f"{catalog_path}: no family {FAMILY}")
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].strip().startswith("- name:") and len(lines[i]) - len(lines[i].lstrip()) == indent),
               len(lines))
    for name, value in knobs.items():
        at = next((i for i in range(start, end)
                   if lines[i].strip() == f"{name}:" or lines[i].strip().startswith(f"{name}: *")), None)
        if at is None:
            raise ValueError(f"{FAMILY} has no knob {name}")
        if lines[at].strip().startswith(f"{name}: *"):
            raise ValueError(f"{name} is shared with other families (a YAML anchor): set it by hand")
        knob_indent = len(lines[at]) - len(lines[at].lstrip())
        for j in range(at + 1, end):
            stripped = lines[j].strip()
            if len(lines[j]) - len(lines[j].lstrip()) <= knob_indent and stripped:
                raise ValueError(f"{name} has no default line")
            if stripped.startswith("default:"):
                lines[j] = f"{lines[j][:len(lines[j]) - len(lines[j].lstrip())]}default: {value}\n"
                break
    catalog_path.write_text("".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep_json", nargs="?")
    ap.add_argument("--set", dest="knobs", help="set these knobs (a JSON object) as the defaults, no sweep")
    ap.add_argument("--margin", type=float, default=1.03, help="the winner must be this much faster (default 1.03)")
    ap.add_argument("--apply", action="store_true", help="set the winner's knobs as the family's defaults")
    ap.add_argument("--strategies", help="the strategies directory whose catalog.yaml --apply edits (default: the task's)")
    args = ap.parse_args(argv)
    if (args.sweep_json is None) == (args.knobs is None):
        print("error: give a sweep's JSON or --set KNOBS_JSON (one of them)", file=sys.stderr)
        return 2
    try:
        if args.knobs is not None:
            knobs, why = json.loads(args.knobs), "knobs given"
            if not isinstance(knobs, dict):
                raise ValueError("--set takes a JSON object")
        else:
            knobs, why = pick(json.loads(Path(args.sweep_json).read_text()), args.margin)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(why, file=sys.stderr)
    if knobs is None:
        return 0
    if args.apply or args.knobs is not None:
        from ksearch.task import load_task
        from ksearch.task.catalog import load_catalog

        task = load_task(TASK)
        strategies = Path(args.strategies) if args.strategies else Path(task.strategies_dir)
        try:
            apply(strategies / "catalog.yaml", knobs)
        except ValueError as e:
            print(f"not applied: {e}", file=sys.stderr)
            return 2
        got = next(f for f in load_catalog(strategies, task.name).families if f.name == FAMILY).defaults()
        wrong = {k: (got.get(k), v) for k, v in knobs.items() if got.get(k) != v}
        if wrong:
            print(f"error: the catalog did not take {wrong}", file=sys.stderr)
            return 2
        print(f"{FAMILY} defaults now: {knobs}", file=sys.stderr)
    print(json.dumps(knobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
