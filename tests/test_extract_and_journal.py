"""Code extraction from model text, and the journal's crash tolerance."""

import json

import pytest

from ksearch.instantiate import CodeExtractionError, Solution, extract_python
from ksearch.store import Journal, JournalDivergence


def test_extracts_the_block_that_defines_run():
    text = "Here you go:\n```python\nimport math\n```\nand\n```python\ndef run(x):\n    return x\n```\nThanks"
    assert extract_python(text).startswith("def run")


def test_rejects_hex_floats_syntax_errors_and_missing_entry():
    for bad, why in (("def run(x):\n    return 0x1.8p3\n", "hex float"), ("def run(:\n", "does not parse"),
                     ("def go():\n    pass\n", "no top-level function")):
        with pytest.raises(CodeExtractionError, match=why):
            extract_python(bad)


def test_solution_id_ignores_the_name():
    a = Solution.from_code("t", "def run():\n    pass\n", name="round 1")
    b = Solution.from_code("t", "def run():\n    pass\n", name="round 7")
    assert a.solution_id == b.solution_id
    assert Solution.from_json(a.to_json()) == a


def test_torn_last_line_is_dropped_and_replay_returns_recorded_values(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path, fsync=False)
    j.event("start", check={"task": "t"})
    assert j.memo("model", "k1", lambda: {"text": "A"}) == {"text": "A"}
    j.close()
    with path.open("a") as f:
        f.write('{"seq": 2, "kind": "mod')          # a crash mid-write
    j = Journal(path, fsync=False)
    assert len(j.recorded) == 2 and path.read_text().endswith("\n")
    j.event("start", check={"task": "t"})
    calls = []
    assert j.memo("model", "k1", lambda: calls.append(1) or {"text": "B"}) == {"text": "A"} and not calls
    assert not j.replaying
    assert j.memo("model", "k2", lambda: {"text": "C"}) == {"text": "C"}
    j.close()
    assert [json.loads(line)["kind"] for line in path.read_text().splitlines()] == ["start", "model", "model"]


def test_divergence_is_reported(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path, fsync=False)
    j.memo("model", "k1", lambda: {"text": "A"})
    j.close()
    j = Journal(path, fsync=False)
    with pytest.raises(JournalDivergence, match="resume with the original settings"):
        j.memo("model", "other", lambda: {"text": "B"})
