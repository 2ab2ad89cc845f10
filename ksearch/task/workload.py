"""Workloads: concrete axis values plus what is needed to synthesise inputs reproducibly."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Workload:
    """One shape to check and time. `params` carries generator details (e.g. per-sequence lengths)."""

    name: str
    axes: dict[str, int]
    params: dict[str, Any] = field(default_factory=dict)

    def input_seed(self, run_seed: int, trial: int = 0) -> int:
        """A stable seed per (run seed, workload, trial): same inputs on every machine and on resume."""
        h = hashlib.sha256(f"{run_seed}:{self.name}:{trial}".encode()).digest()
        return int.from_bytes(h[:4], "little")

    def describe(self) -> str:
        return f"{self.name} " + " ".join(f"{k}={v}" for k, v in self.axes.items())

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "axes": dict(self.axes), "params": dict(self.params)}


ELEMENT_RULES = ("flashinfer", "allclose")


@dataclass(frozen=True)
class Correctness:
    """The element rule. `flashinfer` (default), FlashInfer-Bench's: an element fails only where
    abs > atol AND rel > rtol. `allclose`, torch.allclose's (GPUMode's): it fails where
    abs > atol + rtol * |ref|."""

    atol: float = 1e-2
    rtol: float = 1e-2
    required_matched_ratio: float = 1.0
    rule: str = "flashinfer"

    def __post_init__(self) -> None:
        if self.rule not in ELEMENT_RULES:
            raise ValueError(f"correctness.rule must be one of {list(ELEMENT_RULES)}, got {self.rule!r}")
