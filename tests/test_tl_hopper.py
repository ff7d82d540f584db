"""The Hopper form of TL (docs/TL.md, section 11): the reference program parses, prints back,
checks clean and interprets to the float64 reference; the checker rejects each broken rule with
its code, position and numbers; the interpreter catches missing waits, wrong phases, wrong stages
and early reads of an asynchronous GEMM's result."""

from __future__ import annotations

import pytest

from attnforge.errors import TLRuntimeError, TLSyntaxError
from attnforge.tl import catalog
from attnforge.tl import nodes as n
from attnforge.tl.checker import check
from attnforge.tl.harness import Shape, run_and_compare
from attnforge.tl.parser import parse
from attnforge.tl.printer import print_program

NAME = "hopper_gqa_causal_fwd"
SOURCE = catalog.source(NAME)
# Several ring rounds (7 K/V tiles over 2 stages) and partial tiles (200 = 3 * 64 + 8 = 6 * 32 + 8).
SHAPE = Shape(1, 2, 1, 200, 200, 32, 32)
SMALL = {"BM": 64, "BN": 32, "stages": 2}


def edit(old: str, new: str, count: int = 1, text: str = SOURCE) -> str:
    assert text.count(old) >= count, old
    return text.replace(old, new, count)


def line_of(needle: str, text: str = SOURCE) -> int:
    return text[: text.index(needle)].count("\n") + 1


def errors(text: str, target: str | None = None, **kw) -> list:
    return check(parse(text), target, head_dim=kw.pop("head_dim", 128), **kw).errors


def only(findings: list, code: str):
    picked = [f for f in findings if f.code == code]
    assert picked, [str(f) for f in findings]
    return picked[0]


# ---------------------------------------------------------------- the reference program


def test_the_reference_program_parses_and_prints_back() -> None:
    program = parse(SOURCE)
    assert parse(print_program(program)) == program
    (kernel,) = program.kernels
    compute, load = n.roles(kernel)
    assert (compute.name, compute.regs, load.name, load.regs) == ("compute", None, "load", 24)
    ks = next(s for s in kernel.body if isinstance(s, n.Allocate) and s.name == "Ks")
    assert ks.ring == n.Name("stages") and ks.level == "shared"
    for name in ("k_free", "v_free"):
        free = next(s for s in kernel.body if isinstance(s, n.Allocate) and s.name == name)
        assert free.level == n.BARRIER and free.shape == (n.Name("stages"),) and free.count is None
    copy_k = next(s for s in n.walk(load.body) if isinstance(s, n.Copy) and s.src == "K")
    assert copy_k.signal == n.BarrierRef("k_ready", copy_k.dst_index) and copy_k.dst == "Ks"
    gemm = next(s for s in n.walk(compute.body) if isinstance(s, n.Gemm))
    assert gemm.is_async and gemm.b == "Ks" and gemm.b_index is not None and gemm.b_trans
    # walk descends into roles
    assert {type(s) for s in n.walk(kernel.body)} >= {n.Role, n.Wait, n.WaitGemm, n.Arrive, n.Loop}


def test_every_new_statement_round_trips() -> None:
    text = edit("Allocate q_ready in barrier", "Allocate q_ready in barrier count 1\nAllocate spare in barrier (2) count stages")
    program = parse(text)
    printed = print_program(program)
    assert "Allocate spare in barrier (2) count stages" in printed and "Allocate q_ready in barrier count 1" in printed
    assert parse(printed) == program


@pytest.mark.parametrize("target", ["h100", "h200", None])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_reference_program_checks_clean(target, head_dim) -> None:
    result = check(parse(SOURCE), target, head_dim=head_dim)
    assert not [f for f in result.findings if f.severity != "info"], [str(f) for f in result.findings]
    (res,) = result.resources
    # 2 stages of K and V, Q, and 7 barriers of 8 bytes; 9 warps (8 compute + 1 load).
    tile = 128 * head_dim * 2
    assert res.smem_bytes == tile + 2 * 2 * tile + 9 * 8  # Q, the K and V rings, q_ready and 2 slots of k_ready, v_ready, k_free, v_free
    assert res.smem_breakdown["k_ready"] == 16 and res.threads == 9 * 32


