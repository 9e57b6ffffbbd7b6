#!/usr/bin/env bash
# Call 4 (machine warm from calls 1-3): the ablation of the V4.1 decode launch with the stores cut, then SGLang 0.5.23's
# DeepSeek-V4 main-KV writers beside kernelgen's at decode and prefill sizes (same process, same inputs).
export PYTHONUNBUFFERED=1 KERNELGEN_JOBS=16 KERNELGEN_CACHE_DIR=$PWD/.kgcache; export PYTHONPATH=/tmp/site:$PWD
timeout 170 python3 tools/ablate.py dsv4_mainkv dsv4_mainkv_v41_p64 t128.b1.v4.pf.pdl.er.lm --tokens 1,32 --rounds 6 --json $OUT/ablate_v41.json > $OUT/ablate.log 2>&1
timeout 230 python3 tools/side_by_side_sglang.py --tokens 1,32,256,4096,65536,262144 --skip mla --layouts v41,uniform_fp8,v41_fp4 --json $OUT/sglang_sbs.json > $OUT/sglang_sbs.log 2>&1
