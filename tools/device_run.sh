#!/usr/bin/env bash
# Regenerate the GPU evidence in tools/results/ on a GPU machine: run the phases named on the command
# line, each writing its logs and JSON into one folder, RESULTS_DIR (default: a new temporary one).
# Phases: test sanitize tune bench host ncu ab prep.  Files come back without the h200_ prefix of
# tools/results/ (tools/results/README.md says which file each phase writes).
#   tools/device_run.sh test sanitize tune       then       tools/device_run.sh bench host
# ncu takes NCU_VARIANTS, NCU_TOKENS and NCU_WORKLOAD (prefill or decode); tune, bench take SPECS.
# On a machine whose results must travel as one archive (e.g. a lent one), set OUT: everything is
# packed into $OUT/results.tgz after every phase; a wheel of tvm-ffi under .whl/, if any, is installed.
set -uo pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} KERNELGEN_JOBS=${KERNELGEN_JOBS:-30}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} KERNELGEN_CACHE_DIR=${KERNELGEN_CACHE_DIR:-$PWD/.kgcache}
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
RES=${RESULTS_DIR:-$(mktemp -d)}
mkdir -p "$RES"
echo "results in $RES"
pack() { [ -n "${OUT:-}" ] && tar -C "$RES" -czf "$OUT/results.tgz" .; true; }
GPUS=$(python3 -c "import torch; print(','.join(str(i) for i in range(torch.cuda.device_count())))")
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee "$RES/gpu.txt"
SPECS=${SPECS:-"dsv4_indexer dsv4_mainkv dsv32_indexer example"}
for phase in "$@"; do
  case $phase in
    test)
      python3 -m pytest -q -m gpu -rs ${PYTEST_ARGS:-} 2>&1 | tee "$RES/pytest_gpu.log" | tail -15
      grep -q " failed" "$RES/pytest_gpu.log" && { echo "GPU tests failed: stopping"; pack; break; } ;;
    sanitize)
      for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool --kernel-name kns=fused_norm_rope_store --error-exitcode 9 \
          python3 tools/sanitize.py > "$RES/sanitize_$tool.log" 2>&1; echo "$tool exit $?" | tee -a "$RES/sanitize_$tool.log"
        tail -3 "$RES/sanitize_$tool.log"
        compute-sanitizer --tool $tool --kernel-name kns=fused_group --error-exitcode 9 \
          python3 tools/sanitize.py --groups --tokens 1,300 > "$RES/sanitize_groups_$tool.log" 2>&1
        echo "$tool groups exit $?" | tee -a "$RES/sanitize_groups_$tool.log"
      done ;;
    tune)
      for spec in $SPECS; do
        python3 -m kernelgen tune "$spec" --gpus "$GPUS" --out cache ${TUNE_ARGS:-} > "$RES/tune_$spec.log" 2>&1
        grep -E "configurations timed|error" "$RES/tune_$spec.log" | tail -30
        cp cache/*.json "$RES/"; pack  # a run cut short keeps the specs done
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
    host)
      python3 -c "import torch, tvm_ffi; print('torch', torch.__version__, 'tvm-ffi', tvm_ffi.__version__, 'DLPack C exchange API:',
        any(hasattr(torch.Tensor, a) for a in ('__dlpack_c_exchange_api__', '__c_dlpack_exchange_api__')))" | tee "$RES/host_profile.log"
      python3 tools/host_profile.py 2>&1 | tee -a "$RES/host_profile.log" ;;
    prep)  # the attention-prep launch groups beside FlashInfer's fused kernels (needs .fi/: tools/flashinfer_build.py)
      python3 tools/attention_prep_side_by_side.py --fp8 ${PREP_ARGS:-} --out "$RES/side_by_side_flashinfer.json" \
        > "$RES/side_by_side_flashinfer.log" 2>&1
      tail -3 "$RES/side_by_side_flashinfer.log" ;;
    ab)  # ab_old/: the old tree (see tools/ab_kernels.py)
      python3 tools/ab_kernels.py ab_old ${AB_SETS:-dsv4_indexer:dsv4_indexer_bf16_p64,dsv4_indexer_fp8_p64,dsv4_indexer_fp4_p64 dsv4_mainkv:dsv4_mainkv_fp8mla_p64,dsv4_mainkv_bf16_p64} \
        ${AB_ARGS:-} --json "$RES/ab_kernels.json" 2>&1 | tee "$RES/ab_kernels.log" | tail -32 ;;
  esac
  pack  # after every phase: a run cut short still returns what it did
done
