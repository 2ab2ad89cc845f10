"""Issue 10 item 6: work skipped past a tile boundary fails on a laptop.

A kernel that reads only the first 128 KV tokens of each sequence (one 128-token tile and then stops)
passed every CPU workload while no CPU sequence was longer than 128 tokens. The `tiny` set now holds a
320-token sequence and a ragged batch with a 300-token one, so the CPU evaluator fails it with
INCORRECT_NUMERICAL; the honest kernel still passes the same set.
"""

from ksearch.eval.report import BaselineTimes, Status
from ksearch.task.paged import decode_workload
from tests.adversarial import kernels as k

FIRST_TILE_ONLY = k.ATTEND + '''

TILE = 128


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # Visit one 128-token tile per sequence and stop: a loop bound that forgot to advance.
    starts = kv_indptr[:-1]
    lens = (kv_indptr[1:] - kv_indptr[:-1]).clamp(max=TILE)
    ends = starts + lens
    keep = torch.cat([torch.arange(int(s), int(e)) for s, e in zip(starts.tolist(), ends.tolist())]
                     + [torch.zeros(0, dtype=torch.int64)]).to(kv_indices.device)
    indptr = torch.zeros_like(kv_indptr)
    indptr[1:] = torch.cumsum(lens, 0)
    return _attend(q, k_cache, v_cache, indptr, kv_indices[keep], sm_scale)
'''


def _baseline(workloads):
    return BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in workloads}}, "fixed 1 ms")


def test_first_tile_only_kernel_fails_on_the_cpu_tiny_set(checked, task):
    tiny = task.workload_set("tiny")
    assert max(max(w.params["kv_lens"]) for w in tiny) > 2 * 128
    r = checked.evaluate(FIRST_TILE_ONLY, "first_tile_only", tiny, _baseline(tiny))
    assert r.status == Status.INCORRECT_NUMERICAL, r.summary()
    good = checked.evaluate(k.GOOD, "good_after_first_tile", tiny, _baseline(tiny))
    assert good.status == Status.PASSED, good.summary() + good.log[-1500:]


def test_first_tile_only_kernel_passed_the_old_short_workloads(checked):
    # The CPU workloads before issue 10 (no sequence longer than 128 tokens): the cheat went unseen there,
    # which is why the tiny set changed. This keeps the test above honest: it fails for the length alone.
    old = [decode_workload("old_b1_l7", 1, 7, 16, 1 / 128 ** 0.5),
           decode_workload("old_b3_l70", 3, 70, 96, 1 / 128 ** 0.5),
           decode_workload("old_b2_l131", 2, 131, 150, 1 / 128 ** 0.5)]
    assert max(max(w.params["kv_lens"]) for w in old) <= 128
    r = checked.evaluate(FIRST_TILE_ONLY, "first_tile_only_old", old, _baseline(old))
    assert r.status == Status.PASSED, r.summary()
