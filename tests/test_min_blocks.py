"""Occupancy as a launch parameter (launch.min_blocks, issue 39): __launch_bounds__'s minimum blocks per SM, which
caps the registers per thread. The tuning space names it by the threads an SM must hold (resident_threads), so one
value is the same register cap for every block size. Off in the default space until measured; a spec opts in through
`tune:`; ids written before it existed keep their meaning."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kernelgen.codegen.guards import precheck
from kernelgen.codegen.launch import resolve
from kernelgen.codegen.render import render_variant
from kernelgen.errors import GuardViolation, SpecError
from kernelgen.spec.parse import load_spec, parse_spec
from kernelgen.tune.space import candidates, default_space
from sass_ops import SASS

V = load_spec("dsv4_indexer").variant("dsv4_indexer_fp8_p64")


@pytest.mark.pure
def test_the_default_space_leaves_it_off_and_a_spec_opts_in_by_resident_threads() -> None:
    assert {c.min_blocks for c in candidates(V, default_space(V))[0]} == {0}
    space = default_space(V, {"resident_threads": (0, 1536, 2048), "block_threads": (64, 128, 256)})
    valid, rejected = candidates(V, space)
    # one resident_threads value is one register cap: blocks x block threads reach it for every block size
    for c in valid:
        threads = c.threads_per_token * c.tokens_per_block
        assert c.min_blocks == 0 or c.min_blocks * threads in (1536, 2048), c.id
    assert {(c.min_blocks, c.threads_per_token * c.tokens_per_block) for c in valid if c.min_blocks} >= {
        (24, 64), (12, 128), (6, 256), (32, 64), (16, 128), (8, 256)}
    assert all(c.id.endswith(f".mb{c.min_blocks}") for c in valid if c.min_blocks)
    fits, over = candidates(V, default_space(V, {"resident_threads": (2560,)}))  # more than an SM holds
    assert not any(c.min_blocks for c in fits) and any("lower launch.min_blocks [guard min_blocks_fit]" in why for _, why in over)


@pytest.mark.pure
def test_a_spec_sets_it_in_launch_and_tune_and_the_guard_names_it() -> None:
    text = ("family: fused_norm_rope_store\nname: ob\nvariants:\n"
            "  - {name: ob_a, head_dim: 128, rope_dim: 64, launch: {threads_per_token: 8, tokens_per_block: 32, "
            "vec: 8, min_blocks: 4}}\ntune: {resident_threads: [0, 1536]}\n")
    spec = parse_spec(text, "ob.yaml")
    v = spec.variant("ob_a")
    assert resolve(v).launch.min_blocks == 4 and resolve(v).launch.id == "t8.b32.v8.mb4"
    assert spec.tune_overrides()["resident_threads"] == (0, 1536)
    with pytest.raises(SpecError, match=r"^ob.yaml:5:\d+: tune: min_blocks is searched as resident_threads \(the threads "
                                        r"an SM must hold; min_blocks = resident_threads / block_threads, rounded up\), "
                                        r"e.g. resident_threads: \[0, 1536, 2048\]$"):
        parse_spec(text.replace("tune: {resident_threads", "tune: {min_blocks"), "ob.yaml")
    with pytest.raises(GuardViolation, match=r"must fit the 2048 threads an SM holds; lower launch.min_blocks"):
        precheck(parse_spec(text.replace("min_blocks: 4", "min_blocks: 9"), "ob.yaml").variant("ob_a"))


@pytest.mark.build
def test_the_ptx_asks_for_the_blocks_only_where_set(tmp_path: Path) -> None:
    from kernelgen import resources
    from kernelgen.build import toolchain
    from kernelgen.build.buildplan import CUDA_FLAGS

    tc = toolchain.detect()
    launch = resolve(V).launch
    found = {}
    for mb in (0, 3):
        src = tmp_path / f"k{mb}.cu"
        src.write_text(render_variant(V.with_launch(launch.__class__(**{**launch.__dict__, "min_blocks": mb}))))
        out = tmp_path / f"k{mb}.ptx"
        cmd = [tc.nvcc, *CUDA_FLAGS, f"-I{resources.include_dir()}",
               *(f"-I{d}" for d in tc.include_dirs), "-arch=sm_90a", "-ptx", str(src), "-o", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        found[mb] = re.findall(r"\.minnctapersm\s+(\d+)", out.read_text())
    assert found[0] == [] and found[3] and set(found[3]) == {"3"}


def _sass_count(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202 (a module)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "tools"))
    import sass_count

    return sass_count


@pytest.mark.pure
def test_resident_warps_follow_the_register_allocation_unit_and_the_sm_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The occupancy tools/sass_count.py --regs reports, by CUDA's cuda_occupancy.h rules: registers are allocated per
    warp in units of 256 within four sub-partitions of 16384, so 63 and 64 registers per thread hold 32 warps of 64-thread
    blocks, 72 hold 28 and 86 hold 20 (not 22: a sub-partition holds whole warps); threads, blocks and shared memory cap
    too, and a kernel without registers is capped by those alone."""
    sc = _sass_count(monkeypatch)
    warps = sc.resident_warps
    assert warps(63, 0, 64) == warps(64, 0, 64) == 32
    assert warps(72, 0, 64) == 28 and warps(65, 0, 64) == 28  # 65 x 32 rounds up to 2304 registers a warp
    assert warps(32, 0, 64) == 64 and warps(16, 0, 32) == 32  # 2048 threads, then 32 blocks of one warp
    assert warps(128, 0, 256) == 16 and warps(40, 100 * 1024, 128) == 8  # registers; then two blocks of shared memory
    assert warps(86, 0, 64) == 20 and warps(0, 0, 64) == 64 and warps(255, 0, 32) == 8
    with pytest.raises(SystemExit, match=r"^--regs knows an sm_90 SM's limits .* not sm_120a's: use --arch sm_90a$"):
        sc.resources("attention_prep", "cake_64_8_fp8", ["t4.b16.v8"], "sm_120a")


@pytest.mark.build
@SASS
def test_a_launch_groups_registers_are_capped_by_resident_threads_1024(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cake (64, 8) fp8 group's one kernel at t4.b16.v8 (64-thread blocks): uncapped it holds more registers than
    its Q member alone (docs/tuning.md: fewer warps per SM), and resident_threads 1024 (min_blocks 16) holds it to 64
    registers, 32 warps an SM, as many as the member."""
    rs = _sass_count(monkeypatch).resources
    group = rs("attention_prep", "cake_64_8_fp8", ["t4.b16.v8", "t4.b16.v8.mb16"], "sm_90a")
    member = rs("attention_prep", "cake_64_8_fp8_q", ["t4.b16.v8"], "sm_90a")["t4.b16.v8"]
    assert group["t4.b16.v8"]["reg"] > member["reg"] and group["t4.b16.v8"]["warps"] < member["warps"] == 32
    assert group["t4.b16.v8.mb16"]["reg"] <= 64 and group["t4.b16.v8.mb16"]["warps"] == 32
