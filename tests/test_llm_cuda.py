"""``--translate llm`` with the CUDA backend, on a CPU machine: the static gate for model-written
CUDA (what it refuses, where, and that attnforge's own kernels pass it), the file assembled behind
attnforge's head and compiled as the backend's own, the feedback loop (gate, compile, and the stop
when no GPU can verify), and the whole pipeline against a scripted OpenAI-compatible server on
127.0.0.1. Verification of a model's CUDA kernels runs on a GPU only (CUDA has no interpreter)."""

from __future__ import annotations

import functools
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnforge.backends import get_backend
from attnforge.backends.cuda.compile import compile_for_target
from attnforge.backends.cuda.module import KERNEL_MARK
from attnforge.errors import AttnforgeError
from attnforge.llm import cuda_gate
from attnforge.llm.budget import Budget
from attnforge.llm.errors import UnsafeCodeError
from attnforge.llm.sandbox import Limits
from attnforge.llm.stage2 import write_kernel
from attnforge.llm.tracked import Tracked
from attnforge.spec import AttentionSpec
from attnforge.targets import get_target
from attnforge.tl.parser import parse
from llm_scripts import TILES, Scripted, fenced, program
from llm_servers import clean_env  # noqa: F401 (fixture)

SPEC = AttentionSpec(heads=4, kv_heads=2, head_dim=32, dtype="fp16", causal=True)
A100 = get_target("a100")
# the model's tiles: the LLM tests' small ones, but BN = 64 (at BN = 32, D = 32 causal on sm_80, ptxas keeps one value on
# the stack at 72 registers since the unmasked tiles' copies carry no predicate; the gate refuses any spill)
CUDA_TILES = {**TILES, "BN": 64}


@pytest.fixture(autouse=True)
def _env(clean_env):
    return clean_env


@functools.lru_cache(maxsize=None)
def abi(spec: AttentionSpec = SPEC, target=A100) -> tuple[str, str]:
    """(the CUDA backend's own file for the planner's program, the kernels part a model would write)."""
    source = get_backend("cuda").translate(parse(program(spec, **CUDA_TILES)), head_dim=spec.head_dim, head_dim_v=spec.head_dim_v).source
    return source, source[source.index(KERNEL_MARK):]


def refused(kernels: str, source: str) -> list[tuple[int, int, str]]:
    with pytest.raises(UnsafeCodeError) as err:
        cuda_gate.check_cuda_kernels(kernels, source)
    return err.value.problems


# ---------------------------------------------------------------- the gate

@pytest.mark.parametrize("spec, target", [
    (SPEC, "a100"), (AttentionSpec(heads=2, head_dim=64, dtype="fp16"), "t4"),
    (AttentionSpec(heads=4, kv_heads=1, head_dim=64, dtype="bf16", window_left=50, window_right=0, softcap=20.0, alibi_slopes="auto"), "h100"),
])
def test_the_backends_own_kernels_pass_and_compile_when_assembled(spec, target):
    t = get_target(target)
    source, kernels = abi(spec, t)
    found = cuda_gate.check_cuda_kernels(kernels, source)
    assert [name for name, _ in found] == ["attn_fwd"]
    assembled = cuda_gate.assemble(cuda_gate.head_of(source), kernels, found)
    assert assembled.count(KERNEL_MARK) == 1 and assembled.startswith(cuda_gate.head_of(source).rstrip("\n"))
    (report,) = compile_for_target(assembled, t, None)  # the pipeline lint, nvcc, the SASS report
    assert "mma.sync" in report.instructions


