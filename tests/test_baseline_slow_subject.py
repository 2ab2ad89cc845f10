"""A GPU subject slower than `slow_ms` a call (the PyTorch reference of a long prefill) is timed by one call, not
in graphs and rounds; faster ones still are. The GPU calls are faked: this is the decision, not the clock."""

import pytest
import torch

from ksearch.eval.clocks import gputime
from ksearch.eval.report import Metric, TimingMethod
from ksearch.eval.trusted import baselines


class _Event:
    ms = 0.0

    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return _Event.ms


class _GraphsUsed(Exception):
    pass


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(gputime, "sync", lambda device: None)

    def no_graphs(*a, **k):
        raise _GraphsUsed
    monkeypatch.setattr(gputime, "GraphTimer", no_graphs)
    calls = []
    return calls


def test_a_call_slower_than_the_bound_is_timed_by_that_call_alone(fake_gpu):
    _Event.ms = 1800.0
    rounds, method = baselines.time_subject(lambda: fake_gpu.append(1), "cuda", 1, 1,
                                            slow_ms=baselines.REFERENCE_SLOW_MS)
    assert method == TimingMethod.eager_sync
    assert rounds[Metric.gpu_time] == [1800.0]
    assert len(rounds[Metric.call_latency]) == 1
    assert len(fake_gpu) == 2                  # the warm-up and the timed call, nothing more


@pytest.mark.parametrize("slow_ms", [None, baselines.REFERENCE_SLOW_MS])
def test_a_faster_call_or_no_bound_keeps_the_graph_clock(fake_gpu, slow_ms):
    _Event.ms = 0.5 if slow_ms else 1800.0
    with pytest.raises(_GraphsUsed):
        baselines.time_subject(lambda: None, "cuda", 1, 1, slow_ms=slow_ms)
