export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
E=scratch_exp
timeout 480 python3 bench/gluon_tile_overhead.py --out /tmp/ab --rounds 3 \
  d64=$E/g64 d64s=$E/g64:split_free d128=$E/g128 d128s=$E/g128:split_free \
  d256=$E/g256 d256s=$E/g256:split_free d256o=$E/g256o d256os=$E/g256o:split_free d256b=$E/g256b:split_free 2>&1 | tee $OUT/ab.txt
cp /tmp/ab/overhead.json $OUT/ 2>/dev/null
