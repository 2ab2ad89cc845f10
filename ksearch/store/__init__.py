"""Run directories, the append-only journal of typed records that makes runs resumable, and the run state
those records fold into."""

from ksearch.store.journal import Journal, JournalCorrupted, JournalDivergence, read_records
from ksearch.store.rundir import RunDir, default_run_dir

__all__ = ["Journal", "JournalCorrupted", "JournalDivergence", "read_records", "RunDir", "default_run_dir"]
from ksearch.store.history import NotARunError, RunHistory, load_history  # noqa: F401  (views read runs here)
