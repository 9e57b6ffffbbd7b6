#!/usr/bin/env bash
# call 2: the lean_math numeric check again (sign fix), the MLA fp8 kernels re-tuned (sign fix changed the .lm code;
# the absorbed query and its group now tuned to the buckets that fit), V4.1 main KV tuned, SGLang side by side
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} KERNELGEN_JOBS=16 KERNELGEN_CACHE_DIR=$PWD/.kgcache
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
el numeric; timeout 60 python3 -m pytest -q -m gpu tests/test_numeric_gpu.py -rs 2>&1 | tail -4 | tee $OUT/numeric.log
el tune mla; timeout 270 python3 -m kernelgen tune .kgrun/mla_lean.yaml --out cache \
  --variants deepseek_v3_kv_fp8_p64,deepseek_v3_kv_fp8dsmla_p64,deepseek_v3_layer_fp8,deepseek_v3_q_absorbed_fp8 > $OUT/tune_mla.log 2>&1
grep -E "configurations timed|error|not timed|warning" $OUT/tune_mla.log | cut -c1-200 | tail -10
cp cache/nvidia-h*.json $OUT/ 2>/dev/null
el tune v41; timeout 150 python3 -m kernelgen tune .kgrun/dsv4_mainkv_lean.yaml --out cache \
  --variants dsv4_mainkv_v41_p64 > $OUT/tune_v41.log 2>&1
grep -E "configurations timed|error|not timed|warning" $OUT/tune_v41.log | cut -c1-200 | tail -4
cp cache/nvidia-h*.json $OUT/ 2>/dev/null
el sbs; timeout $(( 575 - ($(date +%s) - T0) )) python3 tools/side_by_side_sglang.py --tokens 1,32,1024,4096,16384 --json $OUT/sglang_sbs.json > $OUT/sglang_sbs.log 2>&1
tail -30 $OUT/sglang_sbs.log | cut -c1-160
el done
