export PYTHONPATH=$PWD/src:$PWD/.gpu_deps ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 330 python3 bench/tune_rows.py --backend gluon --db $OUT/tuning.json --max-candidates 1 --deadline 290 \
  d256-s1k-full bf16-d256-s4k-causal bf16-d256-s16k d128-s1k-full d128-s4k-full > $OUT/tune.txt 2>&1; echo "tune rc $? $(( $(date +%s) - t0 )) s"; cut -c1-200 $OUT/tune.txt
for a in "fp16 777 1031" "bf16 1000 1000"; do set -- $a
  timeout 100 python -m attnforge generate --target auto --backend gluon --out /tmp/g_$1 --dtype $1 --head-dim 128 --heads 4 --kv-heads 2 --seqlen-q $2 --seqlen-k $3 > $OUT/gen_$1.txt 2>&1; echo "generate d128 $a rc $?"; grep -E "plan:|verify" $OUT/gen_$1.txt | cut -c1-160
done
echo "total $(( $(date +%s) - t0 )) s"
