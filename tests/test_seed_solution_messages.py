"""`search.seed_solution` is never silent: its verdict is one line of the run's progress, passing or not."""

from tests.fakes import by_block
from tests.test_search import make_search


class Messages:
    """A progress sink that keeps the run's messages."""

    def __init__(self):
        self.lines: list[str] = []

    def message(self, text):
        self.lines.append(text)

    def round_started(self, *a):
        pass

    def attempt_done(self, *a):
        pass


def _seeded(tmp_path, judge):
    seed = tmp_path / "seed.py"
    seed.write_text('# ksearch-plan: {"family": "split_kv", "knobs": {"BLOCK_N": 999}}\ndef run(*a):\n    pass\n')
    s, _, journal = make_search(tmp_path, judge, max_rounds=1, seed_solution=str(seed))
    s.progress = Messages()
    s.run()
    journal.close()
    return seed, [line for line in s.progress.lines if str(seed) in line]


def test_a_passing_seed_is_reported_with_its_score(tmp_path):
    def judge(plan):
        return ("PASSED", 50.0) if plan["knobs"].get("BLOCK_N") == 999 else by_block(plan)

    seed, said = _seeded(tmp_path, judge)
    assert len(said) == 1 and said[0].startswith(f"seed solution {seed}: PASSED") and "50x" in said[0]


def test_a_failing_seed_is_a_warning_that_says_it_is_not_used(tmp_path):
    def judge(plan):
        return ("RUNTIME_ERROR", None) if plan["knobs"].get("BLOCK_N") == 999 else by_block(plan)

    seed, said = _seeded(tmp_path, judge)
    assert len(said) == 1 and said[0].startswith("warning: seed solution") and "RUNTIME_ERROR" in said[0]
    assert "not used" in said[0]
