"""Faults: a generate or a first attention() killed (SIGKILL) at each step, a full disk, bad
calls to a loaded kernel, sizes and literals a kernel cannot hold. None may leave something a
later call would load, print a traceback, or end without a clear error."""

from __future__ import annotations

import errno
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import attnforge
from attnforge import manifest
from attnforge.cache import CacheRepairWarning, build_or_load, entry_key
from attnforge.cli import main
from attnforge.errors import AttnforgeError, CompileError, LaunchError, OutputError, SpecError
from attnforge.generate import generate
from attnforge.report import contents
from attnforge.spec import AttentionSpec

H100 = attnforge.get_target("h100")
SPEC_OLD = AttentionSpec(heads=2, head_dim=16, dtype="bf16")  # what --out held before
SPEC = AttentionSpec(heads=2, head_dim=16, dtype="fp16")  # what the killed run makes
CLI_SPEC = ("--target", "h100", "--heads", "2", "--head-dim", "16", "--dtype", "fp16")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in contents(directory)}


# ---------------------------------------------------------------- SIGKILL at each step

# A child runs generate (through the CLI) or the cache's first build and SIGKILLs itself when it
# reaches POINT: a pipeline step's start, or a step of the write-out. Children are forked from
# this process (no second import of torch and Triton); the "marker" children are separate
# processes, killed from outside once a marker file shows they reached the compile step.
STEPS = ("plan", "check", "interpret", "translate", "compile", "verify")
CHILD = r"""
import os, signal, sys, shutil
from pathlib import Path
mode, point, path = sys.argv[1:4]
import attnforge.generate as gen, attnforge.outdir as outdir, attnforge.cache as cache, attnforge.manifest as manifest

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

def die_when(fn, test):
    def wrapped(*args, **kwargs):
        if test(*args):
            die()
        return fn(*args, **kwargs)
    return wrapped

if point in STEPS:
    gen._Pipeline.step = die_when(gen._Pipeline.step, lambda self, name, fn: name == point)
elif point == "report":
    gen.write_reports = die
elif point == "publish":
    outdir.publish = die
elif point == "exchange":  # the one step that replaces the earlier output
    outdir._exchange = die
elif point == "cleanup":  # the new output is in place, the earlier one (in the run's directory) not yet removed
    shutil.rmtree = die_when(shutil.rmtree, lambda p, *a: Path(p).name.startswith(".out.attnforge-"))
elif point == "manifest":
    manifest.write = die
elif point == "manifest-rename":  # the manifest is written to a temporary name; killed before it gets its own
    os.replace = die_when(os.replace, lambda src, dst: str(dst).endswith("manifest.json"))
elif point == "entry-rename":
    cache._publish = die
elif point == "marker":  # the parent kills this process from outside once it reaches compile
    def hold(self, name, fn, real=gen._Pipeline.step):
        if name == "compile":
            open(path + ".reached", "w").close()
            import time; time.sleep(120)
        return real(self, name, fn)
    gen._Pipeline.step = hold

if mode == "cli":
    from attnforge.cli import main
    flags = [] if point == "verify" else ["--no-verify"]
    main(["generate", "--target", "h100", "--heads", "2", "--head-dim", "16", "--dtype", "fp16", "--out", path, *flags])
else:
    from attnforge import get_target
    from attnforge.spec import AttentionSpec
    cache.build_or_load(AttentionSpec(heads=2, head_dim=16, dtype="fp16"), get_target("h100"), root=path, verify=point == "verify")
"""


def kill_at(mode: str, point: str, path: Path) -> None:
    if point == "marker":
        proc = subprocess.Popen([sys.executable, "-c", f"STEPS = {STEPS!r}\n" + CHILD, mode, point, str(path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        marker = Path(str(path) + ".reached")
        deadline = time.monotonic() + 240
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=60)
        assert marker.exists() and proc.returncode == -signal.SIGKILL, f"rc {proc.returncode}\n{stdout}\n{stderr}"
        return
    # A fork of a clean process (multiprocessing's fork server, attnforge and torch imported there
    # and nothing run): a plain fork of this test process would inherit torch's CPU thread pools
    # after earlier tests used them, and torch hangs in such a child.
    ctx = _fork_server()
    child = ctx.Process(target=_run_child, args=(mode, point, str(path)))
    child.start()
    child.join(240)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"the child did not reach {point} in 240 s")
    assert child.exitcode == -signal.SIGKILL, f"the child was not killed at {point}: exit code {child.exitcode}"


def _run_child(mode: str, point: str, path: str) -> None:
    """In the child: run until it kills itself; anything else is a failure (exit 70)."""
    try:
        sys.argv = ["child", mode, point, path]
        exec(compile(CHILD, "child", "exec"), {"STEPS": STEPS, "__name__": "child"})
    finally:
        os._exit(70)


def _fork_server():
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "attnforge.cli", "attnforge.generate", "attnforge.cache"])
    return ctx


