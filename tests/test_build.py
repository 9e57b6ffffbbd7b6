"""Build tier (nvcc, no GPU): JIT build lifecycle, cache hits, locking, failures, load + checked call."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kernelgen.build import lifecycle as build_mod
from kernelgen.build import toolchain
from kernelgen.build.lifecycle import build, kernels_dir
from kernelgen.cli import main
from kernelgen.errors import BuildError, LayoutMismatch
from kernelgen.runtime.loader import load
from kernelgen.spec.parse import load_spec
from kernelgen.codegen.launch import resolve
from kernelgen.codegen.render import render_variant
from kernelgen.spec.variant import Launch

pytestmark = pytest.mark.build

ARCH = ("sm_90a",)
NAME = "dsv4_indexer_fp8_p64"


def variant(name: str = NAME):
    return load_spec("dsv4_indexer").variant(name)


def test_build_publishes_once_then_hits_the_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [a, twin] = build([variant(), variant()], toolchain.detect(), ARCH, cache_dir)  # named twice: built once
    assert twin.directory == a.directory
    assert a.library.is_file() and a.source.is_file() and (a.directory / "manifest.json").is_file()
    assert a.directory.parent == kernels_dir(cache_dir)
    assert not list(kernels_dir(cache_dir).glob(".staging-*"))

    def no_ninja(*args: object) -> None:
        raise AssertionError("a cached variant must not be rebuilt")

    monkeypatch.setattr(build_mod, "run_ninja", no_ninja)
    [again] = build([variant()], toolchain.detect(), ARCH, cache_dir)
    assert again.directory == a.directory


def test_loaded_op_checks_tensors_before_launch(cache_dir: Path) -> None:
    op = load("dsv4_indexer", NAME, arch="sm_90a")
    assert op.layout.page_bytes == 8448 and str(op.artifact.directory).startswith(str(cache_dir))
    x, w = torch.randn(4, 128).bfloat16(), torch.randn(128)
    freqs, pos, loc = torch.randn(16, 64), torch.zeros(4, dtype=torch.long), torch.arange(4)
    pool = torch.full((2, 16384), 7, dtype=torch.uint8)
    with pytest.raises(LayoutMismatch, match="kvcache rows are 16384 bytes but dsv4_indexer_fp8_p64 writes 8448-byte "
                                             r"pages \(132 B/token x 64\)"):
        op(x, w, freqs, pos, loc, pool)
    with pytest.raises(LayoutMismatch, match="x must be bfloat16 \\[N, 128\\], got float32"):
        op(x.float(), w, freqs, pos, loc, op.layout.allocate(2))
    with pytest.raises(LayoutMismatch, match=r"out_loc must be int32/int64 \[N\], got int64 \[3\] on cpu"):
        op(x, w, freqs, pos, loc[:3], op.layout.allocate(2))
    with pytest.raises(LayoutMismatch, match="must be on a CUDA device"):
        op(x, w, freqs, pos, loc, op.layout.allocate(2))


def test_the_symbol_takes_only_the_tensors_its_variant_uses(cache_dir: Path) -> None:
    """An RMSNorm variant's symbol has no bias and no scale parameter: the op passes x, weight, freqs,
    positions, out_loc and kvcache untouched, in that order, then eps (a bias given to it is dropped); the
    generated C++ signature says the same."""
    op = load("dsv4_indexer", NAME, arch="sm_90a")
    assert op.args == ("x", "weight", "freqs", "positions", "out_loc", "kvcache")
    seen: list[tuple] = []
    op.function = lambda *args: seen.append(args)
    x, w = torch.randn(4, 128).bfloat16(), torch.randn(128)
    freqs, pos, loc, pool = torch.randn(16, 64), torch.zeros(4, dtype=torch.long), torch.arange(4), op.layout.allocate(2)
    op(x, w, freqs, pos, loc, pool, eps=1e-5, bias=torch.ones(128))
    assert len(seen[-1]) == 7 and all(a is b for a, b in zip(seen[-1], (x, w, freqs, pos, loc, pool))) and seen[-1][6] == 1e-5
    source = render_variant(resolve(op.variant))
    assert f"void {NAME}(\n    tvm::ffi::TensorView x,\n    tvm::ffi::TensorView weight,\n    tvm::ffi::TensorView freqs," in source
    assert "TensorView bias" not in source and "TensorView scale" not in source


def test_exported_symbol_guards_itself(cache_dir: Path) -> None:
    """A serving framework calling the .so directly still gets a clean error, not a wild write."""
    op = load("dsv4_indexer", NAME, arch="sm_90a")
    x, w = torch.randn(4, 128).bfloat16(), torch.randn(128)
    args = (x, w, torch.randn(16, 64), torch.zeros(4, dtype=torch.long), torch.arange(4))
    with pytest.raises(Exception, match="x must be on a CUDA device"):
        op.function(*args, op.layout.allocate(2), 1e-6)


def test_failed_compile_reports_nvcc_and_publishes_nothing(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = build_mod.render_variant
    monkeypatch.setattr(build_mod, "render_variant", lambda v, **kw: real(v, **kw) + "\n#error kernelgen test breakage\n")
    with pytest.raises(BuildError) as info:
        build([variant()], toolchain.detect(), ARCH, cache_dir)
    assert "dsv4_indexer_fp8_p64" in str(info.value) and "kernelgen test breakage" in str(info.value)
    root = kernels_dir(cache_dir)
    assert not [p for p in root.iterdir() if p.name.startswith(NAME)]
    assert not list(root.glob(".staging-*"))


def test_two_processes_build_one_key_once(cache_dir: Path) -> None:
    script = textwrap.dedent(f"""
        from pathlib import Path
        from kernelgen.build import toolchain
        from kernelgen.build.lifecycle import build
        from kernelgen.spec.parse import load_spec
        v = load_spec("dsv4_indexer").variant("dsv4_indexer_bf16_p1")
        [a] = build([v], toolchain.detect(), ("sm_90a",), Path({str(cache_dir)!r}))
        print(a.library)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs) and outs[0] == outs[1]
    log = (kernels_dir(cache_dir) / "builds.log").read_text().splitlines()
    assert len([line for line in log if "dsv4_indexer_bf16_p1-" in line]) == 1


