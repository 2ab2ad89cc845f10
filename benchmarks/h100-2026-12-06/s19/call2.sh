#!/usr/bin/env bash
# Session 19, device call 2: KV_SPLIT refined (one wave of chunks, a separate kernel instantiation) against FlashInfer,
# then the judge on validate (ksearch bench) with what time is left.
set -u
T0=$(date +%s)
VARS="p1s" bash s19/call_pf.sh
source .gpu/activate.sh .gpu
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
left=$(( ${TOTAL:-330} - ($(date +%s) - T0) ))
L=$OUT/judge; mkdir -p $L
echo "judge validate with ${left}s left" | tee $L/summary.txt
if [ $left -gt 90 ]; then
  export KSEARCH_WINDOW_LOG=$L/windows.log
  timeout --kill-after=5 $left python3 -m ksearch bench task=mla_paged_prefill_causal_h16_ckv512_kpe64_ps1 \
    eval.workloads=validate --solution s19/v/p1s.cu --out $L/bench_validate.json > $L/bench_validate.log 2>&1
  echo "bench validate rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
  tail -25 $L/bench_validate.log | tee -a $L/summary.txt
  (cd $L && tar czf logs.tgz *.log && rm -f *.log)
fi
