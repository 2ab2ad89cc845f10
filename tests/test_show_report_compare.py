"""Looking at runs: the typed history reader, `show` (tree, filters, one node), `report` and `compare`.

One real CPU run (4 rounds, conftest's real_run, built once per session) checks the commands end to end; small hand-written
journals check what a real run rarely produces: a torn last line, record kinds this version does not
know, model costs, failed cycles, and the predicted-vs-measured arithmetic.
"""

import json
import re
from pathlib import Path

import pytest

from ksearch.cli.main import main
from ksearch.store import NotARunError, load_history
from ksearch.store import records as R
from ksearch.viz.speedups import prediction_points
from ksearch.world_model import Action, Node
from tests.fakes import node_json, write_synthetic_run


# ---- the history reader -------------------------------------------------------------------------------------
def test_history_reads_a_real_run(real_run):
    h = load_history(real_run)
    best_json = json.loads((real_run / "best" / "report.json").read_text())
    dispatched = sum(1 for e in h.evaluations if e.node_id == "dispatch")   # the final shape dispatch, if any
    assert len(h.evaluations) == 4 + dispatched and dispatched <= 1 and h.rounds == 4 and h.ended
    assert h.best.score == pytest.approx(best_json["score"]) and h.best.node_id == best_json["node_id"]
    by_round = h.best_by_round()
    curve = [b for _, b in by_round]
    assert curve[-1] == pytest.approx(h.best.score)
    # Each round's value is the score of the last best recorded by then. Not necessarily rising: a best replaced
    # on a paired re-measure, or by a shape dispatch that ties within noise, keeps its own (re-measured) score,
    # which on a busy CPU can sit below the score first recorded for the kernel it replaced (CI, session 22).
    bests = sorted(h.bests, key=lambda b: (b.round, b.seq))
    for r, value in by_round:
        last = [b.score for b in bests if b.round <= r]
        assert value == (last[-1] if last else None), (r, value, last)
    assert h.usage.requests > 0 and h.usage.by_model == {"offline": h.usage.requests}
    assert h.eval_s > 0 and h.wall_s >= h.eval_s * 0.5
    assert h.task == "gqa_paged_decode_h32_kv4_d128_ps1" and h.device == "cpu" and h.policy
    assert h.world_model() is not None and not h.torn_tail


def test_history_tolerates_a_torn_tail_unknown_kinds_and_new_fields(toy_run):
    h = load_history(toy_run)
    assert h.torn_tail and h.stop_reason == "round budget used"
    assert h.unknown_kinds == ["mystery_kind"] and len(h.of(R.Remeasure)) == 1
    assert h.forked_from == {"from": "/runs/src", "node": "n3"}
    assert h.config_changes()[0].changed == {"search.max_rounds": [12, 9]}
    assert h.best_report().solution_id == "sb" and h.best_report().speedups == {"w1": 1.8}
    assert [e.solution_id for e in h.evaluations] == ["sa", "sc", "sb"]
    assert h.usage.cost_usd == pytest.approx(0.5) and h.usage.total_tokens == 240 and h.usage.requests == 2
    assert h.best_by_round() == [(1, 1.2), (2, 1.2), (3, 1.2), (4, 1.8)]
    assert h.rounds == 4 and h.eval_s == pytest.approx(6.0) and h.wall_s == pytest.approx(40.0)
    assert h.reached(1.5).round == 4 and h.reached(1.2).round == 1 and h.reached(2.0) is None
    assert (h.model, h.policy, h.seed, h.task) == ("openai/x", "greedy", 3, "toy_task")


def test_best_report_is_the_measurement_the_best_was_chosen_on(toy_run):
    h = load_history(toy_run)
    assert h.best_report().speedups == {"w1": 1.8}          # no re-measurement: the evaluation itself
    h.records[:] = [r for r in h.records if not isinstance(r, R.Remeasure)] + [R.Remeasure(round=4, value={"reports": [
        {"solution_id": "sa", "status": "PASSED", "device": "cpu", "score": 1.1, "elapsed_s": 1.0},
        {"solution_id": "sb", "status": "PASSED", "device": "cpu", "score": 1.8, "elapsed_s": 1.0,
         "speedups": {"w1": 1.79}}]})]
    assert h.best_report().speedups == {"w1": 1.79} and h.eval_s == pytest.approx(7.0)   # one job


def test_history_of_an_unfinished_run(tmp_path):
    h = load_history(write_synthetic_run(tmp_path / "r", ended=False, torn=False))
    assert not h.ended and h.stop_reason is None and not h.torn_tail


def test_not_a_run_says_what_to_pass(tmp_path):
    with pytest.raises(NotARunError, match="does not exist"):
        load_history(tmp_path / "missing")
    with pytest.raises(NotARunError, match="not a run directory"):
        load_history(tmp_path)
    write_synthetic_run(tmp_path / "inner")
    with pytest.raises(NotARunError, match="inner"):
        load_history(tmp_path)          # points at the run inside
    (tmp_path / "sweep.json").write_text("{}")
    with pytest.raises(NotARunError, match="is a sweep"):
        load_history(tmp_path)


