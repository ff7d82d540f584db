#!/usr/bin/env bash
# device call 5 (run 13): the two decode length buckets the bench has no row for (<=1024, <=16384 keys), head to head
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
for shape in "64 1024" "8 16384"; do
  set -- $shape
  timeout 200 python3 -m attnforge.cli tune --backend triton,gluon --dtype bf16 --head-dim 128 --heads 32 --kv-heads 8 --batch $1 \
    --seqlen-q 1 --seqlen-k $2 --budget 40 --max-candidates 1 --db $OUT/tuning.json > $OUT/tune_$2.txt 2>&1
  echo "B=$1 Sk=$2 rc $?"; grep -E "head to head|best|recorded" $OUT/tune_$2.txt | cut -c1-250
done
