"""The baseline cache across runs (ksearch/eval/trusted/baseline_cache.py): a second measurement with the same
settings times nothing, any field of the key that changes is a miss, old entries expire, `refresh` and
`off` do what they say, a damaged file costs one warning line, failed variants are not stored, two processes
writing at once lose nothing, and a run's journal says where its baseline came from.

The timing itself is faked (instant, counted) in the in-process tests; one test goes through the real
worker process. On a CPU the cache is off by default (`auto`), so every test turns it on explicitly.
"""

from __future__ import annotations

import dataclasses
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from ksearch.eval.report import BaselineOrigin, BaselineTimes, Metric, TimingMethod
from ksearch.eval.trusted import baselines
from ksearch.eval.trusted.baseline_cache import (
    BaselineCache,
    BaselineCacheMode,
    CacheFile,
    CacheKey,
    CacheSettings,
    KeyMaker,
    trusted_here,
)
from ksearch.eval.trusted.baselines import BaselineJob, measure_baselines
from ksearch.task import load_task

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"
HOUR = 3600.0


@pytest.fixture
def timed(monkeypatch):
    """The timing function, faked: instant, fixed rounds, every call counted (warm-up, trials)."""
    calls: list[tuple[int, int]] = []

    def fake(call, device, warmup, trials, slow_ms=None):
        calls.append((warmup, trials))
        return {Metric.call_latency: [1.0, 1.2, 0.9]}, TimingMethod.wall_clock_cpu

    monkeypatch.setattr(baselines, "time_subject", fake)
    return calls


@pytest.fixture(scope="module")
def workloads():
    return load_task(TASK).workload_set("tiny")[:2]


def job(workloads, **kw) -> BaselineJob:
    return BaselineJob(**{**dict(task=TASK, workloads=list(workloads), device="cpu", metric=Metric.call_latency,
                                 warmup=0, trials=2), **kw})


def cache(path: Path, read: bool = True, write: bool = True, **kw) -> BaselineCache:
    return BaselineCache(path, read=read, write=write, **kw)


def without_origins(b: BaselineTimes) -> dict:
    return {k: v for k, v in b.to_json().items() if k != "origins"}


def test_a_second_measurement_with_the_same_settings_times_nothing(tmp_path, timed, workloads, monkeypatch):
    path = tmp_path / "b.sqlite"
    first = measure_baselines(job(workloads), cache(path))
    assert len(timed) == len(workloads) and first.provenance() == ""
    assert all(not o.reused and o.key for o in first.origins["reference"].values())
    inputs_made = []
    monkeypatch.setattr(baselines, "baseline_inputs", lambda *a: inputs_made.append(a))
    second = measure_baselines(job(workloads), cache(path))
    assert len(timed) == len(workloads) and inputs_made == []       # no timing, not even inputs or the reference
    assert without_origins(second) == without_origins(first)        # the same content, env included
    for w in workloads:
        was, now = first.origins["reference"][w.name], second.origins["reference"][w.name]
        assert now == dataclasses.replace(was, reused=True)
    assert second.provenance().startswith("reused from ") and second.env["cpu"] in second.provenance()
    assert second.described() == f"{second.label} ({second.provenance()})"


def _copied_task(tmp_path: Path, edit: bool) -> str:
    root = tmp_path / ("edited" if edit else "copied")
    shutil.copytree(load_task(TASK).dir, root / TASK)
    if edit:
        with open(root / TASK / "reference.py", "a") as f:
            f.write("\n# an edit of the reference's file\n")
    return str(root)


@pytest.mark.parametrize("change", ["nothing", "run_seed", "trials", "workload", "task_file", "same_task_copied",
                                    "cpu", "host", "torch", "code"])
