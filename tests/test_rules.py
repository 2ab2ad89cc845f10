"""The evaluator's correctness rule (FlashInfer-Bench's: fail only where abs > atol AND rel > rtol)."""

import torch

from ksearch.eval.trusted.rules import check_outputs, normalize_outputs


def _check(x, y, **kw):
    return check_outputs([x], [y], ["out"], atol=1e-2, rtol=1e-2, **kw)


def test_passes_within_abs_or_rel():
    y = torch.tensor([0.001, 100.0, -5.0])
    x = torch.tensor([0.009, 100.5, -5.0])      # first: abs 0.008 ok; second: rel 0.005 ok
    assert _check(x, y).passed


def test_one_wrong_element_fails_and_is_located():
    y = torch.randn(64, 32)
    x = y.clone()
    x[17, 5] += 1.0
    r = _check(x, y)
    assert r.status == "INCORRECT_NUMERICAL" and "(17, 5)" in r.message
    assert r.matched_ratio == 1 - 1 / (64 * 32)


def test_matched_ratio_threshold_allows_a_few_misses():
    y = torch.randn(1000)
    x = y.clone()
    x[:30] += 5
    assert _check(x, y, required_matched_ratio=0.95).passed
    assert not _check(x, y, required_matched_ratio=0.98).passed


def test_shape_dtype_and_nonfinite():
    y = torch.zeros(4, 4, dtype=torch.bfloat16)
    assert _check(torch.zeros(4, 5, dtype=torch.bfloat16), y).status == "INCORRECT_SHAPE"
    assert _check(torch.zeros(4, 4, dtype=torch.float32), y).status == "INCORRECT_DTYPE"
    x = torch.zeros(4, 4, dtype=torch.bfloat16)
    x[0, 0] = float("nan")
    assert _check(x, y).status == "INCORRECT_NUMERICAL"


def test_matching_minus_inf_is_right():
    y = torch.tensor([float("-inf"), 1.0])
    assert _check(torch.tensor([float("-inf"), 1.0]), y).passed
    assert not _check(torch.tensor([0.0, 1.0]), y).passed


def test_normalize_outputs_accepts_tuple_dict_and_single():
    a, b = torch.zeros(1), torch.ones(1)
    assert normalize_outputs((a, b), ["o", "l"])[1] is b
    assert normalize_outputs({"l": b, "o": a}, ["o", "l"])[0] is a
    assert normalize_outputs(a, ["o"])[0] is a
