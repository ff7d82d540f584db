"""The on-disk kernel cache heals: an entry emptied, truncated, rewritten, missing a file,
without its manifest, or replaced by a file is never loaded; it is set aside (kept), reported
(a CacheRepairWarning and the new entry's report) and rebuilt on the next call."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch

import attnforge
from attnforge import api, cache, manifest
from attnforge.backends.triton.kernel import GeneratedKernel
from attnforge.cache import CacheRepairWarning, build_or_load, entry_key
from attnforge.reference import attention_reference, relative_error
from attnforge.spec import AttentionSpec

SPEC = AttentionSpec(heads=2, head_dim=16, dtype="fp16")
H100 = attnforge.get_target("h100")
SOURCE = "kernel_triton.py"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A cache holding one sound entry, built once; each test works on a copy."""
    root = tmp_path_factory.mktemp("template-cache")
    build_or_load(SPEC, H100, root=root, verify=False)
    return root


@pytest.fixture
def root(template, tmp_path) -> Path:
    copy = tmp_path / "cache"
    shutil.copytree(template, copy)
    return copy


def entry_of(root: Path) -> Path:
    return root / entry_key(SPEC, H100)


def _rewrite_same_size(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x20  # one flipped bit of one byte: only the hash can tell
    path.write_bytes(bytes(data))


def _replace_by_file(entry: Path) -> None:
    shutil.rmtree(entry)
    entry.write_text("not a directory")


def _empty(entry: Path) -> None:
    shutil.rmtree(entry)
    entry.mkdir()


CORRUPTIONS = {
    "emptied": (_empty, "no manifest.json"),
    "module-truncated": (lambda e: (e / SOURCE).write_text((e / SOURCE).read_text()[:300]), "kernel_triton.py has 300 bytes"),
    "module-garbage": (lambda e: (e / SOURCE).write_bytes(os.urandom(5000)), "kernel_triton.py has 5000 bytes"),
    "module-one-byte-changed": (lambda e: _rewrite_same_size(e / SOURCE), "kernel_triton.py does not match its SHA-256"),
    "module-deleted": (lambda e: (e / SOURCE).unlink(), "kernel_triton.py is missing"),
    "module-emptied": (lambda e: (e / SOURCE).write_text(""), "kernel_triton.py has 0 bytes"),
    "ptx-changed": (lambda e: _rewrite_same_size(next((e / "build").glob("*.ptx"))), ".ptx does not match its SHA-256"),
    "report-deleted": (lambda e: (e / "report.json").unlink(), "report.json is missing"),
    "manifest-deleted": (lambda e: (e / manifest.NAME).unlink(), "no manifest.json"),
    "manifest-garbage": (lambda e: (e / manifest.NAME).write_text("{garbage"), "manifest.json is unreadable"),
    "manifest-empty": (lambda e: (e / manifest.NAME).write_text(""), "manifest.json is unreadable"),
    "manifest-of-another-format": (lambda e: (e / manifest.NAME).write_text(json.dumps({"files": []})), "not an attnforge-manifest/1"),
    "replaced-by-a-file": (_replace_by_file, "not a directory"),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_damaged_entry_is_set_aside_reported_and_rebuilt(root, name):
    corrupt, reason = CORRUPTIONS[name]
    entry = entry_of(root)
    corrupt(entry)
    damaged_bytes = {p.relative_to(entry): p.read_bytes() for p in entry.rglob("*") if p.is_file()} if entry.is_dir() else entry.read_bytes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = build_or_load(SPEC, H100, root=root, verify=False)
    repairs = [w for w in caught if issubclass(w.category, CacheRepairWarning)]
    assert len(repairs) == 1, [str(w.message) for w in caught]
    message = str(repairs[0].message)
    assert str(entry) in message and reason in message and "set aside as" in message and "rebuilt" in message
    # the new entry is sound and says it replaced a damaged one
    assert module == entry / SOURCE and manifest.damage(entry, (SOURCE,)) is None
    report = json.loads((entry / "report.json").read_text())
    aside = [p for p in root.iterdir() if p.name.startswith(f"damaged-{entry.name}-")]
    assert len(aside) == 1
    assert reason in report["cache"]["rebuilt"]["reason"] and report["cache"]["rebuilt"]["damaged_copy"] == str(aside[0])
    assert "## Cache" in (entry / "report.md").read_text() and str(aside[0]) in (entry / "report.md").read_text()
    # the damaged copy is kept as it was, for a post-mortem
    if isinstance(damaged_bytes, bytes):
        assert aside[0].read_bytes() == damaged_bytes
    else:
        assert {p.relative_to(aside[0]): p.read_bytes() for p in aside[0].rglob("*") if p.is_file()} == damaged_bytes
    # no half-built directory is left, and the next call loads without a word
    assert not [p for p in root.iterdir() if p.name.startswith(".")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert build_or_load(SPEC, H100, root=root, verify=False) == module


def test_the_rebuilt_kernel_runs(root):
    entry = entry_of(root)
    (entry / SOURCE).write_text("raise SystemExit('a damaged module must never be imported')\n")
    with pytest.warns(CacheRepairWarning):
        module = build_or_load(SPEC, H100, root=root, verify=False)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 19, 16, generator=g).to(torch.float16) for _ in range(3))
    o, _ = GeneratedKernel(module, interpret=True)(q, k, v)
    ref, _ = attention_reference(*(t.double().numpy() for t in (q, k, v)), scale=0.25)
    assert relative_error(o.double().numpy(), ref) < 5e-3


def test_attention_heals_a_damaged_entry_on_its_next_call(tmp_path, monkeypatch):
    """Through attnforge.attention (verification is not the point here: it is skipped)."""
    monkeypatch.setenv("ATTNFORGE_CACHE", str(tmp_path))
    monkeypatch.setattr(api, "build_or_load", lambda *a, **kw: build_or_load(*a, **kw, verify=False))
    monkeypatch.setattr(api, "_loaded", {})
    monkeypatch.setattr(api, "_dispatch", {})
    q = torch.randn(1, 2, 23, 16).to(torch.float16)
    first = attnforge.attention(q, q, q)
    entries = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1
    (entries[0] / SOURCE).write_text("")
    monkeypatch.setattr(api, "_loaded", {})  # a new process
    monkeypatch.setattr(api, "_dispatch", {})
    with pytest.warns(CacheRepairWarning, match="kernel_triton.py has 0 bytes"):
        again = attnforge.attention(q, q, q)
    assert torch.equal(first, again)


def test_loading_a_sound_entry_hashes_it_once_per_process(root, monkeypatch):
    calls = []
    real = manifest._sha256
    monkeypatch.setattr(manifest, "_sha256", lambda p: calls.append(p) or real(p))
    monkeypatch.setattr(manifest, "_verified", set())
    monkeypatch.setattr(cache, "generate", lambda *a, **kw: pytest.fail("a sound entry is rebuilt"))
    files = len(json.loads((entry_of(root) / manifest.NAME).read_text())["files"])
    build_or_load(SPEC, H100, root=root, verify=False)
    assert len(calls) == files >= 5  # each file hashed once
    start = time.perf_counter()
    for _ in range(20):
        build_or_load(SPEC, H100, root=root, verify=False)
    assert len(calls) == files  # later loads only stat the files
    assert (time.perf_counter() - start) / 20 < 0.05


def test_a_file_changed_after_a_check_is_caught_by_the_next(root):
    build_or_load(SPEC, H100, root=root, verify=False)
    _rewrite_same_size(entry_of(root) / SOURCE)
    os.utime(entry_of(root) / SOURCE, ns=(1, 1))  # a new mtime: the stat no longer matches the verified one
    with pytest.warns(CacheRepairWarning, match="does not match its SHA-256"):
        build_or_load(SPEC, H100, root=root, verify=False)


def test_two_threads_healing_one_entry_agree(root):
    entry = entry_of(root)
    (entry / SOURCE).write_text("garbage")
    results: list[Path] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheRepairWarning)
        threads = [threading.Thread(target=lambda: results.append(build_or_load(SPEC, H100, root=root, verify=False))) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    assert results == [entry / SOURCE] * 2
    assert manifest.damage(entry, (SOURCE,)) is None
    others = [p.name for p in root.iterdir() if p != entry]
    assert others and all(name.startswith(f"damaged-{entry.name}-") for name in others)  # one or two set aside, no half build
