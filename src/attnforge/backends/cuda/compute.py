"""The CUDA backend's compute on register fragments: GEMM as mma.sync over ldmatrix'd B (and A)
operands, Reshape of accumulators into A operands, Cast, elementwise ops, ScoreMod and Mask per
fragment element, OnlineSoftmax with quad shuffles (or, over a 1-d tile of per-row values such as a
split-KV combine's partial log-sum-exps, per row without them), Normalize and LogSumExp."""

from __future__ import annotations

from ...analysis import LN2, LOG2E, multiplies_indices
from ...tl.resources import stmt_reads
from ...tl import nodes as n
from .base import INDENT, EmitterBase, RTile

# A 2-d online softmax moves its running max (and rescales O) only when a row of the warp grew by
# more than 8 in log2 units (a factor 2^8): below that the tile's weights exp2(s - m) stay under 256,
# which fp16 and bf16 hold with the relative precision they give 1. m, l and O stay consistent, so
# O = acc / l and the log-sum-exp are the same algebraically; the rounding is not bit for bit the
# same. With scores of a steady scale the max settles after a few tiles and the O rescale (Dv / 4
# multiplies a thread a row) stops. Only where nothing but the softmax reads m and P, and nothing but
# softmaxes, Normalize and LogSumExp read l (``_lazy``): elsewhere TL's m_new (docs/TL.md) is kept.
_LAZY_LOG2 = 8.0

_ELEMENTWISE = {
    "Multiply": "({0} * {1})", "Add": "({0} + {1})", "Subtract": "({0} - {1})", "Divide": "({0} / {1})",
    "Maximum": "fmaxf({0}, {1})", "Minimum": "fminf({0}, {1})", "Exp": "expf({0})", "Log": "logf({0})",
    "Tanh": "af_tanh({0})", "Abs": "fabsf({0})", "Neg": "(-{0})",
}


