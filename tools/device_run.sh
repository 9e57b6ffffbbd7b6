#!/usr/bin/env bash
# Batched GPU work on a lent H200 machine: install the carried tvm-ffi wheel, then run the phases
# named on the command line (smoke, test, tune, bench). Results land in $OUT.
#   tools/device_run.sh smoke test tune bench
set -uo pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=/usr/local/cuda KERNELGEN_JOBS=${KERNELGEN_JOBS:-30}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
export KERNELGEN_CACHE_DIR=$PWD/.kgcache
GPUS=$(python3 -c "import torch; print(','.join(str(i) for i in range(torch.cuda.device_count())))")
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
SPECS=${SPECS:-"dsv4_indexer dsv4_mainkv dsv32_indexer example"}
for phase in "$@"; do
  case $phase in
    smoke)
      python3 -m kernelgen tune dsv4_indexer --variants dsv4_indexer_fp8_p64 --buckets 1,64,4096 --gpus "$GPUS" \
        --out /tmp/smoke 2>&1 | tee "$OUT/smoke.log" | tail -40 ;;
    test)
      python3 -m pytest -q -m gpu -rs 2>&1 | tee "$OUT/pytest_gpu.log" | tail -15 ;;
    tune)
      for spec in $SPECS; do
        python3 -m kernelgen tune "$spec" --gpus "$GPUS" --out cache 2>&1 | tee -a "$OUT/tune.log" | grep -v "^\s*$" | tail -5
      done
      cp cache/*.json "$OUT/" ;;
    bench)
      for w in prefill decode; do
        python3 -m kernelgen bench dsv4_indexer --variants dsv4_indexer_fp8_p64,dsv4_indexer_fp4_p64,dsv4_indexer_bf16_p64 \
          --workload $w --baselines "" --json "$OUT/bench_indexer_$w.json" 2>&1 | tee -a "$OUT/bench.log" | tail -30
        python3 -m kernelgen bench dsv4_mainkv --variants dsv4_mainkv_fp8mla_p64,dsv4_mainkv_bf16_p64 \
          --workload $w --baselines "" --json "$OUT/bench_mainkv_$w.json" --plot "$OUT/bench_mainkv_$w.png" 2>&1 | tee -a "$OUT/bench.log" | tail -20
      done
      python3 -m kernelgen bench dsv4_indexer --variants dsv4_indexer_bf16_p64 --tokens 1,128,4096,262144 \
        --baselines eager,compile --json "$OUT/bench_baselines.json" 2>&1 | tee -a "$OUT/bench.log" | tail -12 ;;
  esac
done
