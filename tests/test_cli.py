"""The command line, end to end, through main(argv) (what the console script calls)."""

from __future__ import annotations

import json
import re

import pytest

from attnforge.cli import main, read_tl
from attnforge.tl.catalog import programs as library_programs


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_shipped_gqa_causal_for_h100_is_clean(capsys):
    code, out, _ = run(capsys, "tl", "check", "lib:gqa_causal_fwd", "--target", "h100")
    assert code == 0
    assert "clean for h100" in out


def test_check_reports_findings_as_file_line_col_code(capsys):
    code, out, _ = run(capsys, "tl", "check", "lib:gqa_causal_fwd", "--target", "t4")
    assert code == 1
    lines = [l for l in out.splitlines() if re.match(r"^gqa_causal_fwd\.tl:\d+:\d+: TL\d{3}: .+ \(.+\)$", l)]
    codes = {l.split(": ")[1] for l in lines}
    assert {"TL501", "TL503"} <= codes


def test_check_json(capsys):
    code, out, _ = run(capsys, "tl", "check", "lib:decode_split_kv", "--target", "a100", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["target"] == "a100"
    assert [r["kernel"] for r in data["resources"]] == ["decode_split_kv_partial", "decode_split_kv_combine"]


def test_check_sketch_lists_open_parameters(tmp_path, capsys):
    text, _ = read_tl("lib:gqa_fwd")
    sketch = tmp_path / "sketch.tl"
    sketch.write_text(text.replace("param BM = 128, BN = 64", "param BM, BN = ?"))
    code, out, _ = run(capsys, "tl", "check", str(sketch), "--target", "h100")
    assert code == 1 and "TL106" in out
    code, out, _ = run(capsys, "tl", "check", str(sketch), "--target", "h100", "--sketch")
    assert code == 0 and "open parameters: BM, BN" in out


def test_run_verifies_every_shipped_program(capsys):
    for name in library_programs():
        code, out, _ = run(capsys, "tl", "run", f"lib:{name}", "--shape", "1,4,2,37,53,16", "--param", "BM=16", "--param", "BN=16")
        assert code == 0, (name, out)
        assert "verified" in out and "PASS" in out


def test_run_bf16_with_target_check(capsys):
    code, out, _ = run(capsys, "tl", "run", "lib:gqa_causal_fwd", "--target", "h100", "--shape", "1,4,1,17,33,32", "--dtype", "bf16")
    assert code == 0 and "dtype=bf16" in out


def test_run_refuses_a_program_the_checker_rejects(capsys):
    code, out, _ = run(capsys, "tl", "run", "lib:gqa_causal_fwd", "--target", "t4", "--shape", "1,1,1,8,8,16")
    assert code == 1 and "not run" in out


def test_run_fails_on_a_wrong_program(tmp_path, capsys):
    text, _ = read_tl("lib:gqa_fwd")
    bad = tmp_path / "bad.tl"
    bad.write_text(text.replace("for j = 0 : cdiv(Sk, BN)", "for j = 0 : Sk // BN"))
    code, out, _ = run(capsys, "tl", "run", str(bad), "--shape", "1,2,1,20,50,16", "--param", "BN=16")
    assert code == 1 and "FAIL" in out


@pytest.mark.parametrize("argv, field", [
    (["tl", "run", "lib:gqa_fwd", "--shape", "1,2"], "--shape"),
    (["tl", "run", "lib:gqa_fwd", "--shape", "1,3,2,8,8,16"], "--shape"),
    (["tl", "run", "lib:gqa_fwd", "--param", "BM"], "--param"),
    (["tl", "check", "lib:gqa_fwd", "--target", "h900"], "h900"),
    (["tl", "check", "no_such_program.tl"], "no such TL file"),
    (["tl", "check", "lib:gqa_fwd", "--head-dim", "x"], "--head-dim"),
])
def test_bad_input_exits_2_naming_the_problem(capsys, argv, field):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert field in err


def test_syntax_error_exits_2_with_position(tmp_path, capsys):
    bad = tmp_path / "typo.tl"
    bad.write_text("kernel k\ngrid b : B\nAllocate Q in glob (Sq, D) at q[b, 0]\n")
    code, _, err = run(capsys, "tl", "check", str(bad))
    assert code == 2
    assert f"{bad}:3:15: unexpected 'glob'" in err and "'global'" in err


def test_targets_table_and_json(capsys):
    code, out, _ = run(capsys, "targets")
    assert code == 0
    for name in ("t4", "rtx8000", "v100", "a10", "a100", "l4", "l40s", "rtx4090", "h100", "h200", "b200"):
        assert name in out
    code, out, _ = run(capsys, "targets", "--json")
    assert {t["name"] for t in json.loads(out)} >= {"h100", "t4"}


def test_spec_validate(tmp_path, capsys):
    good = tmp_path / "s.toml"
    good.write_text('heads = 32\nkv_heads = 8\nhead_dim = 128\ncausal = true\n')
    code, out, _ = run(capsys, "spec", "validate", str(good))
    assert code == 0 and "gqa" in out
    bad = tmp_path / "b.json"
    bad.write_text('{"heads": 32, "kv_heads": 5, "head_dim": 128}')
    code, _, err = run(capsys, "spec", "validate", str(bad))
    assert code == 2 and "kv_heads" in err
    # Flags override the file, and flags alone describe a spec.
    code, out, _ = run(capsys, "spec", "validate", str(bad), "--kv-heads", "8", "--json")
    assert code == 0 and json.loads(out)["kv_heads"] == 8
    code, out, _ = run(capsys, "spec", "validate", "--heads", "8", "--kv-heads", "1", "--head-dim", "64", "--window=128,0", "--causal")
    assert code == 0 and "mqa" in out
    code, _, err = run(capsys, "spec", "validate", "--heads", "8", "--head-dim", "64", "--softcap", "-1")
    assert code == 2 and "softcap" in err


def test_library_lists_and_prints(capsys):
    code, out, _ = run(capsys, "tl", "library")
    assert code == 0 and "decode_split_kv.tl" in out
    code, out, _ = run(capsys, "tl", "library", "gqa_causal_fwd")
    assert out.startswith("# gqa_causal_fwd.tl")


@pytest.mark.parametrize("argv", [["tl", "check"], ["tl", "run", "--help"], ["--help"], ["spec", "validate", "--help"]])
def test_help_never_crashes(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code in (0, 2)
    out, err = capsys.readouterr()
    assert "usage:" in out + err


@pytest.mark.parametrize("argv", [[], ["tl"], ["spec"]])
def test_a_missing_command_prints_that_levels_help_and_exits_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and "usage: attnforge" in err


def test_run_checks_the_program_it_runs(capsys):
    # --dtype and --param change the program; the check before the run must see them.
    code, out, _ = run(capsys, "tl", "run", "lib:gqa_fwd", "--target", "a100", "--dtype", "fp8e4m3", "--shape", "1,2,1,40,50,64")
    assert code == 1 and "TL501" in out and "not run" in out
    code, out, _ = run(capsys, "tl", "run", "lib:gqa_fwd", "--target", "t4", "--dtype", "fp16", "--param", "stages=1", "--shape", "1,2,1,40,50,64")
    assert code == 0 and "verified" in out
    code, out, _ = run(capsys, "tl", "run", "lib:gqa_fwd", "--param", "BM=100", "--shape", "1,2,1,40,50,64")
    assert code == 1 and "TL505" in out


@pytest.mark.parametrize("argv, field", [
    (["tl", "run", "lib:gqa_fwd", "--param", "bm=16"], "'bm' is not declared"),
    (["tl", "run", "lib:gqa_fwd", "--scalar", "softcap=3"], "'softcap' is not declared"),
    (["tl", "check", "lib:gqa_fwd", "--target", ""], "unknown target ''"),
    (["tl", "library", "/etc/passwd"], "no shipped TL program"),
])
def test_typos_and_wrong_names_are_errors(capsys, argv, field):
    code, _, err = run(capsys, *argv)
    assert code == 2 and field in err


def test_default_shapes_cover_several_query_blocks(capsys):
    code, out, _ = run(capsys, "tl", "run", "lib:gqa_causal_fwd")
    assert code == 0
    sq = [int(x) for x in re.findall(r"Sq=(\d+)", out)]
    assert max(sq) > 2 * 128 and 1 in sq


def test_integer_scalars_bound_window_loops(capsys):
    code, out, _ = run(capsys, "tl", "run", "lib:sliding_window_fwd", "--scalar", "window_left=5", "--scalar", "window_right=0",
                       "--shape", "1,2,1,40,50,16", "--param", "BM=16", "--param", "BN=16")
    assert code == 0 and "PASS" in out