class ComputeEmitter(EmitterBase):
    """The Compute statements (and Reshape) on register fragments: one method per TL statement kind."""

    def s_Gemm(self, s: n.Gemm) -> None:
        self.comment_tl(s)
        a, b = self.tile(s.a, s), self.tile(s.b, s)
        if s.a_trans:
            self.fail(s, "a transposed A operand has no mma.sync translation here", "write GEMM A, B^T with A row-major")
        if a.kind not in ("a_regs", "a_shared", "afrag"):
            self.fail(s, f"{s.a} is not an A operand: load it from shared memory to registers, or Reshape it from mma_c to mma_a")
        if b.kind != "b_shared":
            self.fail(s, f"{s.b} is not a B operand loaded from a shared tile")
        bsh = b.shared
        # B^T: b stored (n, k) -> plain ldmatrix; B: stored (k, n) -> ldmatrix.trans
        n_extent = bsh.rows if s.b_trans else bsh.cols_pad
        k_extent = bsh.cols_pad if s.b_trans else bsh.rows
        if a.ncols != k_extent:
            self.fail(s, f"the GEMM's k extents differ: {s.a} has {a.ncols} (padded) columns, {s.b} {k_extent}")
        if n_extent % 16:
            self.fail(s, f"the GEMM's n extent {n_extent} is not a multiple of 16 (ldmatrix.x4 loads two n8 tiles)")
        out_cols = bsh.rows if s.b_trans else bsh.cols
        if s.accumulate:
            acc = self.tile(s.out, s)
            if acc.kind != "acc" or acc.ncols != n_extent:
                self.fail(s, f"{s.out} is not a fragment tile of {n_extent} columns")
            if acc.rows is None:
                acc.rows = a.rows
        else:
            if s.b_trans and b.rows is not None and b.rows.pos is not None:
                self.fail(s, f"{s.b} comes from a packed view: its rows are (head, position) pairs, not key columns", "pack the query rows only")
            keys = b.rows.first if s.b_trans and b.rows is not None else None  # B^T's rows are the score tile's key columns (kv_idx)
            acc = RTile("acc", self.name(s.out, s), "fp32", ncols=n_extent, true_cols=out_cols, rows=a.rows, cols=keys)
            self.declare(acc, "0.0f")
            self.scope.tiles[s.out] = acc
        base = self._slot_base(b)
        kt = k_extent // 16
        self.emit("#pragma unroll")
        self.emit(f"for (int af_k = 0; af_k < {kt}; ++af_k) {{")
        self.depth += 1
        if a.kind == "a_shared":
            ash = a.shared
            self.emit("uint32_t af_a[af_MT][4];")
            self.emit("#pragma unroll")
            self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
            self.emit(f"{INDENT}af_ldsm_x4(af_a[af_mt], {self._slot_base(a)} + (af_warp * af_MT * 16 + af_mt * 16 + (af_lane & 15)) * {ash.pitch} + af_k * 16 + (af_lane >> 4) * 8);")
            a_frag = "af_a[af_mt]"
        else:
            a_frag = f"{a.cname}[af_mt][af_k]"
        self.emit("#pragma unroll")
        self.emit(f"for (int af_n = 0; af_n < {n_extent // 16}; ++af_n) {{")
        self.depth += 1
        self.emit("uint32_t af_b[4];")
        if s.b_trans:
            self.emit(f"af_ldsm_x4(af_b, {base} + (af_n * 16 + (af_lane & 7) + (af_lane >> 4) * 8) * {bsh.pitch} + af_k * 16 + ((af_lane >> 3) & 1) * 8);")
        else:
            self.emit(f"af_ldsm_x4_trans(af_b, {base} + (af_k * 16 + (af_lane & 7) + ((af_lane >> 3) & 1) * 8) * {bsh.pitch} + af_n * 16 + (af_lane >> 4) * 8);")
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt) {")
        self.emit(f"{INDENT}af_mma({acc.cname}[af_mt][2 * af_n], {a_frag}, af_b[0], af_b[1]);")
        self.emit(f"{INDENT}af_mma({acc.cname}[af_mt][2 * af_n + 1], {a_frag}, af_b[2], af_b[3]);")
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")

    def _names_for(self, t: RTile, expr: n.Expr) -> dict[str, str]:
        wide = multiplies_indices(expr, self.floats)
        w = (lambda x: f"((long long){x})") if wide else (lambda x: x)
        names = {"q_idx": w("af_qi")}
        if t.kind != "rows":
            names["kv_idx"] = w("af_ki")
        if t.rows is not None and t.rows.head is not None:  # a packed tile: each row's own query head
            names["h_idx"] = w("af_hi")
        if wide:
            for g in ("b", "h"):
                if g in self.scope.names:
                    names[g] = f"((long long){self.scope.names[g]})"
        return names

    def _rounded(self, t: RTile, value: str) -> str:
        return value if t.fmt == "fp32" else f"af_round({value})"

    def s_Elementwise(self, s: n.Elementwise) -> None:
        self.comment_tl(s)
        if id(s) in self.base2.multiplies:
            self._fold_scale(s)
            return
        if s.op not in _ELEMENTWISE:
            self.fail(s, f"Compute {s.op} has no CUDA translation here", "RowMax/RowSum live inside OnlineSoftmax in this backend")
        tiles = [self.scope.tiles[a.id] for a in s.args if isinstance(a, n.Name) and a.id in self.scope.tiles]
        if not tiles:
            self.fail(s, f"Compute {s.op} needs a tile operand")
        first = max(tiles, key=lambda t: t.rank)  # a row vector widens against a 2-d tile, whichever comes first
        if first.kind not in ("acc", "rows"):
            self.fail(s, f"Compute {s.op} works on fp32 fragment tiles here")
        ops = []
        for a in s.args:
            if isinstance(a, n.Name) and a.id in self.scope.tiles:
                t = self.scope.tiles[a.id]
                if t.kind == first.kind and (t.kind == "rows" or t.ncols == first.ncols):
                    ops.append(self.elem(t))
                elif t.kind == "rows" and first.kind == "acc":
                    ops.append(f"{t.cname}[af_mt][af_e >> 1]")
                else:
                    self.fail(s, f"{a.id} and {first.cname} have different fragment layouts")
            else:
                ops.append(self.dev(a))
        target = s.out if s.out is not None else s.args[0].id
        name = self.name(target, s)
        value = self._rounded(first, _ELEMENTWISE[s.op].format(*ops))
        if target not in self.scope.tiles:
            out = RTile(first.kind, name, first.fmt, ncols=first.ncols, true_cols=first.true_cols, rows=first.rows, cols=first.cols)
            self.declare(out, None)
            self.scope.tiles[target] = out
        out = self.scope.tiles[target]
        self.frag_loops(first, [f"{self.elem(out)} = {value};"], need_cols=False)

    def _fold_scale(self, s: n.Elementwise) -> None:
        """``Compute Multiply S, scale`` before a base-2 online softmax (``analysis.base2_softmax``):
        c = scale * log2(e). For c > 0 the multiply goes into the softmax's exp2 FFMA (its max is
        max(S) * c, one multiply a row, not one a score), so S keeps its raw scores; otherwise (max(S * c)
        is not max(S) * c) S is multiplied here, a branch the whole grid takes alike."""
        t = self.tile(s.args[0].id, s)
        if t.kind != "acc":
            self.fail(s, "a scale folded into the softmax works on a score tile of fragments")
        c = f"af_c_{t.cname}"
        self.emit(f"const float {c} = ({self.dev(s.args[1])}) * {LOG2E}f;  // the scale in log2 units: the softmax runs in base 2")
        self.emit(f"if (!({c} > 0.0f)) {{  // max(S * c) is max(S) * c only for c > 0 (then the softmax's FFMA applies c, S stays raw)")
        self.depth += 1
        self.frag_loops(t, [f"{self.elem(t)} *= {c};"], need_cols=False)
        self.depth -= 1
        self.emit("}")
        t.factor = c

    def s_Cast(self, s: n.Cast) -> None:
        self.comment_tl(s)
        src = self.tile(s.src, s)
        fmt = self.k.dtype_map().get(s.dtype, s.dtype)
        if fmt not in ("fp16", "bf16", "fp32"):
            self.fail(s, f"Cast to {fmt} has no CUDA translation here")
        target = s.out or s.src
        name = self.name(target, s)
        if src.kind not in ("acc",) or target != s.src:
            self.fail(s, "Cast works in place on a fragment tile here (Compute Cast P to qkv)")
        self.emit(f"// ({name} becomes {fmt}: the values are rounded where they are packed into MMA operand registers, at the Reshape)")
        src.fmt = fmt

    def s_ScoreMod(self, s: n.ScoreMod) -> None:
        self.comment_tl(s)
        t = self.tile(s.target, s)
        if t.kind != "acc":
            self.fail(s, "ScoreMod works on a score tile of fragments")
        extra = self._names_for(t, s.expr)
        extra["score"] = "af_score"
        value = self.dev(s.expr, extra)
        self.frag_loops(t, [f"const float af_score = {self.elem(t)}; (void)af_score;", f"{self.elem(t)} = {self._rounded(t, f'(float)({value})')};"])

    def s_Mask(self, s: n.Mask) -> None:
        self.comment_tl(s)
        t = self.tile(s.target, s)
        if t.kind != "acc" or t.cols is None:
            self.fail(s, "Mask works on a score tile whose columns are keys (from GEMM Q, K^T)")
        keep = self.dev(s.keep, self._names_for(t, s.keep))
        self.frag_loops(t, [f"if (!({keep})) {self.elem(t)} = -INFINITY;"])

    def s_OnlineSoftmax(self, s: n.OnlineSoftmax) -> None:
        self.comment_tl(s)
        S = self.tile(s.scores, s)
        m, l = self.tile(s.row_max, s), self.tile(s.row_sum, s)
        if S.kind not in ("acc", "rows") or m.kind != "rows" or l.kind != "rows":
            self.fail(s, "OnlineSoftmax takes a score tile of fragments (2-d) or of rows (1-d) and two row vectors")
        resc = [self.tile(r, s) for r in s.rescale]
        for r, rn in zip(resc, s.rescale):
            if r.kind != "acc":
                self.fail(s, f"{rn} is not a fragment tile")
        if S.kind == "rows":
            self._online_softmax_rows(s, S, m, l, resc)
            return
        if l.whole_sum:
            self.fail(s, f"{s.row_sum} holds whole row sums (a 1-d OnlineSoftmax's); a 2-d one keeps per-thread partial sums",
                      "use separate state for the two")
        out = self.name(s.out, s)
        P = RTile("acc", out, "fp32", ncols=S.ncols, true_cols=S.true_cols, rows=S.rows, cols=S.cols)
        if s.out != s.scores:
            self.emit(f"float {out}[af_MT][{S.ncols // 8}][4];")
        nt = S.ncols // 8
        self.emit("{  // (the softmax's temporaries: a block may hold more than one)")
        self.depth += 1
        base2 = id(s) in self.base2.softmaxes  # m in log2 units, the scale (if folded) applied here
        lazy = self._lazy(s)
        if base2 and S.factor is not None:
            k = f"af_k_{S.cname}"
            self.emit(f"const float {k} = {S.factor} > 0.0f ? {S.factor} : 1.0f;  // what takes S to log2 units here")
            k_max, k_score, k_state, grow = f" * {k}", k, "", f"{_LAZY_LOG2}f"
        elif base2:
            self.fail(s, f"{s.scores} reaches a base-2 softmax without its folded scale", "report a translator bug with the TL")
        else:  # natural units: e^(s - m) = 2^(s * log2(e) - m * log2(e)), one FFMA a score
            k_max, k_score, k_state, grow = "", f"{LOG2E}f", f" * {LOG2E}f", f"{_LAZY_LOG2 * LN2}f"
        rows = ("#pragma unroll", "for (int af_mt = 0; af_mt < af_MT; ++af_mt)", "#pragma unroll", "for (int af_r = 0; af_r < 2; ++af_r) {")
        self.emit("// per fragment row: the row max over this thread's columns, then over the quad (shuffles xor 1, 2)")
        self.emit("float af_mnew[af_MT][2];")
        for line in rows:
            self.emit(line)
        self.depth += 1
        self.emit("float af_mx = -INFINITY;")
        self.emit("#pragma unroll")
        self.emit(f"for (int af_nt = 0; af_nt < {nt}; ++af_nt)")
        self.emit(f"{INDENT}af_mx = fmaxf(af_mx, fmaxf({S.cname}[af_mt][af_nt][2 * af_r], {S.cname}[af_mt][af_nt][2 * af_r + 1]));")
        self.emit(f"af_mnew[af_mt][af_r] = fmaxf({m.cname}[af_mt][af_r], af_quad_max(af_mx){k_max});")
        self.depth -= 1
        self.emit("}")
        if lazy:
            self.emit(f"// the state moves to the new max only when some row of the warp grew by more than {_LAZY_LOG2:g} (log2 units; one vote,")
            self.emit(f"// warp-uniform): otherwise this tile's weights stay under 2^{_LAZY_LOG2:g} and the rescale of {', '.join(r.cname for r in resc) or 'the state'} is skipped (m, l and O agree)")
            self.emit("bool af_grow = false;")
            for line in rows[:-1]:
                self.emit(line)
            self.emit("for (int af_r = 0; af_r < 2; ++af_r)")
            self.emit(f"{INDENT}af_grow |= af_mnew[af_mt][af_r] > {m.cname}[af_mt][af_r] + {grow};")
            self.emit("if (__any_sync(0xffffffffu, af_grow)) {")
        else:
            self.emit(f"{{  // every tile: the state is read outside the softmax, so it keeps TL's running max")
        self.depth += 1
        for line in rows:
            self.emit(line)
        self.depth += 1
        self.emit("const float af_safe = af_mnew[af_mt][af_r] == -INFINITY ? 0.0f : af_mnew[af_mt][af_r];  // nothing visible yet: weights stay 0")
        self.emit(f"const float af_alpha = af_exp2(({m.cname}[af_mt][af_r] - af_safe){k_state});")
        self.emit(f"{l.cname}[af_mt][af_r] *= af_alpha;")
        self._rescale_rows(resc)
        self.emit(f"{m.cname}[af_mt][af_r] = af_mnew[af_mt][af_r];")
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        for line in rows:
            self.emit(line)
        self.depth += 1
        self.emit(f"const float af_shift = -({m.cname}[af_mt][af_r] == -INFINITY ? 0.0f : {m.cname}[af_mt][af_r]){k_state};")
        self.emit("float af_sum = 0.0f;")
        self.emit("#pragma unroll")
        self.emit(f"for (int af_nt = 0; af_nt < {nt}; ++af_nt)")
        self.emit("#pragma unroll")
        self.emit("for (int af_c = 0; af_c < 2; ++af_c) {")
        self.emit(f"{INDENT}const float af_p = af_exp2(fmaf({S.cname}[af_mt][af_nt][2 * af_r + af_c], {k_score}, af_shift));")
        self.emit(f"{INDENT}{out}[af_mt][af_nt][2 * af_r + af_c] = af_p;")
        self.emit(f"{INDENT}af_sum += af_p;")
        self.emit("}")
        self.emit(f"{l.cname}[af_mt][af_r] += af_sum;  // this thread's columns only: quad-reduced where it is read")
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        l.partial_sum = True
        self.scope.tiles[s.out] = P

    def _lazy(self, s: n.OnlineSoftmax) -> bool:
        """Whether this softmax may keep a running max up to 2^8 below the true one (``_LAZY_LOG2``): nothing but
        online softmaxes and log-sum-exps reads its max, nothing but those and Normalize its row sum, and nothing but
        a Cast, a Reshape or a GEMM its weights (which then differ from TL's by the state's common factor)."""
        if s.out == s.scores:  # (weights written over their scores: the reads before the softmax are the scores')
            return False
        allowed = {s.row_max: (n.OnlineSoftmax, n.LogSumExp), s.row_sum: (n.OnlineSoftmax, n.Normalize, n.LogSumExp),
                   s.out: (n.Cast, n.Reshape, n.Gemm)}
        for t in n.walk(self.k.body):
            if t is s or isinstance(t, (n.Loop, n.Role)):
                continue
            for name, kinds in allowed.items():
                if name in stmt_reads(t) and not isinstance(t, kinds):
                    return False
        return True

    def _online_softmax_rows(self, s: n.OnlineSoftmax, S: RTile, m: RTile, l: RTile, resc: list[RTile]) -> None:
        """OnlineSoftmax over a 1-d tile: one value per row (a split's log-sum-exp in a split-KV
        combine), which every lane of the row's quad holds, so no shuffles; natural exp, as TL's.
        A value of -inf (a split that saw no key) gets weight 0 and leaves the state as it was."""
        if l.partial_sum:
            self._full_sum(l)
        out = self.name(s.out, s)
        if s.out != s.scores:
            self.emit(f"float {out}[af_MT][2];")
        self.emit("// per row: the new max, the old state's rescale (alpha) and the value's weight; every lane of the quad alike")
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
        self.emit("#pragma unroll")
        self.emit("for (int af_r = 0; af_r < 2; ++af_r) {")
        self.depth += 1
        self.emit(f"const float af_x = {S.cname}[af_mt][af_r];")
        self.emit(f"const float af_mx = fmaxf({m.cname}[af_mt][af_r], af_x);")
        self.emit("const float af_safe = af_mx == -INFINITY ? 0.0f : af_mx;  // nothing visible yet: weights stay 0")
        self.emit(f"const float af_alpha = af_exp({m.cname}[af_mt][af_r] - af_safe);")
        self.emit("const float af_p = af_exp(af_x - af_safe);")
        self.emit(f"{out}[af_mt][af_r] = {self._rounded(S, 'af_p')};")
        self.emit(f"{l.cname}[af_mt][af_r] = {l.cname}[af_mt][af_r] * af_alpha + af_p;  // whole: no quad reduction")
        self._rescale_and_keep_max(resc, m)
        l.whole_sum = True
        self.scope.tiles[s.out] = RTile("rows", out, S.fmt, rows=S.rows, dims=S.dims)

    def _rescale_and_keep_max(self, resc: list[RTile], m: RTile) -> None:
        """Inside an OnlineSoftmax's row loops: each rescaled tile's row times alpha, the new max
        kept; then the loops closed."""
        self._rescale_rows(resc)
        self.emit(f"{m.cname}[af_mt][af_r] = af_mx;")
        self.depth -= 1
        self.emit("}")

    def _rescale_rows(self, resc: list[RTile]) -> None:
        """Inside an OnlineSoftmax's row loops (af_mt, af_r): this thread's two columns of each n8 tile of every rescaled
        tile's row times af_alpha."""
        for r in resc:
            self.emit("#pragma unroll")
            self.emit(f"for (int af_nt = 0; af_nt < {r.ncols // 8}; ++af_nt) {{ {r.cname}[af_mt][af_nt][2 * af_r] *= af_alpha; {r.cname}[af_mt][af_nt][2 * af_r + 1] *= af_alpha; }}")

    def _full_sum(self, l: RTile) -> None:
        if l.partial_sum:
            self.emit(f"// {l.cname}: add up the quad's partial row sums")
            self.emit("#pragma unroll")
            self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
            self.emit("#pragma unroll")
            self.emit(f"for (int af_r = 0; af_r < 2; ++af_r) {l.cname}[af_mt][af_r] = af_quad_sum({l.cname}[af_mt][af_r]);")
            l.partial_sum = False

    def s_Normalize(self, s: n.Normalize) -> None:
        self.comment_tl(s)
        acc, l = self.tile(s.acc, s), self.tile(s.row_sum, s)
        if acc.kind != "acc" or l.kind != "rows":
            self.fail(s, "Normalize takes a fragment tile and a row vector")
        self._full_sum(l)
        out = RTile("acc", self.name(s.out, s), "fp32", ncols=acc.ncols, true_cols=acc.true_cols, rows=acc.rows, cols=acc.cols)
        self.declare(out, None)
        inv = f"af_inv_{out.cname}"
        self.emit("// one reciprocal a row, not a division an element; a row that saw nothing gives O = 0")
        self.emit(f"float {inv}[af_MT][2];")
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
        self.emit("#pragma unroll")
        self.emit(f"for (int af_r = 0; af_r < 2; ++af_r) {inv}[af_mt][af_r] = {l.cname}[af_mt][af_r] > 0.0f ? 1.0f / {l.cname}[af_mt][af_r] : 0.0f;")
        self.frag_loops(acc, [f"{self.elem(out)} = {self.elem(acc)} * {inv}[af_mt][af_e >> 1];"], need_cols=False)
        self.scope.tiles[s.out] = out

    def s_LogSumExp(self, s: n.LogSumExp) -> None:
        self.comment_tl(s)
        m, l = self.tile(s.row_max, s), self.tile(s.row_sum, s)
        if m.kind != "rows" or l.kind != "rows":
            self.fail(s, "LogSumExp takes two row vectors")
        self._full_sum(l)
        out = RTile("rows", self.name(s.out, s), "fp32", rows=m.rows)
        self.declare(out, None)
        m_nat = f"{m.cname}[af_mt][af_r]" + (f" * {LN2}f" if s.row_max in self.base2.states else "")  # a base-2 max back to nats
        self.frag_loops(out, [f"{self.elem(out)} = {l.cname}[af_mt][af_r] > 0.0f ? {m_nat} + logf({l.cname}[af_mt][af_r]) : -INFINITY;"])
        self.scope.tiles[s.out] = out

    def s_Reshape(self, s: n.Reshape) -> None:
        self.comment_tl(s)
        t = self.tile(s.name, s)
        if (s.src_layout, s.dst_layout) != ("mma_c", "mma_a") or t.kind != "acc":
            self.fail(s, f"Reshape {s.src_layout} -> {s.dst_layout} of {s.name}: only an accumulator tile to the A-operand layout (mma_c -> mma_a) is translated")
        if t.fmt not in ("fp16", "bf16"):
            self.fail(s, f"{s.name} is {t.fmt}: Cast it to the operand format (qkv) before the Reshape")
        if t.fmt != self.fmt_qkv:
            self.fail(s, f"{s.name} is {t.fmt} but the MMAs of this kernel take {self.fmt_qkv}")
        kt = t.ncols // 16
        name = f"af_{t.cname}_a"
        self.emit("// C fragments of n8 tiles 2k, 2k+1 are the A fragment of k slice k: rows g / g+8, columns 2t, 2t+1 (+8)")
        self.emit(f"uint32_t {name}[af_MT][{kt}][4];")
        self.emit("#pragma unroll")
        self.emit("for (int af_mt = 0; af_mt < af_MT; ++af_mt)")
        self.emit("#pragma unroll")
        self.emit(f"for (int af_k = 0; af_k < {kt}; ++af_k) {{")
        self.emit(f"{INDENT}{name}[af_mt][af_k][0] = af_pack({t.cname}[af_mt][2 * af_k][0], {t.cname}[af_mt][2 * af_k][1]);")
        self.emit(f"{INDENT}{name}[af_mt][af_k][1] = af_pack({t.cname}[af_mt][2 * af_k][2], {t.cname}[af_mt][2 * af_k][3]);")
        self.emit(f"{INDENT}{name}[af_mt][af_k][2] = af_pack({t.cname}[af_mt][2 * af_k + 1][0], {t.cname}[af_mt][2 * af_k + 1][1]);")
        self.emit(f"{INDENT}{name}[af_mt][af_k][3] = af_pack({t.cname}[af_mt][2 * af_k + 1][2], {t.cname}[af_mt][2 * af_k + 1][3]);")
        self.emit("}")
        self.scope.tiles[s.name] = RTile("afrag", name, t.fmt, ncols=t.ncols, true_cols=t.true_cols, rows=t.rows, cols=t.cols)

    def s_Softmax(self, s: n.Softmax) -> None:
        self.fail(s, "a one-pass Softmax has no CUDA translation here", "use the OnlineSoftmax form the planner writes, or --backend triton")
