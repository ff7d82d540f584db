export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 -m attnforge.backends.cuda.gpucheck --out /tmp/gc --phase verify,mutants --budget 180 > $OUT/cuda_gpucheck.txt 2>&1; grep -E "d256|mutant|verify:|FAIL" $OUT/cuda_gpucheck.txt | tail -16; echo "gpucheck $(( $(date +%s) - t0 )) s"
timeout 150 python3 bench/prewarm.py --backends cuda --jobs 14 > $OUT/prewarm.txt 2>&1; tail -2 $OUT/prewarm.txt; echo "prewarm $(( $(date +%s) - t0 )) s"
BENCH_TIME_LIMIT=200 timeout 300 bash bench/bench_gpu.sh --no-png --providers sdpa-cudnn,sdpa-flash,attnforge-cuda --rounds 2 --rep-ms 40 > /dev/null 2>&1; echo "bench $(( $(date +%s) - t0 )) s"
sed -n '/## Summary/,/## Rows/p' $OUT/bench/bench.md
