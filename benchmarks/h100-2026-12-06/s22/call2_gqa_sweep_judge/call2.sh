#!/usr/bin/env bash
# Session 22, call 2: issue 23's acceptance sets under the judge for one knob setting per decode task
# (MLA_KNOBS / GQA_KNOBS: KEY=VALUE ... for s22/render.py; SPECS: task:set:metric list).
set -u
L=$OUT/s22c2; mkdir -p $L
LOG=$L; STEPS=""; source scripts/gpu_steps.sh; gpu_env
T0=$(date +%s); TOTAL=${TOTAL:-540}
export KSEARCH_WINDOW_LOG=$L/windows.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/summary.txt
MLA=mla_paged_decode_h16_ckv512_kpe64_ps1; GQA=gqa_paged_decode_h32_kv4_d128_ps1
python3 s22/render.py $MLA token_chunks $L/mla_tc.py ${MLA_KNOBS:-} >> $L/summary.txt
python3 s22/render.py $GQA token_chunks $L/gqa_tc.py ${GQA_KNOBS:-} >> $L/summary.txt
echo "MLA_KNOBS=${MLA_KNOBS:-} GQA_KNOBS=${GQA_KNOBS:-}" | tee -a $L/summary.txt
for spec in ${SPECS:-mla:validate:gpu_time mla:validate:call_latency gqa:validate:gpu_time gqa:validate:call_latency mla:full:gpu_time}; do
  IFS=: read key set metric <<< "$spec"
  [ $key = mla ] && task=$MLA || task=$GQA
  left=$(( TOTAL - ($(date +%s) - T0) ))
  [ $left -lt 45 ] && { echo "skip $spec (${left}s left)" | tee -a $L/summary.txt; continue; }
  lim=$(( left < ${LIMIT:-200} ? left : ${LIMIT:-200} ))
  tag=${key}_${set}_${metric}
  timeout --kill-after=5 $lim python3 -m ksearch bench task=$task eval.workloads=$set eval.metric=$metric \
    eval.profile=false --solution $L/${key}_tc.py --out $L/$tag.json > $L/$tag.log 2>&1
  echo "$tag rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
  grep -E "geomean|failure|val_|full_" $L/$tag.log | tail -50 >> $L/summary.txt
done
python3 scripts/window_log_summary.py $L/windows.log > $L/window_summary.log 2>&1
save_baseline_cache "$L/baselines.sqlite"
(cd $L && tar czf logs.tgz *.log && rm -f *.log)
echo "total $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
