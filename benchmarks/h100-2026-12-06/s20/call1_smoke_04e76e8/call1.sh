#!/usr/bin/env bash
# Session 20, device call 1: a graph-replay intercept diagnosis (issue 21's self-check), then the smoke at HEAD (the
# prefill kernel's GPU tests, a one-round default prefill run).
set -u
source .gpu/activate.sh .gpu
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 90 python3 s20/graph_intercept.py > $OUT/graph_intercept.txt 2>&1; cat $OUT/graph_intercept.txt
SMOKE_COMMIT=${SMOKE_COMMIT:-?} SMOKE_STEPS="env pytest_cuda run_prefill" SMOKE_PYTEST_PATHS=tests/test_prefill_cuda_kernel.py \
  SMOKE_PYTEST_CUDA_LIMIT=170 SMOKE_ROUNDS=1 SMOKE_RUN_LIMIT=${RUN_LIMIT:-320} bash scripts/gpu_smoke.sh $OUT/smoke
cat $OUT/smoke/summary.txt
