#!/usr/bin/env bash
# Session 20: issue 22's acceptance set under the judge: the prefill family at its defaults on `full`.
set -u
L=$OUT/pf_full; mkdir -p $L
LOG=$L; source scripts/gpu_steps.sh; gpu_env
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/summary.txt
export KSEARCH_WINDOW_LOG=$L/windows.log
timeout --kill-after=5 ${LIMIT:-560} python3 -m ksearch bench task=mla_paged_prefill_causal_h16_ckv512_kpe64_ps1 \
  eval.workloads=${SET:-full} eval.profile=false --solution s20/pf_default.cu --out $L/bench_full.json > $L/bench_full.log 2>&1
echo "bench ${SET:-full} rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
tail -60 $L/bench_full.log | tee -a $L/summary.txt
python3 scripts/window_log_summary.py $L/windows.log > $L/window_summary.log 2>&1
(cd $L && tar czf logs.tgz *.log && rm -f *.log)
