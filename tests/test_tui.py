"""`ksearch tui`: Textual's harness (App.run_test with a Pilot) drives the app on a real recorded run.

It opens the run, selects nodes, shows a kernel and its diff, filters by status and family, jumps to the
best node, follows a run whose journal is still being written, and never writes to the run directory.
"""

import asyncio
import io
import shutil
from pathlib import Path

from rich.console import Console
from textual.widgets import Static, TabbedContent, Tree

from ksearch.cli.main import main
from ksearch.store import load_history, read_records
from ksearch.store import records as R
from ksearch.viz.tui import RunBrowser


def pane_text(app: RunBrowser, name: str) -> str:
    console = Console(file=io.StringIO(), width=200)
    console.print(app.query_one(f"#pane-{name}", Static).content)
    return console.file.getvalue()


def drive(run_dir: Path, script, size=(160, 48), poll_s: float = 0.1):
    """Run `script(app, pilot)` inside the app under Textual's test harness."""
    async def go():
        app = RunBrowser(run_dir, poll_s=poll_s)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await script(app, pilot)
    asyncio.run(go())


def snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(run_dir.rglob("*"))}


def test_opens_a_run_selects_a_node_shows_kernel_and_diff_and_jumps_to_best(real_run):
    h = load_history(real_run)
    wm = h.world_model()
    before = snapshot(real_run)

    async def script(app, pilot):
        assert set(app._tree_nodes) == {n.node_id for n in wm.nodes()}     # every node drawn
        assert app.selected_id == "root"
        await pilot.press("down")                                          # a family
        await pilot.pause()
        chosen = app.selected_id
        assert chosen != "root" and wm.node(chosen).parent_id == "root"
        assert f"node {app.ids.short(chosen)}: " in pane_text(app, "plan")
        await pilot.press("b")
        await pilot.pause()
        assert app.selected_id == app.best.members[0].node_id         # the best kernel's (first) node
        best = wm.node(app.selected_id)
        kernel = pane_text(app, "kernel")
        assert best.solution.solution_id in kernel and "def run(" in kernel
        await pilot.press("d")
        await pilot.pause()
        assert app.query_one(TabbedContent).active == "tab-diff"
        diff = pane_text(app, "diff")
        if best.solution.parent_solution_id:                                # a step: a diff of two kernels
            assert f"diff against the parent's kernel {best.solution.parent_solution_id}" in diff
            assert "@@" in diff
        else:                                                                # a family: nothing to diff
            assert "no parent kernel" in diff
        attempts = pane_text(app, "attempts")
        assert "attempts (" in attempts and "tiny_" in attempts and "PASSED" in attempts

    drive(real_run, script)
    assert snapshot(real_run) == before                                      # it only reads


def test_diff_of_a_step_against_its_parent(toy_run):
    async def script(app, pilot):
        tree = app.query_one(Tree)
        app._move_to(app._tree_nodes["b"])
        await pilot.pause()
        assert app.selected_id == "b" and tree.cursor_node.data == "b"
        diff = pane_text(app, "diff")
        assert "-    return 1" in diff and "+    return 2" in diff

    drive(toy_run, script)


def test_filters_by_status_and_family(toy_run):
    async def script(app, pilot):
        assert set(app._tree_nodes) == {"root", "a", "b", "c", "d"}
        await pilot.press("s")                                               # open
        await pilot.pause()
        assert app.status_filter == "open" and set(app._tree_nodes) == {"root", "a", "d"}   # a: d's ancestor
        await pilot.press("s", "s")                                          # closed, then failed
        await pilot.pause()
        assert app.status_filter == "failed" and set(app._tree_nodes) == {"root", "c"}
        await pilot.press("c")
        await pilot.pause()
        assert set(app._tree_nodes) == {"root", "a", "b", "c", "d"}
        await pilot.press("f")                                               # the first family: a
        await pilot.pause()
        assert app.family_filter == "a" and set(app._tree_nodes) == {"root", "a", "b", "d"}
        await pilot.press("f")
        await pilot.pause()
        assert app.family_filter == "c" and set(app._tree_nodes) == {"root", "c"}
        await pilot.press("b")                                               # best is under a: filters go
        await pilot.pause()
        assert app.selected_id == "b" and app.family_filter is None
        assert "filter" in str(app.query_one("#status", Static).content)

    drive(toy_run, script)


def _tree_records(journal: Path) -> list[int]:
    return [i for i, r in enumerate(read_records(journal)[0]) if isinstance(r, R.TreeSnapshot)]


def test_follows_a_run_that_is_still_being_written(real_run, tmp_path):
    """The journal arrives in two halves: new nodes appear in place, selection and expansion are kept."""
    live = tmp_path / "live"
    shutil.copytree(real_run, live)
    journal = live / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    first_tree = _tree_records(journal)[0]
    journal.write_text("".join(lines[:first_tree + 1]))                   # the families only
    full = load_history(real_run).world_model()
    first = load_history(live).world_model()
    assert len(first.nodes()) < len(full.nodes())

    async def script(app, pilot):
        assert set(app._tree_nodes) == {n.node_id for n in first.nodes()}
        await pilot.press("down")
        await pilot.pause()
        chosen = app.selected_id
        kept = app._tree_nodes[chosen]
        reloads = app.reloads
        with journal.open("a") as f:                                      # the run goes on
            f.write("".join(lines[first_tree + 1:]))
        for _ in range(50):
            await pilot.pause(0.1)
            if app.reloads > reloads:
                break
        assert app.reloads == reloads + 1
        assert set(app._tree_nodes) == {n.node_id for n in full.nodes()}   # the new nodes are there
        assert app.selected_id == chosen and app._tree_nodes[chosen] is kept    # updated in place
        await pilot.pause(0.5)
        assert app.reloads == reloads + 1                                  # no re-read while nothing changes
        assert "run ended" in str(app.query_one("#status", Static).content)

    before = snapshot(live)
    drive(live, script)
    after = snapshot(live)
    assert after.pop("journal.jsonl")[0] == len("".join(lines).encode())   # only the test wrote to it
    before.pop("journal.jsonl")
    assert after == before


def test_tui_of_a_non_run_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    import sys

    for stream in (sys.stdin, sys.stdout):          # as in a terminal: the run is what is wrong here
        monkeypatch.setattr(stream, "isatty", lambda: True)
    assert main(["tui", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_a_journal_damaged_while_the_tui_is_open_ends_it_with_the_reason(real_run, tmp_path):
    live = tmp_path / "live"
    shutil.copytree(real_run, live)
    journal = live / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    apps = []

    async def script(app, pilot):
        apps.append(app)
        assert app.failure is None and app._tree_nodes
        lines[3] = lines[3][:30] + "\n"                                   # damage in the middle
        journal.write_text("".join(lines) + lines[-1])                   # and the file grew: it is re-read
        for _ in range(50):
            await pilot.pause(0.1)
            if app.failure:
                break

    drive(live, script)
    assert apps[0].failure and "is not a journal record" in apps[0].failure
    assert apps[0].return_code == 2
