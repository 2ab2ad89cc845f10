#!/usr/bin/env bash
# Session 29, call B (issue 25): gemm_input_pass's resident input mode (x read once, the five projections from
# fp16 row chunks on chip) against the catalog defaults, GPUMode timing on the 7 ranked cases; the best two
# checked on the 18 test cases.
set -u
tar xf s29/head.tar
T0=$(date +%s)
source scripts/gpu_steps.sh; gpu_env
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,uuid --format=csv,noheader
ONLY=${ONLY:-cublas_defaults,gemm_defaults,gemm_hmajor,gemm_hmajor_p2,gemm_hmajor_p1,gemm_p2,gemm_hmajor_p2_out32,gemm_hmajor_p2_bk128,res2_hmajor,res2_bm128_bn64_w8}
timeout ${SWEEP_T:-400} python3 benchmarks/trimul_sweep.py /tmp/tri --only $ONLY --budget-s ${SWEEP_B:-300} > /tmp/tri.out 2>&1
echo "trimul done at $(( $(date +%s) - T0 ))s rc=$?"
cp /tmp/tri/trimul_sweep.json $OUT/ 2>/dev/null; cp /tmp/tri.out $OUT/trimul_sweep.log
cut -c1-220 /tmp/tri.out | grep -v Warning | tail -60
