export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
git log --oneline -1 2>/dev/null; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
t0=$(date +%s)
JOBS=7 timeout 260 bash bench/gluon_grid_gpu.sh /tmp/grid > $OUT/grid.txt 2>&1; echo "grid rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/grid.txt; tail -2 $OUT/grid.txt
timeout 100 python3 -m attnforge.backends.gluon.gpucheck --phase mutants --mutants gluon_v_free_one_warpgroup > $OUT/mutant.txt 2>&1; echo "mutant rc $? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/mutant.txt
timeout 200 python3 bench/tune_rows.py --backend gluon --db $OUT/tuning.json --max-candidates 1 --deadline 150 d256 > $OUT/tune.txt 2>&1; echo "tune rc $? $(( $(date +%s) - t0 )) s"; grep -c '"backend"' $OUT/tuning.json; tail -3 $OUT/tune.txt
E=scratch_exp
timeout 120 python3 bench/gluon_tile_overhead.py --out /tmp/ab2 --rounds 3 d128=$E/n128 d128s2o1=$E/n128b d128s2o2=$E/n128c > $OUT/ab2.txt 2>&1; echo "ab rc $? $(( $(date +%s) - t0 )) s"; grep -v "^check" $OUT/ab2.txt | tail -12
