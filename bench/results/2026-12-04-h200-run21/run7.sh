#!/usr/bin/env bash
# Run 21 call 7 (issue 13): attnforge generate (its native gate) on three specs the four-warpgroup first choice meets
# (plan/hopper._four_warpgroups): GQA 1000 x 1000, MQA 700 x 900, Sq > Sk 512 x 300; which plan each took.
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
gen() { name=$1; shift; timeout 200 python3 -m attnforge generate --target h200 --backend gluon --out /tmp/gen_$name "$@" > $OUT/generate_$name.txt 2>&1; echo "$name rc $? $(grep -m1 '^param' /tmp/gen_$name/kernel.tl)"; cp /tmp/gen_$name/report.md $OUT/generate_${name}_report.md 2>/dev/null; }
gen gqa --dtype bf16 --head-dim 64 --heads 8 --kv-heads 2 --seqlen-q 1000 --seqlen-k 1000 &
gen mqa --dtype fp16 --head-dim 64 --heads 8 --kv-heads 1 --seqlen-q 700 --seqlen-k 900 &
gen sqgtsk --dtype bf16 --head-dim 64 --heads 4 --kv-heads 4 --seqlen-q 512 --seqlen-k 300 &
wait
grep -h -i "verif" $OUT/generate_*_report.md | head -6 | cut -c1-200
