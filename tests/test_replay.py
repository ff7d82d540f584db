"""Replaying a dispatch-cache key's recorded launches (backends/triton/replay.py), without a GPU.

A recording stand-in for each direct launch keeps what it was handed: a replay must hand every
launch the arguments the recorded call's launcher built, with the call's tensors, fresh scratch
buffers (one per buffer, shared between the launches that shared it) and the tensors behind
descriptors put in, and must refuse to record what it could not replay faithfully.
"""

from __future__ import annotations

import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from attnforge.backends.triton.launching import Recording, scratch
from attnforge.backends.triton.replay import Replay


def _recording(launches, scratch_buffers=()) -> Recording:
    rec = Recording()
    rec.launches.extend(launches)
    rec.scratch.update(id(t) for t in scratch_buffers)
    return rec


class FakeDirect:
    """Stands for ``DirectLaunch``: records (grid, args); descriptors at ``positions``."""

    def __init__(self, positions: tuple[int, ...] = ()):
        self.positions, self.calls = positions, []

    def __call__(self, grid, args, device):
        self.calls.append((grid, list(args), device))


def _call(n_q: int = 16):
    q = torch.randn(1, 2, n_q, 32)
    k, v = torch.randn(1, 2, 24, 32), torch.randn(1, 2, 24, 32)
    o, lse = torch.empty(1, 2, n_q, 32), torch.empty(1, 2, n_q)
    return q, k, v, o, lse


def test_a_replay_puts_the_new_calls_tensors_where_the_recorded_ones_were():
    first, second = _call(), _call()
    partial, combine = FakeDirect(positions=(5,)), FakeDirect()
    q, k, v, o, lse = first
    buf = torch.empty(1, 4, 2, 16, 32)  # split-KV partial outputs: written by one kernel, read by the next
    desc = TensorDescriptor(k, list(k.shape), list(k.stride()), [1, 1, 16, 32])
    trace = [(partial, (8,), (q, k, v, buf, lse, desc, 7, 0.5)), (combine, (2,), (buf, o, lse, 7))]
    replay = Replay.record(_recording(trace, [buf]), first, device=0)
    assert replay is not None
    replay(second)
    (grid1, args1, _), (grid2, args2, _) = partial.calls[0], combine.calls[0]
    q2, k2, v2, o2, lse2 = second
    assert grid1 == (8,) and grid2 == (2,)
    assert args1[0] is q2 and args1[1] is k2 and args1[2] is v2 and args1[4] is lse2 and args2[1] is o2 and args2[2] is lse2
    assert args1[5] is k2  # a descriptor's position gets its tensor: the direct launch encodes the map
    assert args1[6:] == [7, 0.5] and args2[3] == 7
    fresh = args1[3]
    assert fresh is args2[0] and fresh is not buf  # one new buffer per call, shared like the recorded one
    assert fresh.shape == buf.shape and fresh.stride() == buf.stride() and fresh.dtype == buf.dtype


def test_a_view_of_a_calls_tensor_is_made_again_on_the_next_calls():
    """A split-KV launch of one split passes o.unsqueeze(1) as the partial kernel's output (triton/launcher.py):
    the replay makes that view of the new call's o, as it would any view of all of a call tensor's elements."""
    first, second = _call(), _call()
    q, k, v, o, lse = first
    trace = [(FakeDirect(), (4,), (q.view(2, -1, 32), k, v, o.unsqueeze(1), lse.unsqueeze(1), 7))]
    replay = Replay.record(_recording(trace, []), first, device=0)
    assert replay is not None
    replay(second)
    ((_, args, _),) = trace[0][0].calls
    q2, _, _, o2, lse2 = second
    assert args[3].data_ptr() == o2.data_ptr() and args[3].shape == o.unsqueeze(1).shape and args[3].stride() == o.unsqueeze(1).stride()
    assert args[4].data_ptr() == lse2.data_ptr() and args[0].data_ptr() == q2.data_ptr() and args[0].shape == (2, q.numel() // 64, 32)


def test_a_launch_through_the_jit_is_not_replayed():
    call = _call()
    assert Replay.record(_recording([(FakeDirect(), (1,), call), (None, (1,), call)]), call, device=0) is None


@pytest.mark.parametrize("made_by_launcher", ["part_of_input", "copy_of_input", "descriptor_over_scratch", "descriptor_not_at_a_descriptor_position"])
def test_what_a_replay_could_get_wrong_is_not_recorded(made_by_launcher):
    q, k, v, o, lse = call = _call()
    registered = []
    if made_by_launcher == "copy_of_input":  # a buffer of its own, but holding q's values: a fresh one would not
        args = (q.transpose(2, 3).contiguous(), k, v, o, lse)
        direct = FakeDirect()
    elif made_by_launcher == "part_of_input":
        args = (q[:, 1:], k, v, o, lse)  # a view of some of q's elements: where they lie in another call's q is not recorded
        direct = FakeDirect()
    elif made_by_launcher == "descriptor_over_scratch":
        buf = scratch_buffer = torch.empty(4, 32)
        registered = [scratch_buffer]
        args = (q, TensorDescriptor(buf, [4, 32], [32, 1], [4, 32]))
        direct = FakeDirect(positions=(1,))
    else:
        args = (q, TensorDescriptor(k, list(k.shape), list(k.stride()), [1, 1, 16, 32]))
        direct = FakeDirect(positions=())
    assert Replay.record(_recording([(direct, (1,), args)], registered), call, device=0) is None


def test_scratch_is_noted_only_while_a_call_is_recorded():
    from attnforge.backends.triton.launching import recording

    buf = torch.empty(3)
    assert scratch(buf) is buf
    rec = Recording()
    token = recording.set(rec)
    try:
        scratch(buf)
    finally:
        recording.reset(token)
    assert rec.scratch == {id(buf)}


def test_launch_hooks_of_either_kind_are_seen(monkeypatch):
    from triton import knobs
    from triton.knobs import HookChain

    from attnforge.backends.triton.launching import launch_hooked

    assert not launch_hooked()
    chain = HookChain()
    chain.add(lambda metadata: None)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", chain)  # a profiler that only watches launches end
    assert launch_hooked()
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", HookChain(reversed=True))
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: None)  # assigned, as older Triton code does
    assert launch_hooked()


def test_a_call_that_passes_one_tensor_twice_is_not_recorded():
    q, k, _, o, lse = _call()
    call = (q, k, k, o, lse)  # k is v: a later call with two tensors could not tell which position took which
    assert Replay.record(_recording([(FakeDirect(), (1,), call)]), call, device=0) is None
