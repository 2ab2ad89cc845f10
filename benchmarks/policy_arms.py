"""Does the search earn its keep? Best score against evaluations for the learned, greedy and random arms.

Runs `ksearch run` once per (policy, seed) on one task with the same model, workloads and round budget,
then reads each run's journal: after the k-th evaluation, the best score so far is the score of the
last "best" record before it (the search's own, noise-aware notion of a new best, validate gate
included). Prints one table per task (rows: evaluations; columns: arms, the median over seeds) and the
final best's validate score, and writes everything as JSON.

    python benchmarks/policy_arms.py --task gqa_paged_decode_h32_kv4_d128_ps1 --rounds 40 --seeds 0 1 2
    python benchmarks/policy_arms.py --task mla_paged_decode_h16_ckv512_kpe64_ps1 --rounds 40 -- eval.device=cuda

Anything after `--` is passed to every run as Hydra overrides. On a CPU keep --rounds small: every
evaluation runs the Triton interpreter.

Memory across runs (ksearch/knowledge): arms must not learn from each other, so by default every run has
memory off; `--memory STORE` starts every arm from the same knowledge store (e.g. one an earlier run
wrote) and lets none of them add to it.

Baselines (ksearch/eval/trusted/baseline_cache.py): the arms of one seed are scored against one measurement
of the baselines, the first arm's, kept in a cache file of this benchmark's own (OUT/baselines.sqlite, reused
for as long as the benchmark takes, CPU included): the arms' scores share their denominator, and on the H200
six of nine runs skip the ~45 s of timing FlashInfer. An `eval.baseline_cache...` override after `--` replaces
this.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ARMS = ("learned", "greedy", "random")
ROOT = Path(__file__).resolve().parents[1]


def memory_overrides(store: Path | None) -> list[str]:
    """Every arm starts from the same memory (none, or `store`) and adds nothing to it."""
    if store is None:
        return ["memory.enabled=false"]
    return [f"memory.path={store}", "memory.write=false"]


#: the benchmark's own baselines stay good for its whole length (arms of a seed must share one measurement)
ARMS_BASELINE_MAX_AGE_H = 24 * 30


def baseline_overrides(out: Path, extra: list[str]) -> list[str]:
    """Every arm reuses the baselines the first arm of its seed measured (see the module doc), unless the
    overrides after `--` set the baseline cache themselves."""
    if any(o.lstrip("+~").split("=", 1)[0].startswith("eval.baseline_cache") for o in extra):
        return []
    return ["eval.baseline_cache=on", f"eval.baseline_cache_path={out / 'baselines.sqlite'}",
            f"eval.baseline_cache_max_age_h={ARMS_BASELINE_MAX_AGE_H}"]


def run_arm(task: str, policy: str, seed: int, rounds: int, out: Path, extra: list[str],
            store: Path | None = None) -> Path:
    run_dir = out / task / f"{policy}_seed{seed}"
    shared = [*memory_overrides(store), *baseline_overrides(out, extra), *extra]
    if (run_dir / "journal.jsonl").is_file():
        cmd = [sys.executable, "-m", "ksearch.cli.main", "resume", str(run_dir), f"search.max_rounds={rounds}",
               "run.live=false", *shared]
    else:
        cmd = [sys.executable, "-m", "ksearch.cli.main", "run", f"task={task}", f"search.policy={policy}",
               f"run.seed={seed}", f"search.max_rounds={rounds}", f"run.dir={run_dir}", "run.live=false",
               *shared]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    return run_dir


def curve(run_dir: Path) -> tuple[list[float | None], float | None]:
    """Best score after each evaluation, and the final best's validate score (None when not measured)."""
    records = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines() if x.strip()]
    best: float | None = None
    validate: float | None = None
    out: list[float | None] = []
    for r in records:
        if r.get("kind") == "best" and r.get("score") is not None:
            best, validate = float(r["score"]), r.get("validate_score")
            if out:
                out[-1] = best            # a best decided on this evaluation counts at this evaluation
        elif r.get("kind") == "evaluation":
            out.append(best)
    return out, validate


def table(curves: dict[str, list[list[float | None]]], points: list[int]) -> str:
    lines = ["evaluations | " + " | ".join(f"{a:>10}" for a in curves)]
    for k in points:
        cells = []
        for runs in curves.values():
            vals = [c[min(k, len(c)) - 1] for c in runs if c and c[min(k, len(c)) - 1] is not None]
            cells.append(f"{statistics.median(vals):>9.4g}x" if vals else f"{'-':>10}")
        lines.append(f"{k:>11} | " + " | ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", action="append", required=True, help="task name (repeat for several)")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "policy_arms")
    p.add_argument("--memory", type=Path, default=None, metavar="STORE",
                   help="start every arm from this knowledge store, adding nothing to it (default: memory off)")
    args = p.parse_args(argv)
    results: dict[str, dict[str, object]] = {}
    for task in args.task:
        curves: dict[str, list[list[float | None]]] = {a: [] for a in args.arms}
        finals: dict[str, list[float | None]] = {a: [] for a in args.arms}
        for arm in args.arms:
            for seed in args.seeds:
                c, v = curve(run_arm(task, arm, seed, args.rounds, args.out, extra, args.memory))
                curves[arm].append(c)
                finals[arm].append(v)
        n = max((len(c) for runs in curves.values() for c in runs), default=0)
        points = sorted({k for k in (1, 2, 5, 10, 20, 40, 80, 160, n) if 1 <= k <= n})
        print(f"\n== {task}: best feedback score (median over seeds {args.seeds}) against evaluations")
        print(table(curves, points))
        print("final best on validate: " + ", ".join(
            f"{a}: {statistics.median([v for v in vs if v is not None]):.4g}x" if any(v is not None for v in vs)
            else f"{a}: -" for a, vs in finals.items()))
        results[task] = {"curves": curves, "validate": finals, "seeds": args.seeds, "rounds": args.rounds}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "policy_arms.json").write_text(json.dumps(results, indent=1))
    print(f"\nwritten: {args.out / 'policy_arms.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
