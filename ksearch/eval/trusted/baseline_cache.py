"""The baseline cache: baselines measured by one run, reused by the next runs on the same GPU.

Why: on an H200, timing a task's FlashInfer baselines until they are steady costs about 45 s per `ksearch run`
(two configurations on each workload, plus FlashInfer's JIT), and arms of a comparison, a re-run of the same
task, the GPU tests and `ksearch bench` all measure the same numbers again. Arms that share one measurement
are also scored against the same denominator.

What an entry is: one subject (a baseline variant, or the PyTorch reference) timed on one workload: the
rounds of every clock (GPU time and call latency), the GPU-time method, the environment `describe()` gave the
job that timed it, and when and on which device. Medians, spreads, labels and the best variant are computed
from the rounds exactly as for a fresh measurement (ksearch.eval.trusted.baselines), so a reused
`BaselineTimes` differs from a measured one only in its `origins` (ksearch.eval.report.BaselineOrigin).
Variants that fail (disagree with the reference, crash) are never stored.

The key (`KeyMaker`) holds everything that decides the number:
- the device: on CUDA the GPU's name, UUID (another physical GPU is a miss), compute capability, SM count
  and memory, the driver and CUDA versions; on a CPU its model, core count, torch's threads and the host;
- the software: torch, triton, flashinfer, numpy, Python, ksearch's version, `MEASUREMENT_VERSION` and a
  digest of the code that makes inputs and times them (`MEASUREMENT_MODULES`), so an edit there is a miss;
- the task: its name and the digest of the snapshot the judge reads (definition, task.yaml, reference,
  workload generator, baselines: ksearch.task.snapshot);
- the workload (name, axes, params) and its input seed (from the run's seed);
- the subject's name and its timing settings (warm-up calls, minimum rounds; the L2 flush, the graph's length
  and the steadiness target are code, in the digest above).
Left out on purpose: the clock the score uses (every clock is timed and stored), the other variants asked
for and whether the reference is timed too (each subject is checked and timed on its own), the run.
Entries older than `eval.baseline_cache_max_age_h` (12 h) are misses: clocks, temperature and neighbours
drift over a day. A dataset workload is keyed by its uuid and file paths, not the bytes of its files.

Where: `$XDG_CACHE_HOME/ksearch/baselines.sqlite` (`eval.baseline_cache_path=` elsewhere), beside the
knowledge store (ksearch/knowledge) rather than a table in it: the trusted worker reads and writes it and
imports nothing of the search side; its entries expire and can be deleted at any time without losing
anything a search learnt; and a damaged cache must never cost the knowledge store.

Trust: only the trusted worker opens it (candidate code never runs there; the judge never consults it).
A candidate's process cannot write it where the kernel confines its writes to its scratch folder (a
read-only mount namespace, or Landlock: ksearch.eval.isolation.walls); on a machine where neither is
available a candidate could forge entries, so there the cache is not used at all (`trusted_here`). What
remains: entries are not signed (a key any process of this user could read would not help), so a file
written on this machine by something other than ksearch's worker, or by a candidate of a run before the
machine had walls, would be believed until it expires; `eval.baseline_cache=refresh` replaces it.

Concurrency and damage, as the knowledge store learnt them: opening (switching to WAL, the schema) takes
turns on an flock of a sidecar file, because two connections switching a fresh file to WAL at once deadlock
and SQLite fails one at once; each write is one IMMEDIATE transaction with a busy timeout, so processes
writing at once wait for each other and lose nothing (the same key written twice: the later one stays). A
file that cannot be opened or read costs one warning line (`note`) and the job measures as if the cache
were empty; it never fails a job.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ksearch.sqlite_files import NewerSchema, immediate, opening_lock, prepare

SCHEMA_VERSION = 1
#: Bump when the way a baseline is timed changes in a way the code digest below cannot see.
MEASUREMENT_VERSION = 1
DEFAULT_MAX_AGE_H = 12.0
PRUNE_AFTER_H = 7 * 24.0        # entries this old are deleted when a job writes (unless max_age_h is longer)
BUSY_TIMEOUT_S = 30.0
FILE_NAME = "baselines.sqlite"
#: The code that makes a baseline's inputs and times it: an edit to any of these is a miss.
MEASUREMENT_MODULES = ("ksearch.eval.trusted.baselines", "ksearch.eval.clocks.gputime", "ksearch.eval.clocks.noise",
                       "ksearch.eval.trusted.rules", "ksearch.task.baselines", "ksearch.task.paged",
                       "ksearch.task.synth", "ksearch.task.definition", "ksearch.task.workload",
                       "ksearch.task.registry", "ksearch.task.dataset")
_GPU_IDENTITY = ("gpu", "capability", "sm_count", "gpu_memory_gb", "driver", "cuda")
_CPU_IDENTITY = ("cpu", "cpu_count", "host", "torch_threads", "mode")
_SOFTWARE = ("torch", "triton", "flashinfer", "numpy", "python")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS timings (
    key TEXT PRIMARY KEY,
    measured_at REAL NOT NULL,
    task TEXT NOT NULL,
    workload TEXT NOT NULL,
    subject TEXT NOT NULL,
    device TEXT NOT NULL,
    key_fields TEXT NOT NULL,
    timing TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS timings_by_age ON timings (measured_at);
"""


