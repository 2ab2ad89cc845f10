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

# gpu_env: the offline bundle, a carried FlashInfer JIT cache and baseline cache, PYTHONPATH for the checkout.
# The baseline cache (ksearch/eval/trusted/baseline_cache.py) is this machine's default file, shared by every
# `ksearch run` and `bench` of the call (the pytest step keeps its own); a copy carried as .gpu/baselines.sqlite
# seeds it, and its entries are reused only on the same physical GPU (UUID), versions and code, within 12 h.
gpu_env() {
  [ -f .gpu/activate.sh ] && source .gpu/activate.sh .gpu
  [ -f .gpu/fi_cache.tgz ] && mkdir -p ~/.cache && tar xzf .gpu/fi_cache.tgz -C ~/.cache 2>/dev/null
  export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
  BASELINE_CACHE=$(python3 -c "from ksearch.eval.trusted.baseline_cache import default_path; print(default_path())" 2>/dev/null)
  if [ -f .gpu/baselines.sqlite ] && [ ! -f "$BASELINE_CACHE" ]; then
    mkdir -p "$(dirname "$BASELINE_CACHE")" && cp .gpu/baselines.sqlite "$BASELINE_CACHE"
  fi
}

# save_baseline_cache DST: a consistent copy of the machine's baseline cache (SQLite's backup, the WAL
# included), for the next call to carry as .gpu/baselines.sqlite.
save_baseline_cache() {
  [ -f "${BASELINE_CACHE:-}" ] || return 0
  python3 -c "import sqlite3, sys; src, dst = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2]); src.backup(dst); dst.close()" \
    "$BASELINE_CACHE" "$1" 2>/dev/null || rm -f "$1"
}

# pack_logs [DIR ...]: files come back from a device call only 8 at a time, so the logs (and these folders under
# LOG, where they exist) travel as one archive.
pack_logs() {
  local extra=() d
  for d in "$@"; do [ -e "$LOG/$d" ] && extra+=("$d"); done
  (cd "$LOG" && tar czf logs.tgz *.log ${extra[@]+"${extra[@]}"} 2>/dev/null && rm -rf *.log *.rc ${extra[@]+"${extra[@]}"})
}
