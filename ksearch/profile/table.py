"""A profile as a compact plain-text table, for model prompts (and any view that shows one)."""

from __future__ import annotations

from ksearch.profile.advice import advise
from ksearch.profile.model import Profile, ProfileReading


def _opt(v: object, fmt: str = "{}") -> str:
    return "-" if v is None else fmt.format(v)


def render_profile(reading: ProfileReading) -> str:
    """Kernels (registers, spills, shared memory, warps, stages, occupancy), then per workload the
    launches of one call with their GPU time and the % of the physical limit; or one line saying why
    there is no profile."""
    if reading.profile is None:
        return f"none ({reading.reason})" if reading.reason else "none"
    return render_table(reading.profile)


def render_table(profile: Profile) -> str:
    rows: list[tuple[str, ...]] = [("kernel", "regs/thread", "spill B", "smem KiB", "warps", "stages", "occupancy")]
    for k in profile.kernels:
        smem = None if k.shared_memory_bytes is None else k.shared_memory_bytes / 1024
        rows.append((k.name, _opt(k.registers_per_thread), _opt(k.spilled_bytes), _opt(smem, "{:.1f}"),
                     _opt(k.num_warps), _opt(k.num_stages),
                     _opt(None if k.occupancy is None else 100 * k.occupancy, "{:.0f}%")))
    lines = _columns(rows) if profile.kernels else []
    wrows: list[tuple[str, ...]] = [("workload", "launches (GPU us each)", "total us", "% of limit")]
    for w in profile.workloads:
        launches = ", ".join(f"{x.kernel} {x.gpu_time_us:.3g}" for x in w.launches) or "-"
        wrows.append((w.workload, launches, f"{w.gpu_time_us:.3g}" if w.launches else "-",
                      _opt(w.pct_of_limit, "{:.0f}%")))
    if profile.workloads:
        lines += _columns(wrows)
    advice = advise(profile)
    if advice:
        lines.append("reading: " + "; ".join(advice.reasons))
    return "\n".join(lines) or "empty profile"


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
