"""Crash safety of a parallel run: SIGKILLs at random points of a `search.parallel=3` CPU run, each
followed by `ksearch resume`, end in one contiguous journal with no evaluation recorded twice, and in the
same run as an uninterrupted one driven by the same recording (cycles' work is matched by cycle, so the
order in which cycles finished before a kill does not matter)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from ksearch.store import read_records
from tests.fakes import journal_lines
from tests.test_parallel import check_journal, cycle_work, owner_decisions

CLI = [sys.executable, "-m", "ksearch.cli.main"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
SETTINGS = ["search.max_rounds=6", "search.parallel=3", "run.live=false"]


@pytest.mark.slow
def test_kills_then_resume_of_a_parallel_run(tmp_path):
    recording = tmp_path / "recording"
    subprocess.run(CLI + ["run", f"run.dir={recording}", *SETTINGS], env=ENV, check=True, capture_output=True,
                   timeout=900)
    straight = tmp_path / "straight"
    subprocess.run(CLI + ["run", f"run.dir={straight}", *SETTINGS, f"llm.replay={recording}"], env=ENV,
                   check=True, capture_output=True, timeout=900)

    rng = random.Random(11)
    killed = tmp_path / "killed"
    kills = 0
    first = ["run", f"run.dir={killed}", *SETTINGS, f"llm.replay={recording}"]
    while True:
        args = ["resume", str(killed)] if (killed / "journal.jsonl").exists() else first
        proc = subprocess.Popen(CLI + args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        if kills < 6:
            start, grow = journal_lines(killed), rng.randint(0, 4)
            deadline = time.time() + 120
            while time.time() < deadline and proc.poll() is None and journal_lines(killed) < start + grow:
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.05))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                kills += 1
            proc.wait()
            continue
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err.decode()[-2000:]
        break
    assert kills == 6
    recs = check_journal(killed)                   # contiguous seqs, no evaluation recorded twice
    assert owner_decisions(killed) == owner_decisions(straight)
    assert cycle_work(killed) == cycle_work(straight)
    assert len(recs) == len(read_records(straight / "journal.jsonl")[0])
    def best(run):
        return json.loads((run / "best" / "report.json").read_text())
    assert (best(killed)["solution_id"], best(killed)["score"]) == (best(straight)["solution_id"],
                                                                      best(straight)["score"])