def test_the_reference_program_interprets_to_the_reference() -> None:
    report = run_and_compare(parse(SOURCE), SHAPE, params=SMALL)
    assert report.passed, report.line()
    assert report.programs == 8  # 4 query tiles x 2 heads
    bf16 = run_and_compare(parse(SOURCE), Shape(1, 2, 1, 77, 130, 16, 16), params={"BM": 64, "BN": 16, "stages": 3}, dtype="bf16")
    assert bf16.passed, bf16.line()


# ---------------------------------------------------------------- the checker


def test_a_ring_too_large_for_shared_memory() -> None:
    text = edit("param BM = 128, BN = 128, warps = 8, stages = 2", "param BM = 128, BN = 128, warps = 8, stages = 8")
    f = only(errors(text, "h100", head_dim=256), "TL503")
    # Qs 64 KiB, Ks and Vs 8 x 64 KiB each: 1088 KiB and 224 bytes of barriers
    assert "shared memory 1088 KiB exceeds h100's 227 KiB per block" in f.message
    assert "Ks 512 KiB" in f.message and "k_ready 64 B" in f.message


def test_a_read_before_its_wait() -> None:
    text = edit("        Wait k_ready[j % stages] phase (j // stages) % 2\n", "")
    f = only(errors(text, "h100"), "TL416")
    assert f.message == "Ks[j % stages] is read before its barrier k_ready[j % stages] is waited on"
    assert f.line == line_of("Compute GEMM Qs, Ks[j % stages]^T and get S async", text)
    assert "Wait k_ready[j % stages] phase" in f.hint
    # Q: a plain shared tile that TMA fills needs its Wait too.
    g = only(errors(edit("    Wait q_ready phase 0\n", "")), "TL416")
    assert g.message == "Qs is read before its barrier q_ready is waited on"


def test_a_wait_guards_the_slot_it_names_however_it_is_written() -> None:
    """TL416 compares slots, not text: at stages = 2, k_ready[j % 2] is k_ready[j % stages]."""
    wait = "Wait k_ready[j % stages] phase (j // stages) % 2"
    assert not [str(e) for e in errors(edit(wait, "Wait k_ready[j % 2] phase (j // 2) % 2", count=2), "h100")]
    wrong = errors(edit(wait, "Wait k_ready[(j + 1) % stages] phase (j // stages) % 2", count=2), "h100")
    assert only(wrong, "TL416").message == "Ks[j % stages] is read before its barrier k_ready[j % stages] is waited on"
    # Equal at the probe's first trip only (j = 0) is not the same slot.
    assert only(errors(edit(wait, "Wait k_ready[0] phase (j // stages) % 2", count=2), "h100"), "TL416")


def test_a_wait_in_an_earlier_loop_does_not_guard_a_read_in_a_later_one() -> None:
    second = SOURCE.index("    for j = min(")
    text = SOURCE[:second] + SOURCE[second:].replace("        Wait k_ready[j % stages] phase (j // stages) % 2\n", "", 1)
    assert only(errors(text, "h100"), "TL416").line > line_of("    for j = min(")


def test_a_gemm_role_must_own_whole_warpgroups() -> None:
    text = edit("role compute warps 0 : warps", "role compute warps 2 : 6")
    found = [f for f in errors(text, "h100") if f.code == "TL509"]
    assert any("must own warps 0 : warps (0 : 8)" in f.message for f in found), [str(f) for f in found]
    text = edit("param BM = 128, BN = 128, warps = 8", "param BM = 128, BN = 128, warps = 6")
    f = only(errors(text, "h100"), "TL509")
    assert "owns warps 0 : 6: a warpgroup is 4 consecutive warps starting at a multiple of 4" in f.message


