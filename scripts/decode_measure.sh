#!/usr/bin/env bash
# Issue 23's decode measurements in one device call, in order of what they decide, within TOTAL seconds:
#
#   TOTAL=540 bash scripts/decode_measure.sh $OUT            # on the device machine
#
# Steps (scripts/gpu_steps.sh: a limit each, output in LOGDIR/<step>.log, one summary line each):
#   bench   SPECS under the judge (scripts/bench_sets.sh; default: MLA decode's, then GQA decode's `full` set,
#           GPU time, token_chunks at its defaults), each within BENCH_LIMIT s (default 300: on the H100 MLA's 51
#           workloads did not finish in 206 s with the PyTorch reference timed; bench_sets leaves it untimed)
#   sweep   the token_chunks knob sweep (benchmarks/decode_sweep.py: the first VARIANTS settings of each task's
#           grid on SHAPES), in what is left when that is over a minute
#   profile where one call's GPU time goes, kernel by kernel (benchmarks/decode_profile.py): PROFILE_TASK (default
#           mla) on PROFILE_SHAPES at the defaults, and at PROFILE_VS too when set (a JSON knob setting, e.g.
#           '{"PDL": false}', or the word flashinfer for FlashInfer's own kernels); before the sweep, 90 s at
#           most; only when MEASURE_STEPS names it
# MEASURE_STEPS="sweep" runs a subset. Sessions 22-24 each wrote this call anew as a scratch script. The logs and
# results are packed into LOGDIR/logs.tgz (a device call returns only a few files); LOGDIR/summary.txt holds the
# per-workload rows and the sweep's table.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${1:?usage: decode_measure.sh LOGDIR}
mkdir -p "$LOG"
STEPS=${MEASURE_STEPS:-}
source scripts/gpu_steps.sh
gpu_env
T0=$(date +%s); TOTAL=${TOTAL:-540}
: > "$LOG/summary.txt"
export KSEARCH_WINDOW_LOG=$LOG/windows.log
summary "decode_measure at ${MEASURE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')} on $(date -u +%FT%TZ)"
summary "$(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
summary "$(python3 -c "import sys,torch,triton,flashinfer; print(sys.version.split()[0], torch.__version__, triton.__version__, flashinfer.__version__)" 2>&1 | tail -1)"
left() { echo $(( TOTAL - ($(date +%s) - T0) )); }

SPECS=${SPECS:-mla_decode:full:gpu_time:family:token_chunks gqa:full:gpu_time:family:token_chunks}
budget=$(( $(left) - 30 ))
# shellcheck disable=SC2086  # SPECS is a list
step bench $(( budget + 10 )) env TOTAL=$budget LIMIT="${BENCH_LIMIT:-300}" bash scripts/bench_sets.sh "$LOG/bench" $SPECS
cat "$LOG/bench/summary.txt" >> "$LOG/summary.txt" 2>/dev/null

if [[ " $STEPS " == *" profile "* ]]; then     # only when named
  PROFILE_SHAPES=${PROFILE_SHAPES:-full_b64_t9945,full_b64_t27332,full_b16_t3817,b256_l512}
  step profile 90 python3 benchmarks/decode_profile.py "${PROFILE_TASK:-mla}" "$PROFILE_SHAPES" '{}' ${PROFILE_VS:+"$PROFILE_VS"}
  cat "$LOG/profile.log" >> "$LOG/summary.txt" 2>/dev/null
fi

budget=$(( $(left) - 30 ))
if [ $budget -gt 60 ]; then
  step sweep $(( budget + 10 )) python3 benchmarks/decode_sweep.py "$LOG/sweep" --tasks "${TASKS:-mla,gqa}" \
    --max-variants "${VARIANTS:-6}" --budget-s $(( budget - 10 )) \
    --shapes "${SHAPES:-b256_l512,b16_l1500,b128_l8192,b1_l546,ragged40_l30-180000,b256_l2048,b3_l6000,mix5_l50000,b64_l4096}"
  cat "$LOG/sweep/decode_sweep.txt" >> "$LOG/summary.txt" 2>/dev/null
elif wanted sweep; then
  summary "skip  sweep (${budget}s left of ${TOTAL}s)"
fi

wanted bench && python3 scripts/window_log_summary.py "$LOG/windows.log" > "$LOG/window_summary.log" 2>&1
save_baseline_cache "$LOG/baselines.sqlite"
pack_logs bench sweep
summary "total $(( $(date +%s) - T0 ))s"
if [ ${#failed[@]} -gt 0 ]; then
  summary "decode_measure: FAILED: ${failed[*]}"
  exit 1
fi
