#!/usr/bin/env bash
# device call 6 (run 13): Triton's decode with a launch of one split (the partial kernel alone into o and lse) against c000ee4's
# two kernels, the bench's decode rows twice in turns; the replay of a one-split key checked by the bench's second call
set -u
export ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
for round in 1 2; do
  for tree in new old; do
    src=$PWD/src; [ $tree = old ] && src=$PWD/scratch/old_src
    PYTHONPATH=$src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc_$tree timeout 120 python3 -m attnforge.cli bench --no-png --rows decode-bf16 \
      --providers sdpa-cudnn,attnforge-triton --rounds 2 --rep-ms 40 --out $OUT/$tree$round > $OUT/bench_$tree$round.txt 2>&1
    echo "$tree $round rc $?"; grep -E "^\| decode" $OUT/$tree$round/bench.md | head -6
  done
done
mkdir -p $OUT/keep; for d in new1 old1 new2 old2; do cp $OUT/$d/bench.md $OUT/keep/$d.md; done; rm -rf $OUT/new* $OUT/old*
