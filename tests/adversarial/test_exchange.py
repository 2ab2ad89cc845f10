"""The shared memory of one judged call (ksearch.eval.trusted.exchange) and the judge's decision whether a captured
CUDA graph can be the clock (ksearch.eval.trusted.judge.graph_unusable, ksearch.eval.clocks.gputime.KernelCounts): the
parts that need no candidate process and no GPU."""

import math
import os
import socket

import pytest
import torch

from ksearch.eval.clocks.gputime import KernelCounts, graph_kernels
from ksearch.eval.trusted import exchange
from ksearch.eval.trusted.judge import graph_unusable

INPUTS = {"q": torch.randn(2, 3, dtype=torch.float32).to(torch.bfloat16), "idx": torch.arange(5, dtype=torch.int32),
          "empty": torch.empty(0, 4), "scale": 0.125}
ORDER = ["q", "idx", "empty", "scale"]
OUTPUTS = [torch.zeros(2, 3, dtype=torch.bfloat16), torch.zeros(2, dtype=torch.float32)]


def _mapped_through_a_socket(shared):
    a, b = socket.socketpair()
    try:
        shared.hand_over(a)
        fd = exchange.receive_fd(b)
    finally:
        a.close()
        b.close()
    try:
        return exchange.Mapped(fd, shared.layout)
    finally:
        os.close(fd)


def test_inputs_arrive_with_the_descriptor_and_outputs_start_unwritten():
    layout = exchange.plan(INPUTS, ORDER, OUTPUTS, ["out", "lse"])
    assert all(s.offset % exchange.ALIGN == 0 for s in layout.inputs + layout.outputs)
    assert dict(layout.scalars) == {"scale": 0.125} and layout.output_bytes == [12, 8]
    with exchange.SharedCall(layout, INPUTS) as shared:
        got = _mapped_through_a_socket(shared)
        q, idx, empty, scale = got.inputs
        assert torch.equal(q, INPUTS["q"]) and torch.equal(idx, INPUTS["idx"]) and empty.shape == (0, 4)
        assert scale == 0.125
        out, lse = got.outputs
        assert torch.isnan(out.float()).all() and torch.isnan(lse).all()      # NaN until the candidate writes
        assert all(torch.isnan(t.float()).all() for t in shared.take_outputs())
        out.copy_(torch.ones(2, 3))
        lse.copy_(torch.tensor([1.0, 2.0]))
        taken = shared.take_outputs()
        assert torch.equal(taken[0], torch.ones(2, 3, dtype=torch.bfloat16)) and taken[1].tolist() == [1.0, 2.0]
        out.fill_(7.0)                                  # written after the judge's copy: the copy stays
        assert torch.equal(taken[0], torch.ones(2, 3, dtype=torch.bfloat16))
        assert shared.changed_input(INPUTS) is None
        idx[3] = 99
        assert shared.changed_input(INPUTS) == "idx"
        got.close()


def test_until_handed_over_the_memory_is_in_no_other_process():
    """The descriptor is close-on-exec, and it is the judge's alone until it is sent with the request."""
    layout = exchange.plan(INPUTS, ORDER, OUTPUTS, ["out", "lse"])
    with exchange.SharedCall(layout, INPUTS) as shared:
        assert not os.get_inheritable(shared.fd)
        assert os.readlink(f"/proc/self/fd/{shared.fd}").startswith("/memfd:ksearch-exchange")


def test_the_candidate_cannot_resize_the_shared_file():
    """A shrunk file would fault the judge's own reads of its mapping (SIGBUS): its size is sealed."""
    layout = exchange.plan(INPUTS, ORDER, OUTPUTS, ["out", "lse"])
    with exchange.SharedCall(layout, INPUTS) as shared:
        a, b = socket.socketpair()
        try:
            shared.hand_over(a)
            fd = exchange.receive_fd(b)
        finally:
            a.close()
            b.close()
        try:
            for size in (0, layout.size * 2):
                with pytest.raises(PermissionError):
                    os.ftruncate(fd, size)
        finally:
            os.close(fd)
        assert all(torch.isnan(t.float()).all() for t in shared.take_outputs())


