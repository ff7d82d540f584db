"""Run 20 (issue 13): the consumers give K's and V's ring slots back without a warpgroup barrier. Triton's membar pass puts a
`bar.sync 0, 128` before every `mbarrier.arrive` ("it may signal other threads: finish every shared-memory access first"),
so each compute warpgroup waits for its four warps twice a K/V tile. The only readers of a K or V slot are the warpgroup's
own wgmma, and its wgmma.wait_group completes the whole warpgroup's GEMM, so one thread's arrival after its wait is enough
(CUTLASS's consumer_release does no more). The arrive is written as inline asm, which the membar pass does not see as one:
one thread a warpgroup (tid.x % 128 == 0) arrives at global_smem + the barrier's offset. The offsets are the allocator's,
read from the shipped kernel's PTX (its mbarrier.init lines, in the source's order), and checked again in the patched
kernel's PTX: a mismatch raises. A text transform of a generated Hopper-form module.

Run 20 call 5 hung: the offsets were read from one compile, and the launch's JIT specialises integer arguments equal to 1
(B = 1 among the gate's cases), which moves every barrier 16 bytes (found on the CPU afterwards: 164192 -> 164176 for
k_free in the D = 64 1k kernel), so the raw arrivals went to the wrong words and the ring never turned. Now the patch
turns the kernel's specialisation off (do_not_specialize, on value and alignment, for every argument that is not a
descriptor), and ``checked_offsets`` compiles it as the launch will, for both signs of the scale, and refuses offsets
that differ between them."""
import re

ARRIVE = ("{ .reg .b32 t, a; .reg .pred p; mov.u32 t, %tid.x; and.b32 t, t, 127; setp.eq.u32 p, t, 0; "
          "mov.b32 a, global_smem; add.s32 a, a, $1; @p mbarrier.arrive.shared::cta.b64 _, [a]; mov.u32 $0, 0; }")
SYNCED_ARRIVE = "bar.sync $2, 128; " + ARRIVE  # the warpgroup's own named barrier first: Q's ldmatrix reads must be done
Q_BARRIER = 8  # named barriers 8 + WG for Q's release (Triton's own are 0-2, the turns 16 - SETS + WG; checked_offsets checks)
WAIT = ("{ .reg .b32 a; .reg .pred p; mov.b32 a, global_smem; add.s32 a, a, $1; "
        "spin: mbarrier.try_wait.parity.shared::cta.b64 p, [a], $2; @!p bra.uni spin; mov.u32 $0, 0; }")


def barrier_offsets(src: str, ptx: str) -> dict[str, int]:
    """{barrier name: byte offset of its first slot from global_smem}, pairing the source's mbarrier.init calls with the
    PTX's, in order."""
    stages = int(re.search(r"^stages = gl\.constexpr\((\d+)\)", src, re.M).group(1))
    names = []
    for m in re.finditer(r"mbarrier\.init\((\w+)(\.index\(i\))?, count=", src):
        names += [m.group(1)] * (stages if m.group(2) else 1)
    base = re.search(r"mov\.b32\s+(%r\d+), global_smem;", ptx).group(1)
    regs = dict(re.findall(rf"add\.s32\s+(%r\d+), {re.escape(base)}, (\d+);", ptx))
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[(%r\d+)\]", ptx)
    if len(inits) != len(names):
        raise ValueError(f"raw_arrive: {len(names)} barrier slots in the source, {len(inits)} mbarrier.init in the PTX")
    offsets: dict[str, int] = {}
    for name, reg in zip(names, inits):
        offsets.setdefault(name, int(regs[reg]))
    return offsets


def _plain_args(src: str) -> list[str]:
    """The kernel's arguments that the JIT would specialise: all but its TMA descriptors and constexprs."""
    args = re.search(r"^def attn_fwd\((.*)\):$", src, re.M).group(1).split(", ")
    return [a for a in args if not a.endswith("_desc") and ":" not in a]


def jit_ptx(src: str, scale_positive: bool) -> str:
    """The PTX of ``src``'s kernel as the launch compiles it with specialisation off (no value or alignment attributes)."""
    import tempfile
    from pathlib import Path

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from attnforge.backends.gluon import _import
    from attnforge.backends.gluon.compile import _signature
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.py"
        path.write_text(src)
        module = _import(path)
        sig, const = _signature(module, module.TENSOR_DTYPES["q"], scale_positive)
        nreg = getattr(module, "MAXNREG", None)  # as the launch passes it
        kernel = triton.compile(GluonASTSource(getattr(module, module.KERNEL), sig, const, {}), target=GPUTarget("cuda", 90, 32),
                                options={"num_warps": int(module.WG_WARPS), **({"maxnreg": nreg} if nreg else {})})
        return kernel.asm["ptx"]


