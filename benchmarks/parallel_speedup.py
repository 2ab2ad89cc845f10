"""Serial against parallel search when the model is slow: wall time to the same number of evaluations.

    PYTHONPATH=. python benchmarks/parallel_speedup.py [--delay 2.0] [--eval-s 0.2] [--rounds 48] [--parallel 1 4]

For each N: an offline run with search.parallel=N records every prompt and reply; then the same search
runs with llm=litellm against a local OpenAI-compatible server (tests/fake_llm_server.py) that answers
each request after `--delay` seconds, like a remote model. Measurements come from a deterministic
stand-in evaluator that takes `--eval-s` seconds per kernel (compile + check + time on one pool slot), so
the prompts repeat exactly and the numbers isolate what the loop does with the waiting. Prints, per N,
the evaluations, the model requests, the most requests in flight at once and the wall time, and the
speedup over the first N.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ksearch.eval.report import BaselineTimes, EvalReport, WorkloadResult
from ksearch.llm.offline import read_plan_header


class TimedStandIn:
    """Scores a kernel by its plan header (larger tiles faster), taking a fixed time; thread-safe."""

    eval_s = 0.2

    def __init__(self, task=None, settings=None):
        pass

    def measure_baselines(self, workloads, time_reference=False):
        return BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in workloads}}, "stand-in")

    def evaluate(self, source, solution_id, workloads, baseline):
        time.sleep(self.eval_s)
        plan = read_plan_header(source) or {"family": "?", "knobs": {}}
        knobs = plan.get("knobs", {})
        score = (1.0 if plan.get("family") == "split_kv" else 0.6) * (1 + knobs.get("BLOCK_N", 32) / 256)
        r = EvalReport(solution_id, "PASSED", "cpu", [WorkloadResult(w.name, "PASSED", latency_ms=1 / score)
                                                       for w in workloads])
        r.score, r.score_name, r.baseline = score, "geomean_speedup", baseline.label
        return r

    def remeasure(self, entries, workloads, baseline):
        return [self.evaluate(src, sid, workloads, baseline) for src, sid in entries]

    def close(self):
        pass


def one(parallel: int, rounds: int, delay: float, root: Path) -> dict:
    import ksearch.store.records as R
    from ksearch.cli.app import compose_config, execute
    from ksearch.llm.base import ModelRequest
    from ksearch.store import read_records
    from tests.fake_llm_server import FakeLLMServer

    common = [f"search.max_rounds={rounds}", f"search.parallel={parallel}", "run.live=false", "eval.device=cpu"]
    offline = root / f"offline_p{parallel}"
    execute(compose_config([f"run.dir={offline}", *common]), offline, fresh=True)
    table: dict[str, list[str]] = {}
    for r in R.of_kind(read_records(offline / "journal.jsonl")[0], R.ModelCall):
        table.setdefault(ModelRequest.from_json(r.request).full_prompt(), []).append(r.value["text"])
    live = root / f"litellm_p{parallel}"
    with FakeLLMServer(by_prompt=table, delay_s=delay) as srv:
        cfg = compose_config([f"run.dir={live}", *common, "llm=litellm", "llm.model=openai/fake",
                              f"llm.api_base={srv.api_base}"])
        t0 = time.monotonic()
        out = execute(cfg, live, fresh=True)
        wall = time.monotonic() - t0
    return {"parallel": parallel, "evaluations": out.evaluations, "requests": len(srv.requests),
            "peak": srv.max_concurrent(), "wall_s": wall, "best": out.best.score if out.best else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay", type=float, default=2.0, help="seconds the fake model takes per answer")
    ap.add_argument("--eval-s", type=float, default=0.2, help="seconds per evaluation (stand-in evaluator)")
    ap.add_argument("--rounds", type=int, default=48, help="search.max_rounds")
    ap.add_argument("--parallel", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    args = ap.parse_args()

    import ksearch.eval.parent.evaluator as ev

    TimedStandIn.eval_s = args.eval_s
    ev.Evaluator = TimedStandIn          # the pool builds its evaluators from here
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")   # no network look-up at import
    import litellm  # noqa: F401       # imported once before any timing (it takes seconds)
    os.environ.setdefault("OPENAI_API_KEY", "sk-benchmark")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.parallel:
            rows.append(one(n, args.rounds, args.delay, args.keep or Path(tmp)))
    print(f"model delay {args.delay:g} s, evaluation {args.eval_s:g} s, search.max_rounds={args.rounds}")
    print(f"{'parallel':>8} {'evals':>6} {'requests':>8} {'in flight':>9} {'wall s':>8} {'speedup':>8} {'best':>7}")
    base = rows[0]["wall_s"]
    for r in rows:
        print(f"{r['parallel']:>8} {r['evaluations']:>6} {r['requests']:>8} {r['peak']:>9} {r['wall_s']:>8.1f} "
              f"{base / r['wall_s']:>7.2f}x {r['best'] or 0:>7.3f}")


if __name__ == "__main__":
    main()
