"""What a newcomer reads after `ksearch run`, checked where the user sees it:
the CLI in a subprocess.

- One best number: the tree, the families table, the summary, the report, the TUI and `export` give the
  score of what best/ holds, and best/manifest.json says what that is (one node's kernel, or a shape
  dispatch over named nodes and their regions).
- Short ids: the progress log names nodes as `show` does, and every short id `show` prints works for
  `show --node` and `fork.node=`, even where a full id looks like another node's short id.
- Baselines: every table shows the baseline's time and its spread, `compare` says when two runs'
  baselines differ, and the CPU baseline is timed in rounds long and many enough to mean something.
- Files: a run directory's files get the permissions the umask gives, so a team can read a shared run.

One real search (5 one-round cycles, about 20 s) is shared by the module; hand-written journals cover
what a short run may not produce (a dispatch best, a re-measured best, differing baselines).
"""

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ksearch.store import load_history
from ksearch.store.atomic import atomic_write
from ksearch.store.best_manifest import BestKind, BestManifest, manifest_from_history, read_manifest
from ksearch.store.short_ids import ShortIds

ROOT = Path(__file__).resolve().parent.parent
_ROUND = re.compile(r"^\[round (\d+)/(\d+)\] (\S+): (.*) \(attempt \d+, \w+\)$")
_TREE_ID = re.compile(r"(?:^|[─━] )(n\d+) ")


def cli(capsys, *args: str) -> str:
    """`ksearch ARGS` in this process (quicker), for the checks beside each test's subprocess one."""
    from ksearch.cli.main import main

    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


def ksearch(*args: str, umask: int | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`ksearch ARGS` as a user runs it, output piped."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "ksearch", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout, preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """(run directory, what `ksearch run` printed): 5 rounds of one attempt each, so the log reaches depth-2
    nodes, whose full ids (`n3_fam_grouped_heads_0`) start like another node's short id; umask 022."""
    run = tmp_path_factory.mktemp("newcomer") / "run"
    p = ksearch("run", f"run.dir={run}", "search.max_rounds=5", "search.max_rounds_per_cycle=1", "run.live=false",
                umask=0o022)
    assert p.returncode == 0, p.stdout + p.stderr
    return run, p.stdout


def _tree_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("node  step"))
    end = next(i for i, line in enumerate(lines) if line.startswith("vs base:"))
    return lines[start + 1:end]


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(\d+(?:\.\d+)?(?:e-?\d+)?)x", text)]


# ---- item 2: short ids ------------------------------------------------------------------------------------
def test_the_log_names_nodes_by_the_short_ids_show_prints(searched):
    run, log = searched
    h = load_history(run)
    ids = ShortIds.from_history(h)
    logged = [_ROUND.match(line) for line in log.splitlines() if line.startswith("[round ")]
    assert len(logged) == 5, log                                       # "[round r/5]" is printed, not eaten
    by_round = {e.round: e.node_id for e in h.evaluations if e.node_id != "dispatch"}
    for m in logged:
        assert m is not None
        assert m.group(3) == ids.short(by_round[int(m.group(1))])      # the id `show` prints for that node
    deep = [full for full in by_round.values() if re.match(r"n\d+_", full)]
    assert deep, "the run should reach a node whose full id starts like a short id"
    assert not any(full in log for full in deep)                       # full ids never reach the log


