"""The GPU mutation checks verify each planted kernel in a child process: what counts as caught."""

from __future__ import annotations

import sys
import textwrap

import pytest

from attnforge.selftest.child import verify_in_child

CHILD = textwrap.dedent('''
    import sys, time
    what = sys.argv[sys.argv.index("--verify-one") + 1].rsplit("/", 1)[-1]
    if what == "pass":
        print("PASSED"); sys.exit(0)
    if what == "fail":
        print("building"); print("FAILED 1x4/2x37x53 bhsd: O at b=0 h=1 row=3"); sys.exit(1)
    if what == "fault":  # verify records a fault as failed cases: the child still says FAILED
        print("FAILED 1x4/2x37x53 bhsd: RuntimeError: CUDA error: an illegal memory access was encountered"); sys.exit(1)
    if what == "hang":
        time.sleep(30)
    if what == "env":  # passes only with the cache directory the parent gave it
        import os
        ok = os.environ.get("TRITON_CACHE_DIR", "").endswith("fresh-cache")
        print("PASSED" if ok else "FAILED saw " + os.environ.get("TRITON_CACHE_DIR", "none")); sys.exit(0 if ok else 1)
    raise ImportError("a child that never verified")  # a traceback, then this line
''')


@pytest.fixture
def child_module(tmp_path, monkeypatch):
    (tmp_path / "fake_gpucheck_child.py").write_text(CHILD)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + ":" + ":".join(sys.path))
    return "fake_gpucheck_child"


@pytest.mark.parametrize("what, passed, caught", [
    ("pass", True, False),
    ("fail", False, True),
    ("fault", False, True),
    ("hang", False, True),
    ("crash", False, False),  # an import or build error catches nothing: the mutant was never judged
])
def test_what_a_child_verdict_counts_as(child_module, tmp_path, what, passed, caught):
    got_passed, got_caught, detail = verify_in_child(child_module, tmp_path / what, "hopper", {"BM": 128}, deadline_s=5.0 if what == "hang" else 60.0)
    assert (got_passed, got_caught) == (passed, caught), detail
    if what == "hang":
        assert "no result within 5 s" in detail
    if what == "crash":
        assert detail == "no verdict: ImportError: a child that never verified"
    assert (tmp_path / what).with_suffix(".log").is_file()
    if what == "fail":
        assert "building" in (tmp_path / what).with_suffix(".log").read_text()


def test_a_child_builds_with_the_environment_it_is_given(child_module, tmp_path):
    """The Gluon GPU check gives each child a Triton cache of its own (its control's time must include a build, as a
    mutant's does); the child sees it, on top of the parent's environment (PYTHONPATH still finds the module)."""
    passed, caught, detail = verify_in_child(child_module, tmp_path / "env", "hopper", {}, deadline_s=60.0,
                                             env={"TRITON_CACHE_DIR": str(tmp_path / "fresh-cache")})
    assert (passed, caught) == (True, False), detail
    passed, caught, detail = verify_in_child(child_module, tmp_path / "env", "hopper", {}, deadline_s=60.0)
    assert (passed, caught) == (False, True) and "saw" in detail
