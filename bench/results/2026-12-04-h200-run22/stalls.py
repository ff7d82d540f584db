"""Run 22 call 3: the warp stall samples of `ncu --page source --csv --print-source sass` per SASS line, summed by what the
line is (a barrier wait, a wgmma wait, a GEMM, the softmax's math), and the top lines, for each kernel's CSV given."""
import csv
import re
import sys
from collections import Counter

CLASSES = (  # (name, SASS pattern), first match wins
    ("mbarrier wait (SYNCS)", r"SYNCS"), ("named barrier (BAR)", r"\bBAR\b|BAR\."), ("wgmma wait (WARPGROUP)", r"WARPGROUP|WARPSYNC"),
    ("wgmma (HGMMA)", r"HGMMA"), ("exp2 (MUFU)", r"MUFU"), ("shuffle/redux", r"SHFL|REDUX"), ("shared st/ld", r"\bSTS\b|\bLDS\b|STSM|LDSM"),
    ("global/TMA", r"UTMA|\bSTG\b|\bLDG\b|UBLKCP"), ("fp32 math", r"FMUL|FADD|FFMA|FMNMX|FSEL|FSETP"), ("convert/pack", r"F2F|F2FP|I2F|PRMT"),
    ("branch/exit", r"BRA|EXIT|BSYNC|BSSY|RET|CALL"),
)


def load(path):
    """[(columns, rows)] per kernel: the CSV holds one header row per kernel it prints."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    heads = [i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r)] + [len(rows)]
    return [(rows[a], [r for r in rows[a + 1:b] if len(r) == len(rows[a])]) for a, b in zip(heads, heads[1:])]


def main():
    for path, (cols, rows) in ((p, k) for p in sys.argv[1:] for k in load(p)):
        src = next(i for i, c in enumerate(cols) if c.strip() == "Source")
        allc = next((i for i, c in enumerate(cols) if "Warp Stall Sampling (All" in c), None)
        if allc is None:
            print(path, "columns:", cols)
            continue
        def n(r):
            try:
                return float(r[allc].replace(",", "") or 0)
            except ValueError:
                return 0.0
        total = sum(n(r) for r in rows) or 1.0
        by = Counter()
        for r in rows:
            name = next((c for c, p in CLASSES if re.search(p, r[src])), "other")
            by[name] += n(r)
        print(f"== {path}: {len(rows)} SASS lines, {total:.0f} stall samples")
        for name, v in by.most_common():
            print(f"  {name:26s} {100 * v / total:5.1f}%")
        print("  top lines:")
        for r in sorted(rows, key=n, reverse=True)[:22]:
            print(f"  {100 * n(r) / total:5.1f}%  {r[src].strip()[:110]}")


if __name__ == "__main__":
    main()
