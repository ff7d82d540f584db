#!/usr/bin/env bash
# `attnforge bench` on the GPU machine in one call, from the repository root (carry .gpu_deps: lark):
#     bash bench/bench_gpu.sh --quick
#     bash bench/bench_gpu.sh --dtype fp16 --head-dim 64,128      # a part of the full matrix
# Extra arguments go to `attnforge bench`. Writes $OUT/bench/{bench.json,bench.md,bench.png,log.txt}
# (the JSON after every row, so a run cut short keeps what it measured). No new row starts after
# BENCH_TIME_LIMIT seconds (default 480: a command there is stopped at 600).
set -uo pipefail
export PYTHONPATH="$PWD/src:$PWD/.gpu_deps${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export ATTNFORGE_CACHE="${ATTNFORGE_CACHE:-$(mktemp -d /tmp/afcache-XXXXXX)}"
out="${OUT:-/tmp/bench-out}/bench"
mkdir -p "$out"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv,noheader || true
  python3 -c 'import importlib
for m in ("torch", "triton", "lark", "rich", "matplotlib"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "?"))
    except ImportError as err:
        print(m, "MISSING:", err)'
} 2>&1 | tee "$out/log.txt"
python3 -m attnforge.cli bench --out "$out" --time-limit "${BENCH_TIME_LIMIT:-480}" "$@" 2>&1 | tee -a "$out/log.txt"
exit "${PIPESTATUS[0]}"
