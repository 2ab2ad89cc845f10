#!/usr/bin/env bash
# Session 22, short call (little device time left): MLA decode's merge-grid question only. The first six settings
# of token_chunks' grid on six timing shapes against FlashInfer.
set -u
L=$OUT/s22s; mkdir -p $L
LOG=$L; STEPS=""; source scripts/gpu_steps.sh; gpu_env
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $L/summary.txt
python3 -c "import sys,torch,triton,flashinfer; print(sys.version.split()[0], torch.__version__, triton.__version__, flashinfer.__version__)" | tee -a $L/summary.txt
timeout --kill-after=10 ${SWEEP_LIMIT:-220} python3 benchmarks/decode_sweep.py $L/sw --tasks mla --max-variants 6 \
  --shapes b256_l512,b256_l2048,b16_l1500,b128_l8192,b1_l546,ragged40_l30-180000 --budget-s ${SWEEP_BUDGET:-200} > $L/sweep.log 2>&1
echo "sweep rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
cp $L/sw/decode_sweep.txt $L/ 2>/dev/null
(cd $L && tar czf logs.tgz *.log && rm -f *.log)
echo "total $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