def test_a_descriptor_is_handed_over_once():
    layout = exchange.plan(INPUTS, ORDER, OUTPUTS, ["out", "lse"])
    with exchange.SharedCall(layout, INPUTS) as shared:
        _mapped_through_a_socket(shared).close()
        a, b = socket.socketpair()
        with a, b, pytest.raises(exchange.ExchangeError, match="handed over already"):
            shared.hand_over(a)


def test_a_layout_refuses_what_cannot_be_shared():
    with pytest.raises(exchange.ExchangeError, match="complex"):
        exchange.plan({"x": torch.zeros(2, dtype=torch.complex64)}, ["x"], [], [])
    with pytest.raises(exchange.ExchangeError, match="list"):
        exchange.plan({"x": [1, 2]}, ["x"], [], [])


def test_receive_fd_wants_exactly_one_descriptor():
    a, b = socket.socketpair()
    try:
        a.send(b"x")
        with pytest.raises(EOFError):
            exchange.receive_fd(b)
    finally:
        a.close()
        b.close()


# ---- does a graph hold the work? ----------------------------------------------------------------------------
def _dot(kernels: int, memsets: int = 0) -> str:
    nodes = [f'"graph_1_node_{i}"[style="bold" shape="record" label="{{KERNEL\n| {{ID | {i} | k\\<\\<\\<1,128,0\\>\\>\\>}}"];'
             for i in range(kernels)]
    nodes += [f'"graph_1_node_m{i}"[label="{{MEMSET\n| {{ID | {i}}}"];' for i in range(memsets)]
    return "digraph dot {\nsubgraph cluster_1 {\n" + "\n".join(nodes) + "\n}\n}\n"


class _Dumps:
    def __init__(self, text):
        self.text = text

    def debug_dump(self, path):
        if self.text is not None:
            with open(path, "w") as f:
                f.write(self.text)


def test_kernel_nodes_are_read_from_the_graphs_dump():
    assert graph_kernels(_Dumps(_dot(5, memsets=3))) == 5
    assert graph_kernels(_Dumps(None)) is None          # nothing dumped (a driver without it): unknown
    assert graph_kernels(_Dumps("")) is None


@pytest.mark.parametrize("counts,n,holds", [
    ((100, 50, 2), 50, True),        # a flush kernel and a call kernel per iteration
    ((400, 0, 8), 50, True),         # flushes as memsets; eight kernels per call
    ((50, 50, 1), 50, False),        # a call records nothing: work outside the graph (its own stream)
    ((53, 50, 2), 50, False),        # three calls recorded: a memo skipped the others at capture
    ((None, 50, 2), 50, True),       # unknown counts: the replay on fresh inputs decides
])
def test_kernel_counts_tell_whether_every_call_was_recorded(counts, n, holds):
    assert (KernelCounts(*counts).missing_work(n) == "") == holds


def test_the_judge_decides_from_the_capture_reply():
    assert "not capturable" in graph_unusable({"captured": False, "error": "cudaErrorStreamCaptureUnsupported"}, 10)
    assert graph_unusable({"captured": True, "kernels": {"call_graph": 20, "flush_graph": 10, "one_call": 2}}, 10) == ""
    assert "recorded no kernel" in graph_unusable(
        {"captured": True, "kernels": {"call_graph": 10, "flush_graph": 10, "one_call": 1}}, 10)
    # a reply that is not counts leaves the decision to the replay on fresh inputs
    for junk in ({"call_graph": "many"}, {"call_graph": -1, "flush_graph": 0, "one_call": 1}, "x", None):
        assert graph_unusable({"captured": True, "kernels": junk}, 10) == ""


def test_nan_marks_unwritten_elements_in_every_float_format():
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2):
        t = torch.full((4,), exchange.UNWRITTEN, dtype=torch.uint8).view(dtype)
        assert all(math.isnan(v) for v in t.float().tolist()), dtype
