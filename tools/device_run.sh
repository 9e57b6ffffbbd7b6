#!/usr/bin/env bash
# One batched GPU session on the lent H200: install the carried tvm-ffi wheel, run the GPU
# test tier and the shipped-variant verification. Results land in $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=/usr/local/cuda KERNELGEN_JOBS=16
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
export KERNELGEN_CACHE_DIR=/tmp/kgcache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
python3 tools/gpu_verify.py --json "$OUT/verify.json" 2>&1 | tee "$OUT/verify.log"
python3 -m pytest -q -m gpu -x "$@" 2>&1 | tee "$OUT/pytest_gpu.log" | tail -30
python3 tools/host_profile.py 2>&1 | tee "$OUT/host_profile.log"
