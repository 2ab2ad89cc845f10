"""Best token_chunks variant of a decode_sweep.json as `KEY=VALUE,...` ('' = the first variant, the defaults):
the best geomean over the shapes every variant was timed on, when it beats the defaults by MARGIN and its worst
row is not below 0.97 x the defaults' worst."""
import json
import math
import sys

doc = json.load(open(sys.argv[1]))
margin = float(sys.argv[2]) if len(sys.argv) > 2 else 1.01
for task in doc["tasks"].values():
    rows = [r for r in task["rows"] if r["status"] == "ok" and r["vs_fi"]]
    shapes = {r["shape"] for r in rows}
    knobs = {v["name"]: v["knobs"] for v in task["variants"] if v["family"] == "token_chunks"}
    score, worst = {}, {}
    for name in knobs:
        mine = [r["vs_fi"] for r in rows if r["variant"] == name]
        if len(mine) == len(shapes):        # timed on every shape
            score[name] = math.exp(sum(map(math.log, mine)) / len(mine))
            worst[name] = min(mine)
    base = "token_chunks"
    ok = {n: s for n, s in score.items() if worst[n] >= 0.97 * worst.get(base, 0)}
    best = max(ok, key=ok.get) if ok else base
    for n in sorted(score, key=score.get, reverse=True):
        print(f"  {score[n]:.3f} / {worst[n]:.3f}  {n}", file=sys.stderr)
    print(f"pick: default {score.get(base, 0):.3f}, best {best} {score.get(best, 0):.3f}", file=sys.stderr)
    if best != base and score[best] >= margin * score.get(base, 0):
        print(",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in knobs[best].items()))
    else:
        print("")
