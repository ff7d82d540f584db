#!/bin/bash
# call 1: three warpgroups in ping-pong (BM = 192) against the database's kernels on the D = 64 rows
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.backends.cudnn.version())"
timeout 520 python3 bench/gluon_persistent.py --out $OUT/ab --rows d64 --jobs 14 --rounds 2 \
  --variants "BM=192,warps=12,overlap=0" "BM=192,warps=12,BN=64" "BM=192,warps=12" > $OUT/call1-d64-sets3.txt 2>&1
echo rc=$?
rm -rf $OUT/ab/src
grep -v "^PASS" $OUT/call1-d64-sets3.txt | tail -40