class BaselineCacheMode(StrEnum):
    """eval.baseline_cache: whether baseline jobs read and write the cache."""

    auto = "auto"           # on for CUDA; off on a CPU (a reference costs ~1 s a workload and the load varies)
    on = "on"               # reuse entries that match, store what was measured
    off = "off"             # neither read nor write
    refresh = "refresh"     # measure everything, and replace what the cache held


@dataclass(frozen=True)
class CacheSettings:
    """What a baseline job is told about the cache (picklable; the path is resolved in the worker)."""

    mode: BaselineCacheMode = BaselineCacheMode.off
    max_age_h: float = DEFAULT_MAX_AGE_H
    path: str | None = None         # None: default_path() of the process that opens it

    def reads(self, device: str) -> bool:
        return self.mode == BaselineCacheMode.on or (self.mode == BaselineCacheMode.auto and device.startswith("cuda"))

    def writes(self, device: str) -> bool:
        return self.reads(device) or self.mode == BaselineCacheMode.refresh

    def file(self) -> Path:
        return Path(self.path).expanduser() if self.path else default_path()


def default_path() -> Path:
    """$XDG_CACHE_HOME/ksearch/baselines.sqlite (the knowledge store's folder), else ~/.cache/ksearch/..."""
    from ksearch import cache_dir

    return cache_dir() / FILE_NAME


def trusted_here(walls_plan: Any) -> str | None:
    """None when this worker's candidates cannot write outside their scratch folder (so not this cache);
    else why not, in words."""
    if walls_plan is None:
        return "no candidate walls were set up in this process"
    if walls_plan.landlock_abi or (walls_plan.mount and walls_plan.read_only):
        return None
    return f"candidates here are not kept from writing outside their scratch ({walls_plan.describe()})"


@dataclass(frozen=True)
class Timing:
    """One subject timed on one workload: the rounds of each clock (ms), the GPU-time method, the job's
    environment, and when and where it was timed."""

    rounds: dict[str, list[float]]
    method: str
    measured_at: float
    device: str
    host: str
    env: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "method": self.method, "measured_at": self.measured_at,
                "device": self.device, "host": self.host, "env": self.env}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Timing:
        """Raises ValueError, KeyError, TypeError or AttributeError for an entry this version cannot use."""
        from ksearch.eval.report import Metric

        rounds = {Metric(clock).value: [float(x) for x in r] for clock, r in d["rounds"].items()}
        if not rounds or not all(rounds.values()):
            raise ValueError("an entry without rounds")
        return Timing(rounds, str(d["method"]), float(d["measured_at"]), str(d["device"]), str(d["host"]),
                      dict(d.get("env") or {}))


