#!/usr/bin/env bash
# device call 5 (run 12): the D = 64 Gluon buckets re-tuned with the 4-slot ring beside O's staging tile (the planner's new
# first choice) head to head against the 3-slot one; then the D = 64 bench rows with those entries
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc ATTNFORGE_TUNING=$OUT/tuning.json PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 80 python3 -m attnforge.backends.gluon.gpucheck --phase mutants --mutants gluon_decode_one_split_for_every_count,gluon_decode_combine_rescale_dropped,gluon_decode_split_ends_a_tile_early > $OUT/gluon_mutants.txt 2>&1
echo "mutants rc $? $(( $(date +%s) - t0 )) s"
timeout 250 python3 bench/tune_rows.py --backend gluon --db $OUT/tuning.json --max-candidates 2 --deadline 190 d64-s1k-full d64-s4k-full > $OUT/tune.txt 2>&1
echo "tune rc $? $(( $(date +%s) - t0 )) s, $(grep -c '"backend"' $OUT/tuning.json) entries"
left=$(( 535 - ($(date +%s) - t0) ))
BENCH_TIME_LIMIT=$left timeout $(( left + 40 )) bash bench/bench_gpu.sh --no-png --providers sdpa-cudnn,attnforge-gluon --rounds 2 --rep-ms 40 --head-dim 64 > $OUT/bench_stdout.txt 2>&1; echo "bench rc $? $(( $(date +%s) - t0 )) s"
cp $OUT/bench/bench.md $OUT/bench/bench.json $OUT/ 2>/dev/null; rm -rf $OUT/bench
tail -4 $OUT/gluon_mutants.txt | cut -c1-200
cat $OUT/tune.txt | cut -c1-330
grep -E "geomean|^\| attnforge-gluon|^\| mha" $OUT/bench.md | head -16
