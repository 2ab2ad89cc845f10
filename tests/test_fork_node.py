"""fork.node=X grows the new search from X itself, even when an ancestor of X scored higher."""

import json
from pathlib import Path

from ksearch.cli.main import main
from ksearch.store import read_records
from ksearch.store import records as R

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "rmsnorm.json"


def test_fork_expands_the_named_node_not_its_better_parent(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_TASKS_DIR", str(tmp_path / "tasks"))
    assert main(["task", "new", str(EXAMPLE), "--dir", str(tmp_path / "tasks")]) == 0
    src = tmp_path / "src"
    assert main(["run", "task=rmsnorm_h4096", f"run.dir={src}", "search.max_rounds=7", "run.live=false"]) == 0
    tree = json.loads((src / "tree.json").read_text())
    scored = {n["node_id"]: n for n in tree["nodes"] if (n.get("solution") or {}).get("score") is not None}
    x = next(n for n in scored.values() if n["parent_id"] in scored)            # a kernel whose parent has one
    # make X worse than its parent in the recorded tree, so "the best node" and "X" differ
    lines = []
    for r in read_records(src / "journal.jsonl")[0]:
        for n in r.tree.get("nodes", []) if isinstance(r, R.TreeSnapshot) else []:
            if n["node_id"] == x["node_id"] and n.get("solution"):
                n["solution"]["score"] = scored[x["parent_id"]]["solution"]["score"] / 2
        lines.append(json.dumps(r.to_json()))
    (src / "journal.jsonl").write_text("\n".join(lines) + "\n")
    fork = tmp_path / "fork"
    assert main(["run", "task=rmsnorm_h4096", f"run.dir={fork}", "search.max_rounds=1", "run.live=false",
                 f"fork.from={src}", f"fork.node={x['node_id']}"]) == 0
    path = {x["node_id"], x["parent_id"], "root"}
    new = [n for n in json.loads((fork / "tree.json").read_text())["nodes"] if n["node_id"] not in path]
    assert new and x["node_id"] in {n["parent_id"] for n in new}
    assert x["parent_id"] not in {n["parent_id"] for n in new}
