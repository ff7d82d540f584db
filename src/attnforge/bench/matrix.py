"""The rows ``attnforge bench`` times: issue 11's matrix, the shapes of /work/shared/ANCHORS.md.

Prefill at 2048 hidden: Hq = 2048 / D heads, and B x S = 16384 tokens per batch (16 x 1k, 4 x 4k,
1 x 16k), Sq = Sk, fp16 and bf16, D 64 / 128 / 256, causal and not; GQA 32/8 at 4k (bf16, D 128);
decode (Sq = 1) B64 32/8 heads Sk 4096 and B8 Sk 32768; decode-verify (speculative decoding,
causal bottom-right) Sq = 2, 4, 8, 16 over Sk 4096, B64 32/8 heads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

HIDDEN = 2048  # Hq x D for the prefill rows
TOKENS = 16384  # B x S for the prefill rows
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (64, 128, 256)
PREFILL_LENGTHS = (1024, 4096, 16384)
VERIFY_LENGTHS = (2, 4, 8, 16)
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}

CONVENTIONS = {
    "flops": "4 * B * Hq * D * visible (q, k) pairs; Sq * Sk pairs without a mask, half of them when causal with "
             "Sq == Sk (the usual convention), the exact count of the bottom-right causal mask when Sq < Sk",
    "bytes": "Q, K and V read once (the decode rows' figure, as in ANCHORS.md); O's write is left out",
    "ratio": "the baseline's time over the provider's time on the same row in the same run (> 1: faster than the baseline)",
    "metric": "prefill rows in TFLOP/s, decode and decode-verify rows in GB/s",
}


def _k(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


@dataclass(frozen=True)
class Row:
    group: str  # "prefill", "decode" or "decode-verify"
    case: str  # "mha", "gqa", "decode", "decode-verify"
    dtype: str
    head_dim: int
    causal: bool
    batch: int
    heads: int
    kv_heads: int
    seqlen_q: int
    seqlen_k: int

    @property
    def name(self) -> str:
        head = f"{self.case}-{self.dtype}-d{self.head_dim}"
        if self.group == "prefill":
            return f"{head}-s{_k(self.seqlen_q)}-{'causal' if self.causal else 'full'}"
        if self.group == "decode":
            return f"{head}-b{self.batch}-sk{_k(self.seqlen_k)}"
        return f"{head}-b{self.batch}-sq{self.seqlen_q}-sk{_k(self.seqlen_k)}{'-causal' if self.causal else ''}"

    @property
    def metric(self) -> str:
        return "tflops" if self.group == "prefill" else "gbps"

    @property
    def shape(self) -> str:
        return f"{self.batch} x {self.heads}/{self.kv_heads} x {self.seqlen_q} x {self.seqlen_k}"

    def visible_pairs(self) -> float:
        sq, sk = self.seqlen_q, self.seqlen_k
        if not self.causal:
            return float(sq * sk)
        if sq == sk:
            return sq * sk / 2.0
        # bottom-right: query i sees keys 0 .. i + sk - sq (clipped at 0 when sq > sk)
        return float(sum(max(0, min(sk, i + sk - sq + 1)) for i in range(sq)))

    def flops(self) -> float:
        return 4.0 * self.batch * self.heads * self.head_dim * self.visible_pairs()

    def bytes(self) -> int:
        e = ELEMENT_BYTES[self.dtype]
        return e * self.head_dim * (self.batch * self.heads * self.seqlen_q + 2 * self.batch * self.kv_heads * self.seqlen_k)

    def to_dict(self) -> dict:
        return {"name": self.name, **asdict(self), "shape": self.shape, "metric": self.metric, "flops": self.flops(), "bytes": self.bytes()}


def full_matrix() -> list[Row]:
    rows = []
    for dtype in DTYPES:
        for d in HEAD_DIMS:
            heads = HIDDEN // d
            for s in PREFILL_LENGTHS:
                for causal in (False, True):
                    rows.append(Row("prefill", "mha", dtype, d, causal, TOKENS // s, heads, heads, s, s))
    for causal in (False, True):
        rows.append(Row("prefill", "gqa", "bf16", 128, causal, 4, 32, 8, 4096, 4096))
    rows.append(Row("decode", "decode", "bf16", 128, False, 64, 32, 8, 1, 4096))
    rows.append(Row("decode", "decode", "bf16", 128, False, 8, 32, 8, 1, 32768))
    for sq in VERIFY_LENGTHS:
        rows.append(Row("decode-verify", "decode-verify", "bf16", 128, True, 64, 32, 8, sq, 4096))
    return rows


# --quick: one row of each kind, the weak 1k causal row among them.
QUICK = (
    "mha-bf16-d128-s4k-full",
    "mha-bf16-d128-s4k-causal",
    "mha-fp16-d64-s1k-causal",
    "gqa-bf16-d128-s4k-causal",
    "decode-bf16-d128-b64-sk4k",
    "decode-verify-bf16-d128-b64-sq4-sk4k-causal",
)


def quick_matrix() -> list[Row]:
    by_name = {row.name: row for row in full_matrix()}
    return [by_name[name] for name in QUICK]


def select(rows: Iterable[Row], *, dtypes: Sequence[str] | None = None, head_dims: Sequence[int] | None = None,
           patterns: Sequence[str] | None = None) -> list[Row]:
    """The rows that pass every filter given: a dtype among ``dtypes``, a head dim among
    ``head_dims``, a name containing one of ``patterns``."""
    return [row for row in rows
            if (not dtypes or row.dtype in dtypes)
            and (not head_dims or row.head_dim in head_dims)
            and (not patterns or any(p in row.name for p in patterns))]
