"""Evaluation: a trusted judge, one sandboxed process per candidate, two honest clocks.

Three kinds of process, so that nothing a candidate can reach decides its verdict or its number:

- the parent (the search): `evaluator` (Evaluator, EvalSettings), `static_checks` (early, friendly
  refusals), `noise` (spreads, noise-aware comparisons), `report` (statuses, EvalReport, BaselineTimes,
  the score), `sandbox` (the trusted worker's process and output);
- the trusted worker: `worker` (set-up and job loop), `judge` (inputs, references, comparisons, the clock,
  the physical floor), `baselines` (FlashInfer or the reference, timed with the same clocks), `rules`
  (the element rule), `environment` (what measured it), `spawn` + `forkserver` + `reaper` (a fresh
  process per candidate from a pre-imported zygote; nothing outlives it);
- the candidate's process: `candidate` (builds inputs from a seed, calls the kernel, runs the timing
  graphs on request), `audit` (PEP 578 hooks installed before its code is imported), `wire` (JSON and
  raw bytes back to the judge, never a pickle), `gputime` (CUDA-graph, CUPTI and eager timing blocks),
  `memory` (scrubbing, limits), `interpreter` (the Triton interpreter's bf16 fixes).

Nothing here imports litellm, hydra or rich at module level: GPU hosts are often offline and minimal.
"""
