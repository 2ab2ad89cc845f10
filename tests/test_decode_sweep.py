"""benchmarks/decode_sweep.py --dry: the GPU sweep's whole path (grid, checks, clocks, table, JSON) on tiny
shapes under the Triton interpreter, the reference standing in for FlashInfer; a broken variant is
recorded, not fatal; bad arguments get one line and exit code 2."""

import json
import sys

import pytest

from ksearch import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "benchmarks"))
import decode_sweep


def test_dry_sweep_records_every_variant_and_shape(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("def run(*args):\n    raise RuntimeError('broken on purpose')\n")
    out = tmp_path / "out"
    # Two check processes: the pool the GPU run compiles in, here with interpreter workers.
    rc = decode_sweep.main([str(out), "--dry", "--tasks", "gqa", "--max-variants", "1", "--jobs", "2",
                            "--extra", f"{decode_sweep.GQA}={broken}"])
    assert rc == 0
    doc = json.loads((out / "decode_sweep.json").read_text())
    res = doc["tasks"][decode_sweep.GQA]
    names = [v["name"] for v in res["variants"]]
    assert names == ["token_chunks", "extra:broken.py"]
    checks = {v["name"]: v["check"] for v in res["variants"]}
    assert checks["token_chunks"]["status"] == "ok"
    assert checks["extra:broken.py"]["status"] == "failed" and "broken on purpose" in checks["extra:broken.py"]["message"]
    shapes = [s["name"] for s in res["shapes"]]
    assert shapes == [name for name, _ in decode_sweep.DRY_SHAPES]
    rows = {(r["variant"], r["shape"]): r for r in res["rows"]}
    assert len(rows) == 2 * len(shapes)
    for shape in shapes:
        good, bad = rows[("token_chunks", shape)], rows[("extra:broken.py", shape)]
        assert good["status"] == "ok" and good["eager_us"] > 0 and good["eager_vs_fi"] > 0
        assert good["max_abs_diff_vs_fi"] is not None and good["max_abs_diff_vs_fi"] < 0.05
        assert bad["status"] == "failed"
        assert res["baselines"][shape]["best_eager_us"] > 0
    assert [s["variant"] for s in res["summary"]][0] == "token_chunks"
    text = (out / "decode_sweep.txt").read_text()
    assert "token_chunks" in text and "mix5_l50" in text and "failed" in text


def test_full_grid_uses_catalog_values_and_fits_one_device_call():
    from ksearch.task import load_task
    from ksearch.task.catalog import load_catalog

    for task in decode_sweep.TASKS:
        t = load_task(task)
        cat = load_catalog(t.strategies_dir, task)
        vs = decode_sweep.variants_of(task, [], None)
        assert 12 <= sum(v.family == decode_sweep.FAMILY for v in vs) <= 24     # both tasks: ~140 s on an H100
        assert len({v.name for v in vs}) == len(vs)
        for v in vs:
            cat.render(v.family, v.knobs)          # every knob value is one the catalog lists
        assert {v.family for v in vs} == {f.name for f in cat.families}


def test_shapes_picks_the_timing_shapes(tmp_path):
    out = tmp_path / "out"
    assert decode_sweep.main([str(out), "--dry", "--tasks", "mla", "--max-variants", "1", "--shapes", "b3_l20"]) == 0
    res = json.loads((out / "decode_sweep.json").read_text())["tasks"][decode_sweep.MLA]
    assert [s["name"] for s in res["shapes"]] == ["b3_l20"]
    assert {r["shape"] for r in res["rows"]} == {"b3_l20"}


@pytest.mark.parametrize("argv", [["--tasks", "gqa,xyz"], ["--extra", "nope=/does/not/exist"],
                                  ["--shapes", "b3_l20,b9_l9"], ["--knobs", "{not json"], ["--knobs", "[]"],
                                  ["--knobs", '{"PDL": false}'], ["--knobs", "[1]"]])
def test_bad_arguments_exit_2_with_one_line(tmp_path, argv, capsys):
    assert decode_sweep.main([str(tmp_path), "--dry", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("decode_sweep: ") and "\n" not in err


def test_knobs_replace_the_grid(tmp_path):
    """--knobs sweeps exactly the settings given (token_chunks only, in order), not the task's grid."""
    out = tmp_path / "out"
    assert decode_sweep.main([str(out), "--dry", "--tasks", "mla", "--shapes", "b3_l20",
                              "--knobs", '[{"BLOCK_N": 16}, {"BLOCK_N": 16, "PARTIAL_BF16": true}]']) == 0
    res = json.loads((out / "decode_sweep.json").read_text())["tasks"][decode_sweep.MLA]
    assert [v["knobs"] for v in res["variants"]] == [{"BLOCK_N": 16}, {"BLOCK_N": 16, "PARTIAL_BF16": True}]
    assert all(v["check"]["status"] == "ok" for v in res["variants"])


def test_a_full_workload_name_is_a_timing_shape_of_the_task_that_has_it():
    """`--shapes full_b16_t457` times the `full` set's own ragged batch (its kv lengths); a task without a workload
    of that name gets none, and an unknown full_ name is refused before anything runs."""
    from ksearch.task import load_task

    mla, gqa = load_task(decode_sweep.MLA), load_task(decode_sweep.GQA)
    want = next(list(w.params["kv_lens"]) for w in mla.workload_set("full") if w.name == "full_b16_t457")
    assert decode_sweep.timing_shapes(mla, False, ["full_b16_t457", "b1_l546"]) == [
        ("b1_l546", [546]), ("full_b16_t457", want)]
    assert len(want) == 16 and sum(want) == 457
    assert decode_sweep.timing_shapes(gqa, False, ["full_b16_t457"]) == []
    names = decode_sweep.full_shape_names([decode_sweep.MLA, decode_sweep.GQA])
    assert "full_b16_t457" in names and "full_b9_t9" not in names
