"""Model-written Python: the static gate, and the child process that contains what runs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from attnforge.llm import SandboxError, UnsafeCodeError
from attnforge.llm.gate import check_source, problems
from attnforge.llm.sandbox import Limits, _unprivileged_user, containment, import_and_call, run_isolated, run_untrusted

FAST = Limits(timeout_s=20, memory_bytes=1 << 30)


# ---------------------------------------------------------------- the gate

@pytest.mark.parametrize("source, where, reason", [
    ("import os\n", (1, 1), "import of 'os'"),
    ("import math\nimport socket\ns = socket.socket()\n", (2, 1), "import of 'socket'"),
    ("def main():\n    with open('x', 'w') as f:\n        f.write('1')\n", (2, 10), "the builtin 'open'"),
    ("import subprocess\n", (1, 1), "import of 'subprocess'"),
    ("from os import system\n", (1, 1), "import from 'os'"),
    ("x = eval('1+1')\n", (1, 5), "the builtin 'eval'"),
    ("exec('print(1)')\n", (1, 1), "the builtin 'exec'"),
    ("c = compile('1', 'f', 'eval')\n", (1, 5), "the builtin 'compile'"),
    ("m = __import__('os')\n", (1, 5), "'__import__'"),
    ("g = globals()\n", (1, 5), "the builtin 'globals'"),
    ("x = ().__class__.__bases__\n", (1, 8), "the attribute '__class__'"),
    ("x = getattr(int, '__subclasses__')\n", (1, 5), "getattr() with a name"),
    ("x = getattr(int, name)\n", (1, 5), "getattr() with a name"),
    ("import torch\ntorch.os.system('id')\n", (2, 7), "the attribute 'os'"),
    ("import torch\nw = torch.load('w.pt')\n", (2, 11), "torch.load"),
    ("import torch as t\nt.utils.cpp_extension.load_inline('x', '')\n", (2, 3), "torch.utils"),
    ("import torch\nx = torch._C\n", (2, 11), "private attribute '_C'"),
    ("x = (i for i in ()).gi_frame.f_back.f_globals\n", (1, 21), "'gi_frame'"),
    ("import torch\ntorch.allclose = lambda *a, **k: True\n", (2, 7), "changing torch.allclose"),
    ("from . import kernel\n", (1, 1), "relative import"),
    ("from triton.language import *\n", (1, 1), "import *"),
    ("from triton.tools.tensor_descriptor import TensorDescriptor, os\n", (1, 1), "only TensorDescriptor"),
    ("import torch\nt = torch.tensor([1]).numpy().tofile('x')\n", (2, 31), "'tofile'"),
    ("b = __builtins__['open']\n", (1, 5), "'__builtins__'"),
])
def test_gate_refuses_with_line_col_and_reason(source, where, reason):
    found = problems(source)
    assert found, source
    line, col, text = found[0]
    assert (line, col) == where and reason in text, found
    with pytest.raises(UnsafeCodeError) as info:
        check_source(source, file="kernel_llm.py")
    assert info.value.where == f"kernel_llm.py:{line}:{col}" and reason in info.value.message
    assert info.value.problems == found


def test_gate_allows_a_triton_kernel_module():
    source = (
        "from __future__ import annotations\n"
        "import math\nimport torch\nimport triton\nimport triton.language as tl\n"
        "from triton.tools.tensor_descriptor import TensorDescriptor\n"
        "HEAD_DIM = 64\n"
        "@triton.jit\n"
        "def _fwd(q_ptr, o_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    x = tl.load(q_ptr + offs, mask=offs < n, other=0.0)\n"
        "    tl.store(o_ptr + offs, tl.exp(x) * math.log2(math.e), mask=offs < n)\n"
        "def launch(q, o, *, scale):\n"
        "    n = q.numel()\n"
        "    _fwd[(triton.cdiv(n, 128),)](q, o, n, BLOCK=128, num_warps=4)\n"
        "    sm = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 1\n"
        "    return getattr(torch, 'float16'), sm\n"
    )
    assert problems(source) == []


def test_gate_reports_a_syntax_error_as_such():
    with pytest.raises(Exception, match=r"does not parse") as info:
        check_source("def f(:\n    pass\n", file="k.py")
    assert not isinstance(info.value, UnsafeCodeError) and "k.py:1" in str(info.value)


@pytest.mark.parametrize("source", ["import socket\ndef main():\n    socket.socket().connect(('127.0.0.1', 9))\n",
                                    "def main():\n    open('/tmp/attnforge-sandbox-escape', 'w').write('x')\n",
                                    "import os\ndef main():\n    return os.getcwd()\n"])
def test_refused_statically_before_anything_runs(source, tmp_path):
    start = time.monotonic()
    with pytest.raises(UnsafeCodeError):
        run_untrusted(source, import_and_call, "main", limits=FAST)
    assert time.monotonic() - start < 1  # no process was started
    assert not Path("/tmp/attnforge-sandbox-escape").exists()


# ---------------------------------------------------------------- the child process

def test_runs_code_and_returns_its_result():
    source = "import math\ndef main(x):\n    print('hello from the kernel')\n    return {'root': math.sqrt(x)}\n"
    assert run_untrusted(source, import_and_call, "main", 16.0, limits=FAST) == {"root": 4.0}


def test_endless_loop_times_out():
    start = time.monotonic()
    with pytest.raises(SandboxError, match="timed out after 2 s") as info:
        run_untrusted("def main():\n    while True:\n        pass\n", import_and_call, "main",
                      limits=Limits(timeout_s=2, memory_bytes=1 << 30))
    assert info.value.kind == "timeout"
    assert 2 <= time.monotonic() - start < 6


def test_unbounded_allocation_hits_the_memory_limit():
    source = "def main():\n    hoard = []\n    while True:\n        hoard.append(bytearray(50_000_000))\n"
    start = time.monotonic()
    with pytest.raises(SandboxError, match="exceeded the memory limit of 768 MiB") as info:
        run_untrusted(source, import_and_call, "main", limits=Limits(timeout_s=30, memory_bytes=768 << 20))
    assert info.value.kind == "memory"
    assert time.monotonic() - start < 20


def test_exception_comes_back_with_traceback_and_output():
    source = "def main():\n    print('about to fail')\n    raise ValueError('bad tile')\n"
    with pytest.raises(SandboxError, match="ValueError: bad tile") as info:
        run_untrusted(source, import_and_call, "main", limits=FAST)
    assert info.value.kind == "exception"
    assert "kernel_llm.py" in info.value.detail and "line 3" in info.value.detail
    assert "about to fail" in info.value.detail


def test_crash_by_signal_is_reported():
    # The gate would refuse this (os); the containment must still hold when something slips through.
    source = "import os, signal\ndef main():\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    with pytest.raises(SandboxError, match="killed by signal SIGSEGV") as info:
        run_isolated(source, import_and_call, "main", limits=FAST)
    assert info.value.kind == "signal"


def test_exit_without_result_is_reported():
    source = "import os\ndef main():\n    os._exit(3)\n"
    with pytest.raises(SandboxError, match="exited with code 3 without a result") as info:
        run_isolated(source, import_and_call, "main", limits=FAST)
    assert info.value.kind == "no-result"


FORK = """
import os, time
def main():
    pids = []
    try:
        for _ in range(200):
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            pids.append(pid)
    except OSError as err:
        return "refused", pids, err.errno
    return "forked", pids, 0