@pytest.fixture(scope="module")
def earlier_output(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("earlier") / "out"
    assert generate(SPEC_OLD, H100, out, run_verification=False).ok
    return out


@pytest.mark.parametrize("point", [*STEPS, "report", "publish", "exchange", "cleanup", "marker"])
def test_generate_killed_leaves_the_earlier_output_or_the_new_one_whole(tmp_path, capsys, earlier_output, point):
    out = tmp_path / "out"
    shutil.copytree(earlier_output, out)
    before = snapshot(out)
    kill_at("cli", point, out)
    after = snapshot(out)
    if point != "cleanup":
        assert after == before  # untouched
    attnforge.load(out)  # what is there loads
    code, stdout, stderr = run(capsys, "generate", *CLI_SPEC, "--no-verify", "--out", str(out))
    assert code == 3, stdout + stderr
    rerun = snapshot(out)
    assert json.loads(rerun["report.json"])["spec"]["dtype"] == "fp16" and "torch.float16" in rerun["kernel_triton.py"].decode()
    assert sorted(json.loads(rerun["report.json"])["contents"]) == sorted(rerun)
    if point == "cleanup":  # killed after the swap: the new run's directory, whole (what a run makes again)
        assert sorted(after) == sorted(rerun) and json.loads(after["report.json"])["spec"] == json.loads(rerun["report.json"])["spec"]
        assert {k: v for k, v in after.items() if not k.startswith("report")} == {k: v for k, v in rerun.items() if not k.startswith("report")}


@pytest.mark.parametrize("point", ["plan", "compile", "verify", "report", "publish", "manifest", "manifest-rename", "entry-rename", "marker"])
def test_a_first_call_killed_leaves_no_entry_and_the_next_builds_cleanly(tmp_path, point):
    root = tmp_path / "cache"
    kill_at("cache", point, root)
    entry = root / entry_key(SPEC, H100)
    assert not entry.exists() and not entry.is_symlink()  # nothing a later call would load
    assert not [p for p in root.iterdir() if not p.name.startswith(".")]  # only hidden build directories
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheRepairWarning)  # nothing damaged to set aside
        module = build_or_load(SPEC, H100, root=root, verify=False)
    assert module == entry / "kernel_triton.py" and manifest.damage(entry, ("kernel_triton.py",)) is None


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def full_disk(monkeypatch):
    def no_space(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))
    monkeypatch.setattr(Path, "write_text", no_space)


def test_generate_on_a_full_disk_is_a_one_line_error_and_keeps_the_earlier_output(tmp_path, capsys, earlier_output, full_disk):
    out = tmp_path / "out"
    shutil.copytree(earlier_output, out)
    before = snapshot(out)
    code, stdout, stderr = run(capsys, "generate", *CLI_SPEC, "--no-verify", "--out", str(out))
    assert code == 1, stdout + stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and str(out) in errors[0]
    assert "Traceback" not in stdout + stderr
    assert snapshot(out) == before and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_generate_api_on_a_full_disk_raises_output_error(tmp_path, full_disk):
    with pytest.raises(OutputError, match="No space left on device"):
        generate(SPEC, H100, tmp_path / "new", run_verification=False)
    assert list(tmp_path.iterdir()) == []


def test_a_first_call_on_a_full_disk_is_a_clear_error_and_leaves_no_entry(tmp_path, full_disk):
    with pytest.raises(OutputError, match="No space left on device") as err:
        build_or_load(SPEC, H100, root=tmp_path, verify=False)
    assert isinstance(err.value, AttnforgeError) and err.value.hint
    assert not [p for p in tmp_path.iterdir()]


def test_no_space_for_the_manifest_leaves_no_entry(tmp_path, monkeypatch):
    def no_space(directory, key):
        raise OSError(errno.ENOSPC, "No space left on device", str(directory / manifest.NAME))
    monkeypatch.setattr(manifest, "write", no_space)
    with pytest.raises(OutputError, match="cannot write the kernel cache entry .*No space left on device"):
        build_or_load(SPEC, H100, root=tmp_path, verify=False)
    assert list(tmp_path.iterdir()) == []


