"""Regions of a task's shape space: buckets of a few shape-derived features.

A region is what a shape-dispatched solution switches on, so every feature must be computable on the
host from tensor *shapes* alone (never from index values, which would sync with the device). A feature
is an axis, or the ratio of two axes (e.g. mean KV length per sequence = num_kv_indices / batch_size),
bucketed by ascending edges: value <= edges[0] is bucket 0, ..., above the last edge is the last bucket.
The same `RegionScheme` labels workloads (in the search) and is embedded as plain data in the dispatch
module (ksearch/instantiate/dispatch.py), which recomputes the axes from its inputs' shapes.

A task picks its scheme in workloads.py (`REGIONS = RegionScheme(...)` and `region_of(workload)`);
`default_scheme(definition)` buckets the first var axis by powers of 8 for tasks that do not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ksearch.task.workload import Workload


@dataclass(frozen=True)
class Feature:
    """One bucketed feature: axes[num] (or axes[num] / max(axes[den], 1)), cut at ascending `edges`."""

    label: str
    num: str
    edges: tuple[float, ...]
    den: str | None = None

    def value(self, axes: dict[str, int]) -> float:
        if self.num not in axes or (self.den is not None and self.den not in axes):
            raise KeyError(f"region feature {self.label!r} needs axes {self.num!r}"
                           f"{' and ' + repr(self.den) if self.den else ''}; the workload has {sorted(axes)}")
        v = float(axes[self.num])
        return v / max(float(axes[self.den]), 1.0) if self.den is not None else v

    def bucket(self, value: float) -> str:
        lo = None
        for edge in self.edges:
            if value <= edge:
                return f"{self.label}{_fmt(lo)}-{_fmt(edge)}"
            lo = edge
        return f"{self.label}>{_fmt(lo)}"


@dataclass(frozen=True)
class RegionScheme:
    """Regions = the product of the features' buckets; the name joins the buckets with '|'."""

    features: tuple[Feature, ...]

    def of_axes(self, axes: dict[str, int]) -> str:
        return "|".join(f.bucket(f.value(axes)) for f in self.features)

    def index_of_axes(self, axes: dict[str, int]) -> tuple[int, ...]:
        """Bucket indices (what a dispatcher compares): value <= edges[i] -> i, above them all -> len(edges)."""
        return tuple(sum(1 for e in f.edges if f.value(axes) > e) for f in self.features)

    def of(self, workload: Workload) -> str:
        return self.of_axes(workload.axes)

    def axes_used(self) -> list[str]:
        out: list[str] = []
        for f in self.features:
            for a in (f.num, f.den):
                if a is not None and a not in out:
                    out.append(a)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"features": [asdict(f) for f in self.features]}

    @staticmethod
    def from_json(d: dict[str, Any]) -> RegionScheme:
        return RegionScheme(tuple(Feature(f["label"], f["num"], tuple(f["edges"]), f.get("den"))
                                  for f in d["features"]))


def _fmt(x: float | None) -> str:
    if x is None:
        return "0"
    if x >= 1024 and float(x) % 1024 == 0:
        return f"{int(x) // 1024}k"
    return f"{int(x)}" if float(x).is_integer() else f"{x:g}"


def default_scheme(definition: Any) -> RegionScheme:
    """The first var axis bucketed by powers of 8 (1, 8, 64, ..., 8^7): coarse, but always shape-derived."""
    axes = definition.var_axes()
    if not axes:
        raise ValueError(f"{definition.name} has no var axes: its shape space is a single point")
    return RegionScheme((Feature(axes[0], axes[0], tuple(float(8 ** i) for i in range(8))),))


def scheme_of(task: Any) -> RegionScheme:
    """The task's own scheme (`REGIONS` in workloads.py) or the default one."""
    scheme = getattr(task.workloads_module, "REGIONS", None)
    return scheme if isinstance(scheme, RegionScheme) else default_scheme(task.definition)


def region_of(task: Any, workload: Workload) -> str:
    """The region of `workload`: the task's `region_of` if it defines one, else its scheme's."""
    fn = getattr(task.workloads_module, "region_of", None)
    return str(fn(workload)) if fn is not None else scheme_of(task).of(workload)
