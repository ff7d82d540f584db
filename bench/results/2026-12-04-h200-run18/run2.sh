#!/usr/bin/env bash
# device call 2 (run 18): qreg = 1 in the translator (docs/TL.md section 11.5): the gluon grid (each spec through attnforge
# generate, its gate verifying natively) beside the new mutant (the QK^T GEMMs still reading Qs after the early hand-back)
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.backends.cudnn.version())"
t0=$(date +%s)
(JOBS=8 timeout 400 bash bench/gluon_grid_gpu.sh /tmp/grid > $OUT/grid.txt 2>&1; echo "grid done $(( $(date +%s) - t0 )) s") &
(timeout 400 python3 -m attnforge.backends.gluon.gpucheck --out /tmp/gm --phase mutants --mutants gluon_qreg_qk_still_reads_qs,gluon_persistent_q_phase_stuck > $OUT/gluon_mutants.txt 2>&1; echo "gluon mutants rc $? $(( $(date +%s) - t0 )) s") &
wait
cp /tmp/gm/gluon_gpucheck.json $OUT/mutants.json 2>/dev/null
for f in /tmp/grid/*.log; do n=$(basename $f .log); grep -q PASS /tmp/grid/$n.status 2>/dev/null || cp $f $OUT/fail_$n.log; done
grep -l "qreg = 1" /tmp/grid/gen/*/kernel.tl 2>/dev/null | sed 's|/kernel.tl||;s|.*/||' | tr '\n' ' ' > $OUT/qreg_specs.txt; echo "qreg in: $(cat $OUT/qreg_specs.txt)"
tail -3 $OUT/grid.txt; grep '^FAIL' $OUT/grid.txt
tail -8 $OUT/gluon_mutants.txt | cut -c1-250
