"""benchmarks/prefill_sweep.py in its --dry mode (CPU, Triton interpreter, tiny shapes): every variant is
checked, timed or recorded as failed without stopping the sweep, the JSON and the table carry causal TFLOP/s
and % of the bf16 peak, a resumed sweep keeps what was measured, and bad arguments exit 2."""

from ksearch.eval.interpreter import prepare_interpreter

prepare_interpreter()

import importlib.util
import json
import sys

import pytest

from ksearch import PROJECT_ROOT
from ksearch.task import load_task
from ksearch.task.catalog import load_catalog


@pytest.fixture(scope="module")
def sweep_module():
    spec = importlib.util.spec_from_file_location("prefill_sweep", PROJECT_ROOT / "benchmarks" / "prefill_sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module              # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_dry_sweep_records_failures_and_goes_on(sweep_module, tmp_path, monkeypatch, capsys):
    # A knob value the catalog does not list fails at render time; the next variants still run.
    monkeypatch.setattr(sweep_module, "HOPPER_GRID", [{"BLOCK_M": 48}, {"BLOCK_M": 128, "VALUE_SPLIT": 2, "BLOCK_N": 32}])
    monkeypatch.setattr(sweep_module, "OTHER_VARIANTS", [("persistent_tc_tile", {})])
    assert sweep_module.main([str(tmp_path), "--dry"]) == 0
    doc = json.loads((tmp_path / "prefill_sweep.json").read_text())
    status = {v["label"]: v["status"] for v in doc["variants"]}
    assert status == {"hopper_latent_tiles[BLOCK_M=48]": "failed",
                      "hopper_latent_tiles[BLOCK_M=128,BLOCK_N=32,VALUE_SPLIT=2]": "ok",
                      "persistent_tc_tile[defaults]": "ok"}
    failed = doc["variants"][0]
    assert "BLOCK_M=48" in failed["error"] and failed["results"] == {}
    for v in doc["variants"][1:]:
        assert v["check"]["passed"]
        assert set(v["results"]) == {s.name for s in sweep_module.DRY_SHAPES}
        for name, row in v["results"].items():
            flops = doc["shapes"][name]["flops_causal"]
            assert row["tflops"] == pytest.approx(flops / (row["ms"] * 1e-3) / 1e12)
            assert row["pct_bf16_peak"] == pytest.approx(100 * row["tflops"] / 790.0)
            assert row["vs_flashinfer"] is None                         # no FlashInfer in dry mode
    # Causal FLOPs of the chunked dry shape by hand: 5 queries over 70 keys see 66..70 keys each.
    assert doc["shapes"]["dry_chunk_q5_kv70"]["flops_causal"] == (66 + 67 + 68 + 69 + 70) * 16 * (2 * 576 + 2 * 512)
    out = capsys.readouterr().out
    assert "hopper_latent_tiles[BLOCK_M=48]" in out and "failed" in out and "% bf16" in out


def test_resumed_sweep_keeps_what_was_measured(sweep_module, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_module, "HOPPER_GRID", [{"BLOCK_M": 48}])
    monkeypatch.setattr(sweep_module, "OTHER_VARIANTS", [("persistent_tc_tile", {})])
    first = sweep_module.Sweep(tmp_path, True, 60.0, 60.0, None, log=lambda m: None)
    doc = first.run()
    again = sweep_module.Sweep(tmp_path, True, 60.0, 60.0, None, log=lambda m: None)
    again.resume_from(doc)
    calls = []
    monkeypatch.setattr(again, "run_variant", lambda v, inputs: calls.append(v.label))
    redo = again.run()
    assert calls == [] and [v["status"] for v in redo["variants"]] == [v["status"] for v in doc["variants"]]


@pytest.mark.parametrize("args", [["--budget-s", "0"], ["--variants", "0"]])
def test_bad_arguments_exit_2(sweep_module, tmp_path, args, capsys):
    assert sweep_module.main([str(tmp_path), "--dry", *args]) == 2
    assert "prefill_sweep:" in capsys.readouterr().err


def test_every_gpu_variant_is_a_catalog_setting(sweep_module):
    """A typo in the GPU grid would cost a variant on the scarce GPU call: each one must render."""
    from ksearch.task import load_task
    from ksearch.task.catalog import load_catalog

    task = load_task(sweep_module.TASK)
    catalog = load_catalog(task.strategies_dir, task.name)
    variants = sweep_module.variants(False, None)
    assert 20 <= len(variants) <= 40 and len({v.label for v in variants}) == len(variants)
    for v in variants:
        assert "def run(" in catalog.render(v.family, v.knobs)
    shapes = {s.name: s for s in sweep_module.GPU_SHAPES}
    assert {max(s.q_lens) for s in shapes.values()} >= {3000, 6000, 12000, 16384, 1024, 33}
    assert any(sum(s.kv_lens) > 8 * sum(s.q_lens) for s in shapes.values()), "a chunked prefill"


def test_source_files_come_first_under_their_names(sweep_module, tmp_path, monkeypatch):
    # A solution file is checked like a catalog variant: here one that returns zeros (caught by the check;
    # its parameters are positional-only, as a CUDA extension's are: the check must call it the judge's
    # way) and the task's CUDA family rendered to a file, which cannot run on this CPU (recorded, the sweep
    # goes on). --cuda adds the CUDA family's own settings after the files, also recorded as not runnable.
    monkeypatch.setattr(sweep_module, "HOPPER_GRID", [{"BLOCK_M": 48}])
    monkeypatch.setattr(sweep_module, "OTHER_VARIANTS", [("persistent_tc_tile", {})])
    zeros = tmp_path / "zeros.py"
    zeros.write_text("import torch\n\n\ndef run(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices,"
                     " sm_scale, /):\n    return torch.zeros_like(q_nope), torch.zeros(q_nope.shape[:2])\n")
    task = load_task(sweep_module.TASK)
    cuda_file = tmp_path / "hopper_wgmma_prefill.cu"
    cuda_file.write_text(load_catalog(task.strategies_dir, task.name).render(sweep_module.CUDA_FAMILY, {}))
    out = tmp_path / "out"
    assert sweep_module.main([str(out), "--dry", "--cuda", "--source", str(zeros), "--source", str(cuda_file)]) == 0
    doc = json.loads((out / "prefill_sweep.json").read_text())
    labels = [v["label"] for v in doc["variants"]]
    assert labels[:3] == ["file:zeros.py", "file:hopper_wgmma_prefill.cu", "hopper_wgmma_prefill[defaults]"]
    status = {v["label"]: (v["status"], v["error"] or "") for v in doc["variants"]}
    assert status["file:zeros.py"][0] == "failed" and "wrong result" in status["file:zeros.py"][1]
    assert status["file:hopper_wgmma_prefill.cu"][0] == "failed" and "CUDA" in status["file:hopper_wgmma_prefill.cu"][1]
    cuda_labels = [x for x in labels if x.startswith("hopper_wgmma_prefill[")]
    assert len(cuda_labels) == 1 + len(load_catalog(task.strategies_dir, task.name).family("hopper_wgmma_prefill").tactics)
    assert all(status[x][0] == "failed" and "CUDA" in status[x][1] for x in cuda_labels)
    assert status["persistent_tc_tile[defaults]"][0] == "ok"


def test_a_missing_source_file_exits_2(sweep_module, tmp_path, capsys):
    assert sweep_module.main([str(tmp_path), "--dry", "--source", str(tmp_path / "nope.cu")]) == 2
    assert "no such solution file" in capsys.readouterr().err