def test_a_compile_failure_is_one_line_and_exit_1(tmp_path, capsys, monkeypatch):
    from attnforge.backends.triton import TritonBackend

    def refuse(self, *args, **kwargs):
        raise CompileError("Triton cannot compile attn_fwd for sm_90: at 101:13:\n    x = 1e39\n    ^", where="compile attn_fwd for h100")
    monkeypatch.setattr(TritonBackend, "compile", refuse)
    code, stdout, stderr = run(capsys, "generate", *CLI_SPEC, "--no-verify", "--out", str(tmp_path / "out"))
    assert code == 1 and "Traceback" not in stdout + stderr
    fails = [line for line in stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and "compile failed" in fails[0] and "report.md" in fails[0]


def test_a_bug_in_a_step_is_one_line_on_screen_and_whole_in_the_report(tmp_path, capsys, monkeypatch):
    from attnforge.backends.triton import TritonBackend

    monkeypatch.setattr(TritonBackend, "compile", lambda self, *a, **kw: {}["a bug"])
    out = tmp_path / "out"
    code, stdout, stderr = run(capsys, "generate", *CLI_SPEC, "--no-verify", "--out", str(out))
    assert code == 1 and "Traceback" not in stdout + stderr
    assert [line for line in stdout.splitlines() if line.startswith("FAIL")][0].startswith("FAIL compile failed: KeyError")
    assert "Traceback" in (out / "report.md").read_text()


# ---------------------------------------------------------------- bad calls to a loaded kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    out = tmp_path_factory.mktemp("kernel") / "out"
    assert generate(SPEC, H100, out, run_verification=False).ok
    return attnforge.load(out)


def _t(*shape, dtype=torch.float16, device="cpu"):
    return torch.randn(*shape).to(dtype).to(device)


Q = (1, 2, 20, 16)
BAD_CALLS = {
    "q-3d": ((lambda: (_t(2, 20, 16), _t(*Q), _t(*Q))), "q", "(B, Hq, Sq, D)"),
    "k-3d": ((lambda: (_t(*Q), _t(2, 20, 16), _t(*Q))), "k", "(B, Hkv, Sk, D)"),
    "v-5d": ((lambda: (_t(*Q), _t(*Q), _t(1, *Q))), "v", "(B, Hkv, Sk, Dv)"),
    "q-2d": ((lambda: (_t(20, 16), _t(*Q), _t(*Q))), "q", "(B, Hq, Sq, D)"),
    "q-list": ((lambda: ([[1.0]], _t(*Q), _t(*Q))), "q", "not a torch.Tensor"),
    "k-none": ((lambda: (_t(*Q), None, _t(*Q))), "k", "not a torch.Tensor"),
    "v-numpy": ((lambda: (_t(*Q), _t(*Q), _t(*Q).numpy())), "v", "not a torch.Tensor"),
    "dtype": ((lambda: (_t(*Q, dtype=torch.float32),) * 3), "q", "must be torch.float16"),
    "k-dtype": ((lambda: (_t(*Q), _t(*Q, dtype=torch.bfloat16), _t(*Q))), "k", "must be torch.float16"),
    "device": ((lambda: (_t(*Q, device="meta"),) * 3), "q", "this kernel runs on cpu"),
    "batch-mismatch": ((lambda: (_t(*Q), _t(2, 2, 20, 16), _t(2, 2, 20, 16))), "k", "(B, Hkv, Sk, D)"),
    "length-mismatch": ((lambda: (_t(*Q), _t(1, 2, 20, 16), _t(1, 2, 21, 16))), "v", "(B, Hkv, Sk, Dv)"),
    "head-dim": ((lambda: (_t(1, 2, 20, 32),) * 3), "q, k, v", "head dims D=16"),
    "heads-not-dividing": ((lambda: (_t(*Q), _t(1, 3, 20, 16), _t(1, 3, 20, 16))), "q, k", "multiple of key/value heads"),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_bad_calls_to_a_loaded_kernel_raise_launch_errors(kernel, name):
    make, where, says = BAD_CALLS[name]
    with pytest.raises(LaunchError) as err:
        kernel(*make())
    assert isinstance(err.value, ValueError) and err.value.where == where and says in str(err.value), str(err.value)


@pytest.mark.parametrize("scalars, says", [({"scale": "0.5"}, "scale = '0.5' is not a finite number"),
                                           ({"scale": float("nan")}, "not a finite number"),
                                           ({"scale": True}, "not a finite number"),
                                           ({"softcap": 3.0}, "takes no softcap")])
def test_bad_scalars_raise_launch_errors(kernel, scalars, says):
    with pytest.raises(LaunchError, match=says):
        kernel(_t(*Q), _t(*Q), _t(*Q), **scalars)


@pytest.mark.parametrize("o_shape, lse_shape, where", [((1, 2, 20), (1, 2, 20), "o"), ((1, 2, 20, 16), (1, 2, 20, 1), "lse"),
                                                       ((1, 2, 19, 16), (1, 2, 20), "o")])
def test_bad_outputs_to_launch_raise_launch_errors(kernel, o_shape, lse_shape, where):
    with pytest.raises(LaunchError) as err:
        kernel.launch(_t(*Q), _t(*Q), _t(*Q), _t(*o_shape), _t(*lse_shape, dtype=torch.float32), scale=0.25)
    assert err.value.where == where


# ---------------------------------------------------------------- sizes and literals


@pytest.mark.parametrize("fields, field", [
    (dict(heads=10**12, kv_heads=2), "heads"),
    (dict(heads=2, batch=2**31), "batch"),
    (dict(heads=4, batch=2**30), "batch"),  # batch x heads > 2**31 - 1
    (dict(heads=2, seqlen_q=2**31), "seqlen_q"),
    (dict(heads=2, seqlen_q=16, seqlen_k=2**24 + 1), "seqlen_k"),  # one head of k: 2**24 + 1 rows of 128 > 2**31 elements
    (dict(heads=64, batch=2**16, seqlen_q=8192), "batch"),  # batch x heads x cdiv(Sq, 16) program instances > 2**31 - 1
    (dict(heads=2**16, seqlen_q=2**20), "seqlen_q"),  # heads x cdiv(Sq, 16) alone
    (dict(heads=8, window_left=2**31), "window_left"),
    (dict(heads=8, window_left=0, window_right=10**29), "window_right"),
])
def test_sizes_past_int32_indexing_are_refused(fields, field):
    with pytest.raises(SpecError) as err:
        AttentionSpec(head_dim=128, **fields)
    assert err.value.field == field and "2**31" in str(err.value) and "int32" in str(err.value)


def test_the_largest_indexable_sizes_are_valid():
    AttentionSpec(heads=2**16, kv_heads=2**7, seqlen_q=16, head_dim=16)
    AttentionSpec(heads=512, kv_heads=1, head_dim=16)
    AttentionSpec(heads=2, batch=2**30 - 1, seqlen_q=16, head_dim=16)
    AttentionSpec(heads=1, seqlen_q=2**24, head_dim=128)
    AttentionSpec(heads=8, head_dim=64, window_left=2**31 - 1, window_right=2**31 - 1)


@pytest.mark.parametrize("fields, field, says", [
    (dict(heads=2**31 - 1, kv_heads=1), "heads", "1..65536"),  # an ALiBi slope table of 2**31 entries would hang
    (dict(heads=2**16 + 1), "heads", "1..65536"),
    (dict(heads=1024, kv_heads=1), "kv_heads", "heads / kv_heads <= 512"),  # verification interprets 2 x 1024 query heads
])
def test_heads_the_host_cannot_hold_are_refused(fields, field, says):
    start = time.perf_counter()
    with pytest.raises(SpecError) as err:
        AttentionSpec(head_dim=16, alibi_slopes="auto", **fields)
    assert err.value.field == field and says in str(err.value)
    assert time.perf_counter() - start < 1


def test_huge_heads_on_the_command_line_is_a_one_line_error(tmp_path, capsys):
    code, stdout, stderr = run(capsys, "generate", "--heads", "1000000000000", "--kv-heads", "2", "--head-dim", "16", "--out", str(tmp_path / "o"))
    assert code == 2 and "Traceback" not in stdout + stderr
    assert stderr.strip().count("\n") == 0 and "heads = 1000000000000" in stderr and "2147483647" in stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("field, text, ok", [
    ("score_mod", "score + 99999999999999999999999999999999999999", False),
    ("score_mod", "score + 2147483647", True),
    ("score_mod", "score + 2147483648", False),
    ("score_mod", "score - 3.4e38 * (q_idx - kv_idx)", True),
    ("score_mod", "score * 3.5e38", False),
    ("score_mod", "where(q_idx > kv_idx, score, -1e39)", False),
    ("mask_mod", "kv_idx < 3000000000", False),
    ("mask_mod", "kv_idx % 4 != 0", True),
])
def test_modifier_literals_must_fit_the_kernels_arithmetic(capsys, field, text, ok):
    code, stdout, stderr = run(capsys, "spec", "validate", "--heads", "2", "--head-dim", "16", f"--{field.replace('_', '-')}", text)
    assert code == (0 if ok else 2), stdout + stderr
    if not ok:
        assert stderr.strip().count("\n") == 0 and stderr.startswith(f"error: spec.{field}:")
        assert ("int32" in stderr) or ("fp32" in stderr)