def test_a_change_of_any_key_field_is_a_miss(tmp_path, timed, workloads, monkeypatch, change):
    from ksearch.eval.clocks import environment
    from ksearch.eval.trusted import baseline_cache

    path = tmp_path / "b.sqlite"
    measure_baselines(job(workloads), cache(path))
    timed.clear()
    kw: dict = {}
    if change == "run_seed":
        kw["run_seed"] = 1
    elif change == "trials":
        kw["trials"] = 5                    # the CPU reference takes max(3, trials) rounds at least
    elif change == "workload":
        kw["workloads"] = [dataclasses.replace(workloads[0], params={**workloads[0].params, "extra": 1}),
                           *workloads[1:]]
    elif change in ("task_file", "same_task_copied"):
        kw["tasks_root"] = _copied_task(tmp_path, edit=change == "task_file")
    elif change in ("cpu", "host", "torch"):
        real = environment.describe
        monkeypatch.setattr(environment, "describe", lambda device: {**real(device), change: "another"})
    elif change == "code":
        monkeypatch.setattr(baseline_cache, "code_digest", lambda: "edited")
    again = measure_baselines(job(kw.pop("workloads", workloads), **kw), cache(path))
    missed = {"nothing": 0, "same_task_copied": 0, "workload": 1}.get(change, len(workloads))
    assert len(timed) == missed, change
    assert sum(o.reused for o in again.origins["reference"].values()) == len(workloads) - missed


def test_the_key_names_the_physical_gpu_the_versions_and_the_subject(monkeypatch, workloads):
    from ksearch.eval.trusted import baseline_cache

    gpu = {"gpu": "NVIDIA H200", "capability": "9.0", "sm_count": 132, "gpu_memory_gb": 139.8, "driver": "570.1",
           "cuda": "12.8", "torch": "2.8", "triton": "3.4", "flashinfer": "0.3", "numpy": "2", "python": "3.11"}
    w = workloads[0]

    def digest(env=gpu, uuid="GPU-a", subject="variant:flashinfer_default", warmup=10, trials=3):
        monkeypatch.setattr(baseline_cache, "gpu_uuid", lambda: uuid)
        return KeyMaker(env, "cuda", TASK, "digest").key(w, 7, subject, warmup, trials).digest

    base = digest()
    assert digest() == base
    assert digest(uuid="GPU-b") != base                         # the same model, another physical GPU
    for field, value in [("driver", "575.0"), ("cuda", "13.0"), ("flashinfer", "0.4"), ("triton", "3.5")]:
        assert digest(env={**gpu, field: value}) != base, field
    assert digest(env={**gpu, "sm_clock_mhz": 1200, "host": "elsewhere"}) == base    # notes, not identity
    assert digest(subject="variant:flashinfer_tensor_cores") != base and digest(subject="reference") != base
    assert digest(warmup=3) != base and digest(trials=4) != base


def test_an_entry_older_than_the_maximum_age_is_measured_again(tmp_path, timed, workloads):
    path = tmp_path / "b.sqlite"
    measure_baselines(job(workloads), cache(path))
    timed.clear()
    import time

    later = time.time() + 13 * HOUR
    measure_baselines(job(workloads), cache(path, max_age_h=24, clock=lambda: later))
    assert timed == []                                          # younger than 24 h
    measure_baselines(job(workloads), cache(path, clock=lambda: later))
    assert len(timed) == len(workloads)                         # older than the default 12 h


def test_refresh_measures_and_replaces_what_the_cache_held(tmp_path, timed, workloads):
    path = tmp_path / "b.sqlite"
    first = measure_baselines(job(workloads), cache(path))
    refresh = CacheSettings(BaselineCacheMode.refresh)
    assert not refresh.reads("cuda") and refresh.writes("cuda")
    fresh = measure_baselines(job(workloads), cache(path, read=refresh.reads("cpu"), write=refresh.writes("cpu")))
    assert len(timed) == 2 * len(workloads) and fresh.provenance() == ""
    reused = measure_baselines(job(workloads), cache(path))
    assert len(timed) == 2 * len(workloads)
    for w in workloads:
        got = reused.origins["reference"][w.name]
        assert got.measured_at == fresh.origins["reference"][w.name].measured_at
        assert got.measured_at > first.origins["reference"][w.name].measured_at


