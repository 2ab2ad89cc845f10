#!/usr/bin/env bash
# Session 20: the judge's self-check at e55e12e (graphs of <= 500 calls), then issue 23's acceptance sets under the
# judge: token_chunks at its defaults (each decode task's first pick) on `validate`, GPU time, then eager latency.
set -u
L=$OUT/dec; mkdir -p $L
LOG=$L; STEPS=""; source scripts/gpu_steps.sh; gpu_env
T0=$(date +%s)
TOTAL=${TOTAL:-400}
export KSEARCH_WINDOW_LOG=$L/windows.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/summary.txt
timeout --kill-after=5 110 python3 -m ksearch bench task=gqa_paged_decode_h32_kv4_d128_ps1 eval.workloads=feedback \
  --solution s20/gqa_tc.py --self-check --out $L/selfcheck.json > $L/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt; tail -4 $L/selfcheck.log >> $L/summary.txt
for spec in "gqa_paged_decode_h32_kv4_d128_ps1:gqa_tc:gpu_time" "mla_paged_decode_h16_ckv512_kpe64_ps1:mla_tc:gpu_time" \
            "mla_paged_decode_h16_ckv512_kpe64_ps1:mla_tc:call_latency" "gqa_paged_decode_h32_kv4_d128_ps1:gqa_tc:call_latency"; do
  IFS=: read task sol metric <<< "$spec"
  left=$(( TOTAL - ($(date +%s) - T0) ))
  [ $left -lt 60 ] && { echo "skip $spec (${left}s left)" | tee -a $L/summary.txt; continue; }
  lim=$(( left < ${LIMIT:-100} ? left : ${LIMIT:-100} ))
  tag=${sol}_validate_${metric}
  timeout --kill-after=5 $lim python3 -m ksearch bench task=$task eval.workloads=validate eval.metric=$metric \
    eval.profile=false --solution s20/$sol.py --out $L/$tag.json > $L/$tag.log 2>&1
  echo "$tag rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
  grep -E "geomean|failure|val_" $L/$tag.log | tail -14 >> $L/summary.txt
done
python3 scripts/window_log_summary.py $L/windows.log > $L/window_summary.log 2>&1
save_baseline_cache "$L/baselines.sqlite"
(cd $L && tar czf logs.tgz *.log && rm -f *.log)
