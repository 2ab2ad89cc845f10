#!/usr/bin/env bash
# Session 29, call C (issue 25): TriMul kernel by kernel (torch.profiler), then Nsight Compute on the input pass's
# kernels and the output pass at S=1024 (D=128, 384) for gemm_input_pass's defaults and the resident mode.
set -u
tar xf s29/head.tar
T0=$(date +%s)
source scripts/gpu_steps.sh; gpu_env
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,uuid --format=csv,noheader
timeout 150 python3 s29/tri_prof.py > $OUT/prof.txt 2>&1; echo "profile rc=$? at $(( $(date +%s) - T0 ))s"
grep -v Warn $OUT/prof.txt | cut -c1-160
which ncu || ls /opt/nvidia/nsight-compute/*/ncu
NCU=$(which ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
timeout ${NCU_T:-300} $NCU --clock-control none -k regex:"_proj_gemm|_ln_rows|_norm_gate_out|_proj_resident|_ln_project" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
  --section ComputeWorkloadAnalysis python3 s29/tri_prof.py --ncu > $OUT/ncu.txt 2>&1
echo "ncu rc=$? at $(( $(date +%s) - T0 ))s"
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|L2 Cache Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|nvtx|NVTX|Stall|Warp Cycles Per Issued|Issued Ipc|Shared Memory Configuration Size|Block Limit" $OUT/ncu.txt | cut -c1-150 | head -150
