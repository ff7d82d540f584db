"""Run 19 (issue 13): one exp2 in ``pack`` of the Gluon softmax computed on the FMA pipe instead of MUFU.EX2, as
FlashAttention-4 does on Blackwell: x clamped at -127, floor(x) by an add rounding down onto 1.5 * 2^23, 2^f for
the fraction f in [0, 1) by a minimax polynomial with p(0) = 1 (degree 3: 8.6e-5 relative, degree 4: 3.0e-6; fitted
in float64, evaluated in fp32 by Horner's rule), floor(x) added into the exponent field; 0 under -126 (exp2(-inf)
is 0 exactly). One inline PTX block per ``pack`` elements of a thread (gl.inline_asm_elementwise). ``main``
compiles the D = 64 1k kernel for sm_90a here and counts its SASS (MUFU.EX2, FFMA, ...)."""
import re, subprocess, sys
from pathlib import Path
sys.path.insert(0, "bench")
import gluon_persistent as gp
from attnforge.backends.gluon import GluonBackend, _import
from attnforge.backends.gluon.compile import compile_for_target
from attnforge.compile_report import find_cuobjdump
from attnforge.plan.builtin import Candidate
from attnforge.plan.hopper import hopper_plans
from attnforge.spec import AttentionSpec
from attnforge.targets import get_target

POLY = {3: ["0f3F31F2F1", "0f3E691C67", "0f3D9DD715"], 4: ["0f3F316B69", "0f3E7711D7", "0f3D55FD0A", "0f3C5BFC2D"]}

def asm(pack, emulated, deg):
    lines = ["{", ".reg .f32 af_x, af_t, af_f, af_p;", ".reg .b32 af_i, af_j;", ".reg .pred af_z;"]
    for e in range(pack):
        o, i = f"${e}", f"${pack + e}"
        if e not in emulated:
            lines.append(f"ex2.approx.ftz.f32 {o}, {i};")
            continue
        c = POLY[deg]
        lines += [f"max.f32 af_x, {i}, 0fC2FE0000;",            # clamp at -127
                  "add.rm.f32 af_t, af_x, 0f4B400000;",          # 1.5 * 2^23 + floor(x)
                  "sub.f32 af_f, af_t, 0f4B400000;",
                  "sub.f32 af_f, af_x, af_f;",                   # x - floor(x) in [0, 1)
                  f"fma.rn.f32 af_p, af_f, {c[-1]}, {c[-2]};"]
        for k in range(deg - 3, -1, -1):
            lines.append(f"fma.rn.f32 af_p, af_p, af_f, {c[k]};")
        lines += ["fma.rn.f32 af_p, af_p, af_f, 0f3F800000;",
                  "mov.b32 af_i, af_t;", "shl.b32 af_i, af_i, 23;",
                  "mov.b32 af_j, af_p;", "add.s32 af_i, af_i, af_j;",  # 2^f * 2^floor(x): floor(x) into the exponent
                  f"setp.lt.f32 af_z, {i}, 0fC2FC0000;",          # under -126: 0 (exp2(-inf) = 0 exactly)
                  f"selp.b32 {o}, 0, af_i, af_z;"]
    lines.append("}")
    return " ".join(lines)

def patch(src, pack, emulated, deg):
    a = asm(pack, emulated, deg)
    cons = ",".join(["=r"] * pack + ["r"] * pack)
    fn = (f"@gluon.jit\ndef _exp2_mix(x):\n    return gl.inline_asm_elementwise({a!r}, {cons!r}, [x], dtype=gl.float32, is_pure=True, pack={pack})\n\n\n")
    n = 0
    out = []
    for line in src.splitlines():
        if re.match(r"\s*P = gl\.exp2\(", line):
            line = line.replace("gl.exp2(", "_exp2_mix(", 1); n += 1
        out.append(line)
    text = "\n".join(out) + "\n"
    i = text.index("@gluon.jit")
    return text[:i] + fn + text[i:], n

def sass_counts(cubin):
    p = Path("/tmp/k.cubin"); p.write_bytes(cubin)
    s = subprocess.run([find_cuobjdump(), "-sass", str(p)], capture_output=True, text=True).stdout
    return {k: len(re.findall(k, s)) for k in ("MUFU.EX2", "FFMA", "FMNMX", "HGMMA", "FSEL|SEL", "SHF|SHL|IMAD.SHL", "FADD")}

def main():
    kw = dict(heads=32, kv_heads=32, head_dim=int(sys.argv[1]) if len(sys.argv) > 1 else 64, dtype="bf16", causal=False, batch=16, seqlen_q=1024, seqlen_k=1024)
    spec = AttentionSpec(**kw); t = get_target("h200")
    params = gp._params(spec)
    plan = next(hopper_plans(spec, t, prefer=Candidate(params, "asked")))
    src = GluonBackend().translate(plan.program, head_dim=spec.head_dim, head_dim_v=spec.head_dim_v, file="kernel.tl").source
    print(params)
    import triton
    for label, pack, emu in (("mufu", 1, ()), ("1/4", 4, (0,)), ("1/2", 2, (0,)), ("1/8", 8, (0,))):
        text, n = patch(src, pack, emu, 3) if emu else (src, 0)
        path = Path(f"/tmp/emu_{label.replace('/', 'of')}.py"); path.write_text(text)
        import importlib
        mod = _import(path)
        from attnforge.backends.gluon import compile as gc
        import triton as tr
        rep = compile_for_target(mod, t, keep_dir=Path("/tmp/keep") / label.replace("/", "of"))
        cub = next((Path("/tmp/keep") / label.replace("/", "of")).glob("*.cubin")).read_bytes()
        print(label, "patched", n, "regs", rep.registers, "spill", rep.spill_bytes, sass_counts(cub))

if __name__ == "__main__":
    main()
