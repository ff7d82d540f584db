#!/usr/bin/env bash
# Run 22 call 3 (issue 13): Nsight Compute on the D = 256 bf16 kernel at 1k and 16k and cuDNN's at 1k (prof_d256.py): warp
# states, and the stall samples per SASS line of our kernel. On the H200 from the repository root, .gpu_deps carried.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
R=bench/results/2026-12-04-h200-run22
ncu --version | tail -1
timeout 300 ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
  --section Occupancy --import-source no -o /tmp/prof -f python3 $R/prof_d256.py /tmp/pd > $OUT/ncu_log.txt 2>&1; echo "ncu rc $?"
tail -5 $OUT/ncu_log.txt
ncu --import /tmp/prof.ncu-rep --page details > $OUT/prof_details.txt 2>&1; echo "details rc $?"
for i in 0 1; do
  ncu --import /tmp/prof.ncu-rep --page source --csv --print-source sass --launch-skip $i --launch-count 1 > $OUT/prof_source_$i.csv 2>&1; echo "source $i rc $? $(wc -l < $OUT/prof_source_$i.csv) lines"
done
python3 $R/stalls.py $OUT/prof_source_0.csv $OUT/prof_source_1.csv > $OUT/stalls.txt 2>&1; echo "stalls rc $?"
head -80 $OUT/stalls.txt
grep -E "attn_fwd|cudnn|Duration|Elapsed Cycles|Compute \(SM\) Throughput|Warp Cycles Per Issued|Issue Slots Busy|Stall|Registers Per|Grid Size" $OUT/prof_details.txt | head -60