"""



def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie waits for init to reap it: it runs nothing


def test_forks_are_capped_and_killed_with_the_child():
    verdict, pids, errno = run_isolated(FORK, import_and_call, "main", limits=Limits(timeout_s=30, extra_tasks=16))
    if containment()["process_cap"]:  # not for root: the kernel exempts it from RLIMIT_NPROC
        # EAGAIN well before 200. The cap counts the user's threads too, which come and go, so the
        # number of forks it leaves is near extra_tasks, not exactly it.
        assert verdict == "refused" and errno == 11 and len(pids) < 100
    assert pids
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)  # the whole session was killed with the child


def test_child_has_no_credentials_and_no_privileges(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-be-seen-1234567890")
    monkeypatch.setenv("ATTNFORGE_LLM_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("ATTNFORGE_HARMLESS_SETTING", "kept")
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path / "users-cache"))
    monkeypatch.setenv("ATTNFORGE_TUNING", str(tmp_path / "users-tuning.json"))
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "users-pyc"))
    source = ("import os\n"
              "def main(target):\n"
              "    try:\n"
              "        open(target, 'w').write('x')\n"
              "        wrote = True\n"
              "    except PermissionError:\n"
              "        wrote = False\n"
              "    return {k: v for k, v in os.environ.items() if 'OPENAI' in k or 'ATTNFORGE' in k or 'PYCACHE' in k}, os.getuid(), wrote\n")
    tmp_path.chmod(0o755)
    env, uid, wrote = run_isolated(source, import_and_call, "main", str(tmp_path / "escaped.txt"), limits=FAST)
    # the caches are the child's own: nothing it writes there is loaded outside the sandbox
    cache = env.pop("ATTNFORGE_CACHE")
    assert env == {"ATTNFORGE_HARMLESS_SETTING": "kept"} and cache != str(tmp_path / "users-cache")
    if os.geteuid() == 0 and _unprivileged_user() is not None:
        assert uid == _unprivileged_user()[0] and not wrote and not (tmp_path / "escaped.txt").exists()


def _translated_module() -> str:
    """The project's own Triton translation of a library program, made self-contained the way a
    model must write it (no attnforge imports)."""
    from attnforge.backends import get_backend
    from attnforge.tl import catalog

    from attnforge.selftest.model_style import model_style

    return model_style(get_backend("triton").translate(catalog.load("gqa_fwd"), head_dim=32, head_dim_v=32).source)


def verify_in_interpreter(path: Path) -> float:
    """A job: load a kernel module with Triton's interpreter and return its error against the reference."""
    import numpy as np
    import torch

    from attnforge.backends.triton.kernel import GeneratedKernel
    from attnforge.reference import attention_reference, relative_error

    kernel = GeneratedKernel(path, interpret=True)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 37, 32, generator=g).to(torch.bfloat16)
    k = torch.randn(1, 1, 45, 32, generator=g).to(torch.bfloat16)
    v = torch.randn(1, 1, 45, 32, generator=g).to(torch.bfloat16)
    o, _ = kernel(q, k, v)
    ref, _ = attention_reference(*(np.asarray(t.float(), dtype=np.float64) for t in (q, k, v)))
    return relative_error(np.asarray(o.float()), ref)


def test_a_model_written_triton_kernel_runs_in_the_sandbox():
    source = _translated_module()
    assert problems(source) == []
    error = run_untrusted(source, verify_in_interpreter, limits=Limits(timeout_s=120))
    assert error < 2e-2
