"""Prepared in run 18 (issue 12), not yet run on a GPU: rewrite a stages = 1 attnforge CUDA kernel (K and V copies issued
together at the top of each tile) into FlashAttention-2's staggered single-buffer schedule: V_j issued once K_j has landed
(under QK^T_j), K_{j+1} once V_j has landed (under the softmax and PV_j). A text transform for an A/B (prepare.sh), not a path
to land: if it wins, the change belongs in the S == 1 branch of backends/cuda/memory.py."""
import json, re, sys

def block_end(lines, i):
    """index of the line closing the brace block opened at lines[i] ('{')."""
    d = 0
    for k in range(i, len(lines)):
        d += lines[k].count("{") - lines[k].count("}")
        if d == 0:
            return k
    raise ValueError

def patch(src):
    L = src.split("\n")
    out_waits = None
    n_loops = 0
    i = 0
    while True:
        try:
            s = next(k for k in range(i, len(L)) if "// stages = 1: every thread is done with the slot" in L[k])
        except StopIteration:
            break
        n_loops += 1
        ind = L[s][: len(L[s]) - len(L[s].lstrip())]
        assert L[s + 1].strip() == "__syncthreads();"
        kb0 = s + 2; assert L[kb0].strip() == "{"; kb1 = block_end(L, kb0)
        assert L[kb1 + 1].strip() == "af_cp_commit();"
        vb0 = kb1 + 2; assert L[vb0].strip() == "{"; vb1 = block_end(L, vb0)
        assert L[vb1 + 1].strip() == "af_cp_commit();"
        assert L[vb1 + 2].strip().startswith("af_cp_wait<1>();") and L[vb1 + 3].strip() == "__syncthreads();"
        kblock = L[kb0:kb1 + 1]; vblock = L[vb0:vb1 + 1]
        assert sum("(j * BN)" in x for x in kblock) == 1
        # the loop header above: find 'for (int j = af_loN, ...; j < af_hiN;'
        f = max(k for k in range(0, s) if re.match(r"\s*for \(int j = af_lo\d+", L[k]))
        hi = re.search(r"j < (af_hi\d+)", L[f])[1]; lo = re.search(r"j = (af_lo\d+)", L[f])[1]
        # GEMM QK^T end: the line '// TL: Compute Multiply S, scale' after s
        g = next(k for k in range(s, len(L)) if "// TL: Compute Multiply S, scale" in L[k])
        vw = next(k for k in range(g, len(L)) if "// TL: Copy V (" in L[k])
        assert L[vw + 1].strip().startswith("af_cp_wait<0>();") and L[vw + 2].strip() == "__syncthreads();"
        knext = [x.replace("(j * BN)", "((j + 1) * BN)") for x in kblock]
        kfirst = [x.replace("(j * BN)", f"({lo} * BN)") for x in kblock]
        top = [ind + "// staggered (FlashAttention-2): K_j has landed; every warp is done with Vs; V_j goes in flight under QK^T",
               ind + "af_cp_wait<0>();", ind + "__syncthreads();", *vblock, ind + "af_cp_commit();"]
        mid = [ind + "// staggered: V_j has landed; every warp is done with Ks: K_{j+1} goes in flight under the softmax and PV",
               ind + "af_cp_wait<0>();", ind + "__syncthreads();", ind + f"if (j + 1 < {hi})", *knext, ind + "af_cp_commit();"]
        pind = L[f][: len(L[f]) - len(L[f].lstrip())]
        pro = [pind + "// staggered prologue: the first K tile in flight", pind + f"if ({lo} < {hi})",
               *[x[4:] if x.startswith("    ") else x for x in kfirst], pind + "af_cp_commit();"]
        # apply from the bottom up
        L[vw + 1:vw + 3] = []
        L[g:g] = mid
        L[s:vb1 + 4] = top
        L[f:f] = pro
        i = f + len(pro) + len(top) + len(mid)
    m = re.search(r"^// attnforge-cuda-meta: (.*)$", "\n".join(L), re.M)
    meta = json.loads(m[1])
    for kinfo in meta["kernels"]:
        kinfo["waits"] = ["af_cp_wait<0>();"] * (1 + 2 * n_loops)
        kinfo["notes"] = kinfo.get("notes", []) + ["scratch: FlashAttention-2's staggered single-buffer K/V schedule (hand patch)"]
    text = "\n".join(L).replace(m[0], "// attnforge-cuda-meta: " + json.dumps(meta, sort_keys=True), 1)
    return text, n_loops

if __name__ == "__main__":
    src = open(sys.argv[1]).read()
    text, n = patch(src)
    open(sys.argv[2], "w").write(text)
    print(sys.argv[2], "loops patched:", n)
