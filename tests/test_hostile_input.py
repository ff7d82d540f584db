"""Issue 9 for TL programs, specs and the command line: every bad input gets a clear error, and
nothing hangs.

One table: each row is a command line, the files it reads, and what must come back: the exit
code (0 success, 1 checked and failed, 2 bad input), the field or position named, an error on
one line with no traceback and no long echo of the input, and a bound on the CPU seconds it takes.
Rows run in-process through ``attnforge.cli.main``, or as a subprocess with a timeout where a
regression would hang.
The good rows come first: the same machinery must let real inputs through.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from attnforge.cli import main
from attnforge.errors import AttnforgeError, SpecError, TLRuntimeError, TLSyntaxError
from attnforge.spec import AttentionSpec
from attnforge.tl import catalog
from attnforge.tl.checker import check
from attnforge.tl.harness import Shape, run_and_compare
from attnforge.tl.interpreter import run_program
from attnforge.tl.limits import MAX_ELEMENTS, MAX_EXPR_DEPTH, MAX_LOOP_DEPTH
from attnforge.tl.parser import parse, parse_expr

GQA = catalog.source("gqa_causal_fwd")
WINDOW = catalog.source("sliding_window_fwd")
LOOP = "for j = 0 : cdiv(max(0, min(Sk, (m + 1) * BM + Sk - Sq)), BN) pipeline stages"
GRID = "grid b : B, h : Hq, m : cdiv(Sq, BM)"
MASK = "    Compute Mask S keep kv_idx < Sk and kv_idx <= q_idx + Sk - Sq"
MULTIPLY = "    Compute Multiply S, scale"
SMALL = ("--shape", "1,2,1,17,19,16", "--param", "BM=16", "--param", "BN=16")
ERROR_CHARS = 1500  # an error is one line of at most this much: it never echoes a long input back


def edit(old: str, new: str, text: str = GQA) -> str:
    assert text.count(old) == 1, f"the library program changed: {old!r} is not in it once"
    return text.replace(old, new)


def line_of(fragment: str, text: str = GQA) -> int:
    return text[: text.index(fragment)].count("\n") + 1


def col_of(fragment: str, within: str) -> int:
    return within.index(fragment) + 1


OR_MASK = "    Compute Mask S keep " + " or ".join(["kv_idx < Sk"] * 8000)
SUM_MULTIPLY = "    Compute Multiply S, scale" + " + 0" * 25_000  # 100 KB
NESTED_LOOPS = "".join(f"for t{i} = 0 : 1\n" for i in range(2_000)) + "end\n" * 2_000


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]  # "{tmp}" stands for the test's directory
    code: int
    named: tuple[str, ...]  # each appears in the error (code 2), else in what was printed
    files: tuple[tuple[str, str | bytes], ...] = ()
    seconds: float = 5.0
    subprocess: bool = False  # where a regression would hang: run with a timeout


CASES = [
    # ---- good inputs first
    Case("good: check a shipped program", ("tl", "check", "lib:gqa_causal_fwd"), 0, ("gqa_causal_fwd.tl: clean for h100",)),
    Case("good: check a file", ("tl", "check", "{tmp}/gqa.tl"), 0, ("{tmp}/gqa.tl: clean for h100",), (("gqa.tl", GQA),)),
    Case("good: run a file", ("tl", "run", "{tmp}/gqa.tl", *SMALL), 0, ("PASS", "verified"), (("gqa.tl", GQA),), subprocess=True, seconds=15),
    Case("good: spec with modifiers", ("spec", "validate", "--heads", "8", "--head-dim", "64", "--score-mod", "score - 0.1 * abs(q_idx - kv_idx)",
                                       "--mask-mod", " or ".join(f"kv_idx < {i}" for i in range(40))), 0, ("valid",)),
    Case("good: a 99-level expression", ("spec", "validate", "--heads", "8", "--head-dim", "64", "--score-mod", " + ".join(["score"] * 100)), 0, ("valid",)),
    Case("good: fp8 spec is valid, with a note", ("spec", "validate", "--heads", "8", "--head-dim", "64", "--dtype", "fp8e4m3"), 0,
         ("valid: mha fp8e4m3", "note: the spec is valid, but fp8e4m3 kernels are not generated yet")),
    # ---- 1. loops and grids that run past the tensor's tiles: the checker says so
    Case("loop to 10^12: check", ("tl", "check", "{tmp}/loop.tl"), 1,
         (f"{{tmp}}/loop.tl:{line_of(LOOP)}:1: TL312: loop j runs past the last tile of K", "cdiv(Sk, BN)"),
         (("loop.tl", edit(LOOP, "for j = 0 : 1000000000000 pipeline stages")),)),
    Case("loop to 10^12: run", ("tl", "run", "{tmp}/loop.tl", *SMALL), 1, ("TL312", "not run"),
         (("loop.tl", edit(LOOP, "for j = 0 : 1000000000000 pipeline stages")),), subprocess=True, seconds=15),
    Case("loop to 10^30: check", ("tl", "check", "{tmp}/loop.tl"), 1, (f"loop.tl:{line_of(LOOP)}:1: TL312",),
         (("loop.tl", edit(LOOP, "for j = 0 : " + "1" + "0" * 30 + " pipeline stages")),)),
    Case("loop from -10^12: check", ("tl", "check", "{tmp}/loop.tl"), 1, (f"loop.tl:{line_of(LOOP)}:1: TL312: loop j runs before the first tile of K",),
         (("loop.tl", edit(LOOP, "for j = -1000000000000 : 3 pipeline stages")),)),
    Case("loop to Sk^6: check", ("tl", "check", "{tmp}/loop.tl"), 1, (f"loop.tl:{line_of(LOOP)}:1: TL312",),
         (("loop.tl", edit(LOOP, "for j = 0 : Sk*Sk*Sk*Sk*Sk*Sk pipeline stages")),)),
    Case("loop to Sk^6: run", ("tl", "run", "{tmp}/loop.tl", *SMALL), 1, ("TL312", "not run"),
         (("loop.tl", edit(LOOP, "for j = 0 : Sk*Sk*Sk*Sk*Sk*Sk pipeline stages")),), subprocess=True, seconds=15),
    Case("grid axis of 10^12: check", ("tl", "check", "{tmp}/grid.tl"), 1,
         (f"grid.tl:{line_of(GRID)}:{col_of('m :', GRID)}: TL312: grid axis m runs past the last tile of Q", "m : cdiv(Sq, BM)"),
         (("grid.tl", edit(GRID, "grid b : B, h : Hq, m : 1000000000000")),)),
    # ... and where no tile shows it, the interpreter's work budget stops the run at once
    Case("a 10^12 loop the checker cannot see: run", ("tl", "run", "{tmp}/budget.tl", *SMALL), 2,
         (f"{{tmp}}/budget.tl:{line_of(LOOP)}:1:", "loop t = 0 : 1000000000000 has 1,000,000,000,000 trips", "work budget of 1,000,000 steps"),
         (("budget.tl", edit(LOOP, "for t = 0 : 1000000000000\nend\n" + LOOP)),), subprocess=True, seconds=15),
    Case("a 10^12 grid axis the checker cannot see: run", ("tl", "run", "{tmp}/grid.tl", *SMALL), 2,
         (f"grid.tl:{line_of(GRID)}:", "x : 1000000000000 has 4,000,000,000,000 program instances", "work budget"),
         (("grid.tl", edit(GRID, GRID + ", x : 1000000000000")),), subprocess=True, seconds=15),
    Case("a 200,000-trip loop the checker cannot see: run", ("tl", "run", "{tmp}/budget.tl", *SMALL), 2,
         (f"budget.tl:{line_of(MASK) + 1}:5:", "loop t = 0 : 200000 has 200,000 trips of about 6 steps or more each (the cheapest of the first 1)", "work budget"),
         (("budget.tl", edit(MASK, MASK + "\n    for t = 0 : 200000\n" + "        Compute Multiply S, 1\n" * 5 + "    end")),), subprocess=True, seconds=15),
    # ---- 2. a missing file is an error; shipped programs are lib:NAME
    Case("missing directory", ("tl", "check", "mydir/gqa_causal_fwd.tl"), 2, ("no such TL file: mydir/gqa_causal_fwd.tl", "lib:gqa_causal_fwd")),
    Case("missing absolute path", ("tl", "run", "/nonexistent/gqa_fwd.tl"), 2, ("no such TL file: /nonexistent/gqa_fwd.tl", "lib:gqa_fwd")),
    Case("a bare shipped name is not a path", ("tl", "check", "gqa_fwd"), 2, ("no such TL file: gqa_fwd", "write lib:gqa_fwd")),
    Case("unknown lib: name", ("tl", "check", "lib:gqa_fw"), 2, ("no shipped TL program 'gqa_fw'", "lib:gqa_fwd")),
    Case("a directory", ("tl", "check", "{tmp}"), 2, ("{tmp} is not a regular file",)),
    Case("not UTF-8", ("tl", "check", "{tmp}/bin.tl"), 2, ("{tmp}/bin.tl:2:3: byte 0xff is not UTF-8",), (("bin.tl", b"kernel k\n  \xff\n"),)),
    Case("a 300 KB file", ("tl", "check", "{tmp}/big.tl"), 2, ("big.tl has", "at most 262,144"), (("big.tl", "#" * 300_000 + "\n"),)),
    Case("an empty file", ("tl", "check", "{tmp}/empty.tl"), 2, ("{tmp}/empty.tl:", "unexpected end of file"), (("empty.tl", ""),)),
    # ---- 3. shapes too large for the interpreter
    Case("a 10^8 x 10^8 shape", ("tl", "run", "lib:gqa_causal_fwd", "--shape", "1,1,1,100000000,100000000,64"), 2,
         ("--shape", "the reference's scores (B*Hq*Sq*Sk)", "67,108,864 (2**26)"), seconds=20, subprocess=True),
    Case("a 5000-digit size", ("tl", "run", "lib:gqa_fwd", "--shape", "1" * 5000 + ",1,1,1,1,1"), 2, ("--shape", "is not B,HQ,HKV,SQ,SK,D[,DV]")),
    Case("a superscript digit as a size", ("tl", "run", "lib:gqa_fwd", "--shape", "\u00b2,1,1,1,1,1"), 2, ("--shape", "is not B,HQ,HKV,SQ,SK,D[,DV]")),
    Case("a 5000-digit --head-dim", ("tl", "check", "lib:gqa_fwd", "--head-dim", "1" * 5000), 2, ("--head-dim", "(5002 characters) is not D or D,DV")),
    Case("a 5000-digit --param", ("tl", "run", "lib:gqa_fwd", "--param", "BM=" + "1" * 5000), 2, ("--param", "is not NAME=VALUE")),
    Case("a 5000-digit --target", ("tl", "check", "lib:gqa_fwd", "--target", "1" * 5000), 2, ("unknown target",)),
    Case("BM = 10^9", ("tl", "run", "lib:gqa_fwd", "--shape", "1,2,1,17,19,16", "--param", "BM=1000000000", "--target", "h100"), 1, ("TL503", "not run")),
    # ---- 4. spec files nested too deeply, or with numbers too long to read
    Case("JSON nested 100,000 deep", ("spec", "validate", "{tmp}/deep.json"), 2, ("spec.file", "nests tables or arrays too deeply"),
         (("deep.json", '{"a":' * 100_000 + "1" + "}" * 100_000),)),
    Case("TOML nested 100,000 deep", ("spec", "validate", "{tmp}/deep.toml"), 2, ("spec.file", "nests tables or arrays too deeply"),
         (("deep.toml", "heads = " + "[" * 100_000 + "]" * 100_000 + "\n"),)),
    Case("a 5000-digit JSON integer", ("spec", "validate", "{tmp}/long.json"), 2, ("spec.file", "4300 digits"),
         (("long.json", '{"heads": ' + "1" * 5000 + "}"),)),
    Case("a 100 KB spec key", ("spec", "validate", "{tmp}/key.json"), 2, ("unknown key",),
         (("key.json", json.dumps({"heads": 8, "head_dim": 64, "x" * 100_000: 1})),)),
    Case("a 100 KB dtype", ("spec", "validate", "--heads", "8", "--head-dim", "64", "--dtype", "f" * 100_000), 2, ("spec.dtype",)),
    # ---- 5. non-finite scalars
    Case("scale = nan", ("tl", "run", "{tmp}/gqa.tl", "--shape", "1,2,1,10,10,16", *SMALL[2:], "--scalar", "scale=nan"), 2,
         ("--scalar", "scale = nan is not a finite number"), (("gqa.tl", GQA),)),
    Case("scale = -inf", ("tl", "run", "lib:gqa_fwd", "--shape", "1,2,1,10,10,16", "--scalar", "scale=-inf"), 2, ("--scalar", "scale = -inf")),
    Case("scale = 1e999", ("tl", "run", "lib:gqa_fwd", "--shape", "1,2,1,10,10,16", "--scalar", "scale=1e999"), 2, ("--scalar", "scale = inf")),
    Case("window_left = 10^30", ("tl", "run", "lib:sliding_window_fwd", *SMALL, "--scalar", "window_left=" + "1" + "0" * 30), 2,
         ("--scalar", "window_left", "out of range")),
    # ---- 6. long flat expressions: refused for the real reason, at the expression, without the echo
    Case("8,000 'or's in a TL mask", ("tl", "check", "{tmp}/or.tl"), 2,
         (f"{{tmp}}/or.tl:{line_of(MASK)}:{col_of('kv_idx', OR_MASK)}: expression nested more than {MAX_EXPR_DEPTH} levels deep",),
         (("or.tl", edit(MASK, OR_MASK)),), seconds=20),
    Case("a 100 KB sum in a TL program", ("tl", "check", "{tmp}/sum.tl"), 2,
         (f"sum.tl:{line_of(MULTIPLY)}:{col_of('scale', SUM_MULTIPLY)}: expression nested more than {MAX_EXPR_DEPTH} levels deep",),
         (("sum.tl", edit(MULTIPLY, SUM_MULTIPLY)),), seconds=20),
    Case("10,000 unary minus in --score-mod", ("spec", "validate", "--heads", "8", "--head-dim", "64", "--score-mod", "- " * 10_000 + "score"), 2,
         ("spec.score_mod", "score_mod:1:1: expression nested more than 100 levels deep")),
    Case("8,000 'or's in --mask-mod", ("spec", "validate", "--heads", "8", "--head-dim", "64", "--mask-mod", " or ".join(["kv_idx < 3"] * 8000)), 2,
         ("spec.mask_mod", "nested more than 100 levels deep"), seconds=20),
    Case("a 100 KB --score-mod for generate", ("generate", "--heads", "8", "--head-dim", "64", "--out", "{tmp}/out", "--score-mod", "+".join(["score"] * 16_000)), 2,
         ("spec.score_mod", "nested more than 100 levels deep")),
    Case("2,000 nested loops", ("tl", "check", "{tmp}/loops.tl"), 2, (f"loops.tl:{line_of(LOOP)}:1: loops nested more than {MAX_LOOP_DEPTH} deep",),
         (("loops.tl", edit(LOOP, NESTED_LOOPS + LOOP)),), seconds=20),
    Case("a 100 KB name", ("tl", "check", "{tmp}/name.tl"), 2, ("name.tl:", "characters)"), (("name.tl", edit(MULTIPLY, "    Compute " + "X" * 100_000 + " S")),)),
    # ---- 8. fp8 passes spec validate (row 0 above) but generate refuses it up front
    Case("generate --dtype fp8e4m3", ("generate", "--heads", "8", "--head-dim", "64", "--dtype", "fp8e4m3", "--out", "{tmp}/out"), 2,
         ("spec.dtype", "allowed: fp16, bf16, fp32", "fp8e4m3 kernels are not generated yet"), seconds=30),
    Case("generate --spec with fp8e5m2", ("generate", "--spec", "{tmp}/fp8.toml", "--out", "{tmp}/out"), 2, ("spec.dtype", "fp8e5m2 kernels are not generated yet"),
         (("fp8.toml", 'heads = 8\nhead_dim = 64\ndtype = "fp8e5m2"\n'),), seconds=30),
    # ---- issue 9 row 5: literals past what the kernel's arithmetic holds, refused by field (generate too, before torch)
    Case("a 38-digit score_mod literal: validate", ("spec", "validate", "--heads", "8", "--head-dim", "64", "--score-mod", "score + " + "9" * 38), 2,
         ("spec.score_mod", "int32")),
    Case("a 38-digit score_mod literal: generate", ("generate", "--heads", "8", "--head-dim", "64", "--score-mod", "score + " + "9" * 38, "--out", "{tmp}/out"), 2,
         ("spec.score_mod", "int32"), subprocess=True, seconds=2),
    # ---- row 6: sizes a kernel cannot index (int32) or the host cannot hold, refused by field
    Case("heads = 10^12: validate", ("spec", "validate", "--heads", "1000000000000", "--kv-heads", "2", "--head-dim", "64"), 2, ("spec.heads", "2147483647")),
    Case("heads = 10^12: generate", ("generate", "--heads", "1000000000000", "--kv-heads", "2", "--head-dim", "64", "--out", "{tmp}/out"), 2,
         ("spec.heads", "2147483647"), subprocess=True, seconds=2),
    Case("heads = 2^31 - 1 over 1 KV head", ("spec", "validate", "--heads", "2147483647", "--kv-heads", "1", "--head-dim", "64"), 2, ("spec.heads", "1..65536")),
    Case("10^8 heads with ALiBi slopes", ("spec", "validate", "--heads", "100000000", "--head-dim", "64", "--alibi-slopes", "auto"), 2,
         ("spec.heads", "1..65536"), seconds=2),  # the slope table took 52 s
    Case("heads / kv_heads = 1024", ("spec", "validate", "--heads", "1024", "--kv-heads", "1", "--head-dim", "64"), 2, ("spec.kv_heads", "heads / kv_heads <= 512")),
    Case("batch x heads x row blocks past int32", ("spec", "validate", "--batch", "100000", "--heads", "64", "--head-dim", "64", "--seqlen-q", "8192"), 2,
         ("spec.batch", "program instances <= 2**31 - 1")),
    Case("a window of 10^12", ("spec", "validate", "--heads", "8", "--head-dim", "64", "--window=1000000000000,0"), 2, ("spec.window_left", "int32")),
    Case("a window of 10^29", ("spec", "validate", "--heads", "8", "--head-dim", "64", "--window=-,99999999999999999999999999999"), 2, ("spec.window_right", "int32")),
    Case("good: the widest int32 window", ("spec", "validate", "--heads", "8", "--head-dim", "64", "--window=2147483647,0"), 0, ("valid",)),
    # ---- row 8: --out a file, or where no directory can be made: exit 2 before any work
    Case("--out an existing file", ("generate", "--heads", "8", "--head-dim", "64", "--out", "{tmp}/gqa.tl"), 2, ("--out", "exists and is not a directory"),
         (("gqa.tl", GQA),), subprocess=True, seconds=2),
    Case("--out /proc/x", ("generate", "--heads", "8", "--head-dim", "64", "--out", "/proc/x"), 2, ("--out", "cannot create a directory in /proc"),
         subprocess=True, seconds=2),
    Case("--tl a missing file", ("generate", "--heads", "8", "--head-dim", "64", "--tl", "{tmp}/nope.tl", "--out", "{tmp}/out"), 2,
         ("no such TL file", "nope.tl"), subprocess=True, seconds=2),
    # ---- printed literally: text in [brackets] is not taken for Rich markup
    Case("a spec file named [bold]", ("spec", "validate", "{tmp}/[bold]s.toml"), 0, ("{tmp}/[bold]s.toml: valid", "mask_mod[kv_idx != 3]"),
         (("[bold]s.toml", 'heads = 8\nhead_dim = 64\nmask_mod = "kv_idx != 3"\n'),)),
    Case("a TL file named [red]", ("tl", "check", "{tmp}/[red]g.tl"), 0, ("{tmp}/[red]g.tl: clean for h100",), (("[red]g.tl", GQA),)),
]
# Issue 9's other rows are tested where their machinery is: row 3 (two generates into one --out)
# in test_outdir.py, row 4 (a damaged cache entry) in test_cache_healing.py, row 12 (bad calls to
# a loaded kernel) in test_faults.py, row 13 (Ctrl-C) below; the fuzzers in test_fuzz.py.


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_case(case: Case, tmp: Path, capsys) -> tuple[int, str, str, float]:
    """Exit code, stdout, stderr and the CPU seconds the command used: CPU time, because a loaded
    machine stretches wall time while a hang burns CPU (a subprocess also has a wall timeout)."""
    for name, content in case.files:
        (tmp / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    argv = [a.replace("{tmp}", str(tmp)) for a in case.argv]
    if case.subprocess:
        start = _children_cpu()
        done = subprocess.run([sys.executable, "-m", "attnforge.cli", *argv], capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout, done.stderr, _children_cpu() - start
    start = time.thread_time()
    code = main(argv)
    seconds = time.thread_time() - start
    out, err = capsys.readouterr()
    return code, out, err, seconds


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(case: Case, tmp_path: Path, capsys) -> None:
    code, out, err, seconds = _run_case(case, tmp_path, capsys)
    shown = err if case.code == 2 else out + err
    assert code == case.code, (out[-2000:], err[-2000:])
    assert "Traceback" not in out + err
    if case.code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), err[:2000]
        assert len(err) < ERROR_CHARS, err[:2000]
    for named in case.named:
        assert named.replace("{tmp}", str(tmp_path)) in shown, shown[:3000]
    assert seconds < case.seconds, f"took {seconds:.1f}s of CPU"


@pytest.mark.parametrize("argv", [
    ("--heads", "0", "--head-dim", "64", "--out", "{tmp}/out"),
    ("--heads", "8", "--head-dim", "64", "--out", "{tmp}/file"),
    ("--heads", "8", "--head-dim", "64", "--tl", "{tmp}/nope.tl", "--out", "{tmp}/out"),
], ids=["spec", "out", "tl"])
def test_generate_refuses_bad_input_before_importing_torch(argv, tmp_path: Path) -> None:
    """Issue 9: `generate` with bad input took ~5 s because torch was imported first."""
    (tmp_path / "file").write_text("x")
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = ("import sys\nfrom attnforge.cli import main\nrc = main(['generate', *sys.argv[1:]])\n"
            "print('torch imported' if 'torch' in sys.modules else 'no torch')\nsys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout.strip() == "no torch", (done.stdout, done.stderr)
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1


# ---------------------------------------------------------------- 7. Ctrl-C


def test_ctrl_c_in_a_command_is_one_line_and_exit_130(monkeypatch, capsys) -> None:
    import attnforge.tl.command as tl_command

    def interrupted(ns, console):
        raise KeyboardInterrupt

    monkeypatch.setattr(tl_command, "cmd_tl_check", interrupted)
    assert main(["tl", "check", "lib:gqa_fwd"]) == 130
    out, err = capsys.readouterr()
    assert err == "interrupted\n" and out == ""


@pytest.mark.parametrize("argv", [
    ("tl", "run", "lib:gqa_causal_fwd", "--shape", "1,2,1,17,19,16", "--shape", "2,32,8,1000,1000,128"),
    ("generate", "--target", "h100", "--heads", "4", "--kv-heads", "2", "--head-dim", "64", "--causal", "--out", "{tmp}/out"),
], ids=["tl run", "generate"])
def test_ctrl_c_during_a_long_command(argv, tmp_path: Path) -> None:
    """A real SIGINT once the command has printed its first line (it is then inside main)."""
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    proc = subprocess.Popen([sys.executable, "-m", "attnforge.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        first = proc.stdout.readline()
        assert first, proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (first, out[-1000:], err[-2000:])
    assert err.strip() == "interrupted", err[-2000:]


# ---------------------------------------------------------------- 8. --dtype help


def test_generate_help_lists_the_dtypes_kernels_are_generated_for(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Q/K/V/O element type kernels are generated for: fp16, bf16 (default), fp32" in text
    assert "fp8e4m3 and fp8e5m2 are planned, not generated yet" in text


# ---------------------------------------------------------------- the limits through the Python API


def test_the_work_budget_counts_and_names_the_loop() -> None:
    program = catalog.load("gqa_causal_fwd")
    shape = Shape.parse("1,2,1,40,50,16")
    report = run_and_compare(program, shape, params={"BM": 16, "BN": 16})
    assert report.passed
    # Below what the run needs: 6 instances, the first of 42 steps (the instance, 13 statements
    # before the loop, 2 trips of 1 + 11 statements, 4 after): stopped after the first, at the grid.
    with pytest.raises(TLRuntimeError) as info:
        run_and_compare(program, shape, params={"BM": 16, "BN": 16}, max_steps=60)
    assert (info.value.where.line, info.value.where.col) == (line_of(GRID), col_of("m :", GRID))
    assert "has 6 program instances of about 42 steps or more each (the cheapest of the first 1)" in info.value.message
    assert "work budget of 60 steps" in info.value.message
    # Below what the loop's trips need: stopped after the first trip, at the loop.
    with pytest.raises(TLRuntimeError, match=r"loop j = 0 : 2 has 2 trips of about 12 steps or more each \(the cheapest of the first 1\)"):
        run_and_compare(program, shape, params={"BM": 16, "BN": 16}, max_steps=30)
    # Below what the first trip needs: stopped at the statement where the budget runs out.
    with pytest.raises(TLRuntimeError, match=r"exceeds the interpreter's work budget of 20 steps here \(1 program instances and 1 loop trips so far\)"):
        run_and_compare(program, shape, params={"BM": 16, "BN": 16}, max_steps=20)


def test_a_dependent_grid_extent_is_budgeted_too() -> None:
    # The extent of x depends on m, so the grid's size is unknown up front: the cheapest instance
    # times the instances left on the innermost axis still stops it after one instance.
    program = parse(edit(GRID, GRID + ", x : 100000 * (m + 1)"))
    start = time.thread_time()
    with pytest.raises(TLRuntimeError, match="100,000 or more program instances"):
        run_and_compare(program, Shape.parse("1,2,1,17,19,16"), params={"BM": 16, "BN": 16})
    assert time.thread_time() - start < 5


def test_a_grid_of_many_axes_needs_no_deep_recursion() -> None:
    axes = ", ".join(f"a{i} : 1" for i in range(3000))
    program = parse(edit(GRID, GRID + ", " + axes))
    assert run_and_compare(program, Shape.parse("1,2,1,17,19,16"), params={"BM": 16, "BN": 16}).passed


def test_arrays_past_the_element_limit_are_refused_before_allocation() -> None:
    program = parse(edit("Allocate O_acc in register (BM, Dv) : acc = 0", "Allocate O_acc in register (BM * 100000, Dv * 1000) : acc = 0"))
    tensors = {name: np.zeros(shape) for name, shape in {"q": (1, 1, 8, 16), "k": (1, 1, 8, 16), "v": (1, 1, 8, 16), "o": (1, 1, 8, 16),
                                                           "lse": (1, 1, 8), "alibi_slopes": (1,)}.items()}
    sizes = {"B": 1, "Hq": 1, "Hkv": 1, "Sq": 8, "Sk": 8, "D": 16, "Dv": 16}
    with pytest.raises(TLRuntimeError, match=r"has 25,600,000,000 elements; the interpreter takes at most 67,108,864"):
        run_program(program, sizes, tensors, scalars={"scale": 0.25}, params={"BM": 16, "BN": 16})
    with pytest.raises(AttnforgeError, match="q \\(B\\*Hq\\*Sq\\*D\\)"):
        Shape(1, 1, 1, 1, 1, MAX_ELEMENTS + 1, 1).check_size()


def test_tl312_flags_no_shipped_program_at_any_tile_size() -> None:
    """The new finding must not fire on correct programs, whatever the probes and parameters."""
    for name in catalog.programs():
        program = catalog.load(name)
        for bm, bn in ((16, 16), (16, 128), (128, 16), (64, 64), (128, 128)):
            params = {p.name for k in program.kernels for p in k.params}
            from attnforge.tl.harness import specialize

            special = specialize(program, params={k: v for k, v in {"BM": bm, "BN": bn}.items() if k in params})
            for target in (None, "h100", "a100"):
                for d in (16, 64, 128):
                    codes = {f.code for f in check(special, target, head_dim=d).findings}
                    assert "TL312" not in codes, (name, bm, bn, target, d)


def test_limits_hold_for_the_python_entry_points() -> None:
    with pytest.raises(TLSyntaxError, match="expression nested more than 100 levels deep"):
        parse_expr(" or ".join(["q_idx < 1"] * 8000), "mask_mod")
    with pytest.raises(SpecError, match="score_mod") as info:
        AttentionSpec(heads=8, head_dim=64, score_mod="+".join(["score"] * 16_000))
    assert len(str(info.value)) < ERROR_CHARS
    with pytest.raises(TLSyntaxError, match="integer literal of 200 digits is too long"):
        parse_expr("1" * 200)
    with pytest.raises(TLSyntaxError, match="TL takes at most 262,144"):
        parse("#" * 300_000)


def test_the_deepest_expression_accepted_goes_through_every_tool() -> None:
    """MAX_EXPR_DEPTH is safe: an expression at the limit is checked, interpreted and translated
    with 250 frames to spare (Python's default limit leaves about 900)."""
    from attnforge.backends.triton import translate
    from attnforge.tl.harness import specialize

    deepest = MASK + " + 0" * (MAX_EXPR_DEPTH - 4)  # `and`, `<=` and the two operators already there: 100 levels
    program = parse(edit(MASK, deepest))
    with pytest.raises(TLSyntaxError, match="nested more than 100 levels"):
        parse(edit(MASK, deepest + " + 0"))
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 250)
    try:
        assert check(program, "h100", head_dim=64).ok
        assert run_and_compare(program, Shape.parse("1,2,1,17,19,16"), params={"BM": 16, "BN": 16}).passed
        assert "Mask" in translate(specialize(program, params={"BM": 16, "BN": 16}), head_dim=64, head_dim_v=64).source
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize("argv", [("targets", "--json"), ("tl", "library", "lib:gqa_fwd"), ("tl", "check", "lib:gqa_causal_fwd", "--json")])
def test_a_reader_that_goes_away_is_no_traceback(argv) -> None:
    """`attnforge ... | head -1`: the pipe closes before the command writes; it stops with the
    shell's code for SIGPIPE and says nothing."""
    proc = subprocess.Popen([sys.executable, "-m", "attnforge.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # before the command has even imported attnforge
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and err == "", err[-2000:]