def test_predicted_vs_measured_is_against_the_parent(toy_run):
    points = {p.node_id: p for p in prediction_points(load_history(toy_run).world_model())}
    assert set(points) == {"a", "b"}                  # c has no solution, d is open
    assert points["a"].predicted == 1.5 and points["a"].measured == pytest.approx(1.2)   # parent = baseline
    assert points["b"].predicted == 2.0 and points["b"].measured == pytest.approx(1.8 / 1.2)
    assert points["b"].family == "choice a" and points["b"].depth == 2


def test_predictions_look_through_split_nodes_and_prefer_the_frozen_one():
    from types import SimpleNamespace

    from ksearch.world_model import WorldModel
    from ksearch.world_model.facts import families, predicted_speedup

    tree = {"nodes": [node_json("root", None), Node("s", "root", decision="split").to_json(),
                      node_json("a", "s", 1.5, 1.2, "sa"), node_json("b", "a", 2.0, 1.8, "sb")]}
    wm = WorldModel.from_json(tree)
    points = {p.node_id: p for p in prediction_points(wm)}
    assert points["a"].measured == pytest.approx(1.2) and points["a"].parent_score == 1.0
    assert points["b"].family == "choice a" and [f.node_id for f in families(wm)] == ["a"]
    node = SimpleNamespace(solution=SimpleNamespace(predicted_speedup=1.1), action=Action("t", expected_speedup=3.0))
    assert predicted_speedup(node) == 1.1           # frozen at closing time; later edits do not count
    node.solution.predicted_speedup = None
    assert predicted_speedup(node) == 3.0


# ---- show ----------------------------------------------------------------------------------------------------
def test_show_draws_the_tree_and_a_summary(real_run, capsys):
    assert main(["show", str(real_run)]) == 0
    out = capsys.readouterr().out
    assert "root" in out and "families" in out and "* " in out and " best " in out
    flat = " ".join(out.split())            # the summary line may wrap at 100 columns
    n = 4 + sum(1 for e in load_history(real_run).evaluations if e.node_id == "dispatch")   # + a final dispatch
    assert f"{n} evaluations in 4 rounds" in flat and "finished: round budget used" in flat


