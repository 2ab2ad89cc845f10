import json, sys, math
from pathlib import Path
d = Path(sys.argv[1])
fi = json.loads((d / "fi.json").read_text()) if (d / "fi.json").exists() else {}
subs = {}
for f in sorted(d.glob("*.json")):
    if f.name != "fi.json":
        subs[f.stem] = json.loads(f.read_text())
for k, v in subs.items():
    bad = {n: c for n, c in v.get("checks", {}).items() if not c.get("ok")}
    print(f"{k}: correct={v.get('correct')} failing={bad}")
names = list(fi)
print("| workload | q | FI ms | " + " | ".join(f"{k} ms | vs FI | TF/s" for k in subs) + " |")
print("|---|---|---|" + "---|---|---|" * len(subs))
ge = {k: [] for k in subs}
for n in names:
    f = fi[n].get("ms")
    row = [n, str(fi[n].get("q", "")), f"{f:.4f}" if f else "err"]
    for k, v in subs.items():
        t = v.get("timing", {}).get(n, {})
        ms = t.get("ms")
        if ms and f:
            r = f / ms
            row += [f"{ms:.4f}", f"{r:.2f}x", f"{t['tflops']:.0f}" if t.get("tflops") else "-"]
            if (fi[n].get("q") or 0) >= 3000:
                ge[k].append(r)
        else:
            row += ["-", "-", "-"]
    print("| " + " | ".join(row) + " |")
for k, rs in ge.items():
    if rs:
        print(f"{k}: >=3k rows {len(rs)}, geomean {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}x, worst {min(rs):.2f}x")
