"""Run directories and the append-only journal that makes runs resumable."""

from ksearch.store.journal import Journal, JournalCorrupted, JournalDivergence, read_journal
from ksearch.store.rundir import RunDir, default_run_dir

__all__ = ["Journal", "JournalCorrupted", "JournalDivergence", "read_journal", "RunDir", "default_run_dir"]
from ksearch.store.history import NotARunError, RunHistory, load_history  # noqa: E402,F401  (views read runs here)
