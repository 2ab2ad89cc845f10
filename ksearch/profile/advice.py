"""What a profile suggests trying next, as typed hints the offline model turns into knob moves.

The rules are an engineer's first reading of a profile:

- a kernel that spills registers, or runs at low occupancy, holds too much per program: smaller tiles
  and fewer pipeline stages free registers and shared memory;
- a call that launches several kernels pays each launch and a round trip through memory between them:
  a family that fuses them into one launch;
- small shapes far from the physical limit are starved of parallelism: more splits of the work.

Knob roles come from knob names (`knob_role`): catalogs name tiles BLOCK_* / ROWS / *_CHUNK, pipeline
depth *stages*, and the split of the work *SPLIT* / *CTAS* (a MIN_SPLIT_* knob splits more as it shrinks).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ksearch.profile.model import Profile

#: Below this share of the SM's resident warps a kernel cannot hide memory latency.
LOW_OCCUPANCY = 0.25
#: Small shapes below this % of the physical limit are starved of parallelism.
FAR_FROM_LIMIT_PCT = 25.0


class Hint(str, Enum):  # noqa: UP042 - str() and format() give the value the records hold
    SMALLER_TILES = "smaller_tiles"
    FEWER_STAGES = "fewer_stages"
    FUSED_FAMILY = "fused_family"
    MORE_SPLITS = "more_splits"


class Role(str, Enum):  # noqa: UP042 - str() and format() give the value the records hold
    TILE = "tile"
    STAGES = "stages"
    SPLITS = "splits"
    OTHER = "other"


@dataclass(frozen=True)
class Advice:
    hints: tuple[Hint, ...]
    reasons: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.hints)


NO_ADVICE = Advice((), ())


def advise(profile: Profile | None) -> Advice:
    """Hints in the order they should be tried (resources first, then launches, then parallelism)."""
    if profile is None:
        return Advice((), ())
    hints: list[Hint] = []
    reasons: list[str] = []
    spilling = [k for k in profile.kernels if k.spilled_bytes]
    starved = [k for k in profile.kernels if k.occupancy is not None and k.occupancy < LOW_OCCUPANCY]
    if spilling or starved:
        hints += [Hint.SMALLER_TILES, Hint.FEWER_STAGES]
        reasons += [f"{k.name} spills {k.spilled_bytes} bytes" for k in spilling]
        reasons += [f"{k.name} runs at {100 * (k.occupancy or 0):.0f}% occupancy" for k in starved]
    launches = profile.launches_per_call()
    if launches > 1:
        hints.append(Hint.FUSED_FAMILY)
        reasons.append(f"one call launches {launches} kernels")
    small = _small_workloads(profile)
    pcts = [w.pct_of_limit for w in small if w.pct_of_limit is not None]
    if pcts and statistics.fmean(pcts) < FAR_FROM_LIMIT_PCT:
        hints.append(Hint.MORE_SPLITS)
        reasons.append(f"small shapes reach {statistics.fmean(pcts):.0f}% of the physical limit")
    return Advice(tuple(hints), tuple(reasons))


def _small_workloads(profile: Profile) -> list[Any]:
    """Workloads whose physical floor is at most the median floor (all of them when floors are unknown)."""
    floors = [w.floor_us for w in profile.workloads if w.floor_us is not None]
    if not floors:
        return list(profile.workloads)
    median = statistics.median(floors)
    return [w for w in profile.workloads if w.floor_us is not None and w.floor_us <= median]


_SPLIT = re.compile(r"split|ctas", re.IGNORECASE)


def knob_role(name: str) -> tuple[Role, int]:
    """The knob's role and the direction (+1: a larger value means more of it, bigger tiles, more
    stages or more splits; -1: fewer)."""
    low = name.lower()
    if "stage" in low:
        return Role.STAGES, 1
    if _SPLIT.search(low):
        return Role.SPLITS, -1 if low.startswith("min") else 1
    if re.search(r"block|rows|chunk|tile", low):
        return Role.TILE, 1
    return Role.OTHER, 1


#: Each knob hint: the role it moves and which way (-1 less, +1 more).
_HINT_MOVES: dict[Hint, tuple[Role, int]] = {
    Hint.SMALLER_TILES: (Role.TILE, -1),
    Hint.FEWER_STAGES: (Role.STAGES, -1),
    Hint.MORE_SPLITS: (Role.SPLITS, +1),
}


def step(values: Sequence[Any], current: Any, way: int) -> Any | None:
    """The neighbouring listed value of a numeric knob in direction `way` (None at the end of the list,
    or when the values are not numbers)."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(nums) != len(values) or current not in nums:
        return None
    ordered = sorted(set(nums))
    i = ordered.index(current) + (1 if way > 0 else -1)
    return ordered[i] if 0 <= i < len(ordered) else None


def hint_change(hint: Hint, knobs: dict[str, Any], values: dict[str, Sequence[Any]]) -> dict[str, Any]:
    """Knob settings that carry out `hint` from `knobs`: every knob of the hint's role moved one listed
    value in the hint's direction (empty when the hint is not a knob move or nothing can move)."""
    if hint not in _HINT_MOVES:
        return {}
    role, way = _HINT_MOVES[hint]
    change = {}
    for name, listed in values.items():
        r, direction = knob_role(name)
        if r is not role or name not in knobs:
            continue
        new = step(listed, knobs[name], way * direction)
        if new is not None:
            change[name] = new
    return change
