"""`generate --out DIR`: the directory is written whole (one run's files, its report describing
them), never mixed by two runs, never a file or somebody else's directory clobbered; bad --out
paths are one-line errors with exit 2; the summary lists what is really there and the time of
every compile, rejected ones included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnforge import AttentionSpec, get_target
from attnforge.cli import main
from attnforge.errors import AttnforgeError, DoesNotFitError
from attnforge.generate import generate
from attnforge.report import contents
from attnforge.tl.parser import parse
from attnforge.tl.printer import print_program

SMALL = ("--target", "h100", "--dtype", "fp16", "--no-verify")  # SPEC_B's --dtype comes later and wins
# Two different specs: a run's files are recognisable by head dim and heads.
SPEC_A = ("--heads", "2", "--head-dim", "16")
SPEC_B = ("--heads", "2", "--head-dim", "16", "--dtype", "bf16")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_run(directory: Path) -> dict:
    """The directory is wholly one run's: its report's spec is the one kernel.tl and the module
    were made for, and its list of files is what is there."""
    report = json.loads((directory / "report.json").read_text())
    spec = report["spec"]
    tl = (directory / "kernel.tl").read_text()
    assert print_program(parse(tl)) == report["tl"]  # the TL program the report describes
    module = (directory / "kernel_triton.py").read_text()
    assert f"HEAD_DIM = {spec['head_dim']}\n" in module and f"HEAD_DIM_V = {spec['head_dim_v']}\n" in module
    torch_name = {"fp16": "torch.float16", "bf16": "torch.bfloat16"}[spec["dtype"]]
    assert f'"q": {torch_name}' in module and f"qkv = {spec['dtype']}" in tl
    assert sorted(report["contents"]) == contents(directory)
    assert all(name.startswith("build/") or "/" not in name for name in report["contents"])
    return report


def no_leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".attnforge-" in p.name]


def test_two_runs_into_one_out_leave_one_runs_directory(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "attnforge.cli", "generate", *SMALL, "--out", str(out)]
    procs = [subprocess.Popen(cmd + list(spec), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for spec in (SPEC_A, SPEC_B)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, stderr) in zip(procs, results):
        assert p.returncode == 3, stdout + stderr  # generated, not verified
        assert "Traceback" not in stderr
    report = assert_one_run(out)
    assert report["spec"]["dtype"] in ("fp16", "bf16")
    assert no_leftovers(tmp_path) == []


def test_a_later_run_replaces_an_earlier_output_whole(tmp_path, capsys):
    out = tmp_path / "out"
    assert run(capsys, "generate", *SMALL, *SPEC_B, "--out", str(out))[0] == 3
    (out / "build" / "stale.ptx").write_text("from a run long ago")
    (out / "notes.txt").write_text("mine")
    assert run(capsys, "generate", *SMALL, *SPEC_A, "--out", str(out))[0] == 3
    report = assert_one_run(out)
    assert report["spec"]["dtype"] == "fp16"
    assert not (out / "notes.txt").exists() and not (out / "build" / "stale.ptx").exists()
    assert no_leftovers(tmp_path) == []


def test_an_empty_directory_is_used(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    result = generate(AttentionSpec(heads=2, head_dim=16, dtype="fp16"), get_target("h100"), out, run_verification=False)
    assert result.ok and result.out == out
    assert_one_run(out)


@pytest.mark.parametrize("make, why", [
    (lambda p: (p.write_text("heads = 2\n"), p)[1], "exists and is not a directory"),
    (lambda p: (p.mkdir(), (p / "thesis.tex").write_text("x")) and p, "not attnforge output"),
    (lambda p: Path("/proc/attnforge-out"), "cannot create a directory in /proc"),
    (lambda p: (p.write_text("x"), p / "sub")[1], "cannot create its parent directory"),
], ids=["a-file", "a-foreign-directory", "proc", "under-a-file"])
def test_bad_out_is_a_one_line_error_exit_2(tmp_path, capsys, make, why):
    out = make(tmp_path / "gqa.tl")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, stdout, stderr = run(capsys, "generate", *SMALL, *SPEC_A, "--out", str(out))
    assert code == 2, stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --out:") and why in lines[0], stderr
    assert "Traceback" not in stdout + stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing touched


def test_generate_refuses_before_any_work(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(AttnforgeError, match="not attnforge output"):
        generate(AttentionSpec(heads=2, head_dim=16, dtype="fp16"), get_target("h100"), tmp_path, run_verification=False)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_summary_lists_the_files_there_and_every_compile_time(tmp_path, capsys, monkeypatch):
    """The first plan's compile is made not to fit: its time shows as a rejected compile."""
    import attnforge.generate as gen

    real, calls = gen.check_fits, []

    def first_does_not_fit(rep, target):
        calls.append(rep.kernel)
        if len(calls) == 1:
            raise DoesNotFitError("made not to fit by the test", where="compile")
        return real(rep, target)
    monkeypatch.setattr(gen, "check_fits", first_does_not_fit)
    out = tmp_path / "out"
    code, stdout, _ = run(capsys, "generate", *SMALL, *SPEC_A, "--out", str(out))
    assert code == 3
    files_row = next(line for line in stdout.splitlines() if "files" in line and str(out) in line.replace("│", ""))
    for name in ("kernel.tl", "kernel_triton.py", "report.json", "report.md", "build/", "attn_fwd.h100.cubin", "attn_fwd.h100.ptx"):
        assert name in stdout.split("files", 1)[1], (name, files_row)
    time_text = stdout.split("time", 1)[1].split("files", 1)[0]
    assert "total" in time_text and "rejected compiles" in time_text and "1 candidate(s)" in time_text
    report = json.loads((out / "report.json").read_text())
    assert report["rejected_compile_seconds"] > 0 and report["total_seconds"] >= report["rejected_compile_seconds"]
    assert "did not fit" in (out / "report.md").read_text()


def test_without_an_atomic_exchange_the_earlier_output_is_still_replaced_whole(tmp_path, monkeypatch):
    from attnforge import outdir

    out = tmp_path / "out"
    assert generate(AttentionSpec(heads=2, head_dim=16, dtype="bf16"), get_target("h100"), out, run_verification=False).ok
    monkeypatch.setattr(outdir, "_exchange", lambda a, b: False)  # a file system without renameat2(RENAME_EXCHANGE)
    assert generate(AttentionSpec(heads=2, head_dim=16, dtype="fp16"), get_target("h100"), out, run_verification=False).ok
    assert assert_one_run(out)["spec"]["dtype"] == "fp16"
    assert no_leftovers(tmp_path) == []


def test_an_out_that_became_something_else_during_the_run_is_not_replaced(tmp_path, monkeypatch):
    """Somebody else's files appear at --out while the run works: the run is kept aside, named."""
    from attnforge import outdir
    from attnforge.errors import OutputError

    out = tmp_path / "out"
    real = outdir.publish

    def someone_writes_there_first(work, final):
        final.mkdir()
        (final / "thesis.tex").write_text("x")
        real(work, final)
    monkeypatch.setattr(outdir, "publish", someone_writes_there_first)
    with pytest.raises(OutputError, match="not attnforge output") as err:
        generate(AttentionSpec(heads=2, head_dim=16, dtype="fp16"), get_target("h100"), out, run_verification=False)
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    kept = Path(err.value.hint.split("kept in ", 1)[1])
    assert kept.parent == tmp_path and (kept / "report.json").is_file()