@pytest.mark.parametrize("edit, says", [
    (("{\n", '{\n    asm volatile("trap;");\n', 1), "inline assembly"),
    (("extern", "#include <cstdio>\nextern", 1), "preprocessor line '#include <cstdio>'"),
    (("extern", "#define AF_HIDE asm\nextern", 1), "preprocessor line '#define AF_HIDE asm'"),
    (("{\n", '{\n    printf("%d", 1);\n', 1), "printf: device-side printing"),
    (("{\n", "{\n    float* p = (float*)malloc(4);\n", 1), "malloc: device-side heap"),
    (("{\n", "{\n    int* p = new int[4];\n", 1), "new: device-side heap"),
    (("{\n", "{\n    cudaDeviceSynchronize();\n", 1), "the CUDA runtime is not for kernels"),
    (("extern", "__device__ int af_counter = 0;\nextern", 1), "a __device__ variable at file scope"),
    (("extern", "__constant__ float af_table[4];\nextern", 1), "__constant__: a reserved identifier"),
    (("extern", "__global__ void helper() {}\nextern", 1), "not extern \"C\""),
    (("int Sk,", "int Sk, int extra,", 1), "header is not the ABI's"),
    (("__launch_bounds__(128)", "__launch_bounds__(256)", 1), "header is not the ABI's"),
    (("attn_fwd(", "attn_fwd2(", 1), "none of the program's kernels"),
    (("extern", "%:include <cstdio>\nextern", 1), "digraph"),
    (("{\n", "{\n    as\\\nm(\"trap;\");\n", 1), "a backslash"),
    (("extern", "template <> __device__ __forceinline__ void af_cp_wait<0>() {}\nextern", 1), "af_cp_wait outside a call"),
    (("{\n", "{\n    auto af_mma = [](float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {};\n", 1), "af_mma outside a call"),
    (("{\n", "{\n    static int calls = 0;\n", 1), "static inside a function"),
    # what a review found past an earlier gate (reproducers in the note)
    (("extern", "    #define AF_CAT(a, b) a ## b\nextern", 1), "preprocessor line"),
    (("extern", "/**/ #include <cstdio>\nextern", 1), "preprocessor line"),
    (("extern", "// a comment\r#define X\nextern", 1), "the character '\\r'"),
    (("{\n", "{\n    __CONCAT(print, f)(0);\n", 1), "__CONCAT: a reserved identifier"),
    (("{\n", "{\n    assert(Sq > 0);\n", 1), "assert: a macro of the headers"),
    (("{\n", "{\n    float* p = (float*)__builtin_malloc(4);\n", 1), "__builtin_malloc: a reserved identifier"),
    (("extern", "__attribute__((device)) int state;\nextern", 1), "__attribute__: a reserved identifier"),
    (("extern", "__device__ int state{0};\nextern", 1), "a __device__ variable at file scope"),
    (("extern", 'extern "C" { __device__ int state; }\nextern', 1), "extern: only"),
    (("extern", "namespace ns { __device__ void f() {} }\nextern", 1), "namespace"),
    (("extern", "__device__ __forceinline__ decltype(void()) g() {}\nextern", 1), "decltype"),
    (("{\n", "{\n    auto&& af_mma = [](float (&c)[4], const uint32_t (&a)[4], uint32_t, uint32_t) {};\n", 1), "af_mma outside a call"),
    (("{\n", "{\n    if (Sq < 0) <% }\n", 1), "digraphs"),
    (("extern", "    // ---- kernel attn_fwd\nextern", 1), "a kernel mark inside a line"),
    # a second review's
    (("{\n", "{\n    if (clock64() > 0) o_ptr[0] = 0;\n", 1), "clock64: a clock"),
    (("extern", "struct S { friend __device__ int* af_mma(float*); };\nextern", 1), "friend"),
    (("extern", "__device__ int (g);\nextern", 1), "a __device__ variable at file scope"),
    (("extern", "__device__ __align__(4) int g;\nextern", 1), "a __device__ variable at file scope"),
    (("{\n", "{\n    auto&& af_mma([](float (&c)[4], const uint32_t (&a)[4], uint32_t, uint32_t) {});\n", 1), "af_mma outside a call"),
])
def test_the_gate_refuses_with_the_place_and_the_reason(edit, says):
    source, kernels = abi()
    old, new, count = edit
    assert old in kernels
    problems = refused(kernels.replace(old, new, count), source)
    assert any(says in reason for _, _, reason in problems), problems
    line, col, _ = next(p for p in problems if says in p[2])
    assert line >= 1 and col >= 1


def test_what_the_gate_allows():
    source, kernels = abi()
    allowed = kernels.replace("extern", "extern __shared__ __align__(16) unsigned char af_smem_alias[];\n"
                                        "__device__ __forceinline__ float af_twice(float x) { return 2.0f * x; }\n"
                                        "// a comment with \"quotes\" and asm in it\nextern", 1)
    allowed = allowed.replace("{\n", "{\n#pragma unroll 4 // a comment\n    for (int i = 0; i < 4; ++i) {}\n#pragma unroll(2)\n"
                                      "    for (int i = 0; i < 1'000; ++i) {}\n    static constexpr float k_log2e = M_LOG2E;  // ·\n", 1)
    assert [n for n, _ in cuda_gate.check_cuda_kernels(allowed, source)] == ["attn_fwd"]


