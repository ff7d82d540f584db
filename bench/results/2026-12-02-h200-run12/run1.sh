#!/usr/bin/env bash
# device call 1 (run 12): Gluon decode sweep (alone on the GPU); then the Gluon grid beside the CUDA gate + mutants; one Gluon mutant
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.backends.cudnn.version())"
timeout 200 python3 bench/gluon_decode_tiles.py time AB --per-sm 1 2 4 > $OUT/decode_sweep.txt 2>&1
cp scratch/decab/gluon_decode_tiles.json $OUT/ 2>/dev/null
(JOBS=8 timeout 260 bash bench/gluon_grid_gpu.sh /tmp/grid > $OUT/grid.txt 2>&1) &
GRID=$!
timeout 200 python3 -m attnforge.backends.cuda.gpucheck --out /tmp/gc --phase verify,mutants --budget 180 > $OUT/cuda_gpucheck.txt 2>&1
wait $GRID
timeout 100 python3 -m attnforge.backends.gluon.gpucheck --phase mutants --mutants gluon_ostage2_stores_the_other_warpgroups_rows > $OUT/gluon_mutant.txt 2>&1
echo "grid PASS $(grep -c '^PASS' $OUT/grid.txt)"; grep '^FAIL' $OUT/grid.txt
tail -5 $OUT/cuda_gpucheck.txt; tail -5 $OUT/gluon_mutant.txt
tail -60 $OUT/decode_sweep.txt
