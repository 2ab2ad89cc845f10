#!/usr/bin/env bash
# Session 28, call A: last-program merging gated on the batch (LAST_MERGE_MIN_BATCH) against the defaults, on the
# `full` set's weak 16- and 64-sequence rows and its long few-sequence guard rows; the pick under the judge on
# MLA `full` and `validate`; then GQA `validate` with what is left.
set -u
tar xf s28/head.tar
T0=$(date +%s); TOTAL=${TOTAL:-560}
left() { echo $(( TOTAL - ($(date +%s) - T0) )); }
source scripts/gpu_steps.sh; gpu_env
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
K='[{}, {"LAST_MERGE_MAX": 8}, {"LAST_MERGE_MAX": 8, "LAST_MERGE_MIN_BATCH": 16},
 {"LAST_MERGE_MAX": 8, "LAST_MERGE_MIN_BATCH": 32}, {"LAST_MERGE_MAX": 16, "LAST_MERGE_MIN_BATCH": 16},
 {"LAST_MERGE_MAX": 4, "LAST_MERGE_MIN_BATCH": 16},
 {"LAST_MERGE_MAX": 8, "LAST_MERGE_MIN_BATCH": 16, "PARTIAL_BF16": true}]'
timeout ${SWEEP_T:-180} python3 benchmarks/decode_sweep.py /tmp/sweep --tasks mla --budget-s ${SWEEP_B:-170} \
  --knobs "$K" --shapes full_b16_t2697,full_b16_t12777,full_b64_t9945,full_b64_t18638,full_b64_t44718,full_b1_t208,full_b1_t2708,b3_l6000,mix5_l50000,ragged40_l30-180000,b256_l512 \
  > /tmp/sweep.out 2>&1
echo "sweep done at $(( $(date +%s) - T0 ))s"
cp /tmp/sweep/decode_sweep.json $OUT/decode_sweep.json
grep -A12 "per variant" /tmp/sweep.out | head -12
P=${P-$(python3 s28/pick.py /tmp/sweep/decode_sweep.json)}
echo "pick: '$P'"
export MEASURE_COMMIT=${C:-?}
B=$(( $(left) - 10 ))
MEASURE_STEPS=bench TOTAL=$B BENCH_LIMIT=$(( B * 2 / 3 )) \
  SPECS="mla_decode:full:gpu_time:family:token_chunks${P:+:$P} mla_decode:validate:gpu_time:family:token_chunks${P:+:$P} gqa:validate:gpu_time:family:token_chunks" \
  bash scripts/decode_measure.sh /tmp/m > /tmp/m.out 2>&1
cp /tmp/m/summary.txt $OUT/m_summary.txt; cp /tmp/m/logs.tgz $OUT/m_logs.tgz 2>/dev/null
cp /tmp/m/baselines.sqlite $OUT/baselines.sqlite 2>/dev/null
tar czf $OUT/sweep_logs.tgz -C /tmp sweep sweep.out m.out 2>/dev/null
echo "bench done at $(( $(date +%s) - T0 ))s"
grep -v "^│" /tmp/m/summary.txt | cut -c1-250 | head -24
grep "^│" /tmp/m/summary.txt | cut -c1-130 | head -80
