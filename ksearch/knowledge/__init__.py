"""Memory across runs: a local store of every evaluation, and what a new run takes from it.

- `store`: the SQLite file (user cache by default; `memory.path=`), safe for concurrent runs;
- `signature`: which task a row is about, from its definition;
- `recall`: the evidence a run starts from (journaled at its start), and its prompt section;
- `priors`: how that evidence sets the offline model's first proposals and family beliefs;
- `run_memory`: the search's seam (recall at the start, a write per evaluation);
- `commands`: `ksearch memory show|export|clear`.
"""

from ksearch.knowledge.recall import FamilyEvidence, Recall, RegionEvidence, build_recall, render_recall
from ksearch.knowledge.run_memory import RECORD_KIND, RunMemory, gpu_label, memory_on_at_start
from ksearch.knowledge.signature import TaskSignature, signature_of
from ksearch.knowledge.store import ALL_REGIONS, EvaluationRow, KnowledgeStore, StoreError, default_path

__all__ = ["ALL_REGIONS", "EvaluationRow", "FamilyEvidence", "KnowledgeStore", "RECORD_KIND", "Recall",
           "RegionEvidence", "RunMemory", "StoreError", "TaskSignature", "build_recall", "default_path",
           "gpu_label", "memory_on_at_start", "render_recall", "signature_of"]