@dataclass(frozen=True)
class CacheKey:
    digest: str
    fields: dict[str, Any]

    @property
    def short(self) -> str:
        return self.digest[:16]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@functools.cache
def code_digest() -> str:
    """A digest of the source of MEASUREMENT_MODULES (read once per process)."""
    h = hashlib.sha256()
    for name in MEASUREMENT_MODULES:
        module = importlib.import_module(name)
        h.update(name.encode() + b"\0")
        h.update(Path(module.__file__ or "").read_bytes() if module.__file__ else b"?")
    return h.hexdigest()[:16]


def device_name(env: dict[str, Any]) -> str:
    """The device a number was timed on, as reports name it: the GPU's name, else the CPU's model."""
    return str(env.get("gpu") or env.get("cpu") or env.get("device") or "?")


class KeyMaker:
    """The keys of one baseline job: its device, software and task, then per workload and subject."""

    def __init__(self, env: dict[str, Any], device: str, task_name: str, task_digest: str):
        on_gpu = device.startswith("cuda")
        identity = {k: env.get(k) for k in (_GPU_IDENTITY if on_gpu else _CPU_IDENTITY)}
        identity["kind"] = "cuda" if on_gpu else "cpu"
        if on_gpu:
            identity["uuid"] = gpu_uuid()
        from ksearch import __version__

        software = {k: env.get(k) for k in _SOFTWARE}
        software.update(ksearch=__version__, measurement=MEASUREMENT_VERSION, code=code_digest())
        self._common = {"schema": SCHEMA_VERSION, "device": identity, "software": software,
                        "task": {"name": task_name, "digest": task_digest}}

    def key(self, workload: Any, input_seed: int, subject: str, warmup: int, trials: int) -> CacheKey:
        fields = {**self._common, "workload": workload.to_json(), "input_seed": input_seed, "subject": subject,
                  "timing": {"warmup": warmup, "trials": trials}}
        return CacheKey(hashlib.sha256(_canonical(fields).encode()).hexdigest(), fields)


