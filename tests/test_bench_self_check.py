"""`ksearch bench` checks its own repeatability: the same kernel listed twice must give the same ratios."""

from ksearch.cli.bench import self_check


def _result(name, ratios):
    return {"name": name, "rows": [{"workload": w, "vs_best": r} for w, r in ratios.items()]}


def test_the_same_source_twice_within_three_percent_passes():
    kernels = [("a", "SRC"), ("a again", "SRC"), ("other", "OTHER")]
    results = [_result("a", {"w1": 1.00, "w2": 0.50}), _result("a again", {"w1": 1.02, "w2": 0.49}),
               _result("other", {"w1": 3.0, "w2": 3.0})]
    check = self_check(kernels, results)
    assert check["within_tolerance"] and check["pairs"] == 2
    assert "within 3%" in check["message"]


def test_a_difference_beyond_three_percent_is_reported_with_the_workload():
    kernels = [("a", "SRC"), ("a again", "SRC")]
    check = self_check(kernels, [_result("a", {"w1": 1.0, "w2": 1.0}), _result("a again", {"w1": 1.0, "w2": 0.9})])
    assert not check["within_tolerance"] and "w2" in check["message"] and "NOT within" in check["message"]


def test_no_repeated_source_means_no_check():
    assert self_check([("a", "A"), ("b", "B")], [_result("a", {"w": 1.0}), _result("b", {"w": 1.0})]) is None
