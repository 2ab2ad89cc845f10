#!/usr/bin/env bash
# Session 20: issue 25's acceptance: a default TriMul run (one round), then its best timed GPUMode's way on the 7
# ranked cases and checked on all 18 test cases.
set -u
L=$OUT/tri; mkdir -p $L
LOG=$L; STEPS=""; source scripts/gpu_steps.sh; gpu_env
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/summary.txt
R=/tmp/tri_run; rm -rf $R
timeout --kill-after=10 ${RUN_LIMIT:-300} python3 -m ksearch run task=trimul_outgoing_h128 search.max_rounds=${ROUNDS:-1} \
  run.dir=$R run.live=false > $L/run_trimul.log 2>&1
echo "run rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
python3 scripts/run_summary.py $R 2>&1 | tee -a $L/summary.txt
sol=$R/best/solution.py
[ -f $sol ] || sol=s20/tri_default.py
echo "timing $sol" | tee -a $L/summary.txt
cp $sol $L/best_solution.py
timeout 150 python3 benchmarks/trimul_gpumode.py --solution $sol --json $L/gpumode.json > $L/gpumode.log 2>&1
echo "gpumode rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt; tail -20 $L/gpumode.log | tee -a $L/summary.txt
timeout 120 python3 benchmarks/trimul_gpumode.py --solution $sol --no-baselines --cases test --max-repeats 3 \
  --json $L/gpumode_test.json > $L/gpumode_test.log 2>&1
echo "test cases rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt; tail -25 $L/gpumode_test.log | tee -a $L/summary.txt
tar czf $L/run.tgz -C $R . 2>/dev/null
(cd $L && tar czf logs.tgz *.log && rm -f *.log)