def test_check_command_prints_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "mini.yaml"
    spec.write_text("family: fused_norm_rope_store\nname: mini\nvariants:\n"
                    "  - {name: ok_one, head_dim: 64, store: bf16}\n"
                    "  - {name: bad_one, head_dim: 64, page_size: 3}\n")
    assert main(["check", str(spec), "--arch", "sm_90a"]) == 1
    captured = capsys.readouterr()
    assert "ok_one" in captured.out and "1/2 compiled" in captured.out
    assert "bad_one [sm_90a]" in captured.err and "page_size must be a power of two" in captured.err


def test_every_tuning_candidate_compiles_for_blackwell(cache_dir: Path) -> None:
    """A Blackwell user tunes with the same space: every candidate instance compiles for sm_100a and sm_120a."""
    from kernelgen.build.lifecycle import compile_only
    from kernelgen.tune.runner import tuning_plan
    from kernelgen.tune.space import candidates, default_space

    v = variant("dsv4_indexer_fp4_p64")
    plan = tuning_plan(v, candidates(v, default_space(v))[0])
    assert len(plan.configs) > 10
    from kernelgen.codegen.render import render_variant
    source = render_variant(v, plan=plan)
    assert source.count("struct dsv4_indexer_fp4_p64_cfg") == len(plan.configs)
    results = compile_only([v], toolchain.detect(), ("sm_100a", "sm_120a"), plan=plan)
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]
    # tokens of two and four warps (named barriers, shared-memory exchanges): the candidates of FlashMLA that use them
    mainkv = load_spec("dsv4_mainkv")
    mla = mainkv.variant("dsv4_mainkv_fp8mla_p64")
    wide = [c for c in candidates(mla, default_space(mla, mainkv.tune_overrides()))[0] if c.threads_per_token > 32]
    assert {c.threads_per_token for c in wide} == {64, 128} and any(c.loop for c in wide)
    results = compile_only([mla], toolchain.detect(), ("sm_100a", "sm_120a"), plan=tuning_plan(mla, wide))
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]
    # the Hadamard's stages across warps (shared-memory swaps): a Hadamard row's wide candidates, and the
    # 32 KB edge of its exchange at head_dim 1024
    example = load_spec("example")
    ln = example.variant("example_ln_neox_head")
    wide = [c for c in candidates(ln, default_space(ln, example.tune_overrides()))[0] if c.threads_per_token > 32]
    assert {c.threads_per_token for c in wide} == {64}
    results = compile_only([ln], toolchain.detect(), ("sm_100a", "sm_120a"), plan=tuning_plan(ln, wide))
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]
    d1024 = example.variant("example_d1024_r128")
    edge = [Launch(128, 2, 8, loop=True), Launch(64, 4, 8, True)]
    results = compile_only([d1024], toolchain.detect(), ("sm_100a", "sm_120a"), plan=tuning_plan(d1024, edge))
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]
