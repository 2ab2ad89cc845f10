#!/usr/bin/env bash
# What issue 20 item 5 asks to be measured on the H200, in one or two device calls:
#
#   bash scripts/gpu_measure.sh LOGDIR                          # every step (about 15 minutes: use two calls)
#   MEASURE_STEPS="overhead cv_gqa cv_mla_decode cv_prefill cv_moe" bash scripts/gpu_measure.sh $OUT
#   MEASURE_STEPS="self_gqa self_mla_decode self_prefill self_moe cudagraph" bash scripts/gpu_measure.sh $OUT
#
# Steps (each logged to LOGDIR/<step>.log, JSON beside it, one line each in LOGDIR/summary.txt):
#   overhead        per-candidate cost of the fork server's isolation with CUDA (tests/test_forkserver_gpu.py, -s)
#   cv_TASK         `ksearch bench --baseline-repeats N` (N=10): the best baseline's CV over N fresh worker
#                   processes on the feedback set (the acceptance: < 2% on every workload)
#   self_TASK       `ksearch bench --self-check` on the feedback set: the first family twice within 3%
#   cudagraph       MLA decode: a 6-round search's best (or MEASURE_MLA_RUN=DIR) in `ksearch bench`, then
#                   benchmarks/cudagraph_check.py (Triton's do_bench_cudagraph) on the same kernel: within 10%
# TASK is one of the four tasks with a FlashInfer baseline: gqa, mla_decode, prefill, moe.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${1:?usage: gpu_measure.sh LOGDIR}
mkdir -p "$LOG"
STEPS=${MEASURE_STEPS:-}
source scripts/gpu_steps.sh
gpu_env
REPEATS=${MEASURE_REPEATS:-10}
T0=$(date +%s)
: > "$LOG/summary.txt"
summary "gpu_measure at ${SMOKE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')} on $(date -u +%FT%TZ)"
declare -A TASKS=([gqa]=gqa_paged_decode_h32_kv4_d128_ps1 [mla_decode]=mla_paged_decode_h16_ckv512_kpe64_ps1
                  [moe]=moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048
                  [prefill]=mla_paged_prefill_causal_h16_ckv512_kpe64_ps1)

step overhead 150 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_forkserver_gpu.py
wanted overhead && grep -iE "median|overhead|ms" "$LOG/overhead.log" | tail -8 | sed 's/^/      /'

for key in gqa mla_decode prefill moe; do
  step cv_$key ${MEASURE_CV_LIMIT:-150} python3 -m ksearch bench task=${TASKS[$key]} eval.workloads=feedback \
    --baseline-repeats $REPEATS --out "$LOG/cv_$key.json"
  wanted cv_$key && [ -f "$LOG/cv_$key.json" ] && python3 - "$LOG/cv_$key.json" <<'PY' | tee -a "$LOG/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
cv = d["max_cv_best"]
print(f"      {d['task']}: largest CV of the best baseline over {d['repeats']} processes {100 * cv:.2f}% "
      f"({'within' if cv < 0.02 else 'NOT within'} 2%)")
PY
done

for key in gqa mla_decode prefill moe; do
  step self_$key ${MEASURE_SELF_LIMIT:-150} python3 -m ksearch bench task=${TASKS[$key]} eval.workloads=feedback \
    --self-check --out "$LOG/self_$key.json"
  wanted self_$key && [ -f "$LOG/self_$key.json" ] && python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['self_check'] or {}; print('      ' + c.get('message', 'no self-check pairs'))" \
    "$LOG/self_$key.json" | tee -a "$LOG/summary.txt"
done

if wanted cudagraph; then
  run=${MEASURE_MLA_RUN:-}
  if [ -z "$run" ]; then
    run=/tmp/measure_mla_run; rm -rf $run
    step cudagraph_search 240 python3 -m ksearch run task=${TASKS[mla_decode]} search.max_rounds=6 run.dir=$run run.live=false
  fi
  step cudagraph_bench 120 python3 -m ksearch bench task=${TASKS[mla_decode]} eval.workloads=feedback --run "$run" \
    --out "$LOG/cudagraph_bench.json"
  step cudagraph 150 python3 benchmarks/cudagraph_check.py task=${TASKS[mla_decode]} eval.workloads=feedback \
    --solution "$run/best/solution.py" --bench-json "$LOG/cudagraph_bench.json"
  tail -4 "$LOG/cudagraph.log" 2>/dev/null | sed 's/^/      /' | tee -a "$LOG/summary.txt"
fi

pack_logs
summary "total $(( $(date +%s) - T0 ))s"
if [ ${#failed[@]} -gt 0 ]; then
  summary "gpu_measure: FAILED: ${failed[*]}"
  exit 1
fi
summary "gpu_measure: all steps passed"