def test_roles_must_follow_each_other() -> None:
    text = edit("role load warps warps : warps + 1 regs 24", "role load warps 4 : 5 regs 24")
    f = only(errors(text, "h100"), "TL509")
    assert f.message == "role load starts at warp 4, but the role before it ends at warp 8: the ranges overlap"


def test_register_budgets() -> None:
    f = only(errors(edit("regs 24", "regs 250")), "TL510")
    assert "250 registers per thread; setmaxnreg takes a multiple of 8 from 24 to 256" in f.message and f.hint == "write regs 248"
    # 8 compute warps at 240 and 4 load warps at 256: 61440 + 32768 > 65536.
    text = edit("role load warps warps : warps + 1 regs 24", "role load warps warps : warps + 4 regs 256")
    text = edit("role compute warps 0 : warps", "role compute warps 0 : warps regs 240", text=text)
    f = only(errors(text, "h100"), "TL510")
    assert "need 94208 registers (compute 256 x 240, load 128 x 256 threads x registers), more than the 65536 of an SM" in f.message
    # Workers that leave the default role fewer than 24 per thread.
    text = edit("role load warps warps : warps + 1 regs 24", "role load warps warps : warps + 8 regs 256")
    assert "leaving fewer than 24 per thread for compute" in only(errors(text, "h100"), "TL510").message


def _decode_text(head_dim: int, params: dict) -> str:
    from attnforge.plan.hopper import hopper_decode_source
    from attnforge.spec import AttentionSpec
    from attnforge.targets import get_target

    spec = AttentionSpec(heads=32, kv_heads=8, head_dim=head_dim, dtype="bf16", seqlen_q=1, seqlen_k=4096)
    return hopper_decode_source(spec, get_target("h200"), dict(BM=64, BN=64 if head_dim <= 128 else 32, warps=4, **params))


def test_occupancy_gives_each_program_its_share_of_the_sm() -> None:
    """param occupancy = N: N blocks' shared memory (with 1 KiB reserved each) and threads fit an SM
    (TL511), and the registers a thread may hold are the file over N blocks of whole warpgroups (TL504)."""
    assert not check(parse(_decode_text(128, dict(stages=2, occupancy=2))), "h200", head_dim=128).errors  # 2 x 81 KiB
    f = only(errors(_decode_text(128, dict(stages=4, occupancy=2)), "h200"), "TL511")  # Q 16 + 4 x 32 KiB, twice
    assert "occupancy = 2 needs 2 x (144 KiB + 1 KiB reserved) = 290 KiB of shared memory, more than h200's 228 KiB an SM" in f.message
    assert "occupancy = 5: the programs resident on an SM, 1 to 4" in only(errors(_decode_text(128, dict(stages=2, occupancy=5)), "h200"), "TL511").message
    # D = 256: the 64 x 256 fp32 accumulator alone is 128 registers a thread; two programs of 8 warps leave 128
    f = only(errors(_decode_text(256, dict(stages=2, occupancy=2)), "h200", head_dim=256), "TL504")
    assert "more than the 128 a thread may hold with occupancy = 2" in f.message and "leave occupancy out" in f.hint
    assert not check(parse(_decode_text(256, dict(stages=2))), "h200", head_dim=256).errors


def test_the_compute_role_spills_past_its_budget() -> None:
    text = edit("role compute warps 0 : warps", "role compute warps 0 : warps regs 64")
    f = only(errors(text, "h100"), "TL504")
    assert "in role compute, more than its budget of 64" in f.message


def test_the_hopper_form_needs_sm_90() -> None:
    f = only(errors(SOURCE, "a100"), "TL508")
    assert "a100 (sm_80)" in f.message and "sm_90" in f.hint
    assert f.line == line_of("Allocate Ks in shared")  # the first statement of the Hopper form
    # once per kernel
    assert len([e for e in errors(SOURCE, "a100") if e.code == "TL508"]) == 1
    assert not [e for e in errors(SOURCE, "b200") if e.code == "TL508"]  # TMA and tcgen05


