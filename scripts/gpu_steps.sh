# Shared by scripts/gpu_smoke.sh and scripts/gpu_measure.sh (source it after setting LOG): one summary line
# per step, each step's output in LOG/<step>.log, a time limit per step, failed steps collected in `failed`.
failed=()
summary() { echo "$*" | tee -a "$LOG/summary.txt"; }
wanted() { [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $1 "* ]]; }

# step NAME LIMIT_S CMD...: run CMD with a time limit, its output in LOG/NAME.log, one summary line.
step() {
  local name=$1 limit=$2; shift 2
  wanted "$name" || return 0
  local t=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  local dt=$(( $(date +%s) - t ))
  if [ $rc -eq 0 ]; then summary "ok    $name (${dt}s)"
  else
    [ $rc -eq 124 ] && summary "FAIL  $name: over its ${limit}s limit" || summary "FAIL  $name: exit $rc (${dt}s)"
    failed+=("$name"); tail -15 "$LOG/$name.log" | sed 's/^/      /'
  fi
}

# gpu_env: the offline bundle, a carried FlashInfer JIT cache, PYTHONPATH for the checkout.
gpu_env() {
  [ -f .gpu/activate.sh ] && source .gpu/activate.sh .gpu
  [ -f .gpu/fi_cache.tgz ] && mkdir -p ~/.cache && tar xzf .gpu/fi_cache.tgz -C ~/.cache 2>/dev/null
  export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
}

# pack_logs: files come back from a device call only 8 at a time, so the logs travel as one archive.
pack_logs() {
  (cd "$LOG" && tar czf logs.tgz *.log 2>/dev/null && rm -f *.log *.rc)
}
