"""Tasks: a kernel definition, its workloads, its reference, its baseline and its strategy catalog."""

from ksearch.task.definition import Definition, TensorSpec
from ksearch.task.registry import Task, UnknownTaskError, add_task_dirs, list_tasks, load_task, task_roots, tasks_dir
from ksearch.task.workload import Correctness, Workload

__all__ = [
    "Definition", "TensorSpec", "Workload", "Correctness", "Task", "load_task", "list_tasks",
    "tasks_dir", "task_roots", "add_task_dirs", "UnknownTaskError",
]
