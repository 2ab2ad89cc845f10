"""Summarise a KSEARCH_WINDOW_LOG file (ksearch.eval.trusted.judge): per workload, each part of the timed
windows (median, 90th percentile, max, ms) and whether the windows that lost time also had the host
withholding CPU (cgroup throttling, CPU pressure: ksearch.eval.clocks.hoststall).

    python3 scripts/window_log_summary.py windows.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def q(xs: list[float], f: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))]


def main(path: str) -> int:
    # by workload and call count: a run's log holds several kernels' windows of one workload, and only windows
    # of one kernel (one call count) compare with each other's fastest
    rows: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for line in open(path):
        if line.strip():
            d = json.loads(line)
            rows[(d["workload"], d["calls"])].append(d)
    for (name, calls), ws in rows.items():
        print(f"== {name}: {len(ws)} windows of {calls} calls; window ms median {statistics.median(w['ms'] for w in ws):.2f} "
              f"min {min(w['ms'] for w in ws):.2f} max {max(w['ms'] for w in ws):.2f}")
        parts = list(ws[0]["parts_ms"])
        for p in parts:
            xs = [w["parts_ms"].get(p, 0.0) for w in ws]
            print(f"   {p:<14} median {statistics.median(xs):8.3f}  p90 {q(xs, 0.9):8.3f}  max {max(xs):8.3f}")
        base = min(w["ms"] for w in ws)
        for w in ws:
            lost = w["ms"] - base
            host = w.get("host", {})
            worst = max((k for k in w["parts_ms"] if k != "calls"), key=lambda k: w["parts_ms"][k])
            print(f"   window {w['ms']:8.2f} ms  +{lost:6.2f}  worst part {worst} {w['parts_ms'][worst]:6.2f}  host {host}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