def checked_offsets(src: str) -> dict[str, int]:
    """The barriers' offsets in ``src`` compiled as the launch will (both signs of the scale); raises if they differ, or
    if Triton's code uses a named barrier of Q_BARRIER's range."""
    ptxs = [jit_ptx(src, positive) for positive in (True, False)]
    seen = [barrier_offsets(src, ptx) for ptx in ptxs]
    if seen[0] != seen[1]:
        raise ValueError(f"raw_arrive: the barriers sit at {seen[0]} for a positive scale, {seen[1]} otherwise")
    sets = int(re.search(r"^SETS = gl\.constexpr\((\d+)\)", src, re.M).group(1))
    used = {int(i) for ptx in ptxs for i in re.findall(r"\bbar(?:rier)?\.sync\s+(\d+)", ptx)}
    if used & set(range(Q_BARRIER, Q_BARRIER + sets)) or Q_BARRIER + sets > 16 - sets:
        raise ValueError(f"raw_arrive: named barriers {sorted(used)} in use; {Q_BARRIER}..{Q_BARRIER + sets - 1} are not free")
    return seen[0]


def unspecialised(src: str) -> str:
    """``src`` with the kernel's JIT specialisation off, so that one allocation serves every launch."""
    names = _plain_args(src)
    t, k = re.subn(r"^@gluon\.jit\n(def attn_fwd\()", f"@gluon.jit(do_not_specialize={names!r}, do_not_specialize_on_alignment={names!r})\n\\1",
                   src, count=1, flags=re.M)
    if not k:
        raise ValueError("raw_arrive: no @gluon.jit def attn_fwd in the source")
    return t


def patch(src: str, offsets: dict[str, int], waits: bool = False, qfree: bool = False) -> tuple[str, int]:
    """The K and V slots' arrivals as inline asm; with ``waits``, the consumers' waits for K and V too (the membar pass
    also puts a bar.sync before an mbarrier.wait that follows one on the same barrier array); with ``qfree``, Q's release
    too, after a named barrier of the warpgroup's own. (The membar pass takes a Gluon arrive for a write to all of shared
    memory; Q's release reaches the K/V loop through the path where the first-tile block is skipped, and so puts a
    bar.sync before the loop's first shared-memory access, every iteration. Compiled for sm_90a, the D = 64 1k kernel's
    warpgroup bar.syncs: 34 unpatched, 26 with ``waits``, 18 with ``qfree`` too, none of them left in the K/V loop.)"""
    n = 0
    helper = ("@gluon.jit\n"
              "def _arrive_raw(offset):\n"
              "    one_a_thread: gl.constexpr = gl.BlockedLayout([1], [32], [WG_WARPS], [0])\n"
              f"    gl.inline_asm_elementwise({ARRIVE!r}, '=r,r', [gl.full([32 * WG_WARPS], offset, gl.int32, one_a_thread)], "
              "dtype=gl.int32, is_pure=False, pack=1)\n\n"
              "@gluon.jit\n"
              "def _arrive_synced(offset, barrier_id):\n"
              "    one_a_thread: gl.constexpr = gl.BlockedLayout([1], [32], [WG_WARPS], [0])\n"
              f"    gl.inline_asm_elementwise({SYNCED_ARRIVE!r}, '=r,r,r', [gl.full([32 * WG_WARPS], offset, gl.int32, one_a_thread), "
              "gl.full([32 * WG_WARPS], barrier_id, gl.int32, one_a_thread)], dtype=gl.int32, is_pure=False, pack=1)\n\n"
              "@gluon.jit\n"
              "def _wait_raw(offset, phase):\n"
              "    one_a_thread: gl.constexpr = gl.BlockedLayout([1], [32], [WG_WARPS], [0])\n"
              f"    gl.inline_asm_elementwise({WAIT!r}, '=r,r,r', [gl.full([32 * WG_WARPS], offset, gl.int32, one_a_thread), "
              "gl.full([32 * WG_WARPS], phase, gl.int32, one_a_thread)], dtype=gl.int32, is_pure=False, pack=1)\n\n")
    t, k = re.subn(r"^(@gluon\.jit\ndef _compute\()", lambda m: helper + m.group(1), src, count=1, flags=re.M)
    n += k
    for name in ("k_free", "v_free"):
        t, k = re.subn(rf"mbarrier\.arrive\({name}\.index\((.+)\), count=1\)", lambda m: f"_arrive_raw({offsets[name]} + 8 * ({m.group(1)}))", t)
        if not k:
            raise ValueError(f"raw_arrive: no mbarrier.arrive({name}...) in the source")
        n += k
    if waits:
        head, sep, rest = t.partition("\ndef _compute(")
        body, sep2, tail = rest.partition("\n@gluon.jit")  # _compute's body only: the loader keeps its waits
        for name in ("k_ready", "v_ready"):
            body, k = re.subn(rf"mbarrier\.wait\({name}\.index\((.+?)\), (.+)\)$",
                              lambda m: f"_wait_raw({offsets[name]} + 8 * ({m.group(1)}), {m.group(2)})", body, flags=re.M)
            if not k:
                raise ValueError(f"raw_arrive: no mbarrier.wait({name}...) in _compute")
            n += k
        t = head + sep + body + sep2 + tail
    if qfree and "q_free" in offsets:  # (a kernel that is not persistent has no q_free: then as with waits alone)
        t, k = re.subn(r"mbarrier\.arrive\(q_free, count=1\)", f"_arrive_synced({offsets['q_free']}, {Q_BARRIER} + WG)", t)
        n += k
    return t, n
