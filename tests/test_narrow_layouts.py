"""Layouts at 80 and 120 columns, read as text, no screenshots: names a user types
are never cut, TUI labels keep status and score, cut kernel lines are marked, and the
predicted-vs-measured plot keeps its legend whole and its labels apart.
"""

import asyncio
import io
import itertools
import re

import pytest
from rich.console import Console
from rich.text import Text
from textual.widgets import Tree

from ksearch.cli.main import main
from ksearch.store import load_history
from ksearch.store.best_manifest import manifest_from_history
from ksearch.store.short_ids import ShortIds
from ksearch.viz.compare import CompareRow, compare_table
from ksearch.viz.fit_table import Column, fit_table
from ksearch.viz.node_rows import node_rows, speedup
from ksearch.viz.tui import RunBrowser

WIDTHS = (80, 120)


def _render(renderable, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, soft_wrap=True)      # as ksearch.cli.main.console
    console.print(renderable)
    return console.file.getvalue().splitlines()


def _words(lines: list[str]) -> set[str]:
    return set(" ".join(lines).replace("│", " ").replace("┃", " ").split())


# ---- tables of names --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", WIDTHS)
def test_tasks_table_keeps_every_name_whole(width, capsys, monkeypatch):
    from ksearch.cli import main as cli
    from ksearch.task import list_tasks

    monkeypatch.setattr(cli, "console", Console(width=width, soft_wrap=True))
    assert main(["tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= width
    assert set(list_tasks()) <= _words(lines)


def _row(run: str, task: str, model: str, best: float | None) -> CompareRow:
    return CompareRow(run=run, task=task, model=model, policy="learned", seed=0, best_score=best, rounds=12,
                      evaluations=13, cost_usd=0.0123, tokens=1000, wall_s=95.0, status="round budget used",
                      time_to_target_s=40.0 if best else None, rounds_to_target=7 if best else None)


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_keeps_runs_tasks_and_models_readable(width):
    rows = [_row("sweeps/20261204-101010/arm_0", "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1",
                 "openai/gpt-5.2", 0.91),
            _row("sweeps/20261204-101010/arm_1", "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048",
                 "anthropic/claude-sonnet-4-5", 1.37),
            _row("sweeps/20261204-101010/arm_2", "gqa_paged_decode_h32_kv4_d128_ps1", "offline", None)]
    lines = _render(compare_table(rows, 0.91, width), width)
    assert max(map(len, lines)) <= width
    words = _words(lines)
    for r in rows:
        assert {r.run, r.task, r.model} <= words, (r, "\n".join(lines))
    assert "1.37x" in words and "0.91x" in words


def test_a_table_that_fits_stays_a_table_with_whole_names():
    columns = [Column("task", whole=True), Column("notes")]
    rows = [[Text("a_long_task_name_that_must_stay_whole"), Text("free text " * 6)]]
    lines = _render(fit_table(columns, rows, 80), 80)
    assert lines[0].startswith("┏") and max(map(len, lines)) <= 80
    assert any("a_long_task_name_that_must_stay_whole" in line for line in lines)


# ---- the TUI's tree labels -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", WIDTHS)
def test_tui_labels_keep_status_and_score_at_the_terminal_width(real_run, width):
    history = load_history(real_run)
    wm = history.world_model()
    seen: list[str] = []

    async def go():
        app = RunBrowser(real_run, poll_s=5.0)
        async with app.run_test(size=(width, 40)) as pilot:
            await pilot.pause()
            tree = app.query_one(Tree)
            for y in range(tree.size.height):
                seen.append(tree.render_line(y).text)

    asyncio.run(go())
    ids = ShortIds.from_history(history)
    rows = node_rows(wm, ids, manifest_from_history(history, ids))     # what best/ holds, as the TUI reads it
    ids = {row.short: row for row in rows.values()}
    checked = 0
    for line in seen:
        m = re.search(r"\b(n\d+) ", line)
        if not m or m.group(1) not in ids:
            continue
        row = ids[m.group(1)]
        status = "best" if row.is_best else row.status
        assert f" {status}" in line, (line, row)
        if row.score is not None:
            assert speedup(row.score) in line, (line, row)
        checked += 1
    assert checked == len(wm.nodes())


# ---- show --node: cut kernel lines are marked ----------------------------------------------------------------------
def test_show_node_marks_kernel_lines_cut_at_the_width(real_run, capsys, monkeypatch):
    from ksearch.viz.node_view import shown_evaluation

    history = load_history(real_run)
    wm = history.world_model()
    node = next(n.node_id for n in wm.nodes() if n.solution and n.solution.score is not None)
    source = history.solution_source(shown_evaluation(history, wm.node(node)).solution_id)   # the kernel shown
    long_lines = [line for line in source.splitlines() if len(line) > 60]
    assert long_lines                                                   # the real kernel has some
    monkeypatch.delenv("COLUMNS", raising=False)
    for width in WIDTHS:
        assert main(["show", str(real_run), "--node", node, "--width", str(width)]) == 0
        out = capsys.readouterr().out.splitlines()
        code = [line for line in out if re.match(r"│\s+\d+ ", line)]     # kernel lines in its panel
        assert code and max(map(len, out)) <= width
        cut = [line for line in code if line.rstrip(" │").endswith("…")]
        wide = [line for line in source.splitlines() if len(line) > width - 4 - len(str(len(source.splitlines()))) - 3]
        assert len(cut) >= len(wide) > 0, (width, len(cut), len(wide))
        assert any("cut at the width, marked …" in line for line in out) and "--width N" in "\n".join(out)


# ---- predicted_vs_measured.png -----------------------------------------------------------------------------------
def test_predicted_vs_measured_keeps_legends_whole_and_labels_apart(tmp_path, monkeypatch):
    from ksearch.viz import plots
    from ksearch.viz.speedups import PredictionPoint

    figures, make = [], plots._figure
    monkeypatch.setattr(plots, "_figure", lambda *a, **k: figures.append(make(*a, **k)) or figures[-1])
    families = ["One-launch split-KV with the combine fused in (no per-call scratch allocation)",
                "Flash-decoding with split-KV and a combine kernel",
                "One program per (sequence, kv head), single pass"]
    # 16 nodes crowded around 1x, as a real search's refinements are
    offsets = itertools.cycle([(0.0, 0.0), (0.02, 0.01), (-0.01, 0.02), (0.03, -0.02), (0.01, 0.04), (-0.03, -0.01)])
    points = [PredictionPoint(f"n{i + 1}", families[i % 3], 2, 1.0 + dx + i * 0.004, 1.0 + dy - i * 0.003, 1.0, 1.0)
              for i, (dx, dy) in zip(range(16), offsets)]
    assert plots.plot_predictions(points, tmp_path / "p.png", "predicted vs measured") is not None
    fig = figures[0]
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0]
    texts = [t.get_text().replace("\n", " ") for t in legend.get_texts()]
    assert set(families) <= set(texts)                                   # every family name whole
    whole = fig.bbox
    box = legend.get_window_extent(renderer)
    assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0 and box.y1 <= whole.y1
    ax = fig.axes[0]
    labels = [a for a in ax.texts]
    boxes = [a.get_window_extent(renderer) for a in labels]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b)
    inside = ax.get_window_extent(renderer)
    assert all(inside.x0 <= b.x0 and b.x1 <= inside.x1 and inside.y0 <= b.y0 and b.y1 <= inside.y1 for b in boxes)
    left_out = len(points) - len(labels)
    assert left_out == 0 or f"{left_out} crowded label" in ax.get_xlabel()
    assert len(labels) >= len(points) // 2                               # most points keep their label
