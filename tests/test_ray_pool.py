"""eval.pool=ray on this machine's CPU: a local Ray cluster, one actor per slot, each with an Evaluator.

Slow (a Ray cluster starts and real kernels run under the Triton interpreter) but part of the default
test run: the README's test command covers Ray on a local cluster.
"""

import os

import pytest
import ray  # a dev dependency: the README's test command covers the Ray pool

from ksearch.store import read_records
from ksearch.store import records as R


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:       # a zombie waiting for its parent to reap it is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_parallel_search_on_a_local_ray_cluster_finishes_and_leaves_nothing_running(tmp_path, monkeypatch):
    """`ksearch run search.parallel=2 eval.pool=ray` (the CLI's own composition and execution, in this process so
    the pool can be watched): it finishes, and no actor or evaluator outlives it. One Ray cluster start per test
    run is the cost: the CLI's argument handling is covered with the local pool elsewhere."""
    import ksearch.eval.parent.pool as pool_mod
    from ksearch.cli.app import compose_config, execute

    pools = []
    real = pool_mod.build_pool

    def spy(*a, **kw):
        p = real(*a, **kw)
        pools.append(p)
        return p

    monkeypatch.setattr(pool_mod, "build_pool", spy)
    run_dir = tmp_path / "run"
    cfg = compose_config([f"run.dir={run_dir}", "run.live=false", "search.max_rounds=3", "search.parallel=2",
                          "eval.pool=ray", "eval.device=cpu"])
    out = execute(cfg, run_dir, fresh=True)
    assert out.best is not None
    (p,) = pools
    assert isinstance(p, pool_mod.RayPool) and len(p.devices) == 2
    assert not ray.is_initialized()                      # the cluster this run started is shut down
    assert p.pids and not [pid for pid in p.pids if _alive(pid)], "an actor or evaluator worker outlived the run"
    recs = read_records(run_dir / "journal.jsonl")[0]
    assert [r.seq for r in recs] == list(range(len(recs)))
    evaluations = R.of_kind(recs, R.Evaluation)
    rounds = [r for r in evaluations if r.cycle is not None]
    final = [r for r in evaluations if r.cycle is None]
    assert len(rounds) == 3                              # one per round
    assert len(final) <= 1 and all(r.node_id == "dispatch" for r in final)   # then the shape-dispatched best
    assert out.evaluations == len(evaluations)
    assert len({r.cycle for r in rounds}) >= 2
