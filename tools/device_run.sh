#!/usr/bin/env bash
# Run the GPU phases named on the command line on a GPU machine, each writing its logs and JSON into one
# folder, RESULTS_DIR (default .device_run/, git-ignored), then summarise that folder into evidence/<gpu>.md
# (tools/evidence.py: pytest counts, sanitizer exit statuses, tuning runs, one row per bench variant), stamped
# with the commit and code digest the run began with. A folder holds one code's outputs: phases run in two
# calls add up (tools/device_run.sh test sanitize tune   then   tools/device_run.sh bench), and a folder
# stamped with other code is refused (give RESULTS_DIR a new folder, or delete .device_run/).
# Phases: test sanitize tune bench hit.  tune and bench take SPECS; test takes PYTEST_ARGS, tune TUNE_ARGS; hit
# (issue 38: a cache hit's wall time) builds HIT_SPECS (default attention_prep) once, then times five builds of each.
# Where the tree is not a git checkout (a copied tree), EVIDENCE_COMMIT names the commit it is.
# On a machine whose results must travel as one archive (e.g. a lent one), set OUT: the folder is packed into
# $OUT/results.tgz after every phase and the summary copied to $OUT/evidence/; a wheel of tvm-ffi under
# .whl/, if any, is installed.
set -uo pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} KERNELGEN_JOBS=${KERNELGEN_JOBS:-30}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} KERNELGEN_CACHE_DIR=${KERNELGEN_CACHE_DIR:-$PWD/.kgcache}
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
RES=${RESULTS_DIR:-$PWD/.device_run}
python3 tools/evidence.py --stamp "$RES" ${EVIDENCE_COMMIT:+--commit "$EVIDENCE_COMMIT"} || exit 2
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
    hit)
      for spec in ${HIT_SPECS:-attention_prep}; do
        python3 -m kernelgen build "$spec" > "$RES/hit_${spec}_fill.log" 2>&1 || { echo "hit: $spec did not build"; continue; }
        rm -f "$RES/hit_$spec.txt"
        for i in 1 2 3 4 5; do  # bytecode writable, as a user's install has it
          s=$(date +%s%N); env -u PYTHONDONTWRITEBYTECODE python3 -m kernelgen build "$spec" > /dev/null 2>&1; e=$(date +%s%N)
          awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f\n", (e - s) / 1e9 }' >> "$RES/hit_$spec.txt"
        done
        echo "hit $spec: $(tr '\n' ' ' < "$RES/hit_$spec.txt")"
      done ;;
  esac
  pack  # after every phase: a run cut short still returns what it did
done
# the summary, regenerated from everything the folder holds (a run stopped by a failing test included)
SUMMARY=$(python3 tools/evidence.py "$RES" ${EVIDENCE_COMMIT:+--commit "$EVIDENCE_COMMIT"}) && echo "evidence: $SUMMARY"
[ -n "${SUMMARY:-}" ] && [ -n "${OUT:-}" ] && mkdir -p "$OUT/evidence" && cp "$SUMMARY" "$OUT/evidence/"
pack
