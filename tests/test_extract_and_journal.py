"""Code extraction from model text, and the journal's crash tolerance."""


import pytest

from ksearch.instantiate import CodeExtractionError, Solution, extract_python
from ksearch.store import Journal, JournalDivergence, read_records
from ksearch.store import records as R


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
    j.append(R.RunStart(task="t"))
    assert j.memo(R.ModelCall(key="k1"), lambda: {"text": "A"}).value == {"text": "A"}
    j.close()
    with path.open("a") as f:
        f.write('{"seq": 2, "kind": "mod')          # a crash mid-write
    j = Journal(path, fsync=False)
    assert len(j.recorded) == 2 and path.read_text().endswith("\n")
    j.append(R.RunStart(task="t"))
    calls = []
    assert j.memo(R.ModelCall(key="k1"), lambda: calls.append(1) or {"text": "B"}).value == {"text": "A"} and not calls
    assert not j.replaying
    assert j.memo(R.ModelCall(key="k2"), lambda: {"text": "C"}).value == {"text": "C"}
    j.close()
    assert [type(r) for r in read_records(path)[0]] == [R.RunStart, R.ModelCall, R.ModelCall]


def test_divergence_is_reported(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path, fsync=False)
    j.memo(R.ModelCall(key="k1"), lambda: {"text": "A"})
    j.close()
    j = Journal(path, fsync=False)
    with pytest.raises(JournalDivergence, match="resume with the original settings"):
        j.memo(R.ModelCall(key="other"), lambda: {"text": "B"})
