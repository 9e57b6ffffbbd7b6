#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} KERNELGEN_JOBS=16 KERNELGEN_CACHE_DIR=$PWD/.kgcache
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
V=deepseek_v3_kv_fp8_p64,deepseek_v3_kv_fp8dsmla_p64,deepseek_v3_q_absorbed_fp8,dsv4_mainkv_v41_p64,dsv4_mainkv_v41_new_p64,dsv4_mainkv_uniform_fp8_p64,dsv4_mainkv_v41_fp4_p64,dsv4_mainkv_v41_fp4_new_p64
for tool in memcheck racecheck; do
  el $tool; timeout 100 compute-sanitizer --tool $tool --kernel-name kns=fused_norm_rope_store --error-exitcode 9 \
    python3 tools/sanitize.py --specs mla,dsv4_mainkv --variants $V > $OUT/sanitize_$tool.log 2>&1; echo "$tool exit $?" | tee -a $OUT/sanitize_$tool.log
  tail -2 $OUT/sanitize_$tool.log
done
el groups; timeout 60 compute-sanitizer --tool memcheck --kernel-name kns=fused_group --error-exitcode 9 \
  python3 tools/sanitize.py --groups --specs mla --tokens 1,300 > $OUT/sanitize_groups.log 2>&1; echo "groups memcheck exit $?" | tee -a $OUT/sanitize_groups.log
tail -2 $OUT/sanitize_groups.log
el done
