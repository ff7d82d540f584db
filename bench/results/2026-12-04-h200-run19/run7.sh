#!/usr/bin/env bash
# run 19 call 7: does the bench's fixed provider order (cuDNN timed just before attnforge, each round) bias the ratio?
# The same rows with the providers in both orders.
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpu_deps:$PWD/bench:$PWD/tests ATTNFORGE_CACHE=/tmp/afc PYTHONUNBUFFERED=1
ROWS=d64-s1k,d64-s4k-causal,d256-s1k
timeout 80 python3 bench/prewarm.py --backends gluon --rows $ROWS --jobs 14 > $OUT/prewarm.txt 2>&1; echo "prewarm rc $?"
for order in sdpa-cudnn,attnforge-gluon attnforge-gluon,sdpa-cudnn; do
  OUT=$OUT/$order BENCH_TIME_LIMIT=45 timeout 70 bash bench/bench_gpu.sh --no-png --rows $ROWS --providers $order --rounds 3 --rep-ms 40 > /dev/null 2>&1; echo "bench $order rc $?"
done
python3 - <<'PY'
import json, os, math
out = os.environ["OUT"]
res = {}
for order in ("sdpa-cudnn,attnforge-gluon", "attnforge-gluon,sdpa-cudnn"):
    try:
        d = json.load(open(f"{out}/{order}/bench/bench.json"))
    except OSError:
        continue
    for r in d["rows"]:
        a = r["results"].get("attnforge-gluon", {})
        if a.get("status") == "ok":
            res.setdefault(r["name"], {})[order.split(",")[0]] = a["ratios"]["sdpa-cudnn"]
print("| row | cuDNN timed first | attnforge timed first |")
for name, v in res.items():
    print(f"| {name} | {v.get('sdpa-cudnn', float('nan')):.3f} | {v.get('attnforge-gluon', float('nan')):.3f} |")
for k in ("sdpa-cudnn", "attnforge-gluon"):
    xs = [v[k] for v in res.values() if k in v]
    if xs:
        print(k, "first: geomean", round(math.exp(sum(map(math.log, xs)) / len(xs)), 3), "over", len(xs))
PY