def test_a_wrong_phase_is_reported_with_its_iteration() -> None:
    text = edit("Wait k_free[j % stages] phase (j // stages + 1) % 2", "Wait k_free[j % stages] phase (j // stages) % 2")
    f = only(errors(text, "h100"), "TL418")
    assert f.message.startswith("in role load, at j = 0 (the first program instance) this is Wait number 1 on k_free[0], which must wait for phase 1")
    assert "Arrive releases it, so it starts free" in f.message
    text = edit("phase (j // stages) % 2", "phase j % 2", count=1)  # right for stages = 1 only
    f = only(errors(text, "h100"), "TL418")
    assert "at j = 1" in f.message and "Wait number 1 on k_ready[1], which must wait for phase 0, but it waits for phase 1" in f.message


def test_an_async_gemm_result_is_read_only_after_its_wait() -> None:
    text = edit("        Wait GEMM S\n", "")
    f = only(errors(text, "h100"), "TL417")
    assert f.message == f"S is read before the asynchronous GEMM at line {line_of('and get S async')} that writes it is waited on"
    text = edit("        Wait GEMM O_acc\n", "")  # the next iteration's rescale would read it while it runs
    assert "writing O_acc is still pending at the end of the loop over j" in only(errors(text, "h100"), "TL417").message
    assert "no asynchronous GEMM writes P" in only(errors(edit("Wait GEMM S", "Wait GEMM P")), "TL417").message


def test_ring_and_barrier_indices() -> None:
    f = only(errors(edit("Qs, Ks[j % stages]^T", "Qs, Ks^T")), "TL414")
    assert f.message == "Ks is a ring of 2 tiles; name one stage"
    f = only(errors(edit("Qs, Ks[j % stages]^T", "Qs[0], Ks[j % stages]^T")), "TL414")
    assert f.message == "Qs[0] indexes Qs, which is not a ring"
    f = only(errors(edit("to shared Ks[j % stages]", "to shared Ks[j]")), "TL414")
    assert "Ks[j] is Ks[2] in the last program instance and loop iteration, outside its 2 slots" in f.message
    f = only(errors(edit("Arrive v_free[j % stages]", "Arrive v_free")), "TL415")
    assert f.message == "v_free is a row of barriers"
    f = only(errors(edit("Arrive v_free[j % stages]", "Arrive Ks[j % stages]")), "TL415")
    assert f.message == "Ks is a shared tile, not a barrier"
    f = only(errors(edit("from global to shared Qs async q_ready", "from global to register Qr async q_ready")), "TL415")
    assert "a global -> register Copy cannot be asynchronous" in f.message


def test_a_barrier_nobody_signals() -> None:
    text = edit("        Arrive v_free[j % stages]\n", "", count=2)
    f = only(errors(text), "TL419")
    assert f.line == line_of("Wait v_free", text)
    assert "no async Copy and no Arrive signals v_free" in f.message


def test_roles_stand_alone_at_the_top_level() -> None:
    f = only(errors(edit("role compute warps 0 : warps", "Compute Multiply O, 2\nrole compute warps 0 : warps")), "TL420")
    assert f.message == "a kernel with roles has only allocations outside them"
    f = only(errors(edit("    Allocate m_i in register", "    Allocate Extra in shared (BM, D) : qkv\n    Allocate m_i in register")), "TL420")
    assert f.message == "the shared allocation Extra is inside role compute"
    with pytest.raises(TLSyntaxError, match="role inner is inside role compute"):
        parse(edit("    Allocate m_i in register", "    role inner warps 0 : 1\n    end\n    Allocate m_i in register"))
    with pytest.raises(TLSyntaxError, match="role inner is inside the loop over j"):
        parse(edit("        Wait k_free", "        role inner warps 0 : 1\n        end\n        Wait k_free"))


