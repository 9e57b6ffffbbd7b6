#!/usr/bin/env bash
# Batched GPU work on a lent H200 machine: install the carried tvm-ffi wheel, run the phases named on
# the command line, and pack everything they wrote into $OUT/results.tgz (the device returns at most
# 8 files). Phases: test sanitize tune bench ncu host probe loop ab latency slots.
# ncu takes NCU_VARIANTS, NCU_TOKENS and NCU_WORKLOAD (prefill or decode).
#   tools/device_run.sh test sanitize tune       then       tools/device_run.sh bench host
set -uo pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=/usr/local/cuda KERNELGEN_JOBS=${KERNELGEN_JOBS:-30}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
export KERNELGEN_CACHE_DIR=$PWD/.kgcache
RES=$(mktemp -d)
GPUS=$(python3 -c "import torch; print(','.join(str(i) for i in range(torch.cuda.device_count())))")
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee "$RES/gpu.txt"
SPECS=${SPECS:-"dsv4_indexer dsv4_mainkv dsv32_indexer example"}
for phase in "$@"; do
  case $phase in
    test)
      python3 -m pytest -q -m gpu -rs ${PYTEST_ARGS:-} 2>&1 | tee "$RES/pytest_gpu.log" | tail -15
      grep -q " failed" "$RES/pytest_gpu.log" && { echo "GPU tests failed: stopping"; tar -C "$RES" -czf "$OUT/results.tgz" .; break; } ;;
    sanitize)
      for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool --kernel-name kns=fused_norm_rope_store --error-exitcode 9 \
          python3 tools/sanitize.py > "$RES/sanitize_$tool.log" 2>&1; echo "$tool exit $?" | tee -a "$RES/sanitize_$tool.log"
        tail -3 "$RES/sanitize_$tool.log"
      done ;;
    tune)
      for spec in $SPECS; do
        python3 -m kernelgen tune "$spec" --gpus "$GPUS" --out cache ${TUNE_ARGS:-} > "$RES/tune_$spec.log" 2>&1
        grep -E "configurations timed|error" "$RES/tune_$spec.log" | tail -30
        cp cache/*.json "$RES/"; tar -C "$RES" -czf "$OUT/results.tgz" .  # a run cut short keeps the specs done
      done ;;
    bench)
      for spec in ${BENCH_SPECS:-$SPECS}; do
        for w in prefill decode; do
          python3 -m kernelgen bench "$spec" --workload $w --baselines "" --json "$RES/bench_${spec}_$w.json" \
            > "$RES/bench_${spec}_$w.log" 2>&1
        done
      done
      [ -n "${BASELINES-1}" ] && python3 -m kernelgen bench dsv4_indexer --variants dsv4_indexer_bf16_p64,dsv4_indexer_fp8_p64,dsv4_indexer_fp4_p64 --workload prefill \
        --tokens 1,128,4096,262144 --baselines eager,compile --json "$RES/bench_baselines.json" \
        --plot "$RES/bench_baselines.png" > "$RES/bench_baselines.log" 2>&1
      tail -25 "$RES/bench_baselines.log" 2>/dev/null; true ;;
    ncu)
      case ${NCU_WORKLOAD:-prefill} in prefill|decode) ;; *) echo "NCU_WORKLOAD must be prefill or decode"; exit 2 ;; esac
      for v in ${NCU_VARIANTS:-dsv4_indexer_fp8_p64 dsv4_indexer_fp4_p64}; do
        spec=${v%_*_p*}
        ncu --clock-control none --kernel-name regex:fused_norm_rope_store --launch-skip 2 --launch-count 1 \
          --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
          --section MemoryWorkloadAnalysis --section SchedulerStats \
          --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum \
          python3 tools/ncu_probe.py "$spec" "${NCU_TOKENS:-262144}" "$v" ${NCU_WORKLOAD:-prefill} > "$RES/ncu_$v${NCU_WORKLOAD:+_$NCU_WORKLOAD}.log" 2>&1
        grep -E "config|Throughput|Occupancy|Stall|Registers|Warp Cycles|Issued|Eligible|No Eligible|dram__bytes|lts__t_sectors" "$RES/ncu_$v${NCU_WORKLOAD:+_$NCU_WORKLOAD}.log" | head -44
      done ;;
    probe)
      python3 tools/chain_probe.py --json "$RES/chain_probe.json" 2>&1 | tee "$RES/chain_probe.log" | tail -70 ;;
    loop)
      python3 tools/loop_probe.py --json "$RES/loop_probe.json" 2>&1 | tee "$RES/loop_probe.log" | tail -70 ;;
    host)
      python3 -c "import torch, tvm_ffi; print('torch', torch.__version__, 'tvm-ffi', tvm_ffi.__version__, 'DLPack C exchange API:',
        any(hasattr(torch.Tensor, a) for a in ('__dlpack_c_exchange_api__', '__c_dlpack_exchange_api__')))" | tee "$RES/host_profile.log"
      python3 tools/host_profile.py 2>&1 | tee -a "$RES/host_profile.log" ;;
    latency)
      nvcc -O3 -arch=sm_90a -std=c++17 tools/latency_probe.cu -o /tmp/latency_probe && /tmp/latency_probe | tee "$RES/latency_probe.log" ;;
    slots)
      python3 tools/slot_roofline.py --json "$RES/slot_roofline.json" 2>&1 | tee "$RES/slot_roofline.log" | tail -24 ;;
    ab)  # ab_old/: the old tree, not git-ignored so that it travels (see tools/ab_kernels.py)
      python3 tools/ab_kernels.py ab_old ${AB_SETS:-dsv4_indexer:dsv4_indexer_bf16_p64,dsv4_indexer_fp8_p64,dsv4_indexer_fp4_p64 dsv4_mainkv:dsv4_mainkv_fp8mla_p64,dsv4_mainkv_bf16_p64} \
        ${AB_ARGS:-} --json "$RES/ab_kernels.json" 2>&1 | tee "$RES/ab_kernels.log" | tail -32 ;;
  esac
  tar -C "$RES" -czf "$OUT/results.tgz" .  # after every phase: a run cut short still returns what it did
done
