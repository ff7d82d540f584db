#!/usr/bin/env bash
# On the GPU machine, one call (carry .gpu_deps): the host cost of attention() calls, `attnforge tune`
# on the 1k-token buckets the bench found weakest, then the 1k bench rows with and without that
# database, in the same run. Writes $OUT/{overhead.json,tuning.json,tune_log.txt,bench_tuned/,bench_planner/}.
set -uo pipefail
export PYTHONPATH="$PWD/src:$PWD/.gpu_deps" PYTHONUNBUFFERED=1
export ATTNFORGE_CACHE="$(mktemp -d /tmp/afcache-XXXXXX)"
out="${OUT:-/tmp/tune-out}"
mkdir -p "$out"
python3 bench/call_overhead.py --json "$out/overhead.json" 2>&1 | grep -v "^attnforge:" | tail -5
budget="${TUNE_BUDGET:-45}"
for args in "--dtype fp16 --head-dim 64 --causal" "--dtype bf16 --head-dim 64 --causal" \
            "--dtype bf16 --head-dim 128 --causal" "--dtype bf16 --head-dim 128"; do
  # shellcheck disable=SC2086
  python3 -m attnforge.cli tune --heads 32 --kv-heads 32 $args --seqlen-q 1024 --budget "$budget" --db "$out/tuning.json" 2>&1 \
    | grep -v "^attnforge:" | tee -a "$out/tune_log.txt" | tail -3
done
ATTNFORGE_TUNING="$out/tuning.json" python3 -m attnforge.cli bench --rows s1k --providers sdpa-cudnn,attnforge-triton \
  --out "$out/bench_tuned" --time-limit 120 2>&1 | grep -A6 "^ratio to sdpa-cudnn"