# ---------------------------------------------------------------- the interpreter


def run(text: str, shape: Shape = SHAPE):
    return run_and_compare(parse(text), shape, params=SMALL)


def test_a_dropped_wait_reads_an_empty_stage() -> None:
    with pytest.raises(TLRuntimeError, match=r"role compute reads Ks\[0\] before any copy has landed in it") as info:
        run(text := edit("        Wait k_ready[j % stages] phase (j // stages) % 2\n", ""))
    assert info.value.where.line == line_of("Compute GEMM Qs, Ks[j % stages]^T", text)


def test_a_wrong_phase_deadlocks_or_reads_early() -> None:
    with pytest.raises(TLRuntimeError) as info:
        run(edit("Wait k_free[j % stages] phase (j // stages + 1) % 2", "Wait k_free[j % stages] phase (j // stages) % 2"))
    message = info.value.message
    assert "deadlock: every unfinished role is blocked" in message
    assert "role compute waits at line" in message and "on k_ready[0] for phase 0 (0 phase(s) completed, 0 of 1 arrival(s)" in message
    assert "role load waits at line" in message and "on k_free[0] for phase 0" in message
    # A consumer waiting for the wrong parity passes at once on a fresh slot and reads it empty.
    with pytest.raises(TLRuntimeError, match="before any copy has landed"):
        run(edit("Wait k_ready[j % stages] phase (j // stages) % 2", "Wait k_ready[j % stages] phase (j // stages + 1) % 2"))


def test_a_wrong_stage_index_reads_a_stage_it_did_not_wait_for() -> None:
    with pytest.raises(TLRuntimeError, match=r"reads Ks\[1\] before any copy has landed"):
        run(edit("Qs, Ks[j % stages]^T", "Qs, Ks[(j + 1) % stages]^T"))
    # With the slot filled (the producer ran ahead), the stale stage gives a wrong answer instead.
    text = edit("Qs, Ks[j % stages]^T", "Qs, Ks[(j + 1) % stages]^T", count=2)
    text = edit("Wait k_ready[j % stages] phase (j // stages) % 2", "Wait k_ready[(j + 1) % stages] phase (j // stages) % 2\n"
                "        Wait k_ready[j % stages] phase (j // stages) % 2", count=2, text=text)
    try:
        report = run(text)
    except TLRuntimeError as err:  # or the reordered waits deadlock: caught either way
        assert "deadlock" in err.message or "before any copy" in err.message
    else:
        assert not report.passed, report.line()


def test_a_read_of_a_pending_gemm_result() -> None:
    with pytest.raises(TLRuntimeError, match=r"S is read before the asynchronous GEMM at line \d+ that writes it has finished"):
        run(edit("        Wait GEMM S\n", ""))


def test_a_copy_over_a_stage_a_pending_gemm_reads() -> None:
    # wgmma reads its shared operands until it is waited for: a TMA copy may not replace one before.
    text = edit("        Compute GEMM Qs, Ks[j % stages]^T and get S async\n",
                "        Compute GEMM Qs, Ks[j % stages]^T and get S async\n"
                "        Copy K (BN, D) at [j, 0] from global to shared Ks[j % stages] async k_ready[j % stages]\n")
    with pytest.raises(TLRuntimeError, match=r"this copy overwrites Ks\[0\] while the asynchronous GEMM at line \d+ \(role compute\) still reads it"):
        run(text)


def test_no_barrier_kernels_run_as_before() -> None:
    report = run_and_compare(catalog.load("gqa_causal_fwd"), Shape(1, 2, 1, 40, 50, 16, 16), params={"BM": 16, "BN": 16})
    assert report.passed and report.loop_trips > 0


# ---------------------------------------------------------------- races a single schedule hides (review, 2026-12-01)


def test_a_producer_that_does_not_wait_for_free_slots_is_refused() -> None:
    for free in ("k_free", "v_free"):
        text = edit(f"        Wait {free}[j % stages] phase (j // stages + 1) % 2\n", "")
        assert f"nobody waits on {free}" in only(errors(text, "h100"), "TL419").message


