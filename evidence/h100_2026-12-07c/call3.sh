#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} KERNELGEN_JOBS=16 KERNELGEN_CACHE_DIR=$PWD/.kgcache
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
el tune dsv4; timeout 230 python3 -m kernelgen tune .kgrun/dsv4_mainkv_lean.yaml --out cache \
  --variants dsv4_mainkv_uniform_fp8_p64,dsv4_mainkv_v41_new_p64,dsv4_mainkv_v41_fp4_p64,dsv4_mainkv_v41_fp4_new_p64 > $OUT/tune_dsv4.log 2>&1
grep -E "configurations timed|error|not timed|warning" $OUT/tune_dsv4.log | cut -c1-200 | tail -6
cp cache/nvidia-h*.json $OUT/ 2>/dev/null
el sbs; timeout 90 python3 tools/side_by_side_sglang.py --tokens 1,32,1024,4096,16384 --skip mla --json $OUT/sglang_sbs.json > $OUT/sglang_sbs.log 2>&1
grep -E " N=" $OUT/sglang_sbs.log | cut -c1-120
el bench; timeout 50 python3 -m kernelgen bench mla --workload decode --tokens 1,32 --baselines "" --json $OUT/bench_mla_decode.json > $OUT/bench_mla_decode.log 2>&1
tail -12 $OUT/bench_mla_decode.log
el done
