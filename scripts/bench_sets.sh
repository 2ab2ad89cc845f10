#!/usr/bin/env bash
# One kernel file under the judge on several workload sets and clocks, within one device call's time:
#
#   bash scripts/bench_sets.sh LOGDIR KEY:SET:METRIC:SOLUTION ...
#   e.g. TOTAL=500 bash scripts/bench_sets.sh $OUT/b mla_decode:full:gpu_time:run/best/solution.py \
#          gqa:validate:call_latency:gqa_tc.py
#
# KEY is gqa, mla_decode, prefill, moe or trimul; SET a workload set of the task (feedback, validate, full, ...);
# METRIC gpu_time or call_latency; SOLUTION a kernel file, or family:NAME[:KEY=VALUE,...] for a catalog family at
# those knobs (`ksearch bench --family`), e.g. mla_decode:full:gpu_time:family:token_chunks. Each spec runs
# `python3 -m ksearch bench task=... eval.workloads=SET eval.metric=METRIC eval.profile=false BENCH_ARGS
# --solution SOLUTION (or --family ...) --out LOGDIR/TAG.json`, TAG being KEY_SET_METRIC (with the family spec
# appended for a family), its output in LOGDIR/TAG.log, one summary line plus the per-workload rows in
# LOGDIR/summary.txt. The specs share TOTAL seconds (default 540, counted from the start) in order; each gets at
# most LIMIT (default: what is left); a spec that would start with under 40 s left is skipped and says so.
# BENCH_ARGS defaults to --no-reference (the PyTorch reference's column is information only and costs device time
# on large sets). Source gpu_env (scripts/gpu_steps.sh) before it on the device machine, or let it do so (it does
# when .gpu is present and PYTHONPATH is unset).
set -uo pipefail
cd "$(dirname "$0")/.."
L=${1:?usage: bench_sets.sh LOGDIR KEY:SET:METRIC:SOLUTION ...}; shift
mkdir -p "$L"
if [ -z "${PYTHONPATH:-}" ]; then LOG=$L; STEPS=""; source scripts/gpu_steps.sh; gpu_env; fi
declare -A TASKS=([gqa]=gqa_paged_decode_h32_kv4_d128_ps1 [mla_decode]=mla_paged_decode_h16_ckv512_kpe64_ps1
                  [moe]=moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048
                  [prefill]=mla_paged_prefill_causal_h16_ckv512_kpe64_ps1 [trimul]=trimul_outgoing_h128)
T0=$(date +%s); TOTAL=${TOTAL:-540}; rc_all=0
# TOTAL and LIMIT are whole seconds: a caller's arithmetic that went negative (session 25: LIMIT=-148) reached
# `timeout` as an option and lost the call's bench.
for v in TOTAL ${LIMIT:+LIMIT}; do
  if ! [[ ${!v} =~ ^[0-9]+$ ]]; then
    echo "bench_sets: $v must be a whole number of seconds, got '${!v}'" | tee -a "$L/summary.txt"; exit 2
  fi
done
for spec in "$@"; do
  IFS=: read -r key set metric sol <<< "$spec"
  task=${TASKS[$key]:-}
  if [ -z "$task" ] || [ -z "$sol" ]; then
    echo "bench_sets: '$spec' is not KEY:SET:METRIC:SOLUTION with KEY one of ${!TASKS[*]}" | tee -a "$L/summary.txt"
    rc_all=2; continue
  fi
  left=$(( TOTAL - ($(date +%s) - T0) ))
  if [ $left -lt 40 ]; then echo "skip  ${key}_${set}_${metric} (${left}s left of ${TOTAL}s)" | tee -a "$L/summary.txt"; continue; fi
  lim=$(( left < ${LIMIT:-$left} ? left : ${LIMIT:-$left} ))
  tag=${key}_${set}_${metric}
  if [[ $sol == family:* ]]; then
    fam=${sol#family:}; what=(--family "$fam"); tag=${tag}_${fam//[^A-Za-z0-9]/_}
  else
    what=(--solution "$sol")
  fi
  timeout --kill-after=5 $lim python3 -m ksearch bench task=$task eval.workloads=$set eval.metric=$metric \
    eval.profile=false ${BENCH_ARGS---no-reference} "${what[@]}" --out "$L/$tag.json" > "$L/$tag.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && rc_all=1
  [ $rc -eq 124 ] && why=" (over its ${lim}s)" || why=""
  echo "bench $tag rc=$rc$why at $(( $(date +%s) - T0 ))s ($sol)" | tee -a "$L/summary.txt"
  grep -E "geomean|failure|INCORRECT|val_|full_|fb_" "$L/$tag.log" | tail -70 >> "$L/summary.txt"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && tail -2 "$L/$tag.log" | sed 's/^/    /' >> "$L/summary.txt"
done
exit $rc_all
