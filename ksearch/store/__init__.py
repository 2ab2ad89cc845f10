"""Run directories and the append-only journal that makes runs resumable."""

from ksearch.store.journal import Journal, JournalDivergence, read_journal
from ksearch.store.rundir import RunDir, default_run_dir

__all__ = ["Journal", "JournalDivergence", "read_journal", "RunDir", "default_run_dir"]
