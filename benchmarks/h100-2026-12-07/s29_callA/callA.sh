#!/usr/bin/env bash
# Session 29, call A: MLA decode's LAST_MERGE_COLS (column-sliced last-program merge) against the defaults on
# session 28's 11 shapes, the pick under the judge on MLA `full` and `validate`; TriMul's two catalog defaults
# on the H200 (GPUMode timing) for issue 25's starting point.
# (s29/pick.py was a copy of benchmarks/h200-2026-12-07/s28_callA/pick.py.)
set -u
tar xf s29/head.tar
T0=$(date +%s); TOTAL=${TOTAL:-570}
left() { echo $(( TOTAL - ($(date +%s) - T0) )); }
source scripts/gpu_steps.sh; gpu_env
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,uuid --format=csv,noheader
python3 -c "import sys,torch,triton,flashinfer; print(sys.version.split()[0], torch.__version__, triton.__version__, flashinfer.__version__)"
timeout 100 python3 benchmarks/trimul_sweep.py /tmp/tri --only cublas_defaults,gemm_defaults --no-test-check \
  --budget-s 80 > /tmp/tri.out 2>&1
echo "trimul done at $(( $(date +%s) - T0 ))s"; cat /tmp/tri.out | cut -c1-200; cp /tmp/tri/trimul_sweep.json $OUT/ 2>/dev/null
K='[{}, {"LAST_MERGE_COLS":256}, {"LAST_MERGE_COLS":256,"LAST_MERGE_MIN_BATCH":0},
 {"LAST_MERGE_COLS":256,"LAST_MERGE_MIN_BATCH":16}, {"LAST_MERGE_COLS":128,"LAST_MERGE_MIN_BATCH":16}]'
timeout ${SWEEP_T:-170} python3 benchmarks/decode_sweep.py /tmp/sweep --tasks mla --budget-s ${SWEEP_B:-160} \
  --knobs "$K" --shapes full_b16_t2697,full_b16_t12777,full_b64_t9945,full_b64_t18638,full_b64_t44718,full_b1_t208,full_b1_t2708,b3_l6000,mix5_l50000,ragged40_l30-180000,b256_l512 \
  > /tmp/sweep.out 2>&1
echo "sweep done at $(( $(date +%s) - T0 ))s"
cp /tmp/sweep/decode_sweep.json $OUT/decode_sweep.json
grep -A12 "per variant" /tmp/sweep.out | head -12
P=${P-$(python3 s29/pick.py /tmp/sweep/decode_sweep.json)}
echo "pick: '$P'"
tar czf $OUT/fi_cache.tgz -C ~/.cache flashinfer 2>/dev/null
export MEASURE_COMMIT=${C:-?}
B=$(( $(left) - 12 ))
if [ -n "$P" ]; then
MEASURE_STEPS=bench TOTAL=$B BENCH_LIMIT=$(( B * 2 / 3 )) \
  SPECS="mla_decode:full:gpu_time:family:token_chunks:$P mla_decode:validate:gpu_time:family:token_chunks:$P" \
  bash scripts/decode_measure.sh /tmp/m > /tmp/m.out 2>&1
cp /tmp/m/summary.txt $OUT/m_summary.txt; cp /tmp/m/logs.tgz $OUT/m_logs.tgz 2>/dev/null
cp /tmp/m/baselines.sqlite $OUT/baselines.sqlite 2>/dev/null
fi
tar czf $OUT/sweep_logs.tgz -C /tmp sweep sweep.out tri.out m.out 2>/dev/null
echo "bench done at $(( $(date +%s) - T0 ))s"
[ -f /tmp/m/summary.txt ] && { grep -v "^│" /tmp/m/summary.txt | cut -c1-250 | head -24; grep "^│" /tmp/m/summary.txt | cut -c1-130 | head -80; }
true
