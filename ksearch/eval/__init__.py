"""Evaluation: worker processes, correctness rules, timing, anti-reward-hacking checks, CPU and GPU paths.

Parent side: `evaluator` (Evaluator, EvalSettings), `sandbox` (the spawned worker process, its output,
its process group), `static_checks` (refusals before anything runs), `noise` (spreads and noise-aware
comparisons), `report` (statuses, EvalReport, BaselineTimes, the score). Worker side: `worker` (set-up
and job loop), `judge` (checks and interleaved timing of candidates), `cases` (inputs, buffers,
references), `baselines`, `timing`, `rules`, `integrity` (runtime guards), `memory` (scrubbing, limits),
`environment` (what measured it), `interpreter` (the Triton interpreter's bf16 fixes).

Nothing here imports litellm, hydra or rich at module level: GPU hosts are often offline and minimal.
"""
