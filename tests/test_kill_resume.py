"""The crash-safety check of the product: twenty SIGKILLs at random points of a CPU run, each followed by
`ksearch resume`, end in the same run as an uninterrupted one driven by the same recording."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ksearch.store import read_records
from ksearch.store import records as R
from ksearch.world_model import WorldModel
from tests.fakes import journal_lines

CLI = [sys.executable, "-m", "ksearch.cli.main"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def _decisions(run: Path) -> list[tuple]:
    """What the run decided, without timestamps: the sequence of records and what identifies them."""
    out = []
    for r in read_records(run / "journal.jsonl")[0]:
        ident = {k: getattr(r, k, None) for k in ("kind", "key", "node_id", "solution_id", "purpose", "ok", "round",
                                                  "stop")}
        out.append(json.dumps(ident, sort_keys=True))
    return out


KILLS = 10          # each kill lands at a random point; ten keep the suite inside CI's budget


@pytest.mark.slow
def test_ten_kills_then_resume_match_an_uninterrupted_replay(tmp_path):
    rounds = "search.max_rounds=6"
    recording = tmp_path / "recording"
    subprocess.run(CLI + ["run", f"run.dir={recording}", rounds, "run.live=false"], env=ENV, check=True,
                   capture_output=True, timeout=600)
    straight = tmp_path / "straight"
    subprocess.run(CLI + ["run", f"run.dir={straight}", rounds, "run.live=false", f"llm.replay={recording}"],
                   env=ENV, check=True, capture_output=True, timeout=600)
    total = journal_lines(straight)

    rng = random.Random(7)
    killed = tmp_path / "killed"
    kills = 0
    first = ["run", f"run.dir={killed}", rounds, "run.live=false", f"llm.replay={recording}"]
    while True:
        args = ["resume", str(killed)] if (killed / "journal.jsonl").exists() else first
        proc = subprocess.Popen(CLI + args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        if kills < KILLS:
            # kill once the journal has grown by a random few records (or at a random moment of start-up)
            start, grow = journal_lines(killed), rng.randint(0, 3)
            deadline = time.time() + 120
            while time.time() < deadline and proc.poll() is None and journal_lines(killed) < start + grow:
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.05))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                kills += 1
            proc.wait()
            continue
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-2000:]
        break
    assert kills == KILLS
    assert _decisions(killed) == _decisions(straight) and journal_lines(killed) == total
    recs = read_records(killed / "journal.jsonl")[0]
    evals = [r.key for r in R.of_kind(recs, R.Evaluation)]
    models = [r.seq for r in R.of_kind(recs, R.ModelCall)]
    assert len(evals) == len(set(evals)) and len(models) == len(set(models))
    assert [r.seq for r in recs] == list(range(len(recs)))
    tree = WorldModel.from_json(json.loads((killed / "tree.json").read_text()))
    for node in tree.nodes():                      # consistent: every parent exists, every kernel is stored
        assert node.parent_id is None or node.parent_id in tree
        if node.solution:
            assert (killed / "solutions" / f"{node.solution.solution_id}.json").is_file()
    def best(run):
        return json.loads((run / "best" / "report.json").read_text())
    assert best(killed)["solution_id"] == best(straight)["solution_id"]
    assert best(killed)["score"] == best(straight)["score"]