def test_show_node_has_plan_kernel_diff_and_measurements(toy_run, capsys):
    assert main(["show", str(toy_run), "--node", "b"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"full id\s+b\b", out)
    for needle in ("node n2: choice b", "path", "n0 > n1 > n2", "do b", "predicted 2x, measured 1.5x", "model's notes",
                   "the model thinks b is good", "attached kernel sb", "return 2",
                   "diff against the parent's kernel sa",
                   "-    return 1", "+    return 2", "w1", "PASSED", "1.8x"):
        assert needle in out, needle


def test_show_node_of_a_failed_node_shows_errors(toy_run, capsys):
    assert main(["show", str(toy_run), "--node", "c"]) == 0
    out = capsys.readouterr().out
    assert "RUNTIME_ERROR" in out and "boom" in out and "failed" in out and "retired" in out


def test_show_node_on_a_real_run(real_run, capsys):
    best = load_history(real_run).best
    assert main(["show", str(real_run), "--node", best.node_id]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"full id\s+{re.escape(best.node_id)}", out) and "attached kernel" in out and "tiny_" in out
    assert "def run(" in out and ("diff against" in out or "parent is the root" in out)


def test_show_filters_by_status_and_depth(toy_run, capsys):
    assert main(["show", str(toy_run), "--status", "failed"]) == 0
    out = capsys.readouterr().out.split("vs base:")[0]          # the tree (the summary names the best's step)
    assert "choice c" in out and "choice b" not in out and "choice a" not in out
    assert main(["show", str(toy_run), "--status", "open,closed", "--depth", "1"]) == 0
    out = capsys.readouterr().out.split("vs base:")[0]
    assert "choice a" in out and "choice b" not in out and "choice c" not in out


def test_show_live_returns_once_the_run_has_ended(toy_run, capsys):
    assert main(["show", str(toy_run), "--live"]) == 0


@pytest.mark.parametrize("args,needle", [
    (["--node", "zzz"], "no node 'zzz'"),
    (["--status", "sleeping"], "node statuses are"),
])
def test_show_errors_say_what_to_do(toy_run, capsys, args, needle):
    assert main(["show", str(toy_run), *args]) == 2
    assert needle in capsys.readouterr().err


def test_show_of_a_non_run(tmp_path, capsys):
    assert main(["show", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


# ---- report ----------------------------------------------------------------------------------------------------
def _assert_png(path: Path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_of_a_real_run(real_run, capsys):
    assert main(["report", str(real_run)]) == 0
    out_dir = real_run / "report"
    md = (out_dir / "report.md").read_text()
    for section in ("# ksearch run report", "## Result", "## Best kernel per workload", "## Predicted vs measured",
                    "## How the search went", "## Cost and time", "stopped: round budget used"):
        assert section in md, section
    for name in ("best_by_round.png", "predicted_vs_measured.png", "workload_speedups.png"):
        _assert_png(out_dir / name)
        assert f"]({name})" in md        # linked by relative name: the folder is self-contained
    assert "report written to" in capsys.readouterr().out


def test_report_of_a_hand_written_run(toy_run, tmp_path):
    assert main(["report", str(toy_run), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| `n2` | choice b | choice a | 2 | 2x | 1.5x | 0.75 |" in md       # short id, step, family
    assert "$0.5000" in md and "240 (200 prompt, 40 completion)" in md
    assert "`n3` do c: last status RUNTIME_ERROR; retired" in md
    assert "1 world-model edit scripts were rejected" in md and "bad \\| op" in md
    assert "1 model replies held no usable code" in md
    assert "does not interpret: mystery_kind" in md and "forked from `/runs/src` at node `n3`" in md
    assert "1 passing kernels were not taken as the new best" in md and "1 near-ties were re-measured" in md and "Settings changed on resume (at record 3): search.max_rounds." in md
    assert "40.0s" in md and "6.0s (15% of the wall clock)" in md


# ---- compare -------------------------------------------------------------------------------------------------
def test_compare_table_and_json(real_run, toy_run, capsys):
    assert main(["compare", str(real_run), str(toy_run)]) == 0
    out = capsys.readouterr().out
    assert "real" in out and "toy" in out and "greedy" in out and "$0.5000" in out and "target score" in out
    assert main(["compare", str(real_run), str(toy_run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    real_best = load_history(real_run).best.score
    assert data["target"] == pytest.approx(min(real_best, 1.8))
    rows = {Path(r["run"]).name: r for r in data["runs"]}
    assert rows["toy"]["cost_usd"] == pytest.approx(0.5) and rows["toy"]["seed"] == 3
    assert rows["real"]["rounds_to_target"] is not None and rows["toy"]["time_to_target_s"] is not None


def test_compare_with_a_target_no_run_reached(toy_run, capsys):
    assert main(["compare", str(toy_run), "--target", "1.5", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["runs"][0]
    assert row["rounds_to_target"] == 4 and row["time_to_target_s"] == pytest.approx(30.5)
    assert main(["compare", str(toy_run), "--target", "99", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["runs"][0]
    assert row["rounds_to_target"] is None and row["time_to_target_s"] is None


def test_compare_expands_a_folder_of_runs(tmp_path, capsys):
    write_synthetic_run(tmp_path / "a")
    write_synthetic_run(tmp_path / "b", ended=False)
    assert main(["compare", str(tmp_path), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [Path(r["run"]).name for r in runs] == ["a", "b"] and runs[1]["status"] == "not finished"
    assert main(["compare", str(tmp_path / "nothing")]) == 2


# ---- plots -----------------------------------------------------------------------------------------------------
def _captured_figures(monkeypatch):
    from ksearch.viz import plots

    figures, make = [], plots._figure

    def record(*args, **kwargs):
        figures.append(make(*args, **kwargs))
        return figures[-1]

    monkeypatch.setattr(plots, "_figure", record)
    return figures


def test_cpu_scores_are_not_flattened_by_the_baseline_line(toy_run, tmp_path, monkeypatch):
    """On a CPU every score is ~0.005x; the 1.0x baseline line must not stretch the axis to 1.0."""
    from ksearch.viz import plots

    figures = _captured_figures(monkeypatch)
    cpu = {"w1": 0.0021, "w2": 0.0079, "w3": 0.004}
    assert plots.plot_workload_speedups(cpu, tmp_path / "w.png", "cpu") is not None
    h = load_history(toy_run)
    for e in h.evaluations:
        if e.report.score is not None:
            e.report.score = e.report.score / 250          # 1.2 -> 0.0048, 1.8 -> 0.0072
    for b in h.bests:
        b.score /= 250
    assert plots.plot_best_by_round(h, tmp_path / "b.png") is not None
    for fig, values in zip(figures, (cpu.values(), [0.0048, 0.0072])):
        ax = fig.axes[0]
        lo, hi = ax.get_ylim()
        assert lo <= min(values) and max(values) <= hi < 0.02, (lo, hi)     # fitted to the data, not to 1.0
        assert hi / lo < 10                                 # the values spread over the plot, not one flat line
        assert any("above the plot" in t.get_text() for t in ax.get_legend().get_texts())


def test_scores_around_the_baseline_keep_a_linear_axis_with_the_line(tmp_path, monkeypatch):
    from ksearch.viz import plots

    figures = _captured_figures(monkeypatch)
    plots.plot_workload_speedups({"w1": 0.9, "w2": 1.4}, tmp_path / "w.png", "gpu")
    ax = figures[0].axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0.0 and ax.get_ylim()[1] >= 1.4
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["baseline (1.0x)"]
