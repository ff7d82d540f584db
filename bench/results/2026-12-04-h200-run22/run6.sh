#!/usr/bin/env bash
# Run 22 call 6 (issue 13): attnforge generate (its native gate) on the Gluon grid's two ostage = 3 specs (bench/gluon_grid_gpu.sh),
# the tuning database's D = 256 1k entries and planner choosing it. On the H200 from the repository root, .gpu_deps carried.
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
gen() { name=$1; shift; timeout 110 python3 -m attnforge generate --target auto --backend gluon --out /tmp/gen_$name "$@" > $OUT/generate_$name.txt 2>&1; echo "$name rc $? $(grep -m1 '^param' /tmp/gen_$name/kernel.tl)"; cp /tmp/gen_$name/report.md $OUT/generate_${name}_report.md 2>/dev/null; }
gen bf16_d256_o_via_kv --dtype bf16 --head-dim 256 --heads 4 --kv-heads 2 --seqlen-q 700 --seqlen-k 1000 &
gen fp16_d256_o_via_kv --dtype fp16 --head-dim 256 --heads 2 --kv-heads 2 --seqlen-q 1000 --seqlen-k 333 &
wait
grep -h -i "verif" $OUT/generate_*_report.md | head -4 | cut -c1-220