def test_the_modes_and_the_walls_decide_who_reads_and_writes(tmp_path):
    expected = {"auto": {"cpu": (False, False), "cuda": (True, True)}, "on": {"cpu": (True, True)},
                "off": {"cpu": (False, False), "cuda": (False, False)}, "refresh": {"cuda": (False, True)}}
    for mode, per_device in expected.items():
        for device, (read, write) in per_device.items():
            s = CacheSettings(BaselineCacheMode(mode))
            assert (s.reads(device), s.writes(device)) == (read, write), (mode, device)
    walled = SimpleNamespace(landlock_abi=0, mount="root", read_only=True, describe=lambda: "walls")
    landlock = SimpleNamespace(landlock_abi=3, mount="", read_only=False, describe=lambda: "landlock")
    open_house = SimpleNamespace(landlock_abi=0, mount="", read_only=True, describe=lambda: "no kernel walls")
    assert trusted_here(walled) is None and trusted_here(landlock) is None
    assert "no kernel walls" in trusted_here(open_house) and trusted_here(None)
    on = CacheSettings(BaselineCacheMode.on, path=str(tmp_path / "b.sqlite"))
    assert BaselineCache.for_job(on, "cpu", walled).active
    refused = BaselineCache.for_job(on, "cpu", open_house)
    assert not refused.active and "not used" in refused.note and "\n" not in refused.note
    off = BaselineCache.for_job(CacheSettings(BaselineCacheMode.off, path=str(tmp_path / "b.sqlite")), "cpu", walled)
    assert not off.active and off.note == ""


def test_off_neither_reads_nor_writes(tmp_path, timed, workloads):
    path = tmp_path / "b.sqlite"
    measure_baselines(job(workloads), cache(path, read=False, write=False))
    measure_baselines(job(workloads), cache(path, read=False, write=False))
    assert len(timed) == 2 * len(workloads) and not path.exists()


@pytest.mark.parametrize("damage", ["not_a_database", "parent_is_a_file", "newer_schema", "damaged_entry"])
def test_a_damaged_cache_costs_one_warning_line_and_a_fresh_measurement(tmp_path, timed, workloads, damage):
    path = tmp_path / "b.sqlite"
    if damage == "not_a_database":
        path.write_bytes(b"this is not a database " * 200)
    elif damage == "parent_is_a_file":
        (tmp_path / "file").write_text("x")
        path = tmp_path / "file" / "b.sqlite"
    elif damage == "newer_schema":
        CacheFile(path).close()
        sqlite3.connect(path).execute("PRAGMA user_version = 99")
    else:
        measure_baselines(job(workloads), cache(path))
        db = sqlite3.connect(path)
        db.execute("UPDATE timings SET timing = '{\"rounds\": '")
        db.commit()
        timed.clear()
    got = measure_baselines(job(workloads), cache(path))
    assert len(timed) == len(workloads) and set(got.variants["reference"]) == {w.name for w in workloads}
    if damage == "damaged_entry":
        assert got.cache_note == ""                             # a miss, and the entry is replaced
        timed.clear()
        measure_baselines(job(workloads), cache(path))
        assert timed == []
    else:
        assert got.cache_note.count("\n") == 0 and str(path) in got.cache_note
        assert "eval.baseline_cache_path=" in got.cache_note


