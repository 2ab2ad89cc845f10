#!/usr/bin/env bash
# Session 18, device call 2: the judge's longer windows and sparse MLA inputs, on MLA prefill.
set -u
source .gpu/activate.sh .gpu
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
[ -f .gpu/fi_cache.tgz ] && mkdir -p ~/.cache && tar xzf .gpu/fi_cache.tgz -C ~/.cache 2>/dev/null
L=$OUT/c2; mkdir -p $L
export KSEARCH_WINDOW_LOG=$L/windows.log
T=mla_paged_prefill_causal_h16_ckv512_kpe64_ps1
T0=$(date +%s)
echo "commit ${COMMIT:-?} $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)" | tee $L/summary.txt
timeout --kill-after=10 ${BENCH_LIMIT:-270} python3 -m ksearch bench task=$T eval.workloads=full \
  --solution s18/prefill_cuda.cu --out $L/bench_full.json > $L/bench_full.log 2>&1
echo "bench full rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
left=$(( ${TOTAL:-560} - ($(date +%s) - T0) ))
timeout --kill-after=10 $left python3 -m ksearch run task=$T search.max_rounds=${ROUNDS:-2} \
  run.dir=/tmp/r_prefill run.live=false > $L/run_prefill.log 2>&1
echo "run rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
python3 scripts/run_summary.py /tmp/r_prefill >> $L/summary.txt 2>&1
cp /tmp/r_prefill/best/report.json $L/run_best_report.json 2>/dev/null
[ -s "$KSEARCH_WINDOW_LOG" ] && python3 scripts/window_log_summary.py "$KSEARCH_WINDOW_LOG" > $L/window_summary.log 2>&1
tar czf $L/run_prefill.tgz -C /tmp r_prefill 2>/dev/null
(cd $L && tar czf logs.tgz *.log && rm -f *.log)
cat $L/summary.txt
