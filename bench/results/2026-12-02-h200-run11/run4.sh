# scratch_ab/ built on the CPU by bench/cuda_ab.py build: c-new from 169f04a's planner, tBM-BN-warps-stages-Q with --cand
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 200 python3 bench/cuda_ab.py time scratch_ab --rounds 3 --rows d256-s4k d256-s4k-causal d256-s1k-fp16 d256-s1k-causal d256-s16k d128-s4k d128-s4k-causal d128-s1k d128-s1k-causal > $OUT/cuda_ab4.txt 2>&1; cp scratch_ab/cuda_ab.json $OUT/cuda_ab4.json
timeout 300 python3 -m attnforge.backends.cuda.gpucheck --out /tmp/gc --phase verify,mutants --budget 240 > $OUT/cuda_gpucheck.txt 2>&1; grep -E "mutant|verify:|FAIL" $OUT/cuda_gpucheck.txt | tail -16
cat $OUT/cuda_ab4.txt
