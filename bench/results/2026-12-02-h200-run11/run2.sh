export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 210 python3 bench/cuda_ab.py time scratch_ab --rounds 3 > $OUT/cuda_ab2.txt 2>&1; cp scratch_ab/cuda_ab.json $OUT/cuda_ab2.json
grep -v "^  a-base\|^  c-new" $OUT/cuda_ab2.txt | head -0
timeout 330 python3 -m attnforge.backends.cuda.gpucheck --out /tmp/gc --phase verify,mutants --budget 260 > $OUT/cuda_gpucheck.txt 2>&1; tail -40 $OUT/cuda_gpucheck.txt
cat $OUT/cuda_ab2.txt
