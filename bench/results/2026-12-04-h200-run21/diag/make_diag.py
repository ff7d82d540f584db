"""Run 21 call 6 (issue 13): the four modules `run.py` verifies. `qreg_idxmask.py` and `noqreg_offmask.py` are the window
feature spec's Gluon modules (4/2 heads, window 128/0, BM 128, BN 64, 2 warpgroups, no overlap) with and without qreg, as
the translator wrote them before it refused qreg with a window (backends/gluon/shape._check_q_in_registers); this writes
the other two, each with the other's Mask line:

    python3 make_diag.py      # qreg_offmask.py (qreg, the tile's key offsets) and noqreg_idxmask.py (no qreg, the keys' indices)
"""
from pathlib import Path

HERE = Path(__file__).parent


def mask_line(lines: list[str], form: str) -> int:
    return next(i for i, line in enumerate(lines) if line.strip().startswith(f"S = gl.where(({form}"))


if __name__ == "__main__":
    qreg = (HERE / "qreg_idxmask.py").read_text().split("\n")
    plain = (HERE / "noqreg_offmask.py").read_text().split("\n")
    i, j = mask_line(qreg, "kv_idx"), mask_line(plain, "key_off")
    (HERE / "qreg_offmask.py").write_text("\n".join(qreg[:i] + [plain[j]] + qreg[i + 1:]))
    (HERE / "noqreg_idxmask.py").write_text("\n".join(plain[:j] + [qreg[i]] + plain[j + 1:]))
