#!/usr/bin/env bash
# prepared for a device call (run 17 had no device time left to start a machine for it): Q in registers for QK^T at D = 128 (qreg.py beside this file), verified, timed beside the shipped kernels
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
timeout 300 python3 bench/results/2026-12-04-h200-run17/qreg_ab.py /tmp/qr > $OUT/qreg_ab.txt 2>&1; echo "rc $?"
cp /tmp/qr/qreg_ab.json $OUT/ 2>/dev/null
cut -c1-220 $OUT/qreg_ab.txt | tail -28
