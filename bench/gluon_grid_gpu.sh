#!/usr/bin/env bash
# Verify the gluon backend natively on a Hopper GPU over the forward variant grid: each spec goes
# through attnforge generate (plan, check, interpret, translate, compile, verify against the
# float64 reference), split-KV decode and decode-verify included (ONLY_FEATURES=1: the feature and
# decode specs alone). One line per spec; a hang is cut off by the timeout and counted as a failure.
# JOBS specs at a time (default 6: the compiles are CPU-bound, the GPU check of each is short).
# Usage (on the GPU machine, repository root): bash bench/gluon_grid_gpu.sh OUTDIR
set -u
out=${1:-/tmp/gluon_grid}
mkdir -p "$out"
one() {
  local name=$1; shift
  if timeout 150 python -m attnforge generate --target auto --backend gluon --out "$out/gen/$name" "$@" > "$out/$name.log" 2>&1; then
    echo "PASS $name" | tee "$out/$name.status"
  else
    echo "FAIL $name (rc $?)" | tee "$out/$name.status"; grep -m3 "FAIL\|error" "$out/$name.log"
  fi
}
run() {
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-6}" ]; do wait -n; done
  one "$@" &
}
if [ -z "${ONLY_FEATURES:-}" ]; then
for dt in fp16 bf16; do
  for d in 64 128 256; do
    run "${dt}_d${d}_causal" --dtype $dt --head-dim $d --heads 4 --kv-heads 2 --seqlen-q 1000 --seqlen-k 1000 --causal
    run "${dt}_d${d}_full" --dtype $dt --head-dim $d --heads 4 --kv-heads 4 --seqlen-q 777 --seqlen-k 1031
  done
done
fi
run bf16_topleft --dtype bf16 --head-dim 128 --heads 4 --kv-heads 1 --seqlen-q 300 --seqlen-k 900 --causal --causal-align top_left
run bf16_sq_gt_sk --dtype bf16 --head-dim 128 --heads 2 --kv-heads 2 --seqlen-q 900 --seqlen-k 300 --causal
run bf16_window --dtype bf16 --head-dim 64 --heads 4 --kv-heads 2 --seqlen-q 1000 --seqlen-k 1000 --window 128,0
run bf16_window_d128 --dtype bf16 --head-dim 128 --heads 4 --kv-heads 2 --seqlen-q 1000 --seqlen-k 1000 --window 200,30
run bf16_alibi --dtype bf16 --head-dim 128 --heads 4 --kv-heads 2 --seqlen-q 600 --seqlen-k 600 --causal --alibi-slopes auto
run bf16_softcap --dtype bf16 --head-dim 128 --heads 4 --kv-heads 2 --seqlen-q 600 --seqlen-k 600 --softcap 20
run fp16_scoremod --dtype fp16 --head-dim 64 --heads 4 --kv-heads 4 --seqlen-q 500 --seqlen-k 500 --score-mod "score - 0.01 * abs(q_idx - kv_idx)"
run fp16_maskmod --dtype fp16 --head-dim 64 --heads 4 --kv-heads 4 --seqlen-q 500 --seqlen-k 500 --mask-mod "(q_idx + kv_idx) % 3 != 0"
# D = 256 without a mask up to 1k keys: O through the last K/V tile's ring slots (ostage = 3, plan/hopper._o_via_kv)
run bf16_d256_o_via_kv --dtype bf16 --head-dim 256 --heads 4 --kv-heads 2 --seqlen-q 700 --seqlen-k 1000
run fp16_d256_o_via_kv --dtype fp16 --head-dim 256 --heads 2 --kv-heads 2 --seqlen-q 1000 --seqlen-k 333
# past 1k query rows at D = 64 without a mask: three compute warpgroups (BM = 192, plan/hopper._three_warpgroups)
run fp16_d64_three_sets --dtype fp16 --head-dim 64 --heads 4 --kv-heads 2 --seqlen-q 1500 --seqlen-k 1333
# 512 to 1024 query rows at D = 64 without a mask: four (BM = 256, plan/hopper._four_warpgroups)
run bf16_d64_four_sets --dtype bf16 --head-dim 64 --heads 4 --kv-heads 2 --seqlen-q 1000 --seqlen-k 1000
run bf16_d64_three_sets_gqa --dtype bf16 --head-dim 64 --batch 2 --heads 8 --kv-heads 2 --seqlen-q 2100 --seqlen-k 2100
run bf16_mqa_b3 --dtype bf16 --head-dim 128 --batch 3 --heads 8 --kv-heads 1 --seqlen-q 257 --seqlen-k 513 --causal
# split-KV decode (the split count chosen per call; packed GQA where Hq > Hkv) and decode-verify (Sq 2..16, packed)
run bf16_decode_gqa --dtype bf16 --head-dim 128 --batch 4 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 4099
run bf16_verify_sq4_causal --dtype bf16 --head-dim 128 --heads 32 --kv-heads 8 --seqlen-q 4 --seqlen-k 1000 --causal
run fp16_decode_mha_d64 --dtype fp16 --head-dim 64 --heads 16 --kv-heads 16 --seqlen-q 1 --seqlen-k 2048
run bf16_decode_window_alibi --dtype bf16 --head-dim 128 --heads 16 --kv-heads 2 --seqlen-q 1 --seqlen-k 8192 --window 1024,0 --alibi-slopes auto
run bf16_decode_d256_mqa --dtype bf16 --head-dim 256 --heads 8 --kv-heads 1 --seqlen-q 1 --seqlen-k 3001
run fp16_verify_sq16_g8 --dtype fp16 --head-dim 64 --batch 2 --heads 32 --kv-heads 4 --seqlen-q 16 --seqlen-k 777 --causal
wait
echo "gluon grid: $(cat "$out"/*.status | grep -c ^PASS) passed, $(cat "$out"/*.status | grep -c ^FAIL) failed"
rm -rf "$out/gen"