def test_the_ptx_audit_sees_what_the_tokens_hide():
    """Waits under a condition are refused by the gate; commits deleted pass the gate and the lint
    (which reads the waits) and vanish from the PTX: the audit counts them against attnforge's own."""
    from attnforge.backends.cuda.compile import compile_cubin
    from attnforge.backends.cuda.module import read_meta

    source, kernels = abi()
    own = compile_cubin(source, "sm_80")[1]
    assert cuda_gate.ptx_problems(own, own, read_meta(source)) == []
    for condition in ("if (Sq < 0)\n", "if (threadIdx.x == 0) {\n"):
        dead = re.sub(r"^(\s*)(af_cp_wait<\d+>\(\);)", rf"\1{condition}\1    \2" + ("}" if "{" in condition else ""), kernels, count=1,
                      flags=re.MULTILINE)
        assert any("af_cp_wait under a condition" in r for _, _, r in refused(dead, source))
    # nor moved into a helper or a lambda that a condition could call
    first = re.search(r"^(\s*)af_cp_wait<(\d+)>\(\);[^\n]*\n", kernels, flags=re.MULTILINE)
    for helper, call in ((f"__device__ __forceinline__ void wait_here() {{ af_cp_wait<{first[2]}>(); }}\n", "wait_here();"),
                         ("", f"auto wait_here = [&]() {{ af_cp_wait<{first[2]}>(); }};\n{first[1]}if (Sq > 0) wait_here();")):
        moved = kernels[:first.start()] + first[1] + call + "\n" + kernels[first.end():]
        moved = moved.replace('extern "C"', helper + 'extern "C"', 1)
        assert any("outside a kernel's body" in r for _, _, r in refused(moved, source)), helper or "lambda"
    uncommitted = re.sub(r"^\s*af_cp_commit\(\);[^\n]*\n", "", kernels, flags=re.MULTILINE)
    found = cuda_gate.check_cuda_kernels(uncommitted, source)
    assembled = cuda_gate.assemble(cuda_gate.head_of(source), uncommitted, found)
    problems = cuda_gate.ptx_problems(compile_cubin(assembled, "sm_80")[1], own, read_meta(assembled))
    assert any("commits cp.async groups fewer times" in p and "commit_group" in p for p in problems), problems
    fake = own.replace(".visible .entry attn_fwd(", ".global .align 4 .b8 state[4];\n.visible .entry attn_fwd(", 1) + "\n\ttrap;\n"
    fake = fake.replace(".maxntid 128, 1, 1", ".maxntid 256, 1, 1").replace("\tret;", "\tcall.uni vprintf;\n\tret;", 1)
    found = " | ".join(cuda_gate.ptx_problems(fake, own, read_meta(source)))
    for words in ("module-scope declaration in the PTX: .global", "a call to vprintf", "the PTX has trap", ".maxntid is 256"):
        assert words in found, words


def test_the_lint_reads_comments_as_the_compiler_does():
    """A "/*" inside a // comment opens nothing, and a mark that is not at the start of a line is not a mark."""
    from attnforge.backends.cuda.compile import lint
    from attnforge.errors import CompileError

    source, kernels = abi()
    first = re.search(r"^(\s*)(af_cp_wait<\d+>\(\);)[^\n]*\n", kernels, flags=re.MULTILINE)
    hidden = kernels[:first.start()] + "// /*\n" + first.group(1) + "*/ /*\n" + first.group() + "*/\n" + kernels[first.end():]
    with pytest.raises(CompileError, match="cp.async waits"):
        lint(cuda_gate.head_of(source) + hidden)


def test_feedback_on_a_huge_line_stays_small():
    from attnforge.llm.kernel_feedback import unsafe_text

    source, _ = abi()
    answer = "#" * 100_000 + "\n"
    with pytest.raises(UnsafeCodeError) as err:
        cuda_gate.check_cuda_kernels(answer, source)
    assert len(err.value.problems) <= cuda_gate.MAX_PROBLEMS + 1 and len(unsafe_text(err.value, answer, what="kernels")) < 30_000


def test_a_missing_or_doubled_kernel():
    source, kernels = abi()
    assert any("attn_fwd is missing" in r for _, _, r in refused("__device__ void f() {}\n", source))
    assert any("written 2 times" in r for _, _, r in refused(kernels + kernels, source))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_garbage_is_refused_or_passed_never_crashes(text):
    source, _ = abi()
    try:
        cuda_gate.check_cuda_kernels(text, source)
    except UnsafeCodeError as err:
        assert err.problems and all(isinstance(line, int) and line >= 1 for line, _, _ in err.problems)


# ---------------------------------------------------------------- the loop

