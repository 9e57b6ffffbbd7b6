#!/usr/bin/env bash
# Session 7, call 1: the whole GPU tier at HEAD (the two tests fixed in f679a1c first).
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} KERNELGEN_JOBS=16 KERNELGEN_CACHE_DIR=$PWD/.kgcache
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee $OUT/gpu.txt; git rev-parse --short HEAD | tee -a $OUT/gpu.txt
el fixed tests; timeout 120 python3 -m pytest -q -m gpu --tb=line tests/test_bracket_codes.py "tests/test_gpu.py::test_random_variants_match_reference" > $OUT/pytest_fixed.log 2>&1; tail -3 $OUT/pytest_fixed.log
el tier; timeout 430 python3 -m pytest -q -m gpu --tb=line -p no:cacheprovider --durations=12 tests --deselect tests/test_bracket_codes.py --deselect "tests/test_gpu.py::test_random_variants_match_reference" > $OUT/pytest_tier.log 2>&1; echo rc=$?
grep -E "passed|failed|error" $OUT/pytest_tier.log | tail -5; grep -E "^(FAILED|ERROR)|\.py:[0-9]+: " $OUT/pytest_tier.log | head -20
el done
