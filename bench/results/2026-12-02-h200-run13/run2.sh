#!/usr/bin/env bash
# device call 2 (run 13): the decode partial kernel at 128 registers a thread (two programs an SM), split rule at 1 and 2 programs an SM
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 200 python3 bench/gluon_decode_tiles.py time scratch/decab --per-sm 1 2 --eager > $OUT/decode_nreg_eager.txt 2>&1
timeout 200 python3 bench/gluon_decode_tiles.py time scratch/decab --per-sm 1 2 > $OUT/decode_nreg_graph.txt 2>&1
grep -v Warning $OUT/decode_nreg_eager.txt | grep -v warn_once | tail -20
grep -v Warning $OUT/decode_nreg_graph.txt | grep -v warn_once | tail -20
