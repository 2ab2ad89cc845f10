"""benchmarks/decode_profile.py off the GPU: bad arguments (knob settings, shape names) and a machine without CUDA
get one line and exit 2."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import decode_profile


@pytest.mark.parametrize("argv,words", [
    ([], "usage"),
    (["xyz", "b1_l546"], "usage"),
    (["mla", "b1_l546", "{not json"], "JSON objects"),
    (["mla", "b1_l546", "[1, 2]"], "JSON objects"),
    (["mla", "b1_l546,b9_l9"], "comma list"),
    (["gqa", "full_b16_t457"], "comma list"),      # an MLA `full` workload name, not GQA's
])
def test_bad_arguments_are_one_line_and_exit_2(argv, words, capsys):
    assert decode_profile.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("decode_profile: ") and words in err[0]


def test_without_cuda_it_says_so(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert decode_profile.main(["mla", "b1_l546"]) == 2
    assert capsys.readouterr().err.strip() == "decode_profile: needs a CUDA device"


def test_the_flashinfer_setting_is_taken(capsys, monkeypatch):
    """`flashinfer` in place of a knob setting profiles the baselines: it gets past the argument checks."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert decode_profile.main(["mla", "b1_l546", "{}", "flashinfer"]) == 2
    assert capsys.readouterr().err.strip() == "decode_profile: needs a CUDA device"
