"""What the hardware says about one evaluated kernel: a typed profile, filled in by the judge on a GPU.

Per evaluation (one candidate on one workload set):

- `kernels`: every compiled kernel a call launches, with what its compiler reports (registers per
  thread, bytes spilled to local memory, shared memory, num_warps / num_stages) and the occupancy that
  implies on the GPU it ran on (resident warps per SM over the SM's maximum, 0..1).
- `workloads`: per workload, the launches of one call in order with the GPU time of each, the task's
  physical floor for that workload (fewest bytes at peak bandwidth or FLOPs at peak rate) and the % of
  that limit the kernel reached (floor / measured time).

The evaluation result carries it as JSON under `profile`, or none with a reason under `profile_note`
(on a CPU nothing is launched on a GPU). `read_profile` is the one place that reads it back, so a
malformed profile is a reason, never a crash of the search.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KernelInfo(_Frozen):
    """One compiled kernel, as its compiler and the GPU's limits describe it (None: not known)."""

    name: str
    registers_per_thread: int | None = Field(None, ge=0)
    spilled_bytes: int | None = Field(None, ge=0)
    shared_memory_bytes: int | None = Field(None, ge=0)
    num_warps: int | None = Field(None, ge=1)
    num_stages: int | None = Field(None, ge=1)
    occupancy: float | None = Field(None, ge=0, le=1)


class Launch(_Frozen):
    """One kernel launch of a call and the GPU time it took."""

    kernel: str
    gpu_time_us: float = Field(ge=0)


class WorkloadProfile(_Frozen):
    workload: str
    launches: list[Launch] = Field(default_factory=list)
    floor_us: float | None = Field(None, gt=0)          # the task's physical limit on this workload
    pct_of_limit: float | None = Field(None, ge=0)      # 100 * floor / measured GPU time

    @property
    def gpu_time_us(self) -> float:
        return sum(x.gpu_time_us for x in self.launches)


class Profile(_Frozen):
    kernels: list[KernelInfo] = Field(default_factory=list)
    workloads: list[WorkloadProfile] = Field(default_factory=list)

    def launches_per_call(self) -> int:
        """The most launches one call made on any workload (0 when no launch was recorded)."""
        return max((len(w.launches) for w in self.workloads), default=0)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class ProfileReading:
    """A profile, or None and why there is none."""

    profile: Profile | None
    reason: str = ""

    def to_context(self) -> dict[str, Any]:
        """What a model request's JSON context carries (the offline model reads it back)."""
        return {"profile": self.profile.to_json() if self.profile else None, "profile_note": self.reason}


CPU_REASON = "no GPU profile on a CPU: kernels run in the Triton interpreter, nothing is launched on a GPU"


def read_profile(report: Mapping[str, Any] | None) -> ProfileReading:
    """The profile an evaluation result (its JSON) carries, or the reason it has none."""
    if not report:
        return ProfileReading(None, "no evaluation")
    raw = report.get("profile")
    if raw is None:
        note = str(report.get("profile_note") or "")
        if note:
            return ProfileReading(None, note)
        if not str(report.get("device", "")).startswith("cuda"):
            return ProfileReading(None, CPU_REASON)
        return ProfileReading(None, "the evaluator recorded no profile for this evaluation")
    if isinstance(raw, Profile):
        return ProfileReading(raw)
    try:
        return ProfileReading(Profile.model_validate(raw))
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        return ProfileReading(None, f"the recorded profile is malformed ({where}: {err['msg']})")


def context_profile(context: Mapping[str, Any]) -> Profile | None:
    """The profile a model request's context carries (see ProfileReading.to_context), validated."""
    return read_profile({"profile": context.get("profile"), "profile_note": "-"}).profile
