export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
BENCH_TIME_LIMIT=150 bash bench/bench_gpu.sh --no-png --rows decode --providers sdpa-cudnn,attnforge-gluon --rounds 3 --rep-ms 40 > $OUT/bench_stdout.txt 2>&1; echo "bench rc $? $(( $(date +%s) - t0 )) s"
cp $OUT/bench/bench.md $OUT/bench/bench.json $OUT/ 2>/dev/null; rm -rf $OUT/bench
grep -E "^\| decode" $OUT/bench.md | head -6
