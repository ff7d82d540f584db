"""One TL kernel -> one ``extern "C" __global__`` CUDA C++ function, statement by statement:
``KernelEmitter`` joins the statement emitters (``memory``: allocations, copies, the cp.async
pipeline; ``compute``: GEMMs and the math on fragments) with the kernel-level setup written here:
the header's checks, the shared memory layout (slots per pipeline stage, offsets), the block's
rows and warps, the constants and thread indices, the TL grid on ``blockIdx.x``, and the kernel's
parameters (``signature``: the ABI ``module`` and ``manual`` write).

Each TL statement becomes a ``// TL:`` comment above the code it became (``table.TRANSLATION_TABLE``
says what each one becomes). What the translator cannot express is refused with a
``TranslateError`` naming the statement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...abi import SIZE_ARGS
from ...analysis import KernelFacts
from ...tl import nodes as n
from ...tl.printer import expr as tl_expr
from . import exprs
from .base import CTYPE, Shared, ceil16
from .compute import ComputeEmitter
from .memory import MemoryEmitter


@dataclass
class KernelCode:
    name: str
    lines: list[str]
    threads: int
    smem: int
    tensors: tuple[str, ...]
    ranks: dict[str, int]
    formats: dict[str, str]
    scalars: tuple[str, ...]
    grid: list[str]  # host expressions of the TL grid extents (flattened, last fastest)
    waits: list[str] = field(default_factory=list)  # the cp.async waits of each pipelined loop, in order (for the static lint)
    notes: list[str] = field(default_factory=list)
    params: dict[str, int] = field(default_factory=dict)
    launch: tuple[str, ...] = ()  # launch-time values (a split count): int arguments after the scalars


class KernelEmitter(MemoryEmitter, ComputeEmitter):
    """One TL kernel's translation: ``KernelEmitter(kernel, facts, D, Dv, file).run()`` -> ``KernelCode``."""

    def __init__(self, kernel: n.Kernel, facts: KernelFacts, head_dim: int, head_dim_v: int, file: str | None):
        super().__init__(kernel, facts, head_dim, head_dim_v, file)
        self._check_header()

    # ------------------------------------------------------------------ header and layout
    def _check_header(self) -> None:
        k, facts = self.k, self.facts
        for s in ("tma", "persistent", "ws"):
            if facts.strategies[s]:
                self.fail(k, f"strategy {s} = 1 has no CUDA translation", f"plan with {s} = 0 (the CUDA backend refuses it for every target)")
        dmap = k.dtype_map()
        if dmap.get("qkv") not in ("fp16", "bf16"):
            self.fail(k, f"operand format {dmap.get('qkv')!r}: the CUDA backend's MMAs take fp16 or bf16", "use dtype qkv = fp16 or bf16 (tf32/fp32 kernels: --backend triton)")
        if dmap.get("acc", "fp32") != "fp32":
            self.fail(k, "accumulators must be fp32 (mma.sync accumulates in fp32 here)", "dtype acc = fp32")
        if dmap.get("out", dmap["qkv"]) not in CTYPE:
            self.fail(k, f"output format {dmap.get('out')!r} has no CUDA type here")
        for d, what in ((self.D, "D"), (self.Dv, "Dv")):
            if d % 8 or not 8 <= d <= 256:
                self.fail(k, f"head dim {what} = {d}: the CUDA backend copies rows in 16-byte pieces and takes head dims that are multiples of 8 up to 256",
                          "pad the head dim to a multiple of 8, or use --backend triton")
        for t in facts.tensors:  # arguments and scratch (a split-KV program's partial results): pointers and strides alike
            if facts.formats[t] not in CTYPE:
                self.fail(k, f"tensor {t!r} is {facts.formats[t]}, which has no CUDA type here", "scratch : acc (fp32), or the qkv format")
        self.fmt_qkv = dmap["qkv"]
        warps = facts.num_warps
        self.warps_asked = warps
        self.warps = warps

    def _layout_shared(self) -> int:
        """Slots per shared tile (the stage count of the pipelined loop that fills it), offsets."""
        allocs = {s.name: s for s in n.walk(self.k.body) if isinstance(s, n.Allocate) and s.level == "shared"}

        def visit(body: tuple[n.Stmt, ...], stages: int) -> None:
            for s in body:
                if isinstance(s, n.Loop):
                    visit(s.body, self.int_value(s.stages, s, "stages") if s.stages is not None else 1)
                elif isinstance(s, n.Copy) and s.src_level == "global" and s.dst_level == "shared" and s.dst in allocs:
                    sh = self.shared.get(s.dst)
                    if sh is not None:
                        sh.slots = max(sh.slots, stages)
        for name, a in allocs.items():
            if len(a.shape) != 2:
                self.fail(a, "shared tiles are 2-d (rows, head dim) here")
            rows = self.int_value(a.shape[0], a, "tile dimension")
            cols = self.int_value(a.shape[1], a, "tile dimension")
            if rows % 16:
                self.fail(a, f"shared tile {name} has {rows} rows; MMA tiles need a multiple of 16")
            fmt = self.k.dtype_map().get(a.dtype, a.dtype)
            if fmt != self.fmt_qkv:
                self.fail(a, f"shared tile {name} is {fmt}; the CUDA backend stages operands in the qkv format ({self.fmt_qkv})")
            self.shared[name] = Shared(name, rows, cols, ceil16(cols), fmt)
        visit(self.k.body, 1)
        offset = 0
        for sh in self.shared.values():
            sh.offset = offset
            offset += (sh.bytes + 127) // 128 * 128
        return offset

    def _rows_param(self) -> None:
        """The block's row count (M): the first dim of every register tile; the warps split it in m16 tiles."""
        regs = [s for s in n.walk(self.k.body) if isinstance(s, n.Allocate) and s.level == "register"]
        if not regs:
            self.fail(self.k, "no register tile: the CUDA backend translates tiled attention programs")
        first = regs[0].shape[0]
        self.M = self.int_value(first, regs[0], "tile dimension")
        if self.M % 16:
            self.fail(regs[0], f"{tl_expr(first)} = {self.M}: register tiles are split in 16-row MMA tiles")
        if self.M < 16 * self.warps:
            self.warps = self.M // 16
            self.notes.append(f"{self.k.name}: BM = {self.M} rows hold {self.warps} warps' MMA tiles; launched with {self.warps} warps, not warps = {self.warps_asked}")
        if self.M % (16 * self.warps):
            self.fail(regs[0], f"{tl_expr(first)} = {self.M} is not a multiple of 16 x warps = {16 * self.warps}", "each warp owns whole 16-row MMA tiles")
        for r in regs:
            if r.shape[0] != first:
                self.fail(r, f"register tile {r.name} has {tl_expr(r.shape[0])} rows, not {tl_expr(first)}", "every register tile is indexed by the block's query rows")

    # ------------------------------------------------------------------ kernel
    def run(self) -> KernelCode:
        self._rows_param()
        smem = self._layout_shared()
        self.emit(f"constexpr int af_MT = {self.MT};  // m16 tiles per warp: warp w owns rows [w * {16 * self.MT}, (w + 1) * {16 * self.MT})")
        self.emit(f"constexpr int af_NT = {self.warps * 32};  // threads")
        for c, v in self.facts.constants.items():
            self.emit(f"constexpr int {self.name(c, self.k)} = {v};")
        self.emit(f"constexpr int D = {self.D}, Dv = {self.Dv}; (void)D; (void)Dv;")
        self.emit("extern __shared__ __align__(128) unsigned char af_smem[];")
        self.emit("const int af_tid = threadIdx.x, af_warp = af_tid >> 5, af_lane = af_tid & 31;")
        self.emit("const int af_g = af_lane >> 2, af_t = af_lane & 3;  // fragment row group (0..7) and thread in the group (0..3)")
        self.emit("(void)af_warp; (void)af_g; (void)af_t;")
        grid = self._grid()
        self.block(self.k.body)
        return KernelCode(self.k.name, self.lines, self.warps * 32, smem, self.facts.tensors, {t: self.facts.ranks[t] for t in self.facts.tensors},
                          self.facts.formats, self.facts.scalars, grid, self.waits, self.notes, dict(self.facts.params), self.launch)

    def _grid(self) -> list[str]:
        k = self.k
        hctx = exprs.ExprContext({**{s: s for s in SIZE_ARGS}, "D": str(self.D), "Dv": str(self.Dv),
                                  **{p: str(v) for p, v in self.facts.params.items()}, **{v: v for v in self.launch}}, file=self.file)
        if not k.grid:
            self.emit("// TL grid: one block")
            return []
        grid_names = {g.name for g in k.grid}
        self.emit(f"// TL grid: {', '.join(f'{g.name} : {tl_expr(g.extent)}' for g in k.grid)} (flattened onto blockIdx.x, {k.grid[-1].name} fastest)")
        # counted down: a prefill grid's last axis is its row tiles, and under a causal mask the last
        # tiles see the most keys; launched first, they leave the short ones to fill the grid's tail
        self.emit("long long af_pid = (long long)gridDim.x - 1 - blockIdx.x;  // heaviest causal row tiles first")
        host = []
        for i, g in enumerate(reversed(k.grid)):
            if n.expr_names(g.extent) & grid_names:
                self.fail(g, f"grid extent of {g.name} depends on another grid axis")
            name = self.name(g.name, g)
            extent = self.dev(g.extent)
            if i == len(k.grid) - 1:
                self.emit(f"const int {name} = (int)af_pid;")
            else:
                self.emit(f"const int {name} = (int)(af_pid % {extent}); af_pid /= {extent};")
            host.append(exprs.host(g.extent, hctx))
            self.scope.names[g.name] = name
        self.emit()
        return list(reversed(host))


def signature(code: KernelCode, scalar_kinds: dict[str, str]) -> list[str]:
    """The kernel's parameters: tensor pointers (arguments, then scratch), their strides (int64),
    sizes, scalars, launch-time values (int)."""
    params = []
    for t in code.tensors:
        const = "const " if t in ("q", "k", "v", "alibi_slopes") else ""
        params.append(f"{const}{CTYPE[code.formats[t]]}* __restrict__ {t}_ptr")
    for t in code.tensors:
        params += [f"long long stride_{t}{i}" for i in range(code.ranks[t])]
    params += [f"int {s}" for s in SIZE_ARGS]
    params += [f"{'int' if scalar_kinds.get(s) == 'int' else 'float'} {s}" for s in code.scalars]
    params += [f"int {v}" for v in code.launch]
    return params
