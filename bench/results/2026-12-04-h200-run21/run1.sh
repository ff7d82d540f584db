#!/usr/bin/env bash
# Run 21 call 1 (issue 13): run 20's prepared next_raw.sh as it ran. call 5 again with raw_arrive.py's mends (the kernel unspecialised, its barrier
# offsets checked for both signs of the scale) and softmax_ab.py's per-job deadlines (a hung kernel costs its own job,
# not the call). Versions: unspec (the shipped kernel unspecialised: what do_not_specialize alone costs), waits (K/V
# released and waited for in asm), all (and Q released: no warpgroup bar.sync left in the K/V loop), ctl. On the H200
# from the repository root, .gpu_deps carried; about 5 minutes. (Not the D = 256 rows: there waits and all spill 16 B.)
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 560 python3 bench/results/2026-12-04-h200-run20/softmax_ab.py /tmp/raw raw d64-s1k d128-s1k d64-s4k-causal bf16-d128-s16k-full > $OUT/raw_ab.txt 2>&1; echo "rc $?"
cp /tmp/raw/softmax_ab_raw.json $OUT/ 2>/dev/null
grep -v PASS $OUT/raw_ab.txt | tail -24 | sed 's/{.BM[^}]*} |//' | cut -c1-160
