#!/usr/bin/env bash
# device call 4 (run 12): the decode combine (pipelined loop, 16 rows) A/B; Gluon D = 64 1k-key variants A/B
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 200 python3 bench/gluon_decode_tiles.py time AB --per-sm 1 2 > $OUT/decode_combine_ab.txt 2>&1
cp scratch/decab/gluon_decode_tiles.json $OUT/decode_combine_ab.json
args=""; for v in base n64s4 n64s3 s2 s4 nopers noovl; do args="$args $v=D64/$v/gen"; done
timeout 300 python3 bench/gluon_tile_overhead.py --out /tmp/d64ab --rounds 3 $args > $OUT/d64_ab.txt 2>&1
cp /tmp/d64ab/overhead.json $OUT/d64_ab.json
grep -v -i "warn" $OUT/decode_combine_ab.txt | tail -24
tail -16 $OUT/d64_ab.txt
