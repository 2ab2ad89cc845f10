import json, math, sys
run = sys.argv[1]
recs = [json.loads(l) for l in open(f"{run}/journal.jsonl")]
base = {}
for r in recs:
    if r["kind"] == "baseline":
        base.update(r["value"]["variants"]["flashinfer_auto"])
from ksearch.task import load_task
t = load_task("mla_paged_prefill_causal_h16_ckv512_kpe64_ps1")
wl = {w.name: w for s in t.workload_sets().values() for w in s}
def flops(w):
    q, kv = w.params["q_lens"], w.params["kv_lens"]
    pairs = sum(sum(kvl - ql + i + 1 for i in range(ql)) for ql, kvl in zip(q, kv))
    return pairs * 16 * (576 + 512) * 2
for r in recs:
    if r["kind"] in ("evaluation", "validate"):
        g, g3 = [], []
        print("==", r["kind"], r["value"]["solution_id"])
        for w in r["value"]["workloads"]:
            b = base.get(w["workload"]); k = w["latency_ms"]
            ratio = b / k if b and k else None
            W = wl[w["workload"]]
            tq = sum(W.params["q_lens"])
            if ratio:
                g.append(ratio)
                if tq >= 3000: g3.append(ratio)
            tf = flops(W) / (k * 1e-3) / 1e12
            print(f'| {w["workload"]} | {tq} | {k:.4f} | {b:.4f} | {ratio:.3f} | {tf:.0f} |')
        geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
        print(f"geomean {geo(g):.3f} over {len(g)}; >=3k tokens {geo(g3):.3f} over {len(g3)}, worst {min(g3) if g3 else None}")
