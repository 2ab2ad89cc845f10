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
#   bash benchmarks/trimul_device_call.sh OUT all      # sweep, then (benchmarks/trimul_pick_default.py) the
#                                                      # winner as the family's defaults in this device copy and
#                                                      # `accept` in the time left: one cold start fewer
#
# Acceptance is the default run's best: a winner set on the device (`all`, or DEFAULTS_JSON='{...}' with
# accept, e.g. to resume such a run) must be committed as the catalog's defaults, the same edit
# (`trimul_pick_default.py --set`). Raw output lands in OUT (at most 8 files come back from the device).
set -u
OUT=${1:?usage: trimul_device_call.sh OUT sweep|accept|all}; WHAT=${2:?sweep, accept or all}
mkdir -p "$OUT"
T0=$(date +%s)
LOG=$OUT; STEPS=""; source scripts/gpu_steps.sh; gpu_env
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,uuid --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "$WHAT" = sweep ] || [ "$WHAT" = all ]; then
  ONLY=${ONLY:-cublas_defaults,gemm_defaults,st64,st128,out_p1,out_p2,out_p2_bp32,st64_out_p2,st64_out_p1,gemm_hmajor_p2,gemm_hmajor}
  timeout ${SWEEP_T:-330} python3 benchmarks/trimul_sweep.py /tmp/tri --only "$ONLY" --budget-s ${SWEEP_B:-290} \
    > "$OUT/trimul_sweep.log" 2>&1
  echo "sweep rc=$? at $(( $(date +%s) - T0 ))s"
  cp /tmp/tri/trimul_sweep.json "$OUT/" 2>/dev/null
  grep -v Warning "$OUT/trimul_sweep.log" | cut -c1-200 | grep -v "^ \|^{\|^}\|module\|#-" | tail -40
  python3 benchmarks/trimul_pick_default.py /tmp/tri/trimul_sweep.json > /tmp/pick.json 2> /tmp/pick.log
  cat /tmp/pick.log; [ -s /tmp/pick.json ] && echo "pick: $(cat /tmp/pick.json)"
  [ "$WHAT" = all ] && [ -s /tmp/pick.json ] && SPLIT_T=${SPLIT_T:-60}
  timeout ${SPLIT_T:-150} python3 benchmarks/trimul_call_split.py \
    "st=gemm_input_pass:input_mode~stationary" > "$OUT/call_split.txt" 2>&1
  echo "call split rc=$? at $(( $(date +%s) - T0 ))s"; grep "^==" "$OUT/call_split.txt"
  if [ "$WHAT" = all ] && [ -s /tmp/pick.json ]; then
    WHAT=accept; DEFAULTS_JSON=$(cat /tmp/pick.json)
    SWEEP_FILES="$OUT/trimul_sweep.json $OUT/call_split.txt"; mkdir -p "$OUT/sweep"
    mv $SWEEP_FILES "$OUT/sweep/" && tar czf "$OUT/sweep.tgz" -C "$OUT" sweep && rm -r "$OUT/sweep"
    cat /tmp/pick.log >> "$OUT/gpu.txt"; rm -f "$OUT/trimul_sweep.log"
  fi
fi
if [ "$WHAT" = accept ]; then
  if [ -n "${DEFAULTS_JSON:-}" ]; then
    python3 benchmarks/trimul_pick_default.py --set "$DEFAULTS_JSON" || exit 2
    echo "defaults set on this device copy: $DEFAULTS_JSON (commit the same edit)" | tee -a "$OUT/gpu.txt"
  fi
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
  (cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)        # at most 8 files come back
elif [ "$WHAT" != sweep ] && [ "$WHAT" != all ]; then
  echo "error: the second argument is sweep, accept or all" >&2; exit 2
fi
