#!/usr/bin/env bash
# Session 19: persistent MLA prefill kernel (p1), the same kernel one block per tile (p0), the landed kernel (old), FlashInfer.
set -u
source .gpu/activate.sh .gpu
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
[ -f .gpu/fi_cache.tgz ] && mkdir -p ~/.cache && tar xzf .gpu/fi_cache.tgz -C ~/.cache 2>/dev/null
L=$OUT/pf; mkdir -p $L
T0=$(date +%s)
echo "commit ${COMMIT:-?} $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)" | tee $L/summary.txt
for v in ${VARS:-p1 p1s p0 old}; do python3 s19/pf_bench.py build s19/v/$v.cu > $L/build_$v.log 2>&1 & done
wait
echo "builds done $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
grep -h "built\|rror" $L/build_*.log | tail -5 | tee -a $L/summary.txt
python3 s19/pf_bench.py fi $L/fi.json > $L/fi.log 2>&1; echo "fi rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
for v in ${VARS:-p1 p1s p0 old}; do
  timeout 150 python3 s19/pf_bench.py check s19/v/$v.cu $L/$v.json > $L/run_$v.log 2>&1
  echo "$v rc=$? $(( $(date +%s) - T0 ))s" | tee -a $L/summary.txt
  grep -v "^val\|^s_\|^full" $L/run_$v.log | tail -3 | tee -a $L/summary.txt
done
python3 s19/pf_table.py $L | tee $L/table.md
(cd $L && tar czf logs.tgz *.log && rm -f *.log)
