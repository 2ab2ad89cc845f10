"""`ksearch show` at a glance: one line per node at 100 columns, short stable ids, folded subtrees."""

import re
import shutil

import networkx as nx

from ksearch.cli.main import main
from ksearch.store import load_history, read_records
from ksearch.store import records as R
from ksearch.store.best_manifest import BestKind, manifest_from_history
from ksearch.store.short_ids import ShortIds
from ksearch.viz.tree_view import render_tree
from ksearch.world_model.facts import families
from tests.fakes import write_synthetic_run

_ID = re.compile(r"(?:^|[─━] )(n\d+) ")




def _tree_lines(out: str) -> list[str]:
    """The tree part of `show`'s output: from the column header to the legend."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("node  step"))
    end = next(i for i, line in enumerate(lines) if line.startswith("vs base:"))
    return lines[start + 1:end]


def test_show_at_100_columns_is_one_line_per_node(real_run, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["show", str(real_run), "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    wm = load_history(real_run).world_model()
    ids = ShortIds.from_history(load_history(real_run))
    tree = _tree_lines(out)
    shown = [m.group(1) for line in tree if (m := _ID.search(line))]
    assert len(tree) == len(wm.nodes()) == len(shown)                  # every node, each on exactly one line
    assert sorted(shown) == sorted(ids.short(n.node_id) for n in wm.nodes())
    best = manifest_from_history(load_history(real_run))
    for short in best.short_ids:          # the best kernel's node (*), or each node of a shape dispatch (+)
        line = next(line for line in tree if _ID.search(line).group(1) == short)
        assert (" best " in line and "* " in line) if best.kind is BestKind.KERNEL else ("+ " in line)
    # the families table names each family's best node by its short id, never cut
    table = out[out.index("families"):]
    for fam in families(wm):
        scored = [wm.node(n) for n in nx.descendants(wm.graph, fam.node_id) | {fam.node_id}
                  if wm.node(n).solution and wm.node(n).solution.score is not None]
        if scored:
            top = max(scored, key=lambda n: n.solution.score)
            assert re.search(rf"│\s+{ids.short(top.node_id)}\s+│", table), ids.short(top.node_id)


def test_piped_show_defaults_to_100_columns_and_width_overrides(real_run, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["show", str(real_run)]) == 0                           # capsys: not a terminal
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) == 100
    assert main(["show", str(real_run), "--width", "72"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) == 72
    assert len(_tree_lines(out)) == len(load_history(real_run).world_model().nodes())
    monkeypatch.setenv("COLUMNS", "130")
    assert main(["show", str(real_run)]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) == 130
    assert main(["show", str(real_run), "--width", "20"]) == 2
    assert "at least 60 columns" in capsys.readouterr().err


def test_short_ids_are_stable_as_the_journal_grows_and_accepted_by_node(real_run, tmp_path, capsys):
    full = ShortIds.from_history(load_history(real_run))
    journal = (real_run / "journal.jsonl").read_text().splitlines(keepends=True)
    trees = [i for i, r in enumerate(read_records(real_run / "journal.jsonl")[0]) if isinstance(r, R.TreeSnapshot)]
    part = tmp_path / "part"
    shutil.copytree(real_run, part)
    (part / "journal.jsonl").write_text("".join(journal[:trees[1] + 1]))   # the run as it was mid-way
    early = ShortIds.from_history(load_history(part))
    assert early.by_full and all(full.by_full[k] == v for k, v in early.by_full.items())
    assert len(early.by_full) < len(full.by_full)
    best = load_history(real_run).best.node_id
    assert main(["show", str(real_run), "--node", full.short(best)]) == 0
    out = capsys.readouterr().out
    assert f"node {full.short(best)}: " in out and re.search(rf"full id\s+{re.escape(best)}", out)
    assert "attached kernel" in out
    assert main(["show", str(real_run), "--node", best]) == 0           # the full id still works
    assert main(["show", str(real_run), "--node", "n999"]) == 2
    assert "short id (n12) or a full id" in capsys.readouterr().err


def test_a_family_has_no_vs_parent_and_a_step_is_against_its_parent(tmp_path, capsys):
    run = write_synthetic_run(tmp_path / "toy")
    assert main(["show", str(run), "--width", "100"]) == 0
    rows = {_ID.search(line).group(1): line for line in _tree_lines(capsys.readouterr().out)}
    ids = ShortIds.from_history(load_history(run))
    a, b = rows[ids.short("a")], rows[ids.short("b")]
    # a (a family): 1.2x against the baseline, no parent kernel; its prediction (1.5x) is against the baseline
    assert re.search(r"1\.2x\s+-\s+1\.5->1\.2x$", a), a
    # b: 1.8x; 1.5x against a's kernel; predicted 2x over a's kernel, measured 1.5x
    assert re.search(r"1\.8x\s+1\.5x\s+2->1\.5x$", b), b
    assert main(["show", str(run), "--node", "a"]) == 0
    assert "vs baseline" in capsys.readouterr().out


def test_long_trees_fold_off_the_best_path_with_counts():
    from ksearch.world_model import Action, AttachedSolution, Node, WorldModel

    nodes = [Node("root", None).to_json()]
    for f in range(3):                       # three families, each a chain of 12 steps with 2 open leaves
        parent = "root"
        for d in range(12):
            nid = f"f{f}_{d}"
            sol = AttachedSolution(f"s{nid}", None, d, "PASSED", 1.0 + f + d / 10)
            nodes.append(Node(nid, parent, choice=f"step {nid}", action=Action(f"do {nid}"), solution=sol).to_json())
            for k in range(2):
                nodes.append(Node(f"{nid}_o{k}", nid, choice="an open idea", action=Action(f"idea {nid} {k}")).to_json())
            parent = nid
    wm = WorldModel.from_json({"nodes": nodes})
    best = "f2_11"
    text = render_tree(wm, best=best, width=100, max_rows=50).plain.splitlines()
    assert len(text) - 1 <= 50 and max(len(line) for line in text) <= 100
    folds = [line for line in text if "… " in line and " more (" in line]
    assert folds and all("--node n" in line for line in folds)
    assert any("closed" in line and "open" in line for line in folds)
    ids = ShortIds.from_world_model(wm)
    drawn = "\n".join(text)
    for node in wm.path(best):               # the best path is never folded
        assert re.search(rf"(^|\s){ids.short(node.node_id)} ", drawn, flags=re.M), node.node_id
    # every node is either drawn or counted in a fold line
    counted = sum(int(re.search(r"… (\d+) more", line).group(1)) for line in folds)
    assert len(text) - 1 - len(folds) + counted == len(wm.nodes())
    assert len(render_tree(wm, best=best, width=100).plain.splitlines()) - 1 == len(wm.nodes())
