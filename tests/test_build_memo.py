"""Build tier: a cache hit renders nothing. The build keys of kernels rendered before are kept in the cache
(render_keys.json) by what renders them; the next plan of the same kernel takes its key from there (no render, no
jinja2), and a change to anything a source is made from (a template, a kernelgen module) renders anew."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelgen.build import lifecycle, toolchain
from kernelgen.spec.parse import load_spec

pytestmark = pytest.mark.build

ARCHS = ("sm_90a",)


def test_a_second_plan_takes_its_keys_from_the_memo_and_renders_nothing(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = [load_spec("mla").kernel("deepseek_v3_kv_fp8_p64"), load_spec("mla").kernel("deepseek_v3_layer_fp8")]
    tc = toolchain.detect()
    first = lifecycle.plan(kernels, tc, ARCHS, cache_dir=tmp_path)
    assert all(p.source for p in first)
    memo = json.loads((tmp_path / "v1" / lifecycle.KeyMemo.FILE).read_text())
    assert len(memo) == 1 and sorted(next(iter(memo.values())).values()) == sorted(p.key for p in first)

    def no_render(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("rendered on a memo hit")

    monkeypatch.setattr(lifecycle, "render_variant", no_render)
    again = lifecycle.plan(kernels, tc, ARCHS, cache_dir=tmp_path)
    assert [p.key for p in again] == [p.key for p in first] and all(p.source is None for p in again)
    monkeypatch.undo()
    assert again[0].text() == first[0].source  # rendered on demand, the same source
    # another target, another toolchain salt or another cache: not the memo's keys
    other = lifecycle.plan(kernels[:1], tc, ("sm_100a",), cache_dir=tmp_path)
    assert other[0].source is not None and other[0].key != first[0].key


def test_an_edited_template_renders_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v = load_spec("mla").kernel("deepseek_v3_kv_bf16_p64")
    tc = toolchain.detect()
    first = lifecycle.plan([v], tc, ARCHS, cache_dir=tmp_path)[0]
    lifecycle.renderer_digest.cache_clear()
    monkeypatch.setattr(lifecycle, "renderer_digest", lambda: "an edited checkout")
    again = lifecycle.plan([v], tc, ARCHS, cache_dir=tmp_path)[0]
    assert again.source is not None and again.key == first.key  # rendered again (the same text: the same key)


def test_a_memo_that_cannot_be_read_or_written_only_costs_renders(tmp_path: Path) -> None:
    v = load_spec("mla").kernel("deepseek_v3_kv_bf16_p64")
    tc = toolchain.detect()
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / lifecycle.KeyMemo.FILE).write_text("{not json")
    planned = lifecycle.plan([v], tc, ARCHS, cache_dir=tmp_path)[0]
    assert planned.source is not None
    blocked = tmp_path / "blocked"
    blocked.write_text("")  # a file where the cache folder would be: the memo cannot be written
    assert lifecycle.plan([v], tc, ARCHS, cache_dir=blocked)[0].key == planned.key


def test_the_memo_keeps_only_the_newest_salts_and_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each edit of a checkout is a new salt: the memo keeps the newest SALTS tables (the current one last), each at
    most ENTRIES keys, so it does not grow without end."""
    v = load_spec("mla").kernel("deepseek_v3_kv_bf16_p64")
    tc = toolchain.detect()
    monkeypatch.setattr(lifecycle.KeyMemo, "SALTS", 3)
    for edit in range(5):
        monkeypatch.setattr(lifecycle, "renderer_digest", lambda edit=edit: f"edit {edit}")
        lifecycle.plan([v], tc, ARCHS, cache_dir=tmp_path)
    memo = json.loads((tmp_path / "v1" / lifecycle.KeyMemo.FILE).read_text())
    assert len(memo) == 3
    newest = lifecycle.KeyMemo(tc, ARCHS, False, tmp_path, lifecycle.headers_digest(lifecycle.read_headers()))
    assert list(memo)[-1] == newest.salt and newest.get(v, lifecycle.default_plan(v)) is not None
    monkeypatch.setattr(lifecycle.KeyMemo, "ENTRIES", 2)
    kernels = [load_spec("mla").kernel(n) for n in ("deepseek_v3_kv_bf16_p1", "deepseek_v3_kv_fp8_p64", "deepseek_v3_q_pe")]
    lifecycle.plan(kernels, tc, ARCHS, cache_dir=tmp_path)
    memo = json.loads((tmp_path / "v1" / lifecycle.KeyMemo.FILE).read_text())
    assert len(memo[newest.salt]) == 2
    assert not list((tmp_path / "v1").glob(".render_keys*"))  # no temporary file left behind
