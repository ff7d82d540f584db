set -x
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.backends.cudnn.version())"; nvcc --version | tail -2
timeout 300 python3 bench/cuda_ab.py time scratch_ab --rounds 3 2>&1 | tee $OUT/cuda_ab.txt
cp scratch_ab/cuda_ab.json $OUT/
timeout 120 ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section InstructionStats -o $OUT/prof -f python3 scratch_ab/prof.py scratch_ab/a-base/d128-s4k.cu scratch_ab/c-lazy/d128-s4k.cu scratch_ab/d-4w64/d128-s4k.cu > $OUT/ncu_log.txt 2>&1
ncu --import $OUT/prof.ncu-rep --page details > $OUT/prof.txt 2>&1; rm -f $OUT/prof.ncu-rep
grep -E "attn_fwd|flash_fwd|Duration|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|Theoretical Occ|Executed Instructions  |Stall|No Eligible" $OUT/prof.txt | head -80