def tracked(answers: list[str]) -> Tracked:
    return Tracked(Scripted(answers), budget=Budget())


def test_the_loop_feeds_back_the_gate_and_the_compile_and_stops_where_nothing_can_verify():
    source, kernels = abi()
    tl = program(SPEC, **CUDA_TILES)
    answers = [fenced(kernels.replace("{\n", '{\n    asm("trap;");\n', 1), "cuda"),
               fenced(kernels.replace("af_cp_wait<", "af_cp_wait_typo<", 1), "cuda"),
               fenced(kernels, "cuda")]
    llm = tracked(answers)
    result = write_kernel(llm, SPEC, A100, tl_source=tl, params=CUDA_TILES, max_rounds=5,
                          backend="cuda", program=parse(tl), limits=Limits(timeout_s=120, memory_bytes=None))
    assert [r.failure for r in result.rounds] == ["unsafe", "compile", "unverifiable"]
    assert not result.ok and "no CUDA GPU to verify them on" in result.error
    first = llm.client.requests[0][0].content
    assert first.startswith("<!-- attnforge prompt stage2_translate_cuda, version 1 -->")
    assert 'extern "C" __global__ void __launch_bounds__(128) attn_fwd(' in first and "af_mma" in first
    assert "inline assembly" in llm.client.requests[1][-1].content and "```cuda" in llm.client.requests[1][-1].content
    assert "nvcc cannot compile" in llm.client.requests[2][-1].content or "cp.async waits" in llm.client.requests[2][-1].content
    assert result.source is not None and result.source.startswith(cuda_gate.head_of(source).rstrip("\n"))


def test_the_pipeline_writes_the_cuda_file_and_says_why_it_is_not_verified(httpserver, capsys, tmp_path, monkeypatch):
    """The whole path through a scripted server on 127.0.0.1 (the GPU check pretended away, so the
    run reaches the sandbox's compile and its honest stop)."""
    pytest.importorskip("openai")
    import attnforge.llm.pipeline as pipeline
    from attnforge.cli import main
    from llm_servers import openai_body

    monkeypatch.setattr(pipeline, "gpu_present", lambda: True)
    source, kernels = abi()
    for text in (fenced(program(SPEC, **CUDA_TILES)), fenced(kernels, "cuda")):
        httpserver.expect_ordered_request("/v1/chat/completions", method="POST").respond_with_json(openai_body(text))
    out = tmp_path / "out"
    code = main(["generate", "--target", "a100", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--dtype", "fp16", "--causal",
                 "--backend", "cuda", "--out", str(out), "--llm", "openai:test-model", "--llm-base-url", httpserver.url_for("/v1"),
                 "--llm-retries", "1", "--translate", "llm", "--max-rounds", "2"])
    printed = capsys.readouterr()
    assert code != 0, printed.out
    assert "no CUDA GPU to verify them on" in printed.out + printed.err
    assert (out / "kernel_cuda.cu").read_text().startswith(cuda_gate.head_of(source).rstrip("\n"))
    report = json.loads((out / "report.json").read_text())
    assert not report["verified"] and report["llm"]["failures_by_kind"] == {"unverifiable": 1}
    # attnforge verify: the same gate and sandbox job, never an import; a tampered head is refused
    assert main(["verify", str(out)]) != 0
    assert "no CUDA GPU to verify them on" in capsys.readouterr().out
    cu = out / "kernel_cuda.cu"
    cu.write_text(cu.read_text().replace("__device__ __forceinline__", '__device__ __forceinline__ /* */', 1))
    assert main(["verify", str(out)]) != 0
    printed = capsys.readouterr()
    assert "the file's head (launch facts and prelude) is not the one attnforge writes" in printed.out + printed.err


def test_a_model_is_not_asked_to_write_split_kv_decode_kernels(monkeypatch, tmp_path):
    """Refused before any request: the model writes one-kernel prefill programs for CUDA only."""
    import attnforge.llm.pipeline as pipeline
    from attnforge.llm.pipeline import LLMOptions, run

    monkeypatch.setattr(pipeline, "gpu_present", lambda: True)
    client = Scripted([])
    decode = AttentionSpec(heads=8, kv_heads=2, head_dim=64, dtype="fp16", seqlen_q=1, seqlen_k=512)
    with pytest.raises(AttnforgeError, match="writes prefill kernels only") as err:
        run(LLMOptions("openai:scripted", translate="llm", backend="cuda"), decode, A100, tmp_path / "out", client=client)
    assert err.value.where == "--translate" and client.requests == []
