"""Shared fixtures: the GQA task, its first tiny workload, and evaluators with static checks on and off.

A fixed baseline (1 ms everywhere) stands in for the measured one: these tests are about statuses and
reasons, not speedups, and skipping the baseline job saves a worker's time.
"""

import pytest

from ksearch.eval.parent.evaluator import EvalSettings, Evaluator
from ksearch.eval.report import BaselineTimes
from ksearch.task import load_task
from tests.adversarial.kernels import TASK


def settings(**kw) -> EvalSettings:
    base = dict(device="cpu", timeout_s=30, warmup=0, trials=3, check_trials=2)
    base.update(kw)
    return EvalSettings(**base)


@pytest.fixture(scope="session")
def task():
    return load_task(TASK)


@pytest.fixture(scope="session")
def workloads(task):
    return task.workload_set("tiny")[:1]


@pytest.fixture(scope="session")
def baseline(workloads):
    return BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in workloads}}, "fixed 1 ms")


@pytest.fixture(scope="module")
def checked(task):
    """Static checks on (the default)."""
    ev = Evaluator(task, settings())
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def unchecked(task):
    """Static checks off: every trick reaches the candidate's sandbox, and the judge must hold anyway."""
    ev = Evaluator(task, settings(static_checks=False))
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def bare(task):
    """Static checks and audit hooks off: what process isolation alone contains (crashes, signals)."""
    ev = Evaluator(task, settings(static_checks=False, sandbox=False))
    yield ev
    ev.close()
