"""The host's own account of CPU time it withheld from this machine's processes during a clock reading.

On the H100 host (2026-12-05) a judge's window lost 2-45 ms at a time, in whichever CPU-bound phase was
running (the judge copying outputs, the candidate generating inputs), about once per window: a stall of
the host, not slow work. Two kernel counters say whether the host withheld CPU time: the control group's
CPU throttling (cpu.stat: a quota used up, every thread of the group waits for the next period) and CPU
pressure (PSI, /proc/pressure/cpu "some": time runnable tasks waited for a CPU). The candidate can raise
them (it can burn CPU), never lower them; the judge reads them before its clock starts and after it ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
PRESSURE = Path("/proc/pressure/cpu")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def cpu_stat() -> dict[str, int]:
    """This process's control group's cpu.stat counters (cgroup v2, else v1); empty where unreadable."""
    text = _read(CGROUP / "cpu.stat") or _read(CGROUP / "cpu" / "cpu.stat")
    fields: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            fields[parts[0]] = int(parts[1])
    return fields


def _throttling() -> tuple[int | None, int | None]:
    """(throttled periods, throttled µs) of this process's control group, None where unreadable."""
    fields = cpu_stat()
    usec = fields.get("throttled_usec")
    if usec is None and "throttled_time" in fields:             # v1 counts nanoseconds
        usec = fields["throttled_time"] // 1000
    return fields.get("nr_throttled"), usec


def pressure_us() -> int | None:
    """The host's CPU pressure so far: µs runnable tasks waited for a CPU (PSI "some" total), None without PSI."""
    for line in _read(PRESSURE).splitlines():
        if line.startswith("some"):
            for part in line.split():
                if part.startswith("total="):
                    return int(part[6:])
    return None


@dataclass(frozen=True)
class HostCounters:
    """One reading of the counters (None: this host does not offer it)."""

    throttled_periods: int | None
    throttled_us: int | None
    pressure_us: int | None

    @classmethod
    def read(cls) -> HostCounters:
        periods, usec = _throttling()
        return cls(periods, usec, pressure_us())

    def since(self, before: HostCounters) -> dict[str, float]:
        """What the host withheld between `before` and this reading: throttled periods, throttled ms and
        CPU-pressure ms, each only where both readings have it."""
        out: dict[str, float] = {}
        if self.throttled_periods is not None and before.throttled_periods is not None:
            out["throttled_periods"] = self.throttled_periods - before.throttled_periods
        if self.throttled_us is not None and before.throttled_us is not None:
            out["throttled_ms"] = (self.throttled_us - before.throttled_us) / 1e3
        if self.pressure_us is not None and before.pressure_us is not None:
            out["pressure_ms"] = (self.pressure_us - before.pressure_us) / 1e3
        return out
