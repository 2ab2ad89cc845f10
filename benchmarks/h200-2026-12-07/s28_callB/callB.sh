#!/usr/bin/env bash
# Session 28, call B: the smoke at the session's head (env, peaks, GQA's baselines then its 6-round search, the
# self-check), then GQA decode's `full` set under the judge with what is left.
set -u
tar xf s28/head.tar
T0=$(date +%s); TOTAL=${TOTAL:-570}
left() { echo $(( TOTAL - ($(date +%s) - T0) )); }
SMOKE_COMMIT=${C:-?} SMOKE_STEPS="${SMOKE_STEPS:-env peaks run_gqa selfcheck}" bash scripts/gpu_smoke.sh /tmp/smoke > /tmp/smoke.out 2>&1
cat /tmp/smoke/summary.txt
cp /tmp/smoke/summary.txt $OUT/smoke_summary.txt; cp /tmp/smoke/logs.tgz $OUT/smoke_logs.tgz 2>/dev/null
cp /tmp/smoke/baselines.sqlite $OUT/baselines.sqlite 2>/dev/null
cp /tmp/smoke/peaks.json $OUT/peaks.json 2>/dev/null
echo "smoke done at $(( $(date +%s) - T0 ))s"
B=$(( $(left) - 10 ))
if [ $B -gt 120 ]; then
  source scripts/gpu_steps.sh; gpu_env
  export MEASURE_COMMIT=${C:-?}
  MEASURE_STEPS=bench TOTAL=$B BENCH_LIMIT=$B SPECS="${SPECS:-gqa:full:gpu_time:family:token_chunks}" \
    bash scripts/decode_measure.sh /tmp/m > /tmp/m.out 2>&1
  cp /tmp/m/summary.txt $OUT/m_summary.txt; cp /tmp/m/logs.tgz $OUT/m_logs.tgz 2>/dev/null
  grep -v "^│" /tmp/m/summary.txt | cut -c1-250 | head -24
  grep "^│" /tmp/m/summary.txt | cut -c1-130 | head -70
fi
echo "total $(( $(date +%s) - T0 ))s"