def gpu_uuid() -> str | None:
    """The current CUDA device's UUID (a different physical GPU is a different device)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    return str(uuid) if uuid is not None else None


# ---- the file ---------------------------------------------------------------------------------------------
class CacheFile:
    """The SQLite file: opened in WAL mode with the schema, read by key, written in IMMEDIATE transactions.
    Raises sqlite3.Error or OSError; BaselineCache turns those into a warning."""

    def __init__(self, path: Path, busy_timeout_s: float = BUSY_TIMEOUT_S):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), timeout=busy_timeout_s, isolation_level=None)
        try:
            with opening_lock(path):
                prepare(self._db, busy_timeout_s, _SCHEMA, SCHEMA_VERSION)
        except NewerSchema as e:
            self._db.close()
            raise sqlite3.DatabaseError(f"written by a newer ksearch (schema {e.found})") from None
        except BaseException:
            self._db.close()
            raise

    def get(self, key: str) -> tuple[float, str] | None:
        row = self._db.execute("SELECT measured_at, timing FROM timings WHERE key = ?", (key,)).fetchone()
        return (float(row[0]), str(row[1])) if row else None

    def put(self, rows: list[tuple[str, float, str, str, str, str, str, str]], prune_before: float) -> None:
        """Store rows (key, measured_at, task, workload, subject, device, key_fields, timing), replacing the
        same keys, and delete entries timed before `prune_before`, in one transaction."""
        with immediate(self._db) as db:
            db.executemany("INSERT OR REPLACE INTO timings (key, measured_at, task, workload, subject, device, "
                           "key_fields, timing) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            db.execute("DELETE FROM timings WHERE measured_at < ?", (prune_before,))

    def close(self) -> None:
        self._db.close()


# ---- one job's use of it ------------------------------------------------------------------------------------
class BaselineCache:
    """One baseline job's view of the cache: lookups (when it may read), and what it timed, stored at the end
    (when it may write). Never raises for the file's sake: the first problem turns it off with a `note`."""

    def __init__(self, path: Path | None, *, read: bool, write: bool, max_age_h: float = DEFAULT_MAX_AGE_H,
                 note: str = "", clock: Callable[[], float] = time.time):
        self.path = path
        self.read, self.write = read and path is not None, write and path is not None
        self.max_age_s = max_age_h * 3600.0
        self.note = note
        self._clock = clock
        self._file: CacheFile | None = None
        self._pending: list[tuple[CacheKey, str, Timing]] = []     # (key, subject, timing)

    @classmethod
    def off(cls, note: str = "") -> BaselineCache:
        return cls(None, read=False, write=False, note=note)

    @classmethod
    def for_job(cls, settings: CacheSettings, device: str, walls_plan: Any) -> BaselineCache:
        """The cache as `settings` ask for it on `device`, or off (with why) where candidates could write it."""
        read, write = settings.reads(device), settings.writes(device)
        if not (read or write):
            return cls.off()
        why = trusted_here(walls_plan)
        if why is not None:
            return cls.off(f"the baseline cache is not used: {why}; baselines are measured")
        return cls(settings.file(), read=read, write=write, max_age_h=settings.max_age_h)

    @property
    def active(self) -> bool:
        return self.read or self.write

    def now(self) -> float:
        return self._clock()

    def _open(self) -> CacheFile | None:
        if self._file is None and self.active and self.path is not None:
            try:
                self._file = CacheFile(self.path)
            except (OSError, sqlite3.Error) as e:
                self._give_up(e)
        return self._file

    def _give_up(self, e: BaseException) -> None:
        what = " ".join(str(e).split()) or type(e).__name__
        self.note = (f"the baseline cache {self.path} cannot be used ({what[:200]}); baselines are measured "
                     f"without it (delete the file, or point eval.baseline_cache_path= elsewhere)")
        self.read = self.write = False
        if self._file is not None:
            try:
                self._file.close()
            except sqlite3.Error:
                pass
            self._file = None

    def key_maker(self, make: Callable[[], KeyMaker]) -> KeyMaker | None:
        """`make()` while the cache is in use; a failure to name this job's keys turns the cache off."""
        if not self.active:
            return None
        try:
            return make()
        except Exception as e:  # noqa: BLE001 - without keys nothing is reused or stored; the job goes on
            self._give_up(e)
            return None

    def lookup(self, key: CacheKey) -> Timing | None:
        """The stored timing under `key` if there is one younger than the maximum age (else None)."""
        if not self.read:
            return None
        db = self._open()
        if db is None:
            return None
        try:
            got = db.get(key.digest)
        except sqlite3.Error as e:
            self._give_up(e)
            return None
        if got is None or self.now() - got[0] > self.max_age_s or got[0] > self.now() + 60:
            return None
        try:
            return Timing.from_json(json.loads(got[1]))
        except (ValueError, KeyError, TypeError, AttributeError):     # a damaged entry is a miss
            return None

    def remember(self, key: CacheKey, subject: str, timing: Timing) -> None:
        """Keep a timing to store at `commit` (only subjects that end the job unfailed are stored)."""
        if self.write:
            self._pending.append((key, subject, timing))

    def commit(self, env: dict[str, Any], failed: set[str]) -> int:
        """Store the remembered timings of subjects not in `failed`, with the job's environment; returns how
        many were stored."""
        rows = []
        for key, subject, t in self._pending:
            if subject in failed:
                continue
            f = key.fields
            timing = Timing(t.rounds, t.method, t.measured_at, t.device, t.host, env)
            rows.append((key.digest, t.measured_at, str(f["task"]["name"]), str(f["workload"]["name"]), subject,
                         t.device, _canonical(f), _canonical(timing.to_json())))
        self._pending = []
        if not rows or not self.write:
            return 0
        db = self._open()
        if db is None:
            return 0
        try:
            db.put(rows, self.now() - max(PRUNE_AFTER_H * 3600.0, self.max_age_s))
        except sqlite3.Error as e:
            self._give_up(e)
            return 0
        return len(rows)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