def test_failed_variants_are_not_stored(tmp_path, timed, workloads, monkeypatch):
    task = load_task(TASK)
    built: list[str] = []

    def good(inputs):
        built.append("good")
        return lambda: task.reference(**inputs)

    def bad(inputs):
        built.append("bad")
        raise RuntimeError("no kernel for this shape")

    monkeypatch.setattr(baselines, "baseline_factories", lambda task, job: {"good": good, "bad": bad})
    path = tmp_path / "b.sqlite"
    first = measure_baselines(job(workloads), cache(path))
    assert "bad" in first.failures and set(first.variants) == {"good"} and len(timed) == len(workloads)
    subjects = {row[0] for row in sqlite3.connect(path).execute("SELECT subject FROM timings")}
    assert subjects == {"good"}
    built.clear()
    second = measure_baselines(job(workloads), cache(path))
    assert built == ["bad"] and len(timed) == len(workloads)      # good reused; bad tried (and failed) again
    assert "bad" in second.failures and second.variants == first.variants
    assert all(o.reused for o in second.origins["good"].values()) and "bad" not in second.origins


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ksearch.eval.trusted.baseline_cache import BaselineCache, CacheKey, Timing
    path, run, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for i in range(n):
        cache = BaselineCache(path, read=True, write=True)
        key = CacheKey(f"{run}-{i}", {"task": {"name": "t"}, "workload": {"name": f"w{i}"}})
        cache.remember(key, "reference", Timing({"call_latency": [float(i)]}, "wall_clock_cpu", cache.now(), "cpu", run))
        assert cache.commit({}, set()) == 1, cache.note
        cache.close()
