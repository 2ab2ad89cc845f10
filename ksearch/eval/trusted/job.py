"""What every job the trusted worker runs is given: the task, the workloads, the device and the clock.

The parent (ksearch.eval.parent.evaluator) fills these from its settings once, so a candidate's judgement and a
baseline measurement of the same run cannot be told different clocks or seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ksearch.eval.report import Metric
from ksearch.task import Workload


@dataclass(kw_only=True)
class Job:
    task: str
    workloads: list[Workload]
    device: str
    metric: Metric                  # the clock scores use (report.score_metric): latency_ms, the baselines'
    run_seed: int = 0               # seeds the baselines' inputs; candidates get fresh ones every job
    warmup: int = 10
    trials: int = 3
    tasks_root: str | None = None