def test_every_short_id_show_prints_works_for_show_node(searched, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    run, _ = searched
    out = cli(capsys, "show", str(run), "--width", "200")
    shown = [m.group(1) for line in _tree_lines(out) if (m := _TREE_ID.search(line))]
    ids = ShortIds.from_history(load_history(run))
    wm = load_history(run).world_model()
    assert len(shown) == len(wm.nodes())
    # the nodes whose full id starts with another node's short id, and one family
    tricky = [s for s in shown if re.match(r"n\d+_", ids.by_short[s])] + [ids.short(wm.children("root")[0].node_id)]
    for i, short in enumerate(tricky):
        args = ("show", str(run), "--node", short, "--width", "200")
        text = ksearch(*args).stdout if i == 0 else cli(capsys, *args)
        node = wm.node(ids.by_short[short])
        assert f"node {short}: {node.step}" in text
        assert re.search(rf"full id\s+{re.escape(node.node_id)}", text)


def test_a_short_id_is_looked_up_before_a_full_id_that_looks_like_one(tmp_path, capsys):
    run = _synthetic_run(tmp_path / "ids", full_ids=("n2", "n1"))    # node "n2" is n1, node "n1" is n2
    out = ksearch("show", str(run), "--node", "n1", "--width", "120").stdout
    assert "node n1: choice a" in out and re.search(r"full id\s+n2\b", out)
    out = cli(capsys, "show", str(run), "--node", "n2", "--width", "120")
    assert "node n2: choice b" in out and re.search(r"full id\s+n1\b", out)


def test_fork_node_takes_the_short_ids_show_prints(searched, tmp_path):
    run, _ = searched
    ids = ShortIds.from_history(load_history(run))
    short = next(s for s, full in ids.by_short.items() if re.match(r"n\d+_", full)
                 and load_history(run).world_model().node(full).is_closed)
    fork = tmp_path / "fork"
    p = ksearch("run", f"fork.from={run}", f"fork.node={short}", f"run.dir={fork}", "search.max_rounds=1",
                "run.live=false")
    assert p.returncode == 0, p.stdout + p.stderr
    assert load_history(fork).forked_from["node"] == ids.by_short[short]
    p = ksearch("run", f"fork.from={run}", "fork.node=n999", f"run.dir={tmp_path / 'bad'}")
    assert p.returncode == 2 and "fork.node=n999 is not a node" in p.stderr and "n0, n1" in p.stderr
    assert "Traceback" not in p.stdout + p.stderr


# ---- item 1: one best number ------------------------------------------------------------------------------
def test_best_dir_says_what_it_is_and_every_view_agrees(searched, tmp_path, capsys):
    run, log = searched
    manifest = read_manifest(run / "best")
    assert manifest is not None and manifest == manifest_from_history(load_history(run))
    assert (run / "best" / manifest.file).is_file()
    assert json.loads((run / "best" / "solution.json").read_text())["sources"]
    ids = ShortIds.from_history(load_history(run))
    for m in manifest.members:                                         # named as `show` names them
        assert ids.short(m.node_id) == m.short_id
    score = f"{manifest.score:.4g}x"
    show = ksearch("show", str(run), "--width", "250").stdout
    assert f"best {score}: {manifest.describe()}" in " ".join(show.split())
    best_row = next(line for line in show.splitlines() if "* best:" in line)
    assert score in best_row                                           # the families table's best row
    tree = _tree_lines(show)
    for short in manifest.short_ids:
        line = next(line for line in tree if _TREE_ID.search(line).group(1) == short)
        if manifest.kind is BestKind.KERNEL:
            assert " best " in line and f"{manifest.score:.3g}x" in line
        else:
            assert f"{short} + " in line
    assert not any(" best " in line for line in tree) or manifest.kind is BestKind.KERNEL
    assert f"best: {score}" in log and manifest.describe() in " ".join(log.split())
    cli(capsys, "report", str(run), "--out", str(tmp_path / "rep"))
    report = (tmp_path / "rep" / "report.md").read_text()
    k = load_history(run).evaluation_number(manifest.solution_id, manifest.round)
    assert f"**{score}**" in report and manifest.describe().replace("|", "\\|") in report
    assert f"round {manifest.round}, evaluation {k} of {len(load_history(run).evaluations)}" in report
    p = ksearch("export", str(run), "--out", str(tmp_path / "fib"))
    assert p.returncode == 0 and manifest.describe() in " ".join(p.stdout.split())
    doc = json.loads(next((tmp_path / "fib" / "solutions").glob(f"*{manifest.solution_id}.json")).read_text())
    assert manifest.describe() in doc["description"] and score in doc["description"]


def test_a_dispatch_best_is_not_shown_as_one_nodes_kernel(tmp_path, capsys):
    run = _synthetic_run(tmp_path / "d", dispatch=True)
    out = ksearch("show", str(run), "--width", "120").stdout
    tree = _tree_lines(out)
    assert not any(" best " in line for line in tree)                   # no node's row claims the best
    assert sum("+ choice" in line for line in tree) == 2                # both member nodes are marked
    flat = " ".join(out.split())
    assert "best 1.5x: shape dispatch over 2 kernels of n1, n2 (n1: small and the fallback; n2: large)" in flat
    assert "* best: shape dispatch of n1 + n2 │ 1.5x" in flat
    assert "round 4, evaluation 3 of 3" in flat
    node = cli(capsys, "show", str(run), "--node", "n2", "--width", "120")
    assert "best/ is a shape dispatch (1.5x); this node's kernel sb serves large" in " ".join(node.split())
    assert "sb (attached, in best/)" in node
    cli(capsys, "report", str(run), "--out", str(tmp_path / "rep"))
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "Best: **1.5x**" in report and "shape dispatch over 2 kernels of n1, n2" in report
    assert "- `n2` choice b: solution `sb` (found in round 4); serves large" in report


def test_the_best_row_shows_the_best_score_not_the_nodes_first_measurement(tmp_path):
    run = _synthetic_run(tmp_path / "r", remeasured=1.7)               # b: 1.8x at first, 1.7x re-measured
    out = ksearch("show", str(run), "--width", "120").stdout
    best_line = next(line for line in _tree_lines(out) if " best " in line)
    assert "n2 * choice b" in best_line
    assert "1.7x" in best_line and "1.8x" not in best_line
    flat = " ".join(out.split())
    assert "best 1.7x: kernel of n2 (choice b)" in flat and "* best: kernel of n2 │ 1.7x" in flat


def test_the_tui_marks_and_jumps_to_what_best_holds(tmp_path):
    from tests.test_tui import drive

    run = _synthetic_run(tmp_path / "d", dispatch=True)

    async def script(app, pilot):
        assert app.best is not None and app.best.kind is BestKind.DISPATCH
        labels = {n: str(app._tree_nodes[n].label) for n in ("a", "b")}
        assert all(re.match(r"n\d+ \+ ", label) and "choice" in label and " best" not in label
                   for label in labels.values()), labels
        await pilot.press("b")
        await pilot.pause()
        first = app.selected_id
        await pilot.press("b")
        await pilot.pause()
        assert {first, app.selected_id} == {"a", "b"}                  # b walks the dispatch's nodes
        status = str(app.query_one("#status").content)
        assert "best 1.5x: shape dispatch over 2 kernels of n1, n2" in " ".join(status.split())

    drive(run, script)


# ---- item 3: baselines with their spread ------------------------------------------------------------------
def test_show_node_report_and_compare_show_the_baseline_and_its_spread(searched, tmp_path, capsys):
    run, _ = searched
    h = load_history(run)
    base, spread = h.baseline.best(), h.baseline.best_spread()
    w, ms = next(iter(base.items()))
    cell = f"{ms:.4g} ±{100 * spread[w]:.1f}%"
    family = ShortIds.from_history(h).short(h.world_model().children("root")[0].node_id)
    node = ksearch("show", str(run), "--node", family, "--width", "250").stdout
    row = next(line for line in node.splitlines() if line.startswith("│ " + w))
    assert cell in row
    cli(capsys, "report", str(run), "--out", str(tmp_path / "rep"))
    assert f"| {w} | PASSED | {cell} |" in (tmp_path / "rep" / "report.md").read_text()
    comp = cli(capsys, "compare", str(run))
    assert "baseline ms" in comp and "±" in comp


def test_compare_says_when_two_runs_baselines_differ(tmp_path, capsys):
    quick = _synthetic_run(tmp_path / "quick", baseline_ms=1.0)
    slow = _synthetic_run(tmp_path / "slow", baseline_ms=2.9)
    same = _synthetic_run(tmp_path / "same", baseline_ms=1.02)
    out = " ".join(ksearch("compare", str(quick), str(slow)).stdout.split())
    assert "the baselines of" in out and "(1 vs 2.9 ms, beyond their spread)" in out
    assert f"ksearch bench task=toy_task --run {quick} --run {slow}" in out
    assert "the baselines of" not in cli(capsys, "compare", str(quick), str(same))


def test_cpu_baselines_are_timed_in_enough_long_rounds_within_a_budget(monkeypatch):
    import random

    from ksearch.eval.trusted import baselines as B

    calls: list[float] = []

    def steady() -> None:                                  # about 0.2 ms a call
        calls.append(time.perf_counter())
        time.sleep(0.0002)

    rounds = B.time_subject(steady, "cpu", 2, 3)[0]["call_latency"]
    assert len(rounds) >= B.CPU_MIN_ROUNDS
    round_ms = (calls[-1] - calls[2]) * 1e3 / len(rounds)  # after the two warm-up calls
    assert round_ms >= B.CPU_ROUND_MS * 0.5                # a round spans many calls, not five
    rng = random.Random(0)

    def never_settles() -> None:                           # 1 or 4 ms at random: rounds keep disagreeing
        time.sleep(rng.choice((0.001, 0.004)))

    monkeypatch.setattr(B, "CPU_BUDGET_S", 0.3)
    monkeypatch.setattr(B, "CPU_MAX_ROUNDS", 10_000)       # far beyond the budget: only the budget can stop it
    t0 = time.perf_counter()
    rounds = B.time_subject(never_settles, "cpu", 2, 3)[0]["call_latency"]
    assert B.CPU_MIN_ROUNDS <= len(rounds) < B.CPU_MAX_ROUNDS        # stopped by the time budget
    assert time.perf_counter() - t0 < 0.3 + 0.5


# ---- item 9: permissions ----------------------------------------------------------------------------------
def test_run_files_get_the_permissions_the_umask_gives(searched):
    run, _ = searched
    files = [run / "config.yaml", run / "tree.json", run / "journal.jsonl", *(run / "best").iterdir(),
             *(run / "solutions").iterdir()]
    modes = {str(p.relative_to(run)): stat.S_IMODE(p.stat().st_mode) for p in files}
    assert set(modes.values()) == {0o644}, modes


def test_atomic_write_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        path = atomic_write(tmp_path / "a" / "f.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.read_text() == "x"
    assert [p.name for p in path.parent.iterdir()] == ["f.txt"]          # no temporary file left behind


# ---- hand-written runs --------------------------------------------------------------------------------------
def _synthetic_run(path: Path, *, dispatch: bool = False, remeasured: float | None = None,
                   baseline_ms: float = 1.0, full_ids: tuple[str, str] = ("a", "b")) -> Path:
    """root -> a (1.2x, region small) and b (1.8x, region large); the best is b, b re-measured
    (`remeasured`), or a shape dispatch over a and b (1.5x, composed after round 4)."""
    from ksearch.world_model import Action, AttachedSolution, Node

    a, b = full_ids
    path.mkdir(parents=True)
    (path / "solutions").mkdir()
    for sid in ("sa", "sb", "sd"):
        (path / "solutions" / f"{sid}.py").write_text(f"def run():\n    return '{sid}'\n")
        (path / "solutions" / f"{sid}.json").write_text(json.dumps(
            {"name": sid, "definition": "toy_task", "author": "t", "spec": {"language": "triton"},
             "sources": [{"path": "main.py", "content": f"def run():\n    return '{sid}'\n"}]}))
    (path / "config.yaml").write_text("task:\n  name: toy_task\nsearch:\n  policy: learned\nrun:\n  seed: 0\n")

    def node(node_id, parent, score=None, sid=None):
        act = Action(title=f"do {node_id}", expected_speedup=1.1) if parent else None
        sol = AttachedSolution(sid, None, 1, "PASSED", score, 1.0 / score) if score else None
        return Node(node_id, parent, decision="step", choice=f"choice {'a' if node_id == a else 'b'}"
                    if parent else None, action=act, solution=sol).to_json()

    def evaluation(seq, rnd, node_id, sid, score):
        speed = {"small": {"w_small": score}, "large": {"w_large": score}}
        return {"seq": seq, "kind": "evaluation", "t": 1000.0 + seq, "key": f"{sid}@{rnd}", "round": rnd,
                "node_id": node_id, "attempt": 1 if node_id != "dispatch" else 0, "solution_id": sid,
                "value": {"solution_id": sid, "status": "PASSED", "device": "cpu", "elapsed_s": 1.0,
                          "score": score, "score_name": "geomean_speedup", "baseline": "PyTorch reference (CPU)",
                          "workloads": [{"workload": w, "status": "PASSED", "latency_ms": baseline_ms / score,
                                         "spread": 0.05} for w in ("w_small", "w_large")],
                          "speedups": {**speed["small"], **speed["large"]}}}

    tree = {"kernel_summary": "toy", "open_questions": [], "active_leaf_id": b,
            "nodes": [node("root", None), node(a, "root", 1.2, "sa"), node(b, "root", 1.8, "sb")]}
    base = {"device": "cpu", "variants": {"reference": {"w_small": baseline_ms, "w_large": baseline_ms}},
            "label": "PyTorch reference (CPU)", "spread": {"reference": {"w_small": 0.05, "w_large": 0.05}}}
    recs = [
        {"seq": 0, "kind": "run_start", "t": 1000.0, "task": "toy_task", "workload_set": "tiny", "device": "cpu",
         "model": "offline"},
        {"seq": 1, "kind": "baseline", "t": 1000.5, "key": "cpu:tiny:0", "value": base},
        {"seq": 2, "kind": "tree", "t": 1001.0, "round": 1, "tree": tree},
        evaluation(3, 1, a, "sa", 1.2),
        {"seq": 4, "kind": "best", "t": 1004.0, "solution_id": "sa", "score": 1.2, "node_id": a, "round": 1},
        evaluation(5, 4, b, "sb", 1.8),
        {"seq": 6, "kind": "best", "t": 1006.0, "solution_id": "sb", "score": remeasured or 1.8, "node_id": b,
         "round": 4},
    ]
    if dispatch:
        recs += [evaluation(7, 4, "dispatch", "sd", 1.5),
                 {"seq": 8, "kind": "dispatch", "t": 1008.0, "composed": True, "solution_id": "sd", "accepted": True,
                  "members": ["sa", "sb"], "fallback": "sa", "member_nodes": {"sa": a, "sb": b},
                  "table": {"0": "sa", "1": "sb"}, "score": 1.5, "verdict": "tie",
                  "regions": [{"region": "small", "best_score": 1.2, "solution_id": "sa", "workloads": ["w_small"]},
                              {"region": "large", "best_score": 1.8, "solution_id": "sb", "workloads": ["w_large"]}]},
                 {"seq": 9, "kind": "best", "t": 1009.0, "solution_id": "sd", "score": 1.5, "node_id": a, "round": 4}]
    recs.append({"seq": 10, "kind": "run_end", "t": 1010.0, "stop": "round budget used"})
    (path / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    best_sid = "sd" if dispatch else "sb"
    (path / "best").mkdir()
    (path / "best" / "solution.py").write_text((path / "solutions" / f"{best_sid}.py").read_text())
    (path / "best" / "solution.json").write_text((path / "solutions" / f"{best_sid}.json").read_text())
    return path


def test_the_manifest_reads_back_what_it_wrote(tmp_path):
    run = _synthetic_run(tmp_path / "d", dispatch=True)
    m = manifest_from_history(load_history(run))
    assert m is not None and m.kind is BestKind.DISPATCH and [x.short_id for x in m.members] == ["n1", "n2"]
    assert BestManifest.from_json(json.loads(json.dumps(m.to_json()))) == m
