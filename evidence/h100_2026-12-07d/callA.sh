#!/usr/bin/env bash
# Session 6 call A: bracket_codes on a GPU; the cake groups' occupancy (resident_threads 0/1024) and lean_math in one
# tuning run merged into cache/; the four groups benched at 65536/262144 beside the roofline; V4.1 decode beside SGLang.
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} KERNELGEN_JOBS=16 KERNELGEN_CACHE_DIR=$PWD/.kgcache
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { local l=$(( ${BUDGET:-560} - ($(date +%s) - T0) )); echo $(( l > 5 ? l : 5 )); }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU" | tee $OUT/gpu.txt; git rev-parse --short HEAD 2>/dev/null | tee $OUT/commit.txt
el gpu test bc; timeout 80 python3 -m pytest -q -m gpu tests/test_bracket_codes.py -x > $OUT/pytest_bc.log 2>&1; tail -2 $OUT/pytest_bc.log
el tune cake mb lm; timeout 230 python3 -m kernelgen tune .kgrun/ap_mb64.yaml --out cache \
  --variants cake_64_8_fp8,cake_64_8,cake_8_1_fp8,cake_8_1 > $OUT/tune_mb.log 2>&1
grep -E "configurations timed|error|not timed" $OUT/tune_mb.log | cut -c1-200 | tail -6
mkdir -p $OUT/cache; cp cache/nvidia-h*.json $OUT/cache/
for f in min_blocks lean_math; do python3 tools/tuning_summary.py cache/nvidia-h*.json --flag $f > $OUT/ab_$f.md 2>&1; grep -E "cake" $OUT/ab_$f.md | cut -c1-240; done
el bench; timeout 120 python3 -m kernelgen bench attention_prep --variants cake_64_8_fp8,cake_64_8,cake_8_1_fp8,cake_8_1 \
  --tokens 65536,262144 --baselines '' --json $OUT/bench_cake.json > $OUT/bench_cake.log 2>&1; tail -14 $OUT/bench_cake.log | cut -c1-200
el sbs; timeout $(left) python3 tools/side_by_side_sglang.py --tokens 1,32 --skip mla --layouts v41,uniform_fp8 --json $OUT/sglang_sbs.json > $OUT/sglang_sbs.log 2>&1; grep -E "N=|floor" $OUT/sglang_sbs.log | cut -c1-140
el done
