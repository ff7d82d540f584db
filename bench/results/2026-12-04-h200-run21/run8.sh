#!/usr/bin/env bash
# Run 21 call 8 (issue 13): the Gluon variant grid (bench/gluon_grid_gpu.sh, with its new four-warpgroup spec) through
# attnforge generate and its native gate, with this stop's planner; statuses written under $OUT as they come.
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
JOBS=10 timeout 300 bash bench/gluon_grid_gpu.sh $OUT/grid > $OUT/grid.txt 2>&1; echo "grid rc $?"
grep -c "^PASS" $OUT/grid.txt; grep "^FAIL\|gluon grid" $OUT/grid.txt | head; rm -f $OUT/grid/*.log
