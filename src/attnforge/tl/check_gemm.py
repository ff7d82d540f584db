"""The GEMM statement of the body check and the target's tensor-core limits: operand levels and
layouts, shapes and data types (TL303-306, TL404, TL406), the accumulator (TL507) and the MMA
instruction the target has for the operands (TL501, TL502, TL505).

``GemmChecks`` holds methods of ``check_body.KernelCheck``, which mixes it in; they report
through its ``add`` and read tiles through its ``get``.
"""

from __future__ import annotations

import math

from ..dtypes import TL_DTYPES
from ..errors import TargetError
from . import nodes as n
from .check_info import Info, dims_text
from .printer import expr as show


class GemmChecks:
    """``Compute GEMM`` and its tensor-core checks, for ``KernelCheck``."""

    def c_Gemm(self, s: n.Gemm, env: dict, loop) -> None:
        a, b = self.get(s.a, s), self.get(s.b, s)
        if a is None or b is None or not self.gemm_refs_ok(s, env):
            return
        wgmma = self.target is not None and (self.target.has_wgmma or self.target.has_tcgen05)
        allowed = ("register", "shared") if wgmma else ("register",)
        wrong = [(info, name, role) for info, name, role in ((a, s.a, "A"), (b, s.b, "B")) if info.level not in allowed]
        if wrong:
            where = "register or shared memory (wgmma reads shared operands)" if wgmma else "registers"
            if len(wrong) == 2 and wrong[0][0].level == wrong[1][0].level:
                said = f"operands A ({s.a}) and B ({s.b}) are in {a.level} memory"
            else:
                said = ("operands " if len(wrong) > 1 else "operand ") + " and ".join(f"{role} ({name}) is in {info.level} memory" for info, name, role in wrong)
            fix = " and ".join(f"Copy {name} from {info.level} to register" for info, name, _ in wrong)
            self.add("TL404", s, f"GEMM {said}; operands must be in {where}", fix + " first")
            return
        if a.layout == "mma_c":
            self.add("TL406", s, f"{s.a} is in the accumulator layout (mma_c) but GEMM operand A needs the mma_a layout", f"add 'Reshape {s.a} from mma_c to mma_a' before this GEMM")
        if b.layout == "mma_c":
            self.add("TL406", s, f"{s.b} is in the accumulator layout (mma_c) but GEMM operand B needs the mma_b layout", f"add 'Reshape {s.b} from mma_c to mma_b' before this GEMM")
        if len(a.shape) != 2 or len(b.shape) != 2:
            self.add("TL302", s, "GEMM operands must be 2-d tiles", "use (rows, cols) tiles")
            return
        am, ak = (a.shape[1], a.shape[0]) if s.a_trans else a.shape
        bk, bn = (b.shape[1], b.shape[0]) if s.b_trans else b.shape
        adims = a.dims[::-1] if s.a_trans else a.dims
        bdims = b.dims[::-1] if s.b_trans else b.dims
        if ak != bk:
            hint = f"write {s.b}^T" if not s.b_trans and b.shape[1] == ak else "the inner dimensions of A and B must agree"
            self.add("TL303", s, f"GEMM inner dimensions differ: {s.a}{'^T' if s.a_trans else ''} is {dims_text(adims)}, {s.b}{'^T' if s.b_trans else ''} is {dims_text(bdims)}", hint)
            return
        if a.dtype != b.dtype:
            self.add("TL305", s, f"GEMM operands have different data types: {s.a} is {a.dtype}, {s.b} is {b.dtype}", self._cast_hint(s, a, b))
        self.check_mma(s, a.dtype, (adims[0], am), (bdims[1], bn), (adims[1], ak))
        rows = a.cols if s.a_trans else a.rows
        cols = b.rows if s.b_trans else b.cols
        a_online = a.online
        self.report.operand(self.k, s, s.a, a, ak)
        self.report.operand(self.k, s, s.b, b, ak)
        if s.accumulate:
            acc = self.get(s.out, s)
            if acc is None:
                return
            self.require_register(acc, s.out, s, "GEMM accumulate")
            self.check_accumulator(s, a.dtype, acc.dtype)
            if acc.shape and acc.shape != (am, bn):
                self.add("TL304", s, f"cannot accumulate a {dims_text((adims[0], bdims[1]))} product into {s.out} of shape {dims_text(acc.dims)}", f"Allocate {s.out} in register {dims_text((adims[0], bdims[1]))}")
            if a_online is not None and s.out not in a_online.rescale:
                self.add("TL409", s, f"{s.out} accumulates probabilities from the online softmax at line {a_online.line} but is not rescaled there", f"add 'rescale {s.out}' to that OnlineSoftmax: earlier terms must shrink when the running max grows")
            acc.rows, acc.cols = acc.rows or rows, acc.cols or cols
            self.report.defs(self.k, s, s.out, acc, loop)
            return
        acc_dtype = self.dtypes.get("acc", "fp32")
        self.check_accumulator(s, a.dtype, acc_dtype)
        self.names[s.out] = Info("register", (am, bn), (adims[0], bdims[1]), acc_dtype, s, layout="mma_c", rows=rows, cols=cols,
                                  online=a_online or b.online)
        self.report.defs(self.k, s, s.out, self.names[s.out], loop)

    def check_accumulator(self, s: n.Gemm, operands: str, acc: str) -> None:
        """Tensor cores accumulate in fp32 (or fp16 for fp16 operands); nothing accumulates in bf16 or fp8."""
        if self.target is not None:
            try:
                tc = self.target.tensor_core_dtype(operands, allow_tf32=True)
            except TargetError:
                tc = None
            allowed = sorted({d for i in self.target.mma if tc in i.operand_dtypes for d in i.acc_dtypes}) if tc else ["fp32"]
        else:
            allowed = ["fp16", "fp32"] if operands == "fp16" else ["fp32"]
        allowed = [d for d in allowed if d in TL_DTYPES] or ["fp32"]
        if acc not in allowed:
            self.add("TL507", s, f"a GEMM of {operands} operands cannot accumulate in {acc}" + (f" on {self.target.name}" if self.target else ""),
                     f"accumulate in {' or '.join(allowed)}: dtype acc = fp32")

    def check_mma(self, s: n.Gemm, dtype: str, m: tuple, nn: tuple, k: tuple) -> None:
        t = self.target
        if t is None:
            return
        if dtype == "fp32":
            tf32 = t.tensor_core_dtype("fp32", allow_tf32=True)
            if tf32 is None:
                self.add("TL502", s, f"{t.name} ({t.sm}) has no tensor-core instruction for fp32 or tf32; this GEMM runs on the FMA pipes", "expect about 1/8 of the fp16 rate; use fp16 inputs for tensor cores", "warning")
            else:
                self.add("TL502", s, "exact fp32 GEMMs run on the FMA pipes; tf32 tensor cores are used only when the spec allows tf32", "set allow_tf32 in the AttentionSpec if ~1e-3 relative error is acceptable", "info")
            return
        try:
            tc = t.tensor_core_dtype(dtype)
        except TargetError:
            tc = None
        if tc is None:
            have = ", ".join(sorted(t.mma_operand_dtypes()))
            self.add("TL501", s, f"{t.name} ({t.sm}) tensor cores do not take {dtype}", f"tensor-core dtypes there: {have}; change 'dtype qkv' or pick a newer target")
            return
        grains = (("M", m, t.mma_m_granule()), ("N", nn, t.mma_n_granule()), ("K", k, t.mma_k_granule(dtype)))
        params = {p.name for p in self.k.params}
        for axis, (dim, size), grain in grains:
            if size % grain == 0:
                continue
            if n.expr_names(dim) <= params:
                self.add("TL505", dim, f"GEMM {axis} = {show(dim)} = {size} is not a multiple of {grain}, the {axis} of {t.name}'s {dtype} MMA", f"choose {show(dim)} as a multiple of {grain}")
            elif self.probe == 0:
                self.add("TL505", dim, f"GEMM {axis} = {show(dim)} = {size} is not a multiple of {grain}; the translator pads it to {grain * math.ceil(size / grain)}", "no change needed; padding costs some tensor-core work", "info")

    def _cast_hint(self, s: n.Gemm, a: Info, b: Info) -> str:
        """Which operand to cast, where a Cast can reach it (Cast works on register tiles: TL405)."""
        qkv = self.dtypes.get("qkv")
        (name, info), (other, other_info) = ((s.a, a), (s.b, b)) if a.dtype != qkv else ((s.b, b), (s.a, a))
        if info.level == "register":
            return f"add 'Compute Cast {name} to qkv' before the GEMM"
        fix = f"{name} is in {info.level} memory, where Cast cannot reach it (Cast works on register tiles): allocate it with ': {other_info.dtype}'"
        if other_info.level == "register":
            fix += f", or add 'Compute Cast {other} to {info.dtype}' before the GEMM"
        return fix
