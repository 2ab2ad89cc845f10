#!/usr/bin/env bash
# Device session driver: each argument is one step; all logs, bench JSON and run tarballs end up in
# $OUT/results.tgz (one file back), and each step's summary is printed.
#   "search TASK SET ROUNDS"      ksearch run on TASK/SET, run dir kept as run_<TASK>.tgz
#   "bench TASK SET [RUN_TGZ]"    ksearch bench (--families, plus the run's best when RUN_TGZ is given)
#   "repeat TASK SET N"           baselines measured N times in fresh processes: median and CV per workload
#   "pytest PATH..."              the GPU-marked tests under PATH (python -m pytest -m gpu)
set -uo pipefail
source .gpu/activate.sh .gpu
export PYTHONPATH=.:${PYTHONPATH:-}
OUT=${OUT:-/tmp/out}; R=/tmp/results; mkdir -p "$OUT" $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader
for step in "$@"; do
  set -- $step
  case $1 in
    search)
      timeout ${STEP_TIMEOUT:-170} python3 -m ksearch.cli.main run task=$2 eval.workloads=$3 search.max_rounds=$4 \
        run.dir=/tmp/run_$2 run.live=false > $R/run_$2.log 2>&1; echo "== search $2 rc=$?"
      grep -E "^(stopped|best:)" -A1 $R/run_$2.log | cut -c1-230
      python3 -m ksearch.cli.main show /tmp/run_$2 2>&1 | grep -A8 "families" | cut -c1-200
      tar czf $R/run_$2.tgz -C /tmp run_$2 ;;
    bench)
      extra=""; if [ -n "${4:-}" ]; then mkdir -p /tmp/b_$2 && tar xzf $4 -C /tmp/b_$2 && extra="--run /tmp/b_$2/$(ls /tmp/b_$2)"; fi
      timeout ${STEP_TIMEOUT:-170} python3 -m ksearch.cli.main bench task=$2 eval.workloads=$3 --families $extra \
        ${BENCH_OVERRIDES:-} --out $R/bench_$2_$3.json > $R/bench_$2_$3.log 2>&1; echo "== bench $2 $3 rc=$?"
      grep -E "^(geomean|failure|baseline|copy)|\[(PASSED|INCORRECT|RUNTIME|COMPILE|TIMEOUT)" $R/bench_$2_$3.log | cut -c1-230 ;;
    repeat)
      timeout ${STEP_TIMEOUT:-300} python3 -m ksearch.cli.main bench task=$2 eval.workloads=$3 --baseline-repeats $4 \
        --out $R/repeat_$2_$3.json > $R/repeat_$2_$3.log 2>&1; echo "== repeat $2 $3 x$4 rc=$?"
      grep -vE "^run [0-9]+:" $R/repeat_$2_$3.log | cut -c1-200 | tail -40 ;;
    pytest)
      shift
      timeout ${STEP_TIMEOUT:-300} python3 -m pytest -q -m gpu -p no:cacheprovider "$@" > $R/pytest_gpu.log 2>&1
      echo "== pytest -m gpu $* rc=$?"; tail -40 $R/pytest_gpu.log | cut -c1-300 ;;
  esac
done
tar czf $OUT/results.tgz -C $R .