def test_a_slot_released_before_its_gemm_is_done_races() -> None:
    # the Arrive moves above the PV GEMM's wait: the checker's rules pass it, the producer-first run refills V under its reader
    text = edit("        Wait GEMM O_acc\n        Arrive v_free[j % stages]\n", "        Arrive v_free[j % stages]\n        Wait GEMM O_acc\n", count=2)
    assert not [f for f in errors(text, "h100") if f.code.startswith("TL4")]
    with pytest.raises(TLRuntimeError, match="roles race|overwrites"):
        run(text)
    # K's slot given back before the QK^T GEMM reading it is done: the producer refills K under its reader
    text = edit("        Wait GEMM S\n        Arrive k_free[j % stages]\n", "        Arrive k_free[j % stages]\n        Wait GEMM S\n", count=2)
    assert not [f for f in errors(text, "h100") if f.code.startswith("TL4")]
    with pytest.raises(TLRuntimeError, match="roles race|overwrites"):
        run(text)


def test_writing_an_operand_of_a_pending_gemm() -> None:
    text = edit("Compute GEMM P, Vs[j % stages] and accumulate O_acc async\n",
                "Compute GEMM P, Vs[j % stages] and accumulate O_acc async\n        Compute Multiply P, scale\n", count=2)
    assert "P is written while the asynchronous GEMM" in errors(text, "h100")[0].message


def test_a_gemm_reissued_before_its_wait() -> None:
    line = "Compute GEMM Qs, Ks[j % stages]^T and get S async\n"
    text = edit(line, line + "        " + line, count=2)
    assert any("written by a second asynchronous GEMM" in f.message for f in errors(text, "h100"))


def test_an_arrival_count_past_the_mbarrier_field() -> None:
    text = edit("Allocate v_free in barrier (stages)", "Allocate v_free in barrier (stages) count 2000000")
    assert "at most 1048575" in only(errors(text, "h100"), "TL415").message


def test_a_role_cannot_use_another_roles_registers() -> None:
    text = edit("    Copy Q (BM, D) at [m, 0] from global to shared Qs async q_ready\n",
                "    Copy Q (BM, D) at [m, 0] from global to shared Qs async q_ready\n    Compute Multiply O_acc, scale\n")
    assert "O_acc is a register tile of role compute; role load cannot see it" in only(errors(text, "h100"), "TL420").message


@pytest.mark.parametrize("old, new, says", [
    ("Allocate Ks in shared (BN, D) : qkv ring stages", "Allocate Ks in shared (BN, D) : qkv ring 1000000000000", "ring Ks of 1000000000000 stages"),
    ("Allocate k_ready in barrier (stages)", "Allocate k_ready in barrier (60000000)", "work budget"),
])
def test_a_huge_ring_or_barrier_row_is_refused_not_allocated(old: str, new: str, says: str) -> None:
    """A mutated ring size once grew the interpreter's tile dictionary until the process was killed."""
    with pytest.raises(TLRuntimeError, match=says):
        run_and_compare(parse(edit(old, new)), SHAPE, params=SMALL, max_steps=20_000)


def test_a_repeated_wait_names_the_same_phase() -> None:
    """A second Wait on a slot with nothing signalled in between returns at once: same phase, no finding."""
    again = "        Wait k_ready[j % stages] phase (j // stages) % 2\n"  # (right after the first: once K's slot is given back,
    # the load role may refill it and k_ready completes another phase)
    text = edit(again, again + again, count=2)
    assert not [str(e) for e in errors(text, "h100")]
    assert run(text).passed
    flipped = edit(again, again + again.replace("(j // stages)", "(j // stages + 1)"))
    f = only(errors(flipped, "h100"), "TL418")
    assert "Wait number 1 on k_ready[0], which must wait for phase 0, but it waits for phase 1" in f.message
