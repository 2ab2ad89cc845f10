#!/usr/bin/env bash
# Issue 25's device calls, each within one 10-minute command (run from the repository root on the GPU host,
# after `source .gpu/activate.sh .gpu`):
#
#   bash benchmarks/trimul_device_call.sh OUT sweep    # the sweep subjects below (GPUMode timing, one call,
#                                                      # so they compare), then where a call's time goes on
#                                                      # the small cases (benchmarks/trimul_call_split.py)
#   bash benchmarks/trimul_device_call.sh OUT accept   # a default `ksearch run task=trimul_outgoing_h128`
#                                                      # (ROUNDS, default 12), its best timed GPUMode's way on
#                                                      # the 7 ranked cases and checked on the 18 test cases
#   RESUME_TGZ=run.tgz bash ... OUT accept             # the same run, cut short by a call's limit, goes on
#                                                      # from its journal (run.tgz of the earlier call, carried)
#
# Change the family's defaults (catalog.yaml) to a sweep's winner in a commit before `accept`: acceptance is
# the default run's best. Raw output lands in OUT (at most 8 files come back from the device).
set -u
OUT=${1:?usage: trimul_device_call.sh OUT sweep|accept}; WHAT=${2:?sweep or accept}
mkdir -p "$OUT"
T0=$(date +%s)
LOG=$OUT; STEPS=""; source scripts/gpu_steps.sh; gpu_env
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,uuid --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "$WHAT" = sweep ]; then
  ONLY=${ONLY:-cublas_defaults,gemm_defaults,st64,st128,out_p1,out_p2,out_p2_bp32,st64_out_p2,st64_out_p1,gemm_hmajor_p2,gemm_hmajor}
  timeout ${SWEEP_T:-330} python3 benchmarks/trimul_sweep.py /tmp/tri --only "$ONLY" --budget-s ${SWEEP_B:-290} \
    > "$OUT/trimul_sweep.log" 2>&1
  echo "sweep rc=$? at $(( $(date +%s) - T0 ))s"
  cp /tmp/tri/trimul_sweep.json "$OUT/" 2>/dev/null
  grep -v Warning "$OUT/trimul_sweep.log" | cut -c1-200 | grep -v "^ \|^{\|^}\|module\|#-" | tail -40
  timeout ${SPLIT_T:-150} python3 benchmarks/trimul_call_split.py \
    "st=gemm_input_pass:input_mode~stationary" > "$OUT/call_split.txt" 2>&1
  echo "call split rc=$? at $(( $(date +%s) - T0 ))s"; grep "^==" "$OUT/call_split.txt"
elif [ "$WHAT" = accept ]; then
  R=/tmp/tri_run; rm -rf $R
  left() { echo $(( ${TOTAL:-575} - ($(date +%s) - T0) )); }
  if [ -n "${RESUME_TGZ:-}" ]; then          # a run cut short by an earlier call's limit: go on from its journal
    tar xzf "$RESUME_TGZ" -C /tmp tri_run
    timeout --kill-after=10 $(( $(left) - ${AFTER_S:-230} )) python3 -m ksearch resume $R run.live=false \
      > "$OUT/run_trimul.log" 2>&1
  else
    timeout --kill-after=10 $(( $(left) - ${AFTER_S:-230} )) python3 -m ksearch run task=trimul_outgoing_h128 \
      ${ROUNDS:+search.max_rounds=$ROUNDS} run.dir=$R run.live=false > "$OUT/run_trimul.log" 2>&1
  fi
  echo "run rc=$? at $(( $(date +%s) - T0 ))s (124: cut by the time limit; RESUME_TGZ=<this call's run.tgz> goes on)"
  python3 scripts/run_summary.py $R 2>&1 | head -8
  tar czf "$OUT/run.tgz" -C /tmp tri_run 2>/dev/null
  sol=$R/best/solution.py
  if [ -f $sol ]; then
    cp $sol "$OUT/best_solution.py"
    timeout $(( $(left) - 70 )) python3 benchmarks/trimul_gpumode.py --solution $sol --json "$OUT/gpumode.json" \
      > "$OUT/gpumode.log" 2>&1
    echo "gpumode rc=$? at $(( $(date +%s) - T0 ))s"; tail -14 "$OUT/gpumode.log"
    timeout $(( $(left) - 5 )) python3 benchmarks/trimul_gpumode.py --solution $sol --no-baselines --cases test \
      --max-repeats 3 --json "$OUT/gpumode_test.json" > "$OUT/gpumode_test.log" 2>&1
    echo "test cases rc=$? at $(( $(date +%s) - T0 ))s"; tail -8 "$OUT/gpumode_test.log"
  fi
else
  echo "error: the second argument is sweep or accept" >&2; exit 2
fi
