#!/usr/bin/env bash
# Prepared in run 18 (issue 12), on the CPU from the repository root: the D = 256 CUDA kernels for the A/B of run.sh. The shipped
# kernel (BM 128, BN 64, 8 warps, 2 stages: 198 KiB of shared memory, one block an SM) against tiles of two blocks an SM as
# FlashAttention-2 runs D = 256 on sm_90 (BM 64, BN 64, 4 warps, 99 KiB), with and without Q in registers, and FA2's staggered
# single-buffer K/V order (stagger.py). Each compiled for sm_90 without a spill (a helper's CPU compiles, run 18).
set -eu
D=bench/results/2026-12-04-h200-run18/cuda_d256
R="d256-s4k d256-s4k-causal d256-s1k-fp16 d256-s1k-causal d256-s16k"
PYTHONPATH=src python3 bench/cuda_ab.py build --out scratch/cuda_ab --label c-base --rows $R
for c in 64,64,4,1,0 64,64,4,1,1 64,32,4,2,1 128,32,8,2,1; do
  PYTHONPATH=src python3 bench/cuda_ab.py build --out scratch/cuda_ab --label t${c//,/-} --cand $c --rows $R
done
for q in 0 1; do
  mkdir -p scratch/cuda_ab/s64-64-4-1-$q
  for r in $R; do python3 $D/stagger.py scratch/cuda_ab/t64-64-4-1-$q/$r.cu scratch/cuda_ab/s64-64-4-1-$q/$r.cu; done
done
