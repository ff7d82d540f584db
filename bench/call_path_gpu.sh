#!/usr/bin/env bash
# On the GPU machine, one call (carry .gpu_deps): the first call for a new spec (fresh caches), the
# host cost of attention() calls beside SDPA, then the native verification grid.
# Writes $OUT/{first_call/,call_overhead.json,grid/} and a log per step.
set -uo pipefail
export PYTHONPATH="$PWD/src:$PWD/.gpu_deps" PYTHONUNBUFFERED=1
out="${OUT:-/tmp/call-path-out}"
mkdir -p "$out"
python3 bench/first_call_profile.py "$out/first_call" > "$out/first_call_log.txt" 2>&1; tail -15 "$out/first_call_log.txt"
ATTNFORGE_CACHE="$(mktemp -d /tmp/afcache-XXXXXX)" python3 bench/call_overhead.py --json "$out/call_overhead.json" > "$out/call_overhead_log.txt" 2>&1
grep -v "^attnforge:" "$out/call_overhead_log.txt" | tail -6
ATTNFORGE_CACHE="$(mktemp -d /tmp/afcache-XXXXXX)" timeout "${GRID_LIMIT:-330}" python3 bench/gpu_check.py --out "$out/grid" --skip-timing --jobs 12 \
  > "$out/grid_log.txt" 2>&1
echo "grid exit $?"; tail -8 "$out/grid_log.txt"
