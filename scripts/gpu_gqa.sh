#!/usr/bin/env bash
# Device session for GQA decode. Usage: scripts/gpu_gqa.sh search|full
#   search: environment, bench of every family on feedback, a feedback search (run dir tarred into $OUT)
#   full:   bench of a run's best kernel on the 48 full workloads (expects $OUT/../run_gqa or RUN=...)
set -uo pipefail
source .gpu/activate.sh .gpu
export PYTHONPATH=.:${PYTHONPATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T=gqa_paged_decode_h32_kv4_d128_ps1
if [ "${1:-search}" = search ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv
  python3 -c "import torch, triton, flashinfer; print('torch', torch.__version__, 'triton', triton.__version__, 'flashinfer', flashinfer.__version__)"
  timeout 240 python3 -m ksearch.cli bench task=$T eval.workloads=feedback --families --out $OUT/bench_families_feedback.json > $OUT/bench_families.log 2>&1
  tail -40 $OUT/bench_families.log
  timeout ${RUN_TIMEOUT:-300} python3 -m ksearch.cli run task=$T eval.workloads=feedback search.max_rounds=${ROUNDS:-20} run.dir=/tmp/run_gqa run.live=false > $OUT/run.log 2>&1
  tail -45 $OUT/run.log
  tar czf $OUT/run_gqa.tgz -C /tmp run_gqa
else
  mkdir -p /tmp/run_gqa && tar xzf ${RUN:-run_gqa.tgz} -C /tmp
  timeout 500 python3 -m ksearch.cli bench task=$T eval.workloads=full --run /tmp/run_gqa --families --out $OUT/bench_full.json > $OUT/bench_full.log 2>&1
  tail -120 $OUT/bench_full.log
fi