""")


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path, n = tmp_path / "b.sqlite", 100
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), run, str(n)]) for run in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    reader = cache(path)
    for run in "ab":
        for i in range(n):
            got = reader.lookup(CacheKey(f"{run}-{i}", {}))
            assert got is not None and got.rounds == {"call_latency": [float(i)]} and got.host == run


def test_the_worker_reuses_what_it_measured_before(tmp_path, workloads):
    """Through the real trusted worker (its walls decide whether it may use the cache at all)."""
    from ksearch.eval.parent.evaluator import EvalSettings, Evaluator

    notes: list[str] = []
    settings = EvalSettings(device="cpu", timeout_s=60, warmup=0, trials=2, baseline_cache="on",
                            baseline_cache_path=str(tmp_path / "b.sqlite"))
    with Evaluator(load_task(TASK), settings, notify=notes.append) as ev:
        first = ev.measure_baselines(workloads[:1])
        second = ev.measure_baselines(workloads[:1])
    if "not used" in " ".join(notes):
        pytest.skip(f"this machine's candidates are not walled in: {notes[0]}")     # (and the cache stays off)
    assert notes == []
    assert first.provenance() == "" and second.provenance().startswith("reused from ")
    assert without_origins(second) == without_origins(first)


# ---- the run's journal ------------------------------------------------------------------------------------
class ReusingPool:
    """Answers baselines as the cache would (reused, timed an hour ago on an H200) and scores every kernel 1x."""

    def __init__(self, reused: bool):
        self.reused = reused

    def measure_baselines(self, workloads, time_reference: bool = False):
        import time

        origin = BaselineOrigin(self.reused, time.time() - HOUR, "NVIDIA H200", "gpuhost", "k" * 16)
        return BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in workloads}}, "fake reference",
                             origins={"reference": {w.name: origin for w in workloads}})

    def evaluate(self, source, solution_id, workloads, baseline):
        from ksearch.eval.report import EvalReport, WorkloadResult

        r = EvalReport(solution_id, "PASSED", "cpu", [WorkloadResult(w.name, "PASSED", latency_ms=1.0)
                                                       for w in workloads])
        r.speedups, r.score, r.score_name, r.baseline = {w.name: 1.0 for w in workloads}, 1.0, "geomean_speedup", "x"
        return r

    confirm = evaluate

    def remeasure(self, entries, workloads, baseline):
        return [self.evaluate(src, sid, workloads, baseline) for src, sid in entries]

    def close(self) -> None:
        pass


@pytest.mark.parametrize("reused", [True, False])
def test_the_journal_and_show_say_where_the_baseline_came_from(tmp_path, monkeypatch, capsys, reused):
    from ksearch.cli.main import main
    from ksearch.store import load_history, read_records
    from ksearch.store import records as R

    monkeypatch.setattr("ksearch.eval.parent.pool.build_pool", lambda *a, **kw: ReusingPool(reused))
    run = tmp_path / "run"
    assert main(["run", f"run.dir={run}", "search.max_rounds=1", "run.live=false", "eval.baseline_cache=on"]) == 0
    printed = capsys.readouterr().out
    record = next(r for r in read_records(run / "journal.jsonl")[0] if isinstance(r, R.Baseline))
    origins = record.times.origins["reference"]
    assert all(isinstance(o, BaselineOrigin) and o.reused == reused and o.device == "NVIDIA H200"
               for o in origins.values())
    recorded = record.value["origins"]["reference"]           # as the journal's line holds it
    assert all(o["reused"] == reused and o["measured_at"] > 0 for o in recorded.values())
    history = load_history(run)
    assert ("reused from" in history.baseline.described()) == reused
    assert main(["show", str(run), "--width", "200"]) == 0
    shown = capsys.readouterr().out
    assert ("(reused from " in shown and "on NVIDIA H200)" in shown) == reused
    assert ("(reused from " in printed) == reused                 # the run's own "baseline:" line


def test_an_old_recorded_baseline_has_no_origins_and_reads_as_measured():
    from ksearch.store import load_history

    history = load_history(Path(__file__).parent / "fixtures" / "run_49d329e_serial")
    assert history.baseline is not None and history.baseline.origins == {}
    assert history.baseline.provenance() == "" and history.baseline.described() == history.baseline.label



@pytest.mark.parametrize("flags, mode", [([], "on"), (["--self-check"], "refresh"),
                                         (["--baseline-repeats", "2"], "refresh")])
def test_bench_measures_anew_when_it_checks_the_clock(monkeypatch, flags, mode):
    from ksearch.cli import bench
    from ksearch.cli.main import parse_args
    from ksearch.eval.parent.evaluator import Evaluator

    asked: list[str] = []

    class Measured(Exception):
        pass

    def measure(self, workloads, time_reference=False):
        asked.append(self.settings.baseline_cache)
        raise Measured

    monkeypatch.setattr(Evaluator, "measure_baselines", measure)
    with pytest.raises(Measured):
        bench.run(parse_args(["bench", f"task={TASK}", "eval.baseline_cache=on", *flags]))
    assert asked == [mode]


def test_recorded_origins_that_do_not_parse_are_left_out():
    d = {"device": "cpu", "variants": {"reference": {"w": 1.0}}, "label": "x",
         "origins": {"reference": {"w": {"reused": True, "measured_at": "yesterday"}, "v": 5,
                                   "u": {"reused": True, "measured_at": 1.0e9, "device": "H200", "unknown": 1}}}}
    got = BaselineTimes.from_json(d)
    assert got.origins == {"reference": {"u": BaselineOrigin(True, 1.0e9, "H200")}}
    assert "reused from" in got.provenance() and "H200" in got.provenance()


def test_the_evaluator_says_a_cache_warning_once(tmp_path):
    from ksearch.eval.parent import evaluator

    note = "the baseline cache /x cannot be used (file is not a database); baselines are measured without it"

    class Worker:
        pid = 1

        def alive(self):
            return True

        def request(self, kind, payload, timeout, startup_timeout):
            return evaluator.Reply("ok", BaselineTimes("cpu", {}, "x", cache_note=note), "", 0)

        def kill(self):
            pass

    said: list[str] = []
    ev = evaluator.Evaluator(load_task(TASK), evaluator.EvalSettings(device="cpu"), notify=said.append)
    ev._worker = Worker()
    for _ in range(3):
        assert ev.measure_baselines([]).cache_note == note       # every job's record keeps it
    assert said == [note]


def test_neither_the_judge_nor_a_candidates_side_names_the_cache():
    """Only the baseline job reads or writes it: no module the judge or a candidate's process runs refers to it."""
    root = Path(__file__).resolve().parents[1] / "ksearch" / "eval"
    sides = [root / "trusted" / "judge.py", *sorted((root / "candidate").glob("*.py")),
             *sorted((root / "isolation").glob("*.py"))]
    assert [p.name for p in sides if "baseline_cache" in p.read_text()] == []
