#!/usr/bin/env bash
# One short device session: the new judge on the GPU (its -m gpu tests), then `ksearch bench` on GQA decode's
# feedback set with the same kernel listed twice (the bench self-check). Logs go to $OUT as they are written.
set -uo pipefail
source .gpu/activate.sh .gpu
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import torch,triton,flashinfer;print(torch.__version__,triton.__version__,flashinfer.__version__)" | tee -a $OUT/gpu.txt
timeout ${T1:-170} python3 -m pytest -q -m gpu -p no:cacheprovider -x tests/adversarial/test_gpu_tricks.py \
  2>&1 | tee $OUT/pytest_gpu.log | tail -25
mkdir -p /tmp/k
python3 -c "
from ksearch.task import load_task
import importlib
t=load_task('gqa_paged_decode_h32_kv4_d128_ps1')
try:
    from ksearch.task.catalog import load_catalog
except ImportError:
    from ksearch.task.catalog import load_catalog
c=load_catalog(t.strategies_dir, t.name)
f=c.families[-1].name
open('/tmp/k/a.py','w').write(c.render(f,{}))
open('/tmp/k/b.py','w').write(c.render(f,{}))
print('family', f)"
timeout ${T2:-200} python3 -m ksearch.cli.main bench task=gqa_paged_decode_h32_kv4_d128_ps1 eval.workloads=feedback \
  --solution /tmp/k/a.py --solution /tmp/k/b.py --out $OUT/bench_twice.json 2>&1 | tee $OUT/bench_twice.log | tail -40
