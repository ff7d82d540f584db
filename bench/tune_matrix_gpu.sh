#!/usr/bin/env bash
# On the GPU machine, one call (carry .gpu_deps): `attnforge tune` on the bench matrix's prefill buckets
# not in the shipped database yet (the 1k buckets, then 4k ones), TUNE_BUDGET seconds each.
# Writes $OUT/{tuning.json,tune_log.txt}; merge tuning.json into src/attnforge/tune/shipped.json.
set -uo pipefail
export PYTHONPATH="$PWD/src:$PWD/.gpu_deps" PYTHONUNBUFFERED=1
export ATTNFORGE_CACHE="$(mktemp -d /tmp/afcache-XXXXXX)"
out="${OUT:-/tmp/tune-out}"
mkdir -p "$out"
budget="${TUNE_BUDGET:-30}"
while read -r heads seq args; do
  [ -z "$heads" ] && continue
  # shellcheck disable=SC2086
  python3 -m attnforge.cli tune --heads "$heads" --kv-heads "$heads" $args --seqlen-q "$seq" --budget "$budget" --db "$out/tuning.json" 2>&1 \
    | grep -v "^attnforge:" >> "$out/tune_log.txt"
  grep "^best\|^no candidate\|error" "$out/tune_log.txt" | tail -1
done <<'ROWS'
32 1024 --dtype fp16 --head-dim 64
32 1024 --dtype bf16 --head-dim 64
16 1024 --dtype fp16 --head-dim 128 --causal
16 1024 --dtype fp16 --head-dim 128
8 1024 --dtype fp16 --head-dim 256 --causal
8 1024 --dtype fp16 --head-dim 256
8 1024 --dtype bf16 --head-dim 256 --causal
8 1024 --dtype bf16 --head-dim 256
32 4096 --dtype fp16 --head-dim 64 --causal
32 4096 --dtype bf16 --head-dim 64 --causal
16 4096 --dtype fp16 --head-dim 128
16 4096 --dtype bf16 --head-dim 128
ROWS
