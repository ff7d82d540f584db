export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 bench/prewarm.py --backends cuda --jobs 14 > $OUT/prewarm.txt 2>&1; tail -3 $OUT/prewarm.txt; echo "prewarm $(( $(date +%s) - t0 )) s"
BENCH_TIME_LIMIT=300 timeout 400 bash bench/bench_gpu.sh --no-png --providers sdpa-cudnn,sdpa-flash,attnforge-cuda --rounds 2 --rep-ms 40 > /dev/null 2>&1; echo "bench $(( $(date +%s) - t0 )) s"
tail -75 $OUT/bench/bench.md
left=$(( 560 - ($(date +%s) - t0) ))
[ $left -gt 70 ] && timeout $(( left - 10 )) python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gg --phase mutants --mutants gluon_k_free_one_warpgroup 2>&1 | tail -12 | tee $OUT/gluon_mutant.txt
