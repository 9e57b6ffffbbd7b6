"""Pure tier: build keys are a function of the generated code and the toolchain, nothing else.

Moving a module, renaming a function or reorganising the package must not change any key (a
changed key silently rebuilds every user's cache). The keys below were last updated when
the kernel went full-warp with NaN rows defined (tools/golden_keys.py prints new keys);
update them only in a commit that changes generated code or the key recipe on purpose, and say so
in that commit."""
from __future__ import annotations

import pytest

from kernelgen.build.lifecycle import plan
from kernelgen.build.toolchain import Toolchain
from kernelgen.spec.parse import shipped_variants

pytestmark = pytest.mark.pure

FIXED_TOOLCHAIN = Toolchain("nvcc", "/usr/local/cuda", "release 13.0", "c++ 12", "0.1.15", ("/i",), "/l")

GOLDEN_KEYS = {
    "dsv32_indexer_fp8_p64": "f5c0b1cb35f3accab6256a2d42d43612d87a9e6762559cb73bb6d161bdbbd7d9",
    "dsv32_indexer_bf16_p64": "1c47ea19719b86d7eaeb6278e29ff7e7511f596fa585e8fd3864398598382b5e",
    "dsv4_indexer_fp8_p1": "8d57349820555526c659bd0820ff9db8a8f2b1cedf41dae1c78ae04ce7852e5e",
    "dsv4_indexer_fp8_p16": "1517214dac3871517cc723018fab6ecb16df4823630ca1bd064f839dca874c23",
    "dsv4_indexer_fp8_p64": "80168981eb9e2895673acf07c7c90701072c5500e6a20baf06e6b080eb170e72",
    "dsv4_indexer_fp8_p256": "7480da104646e7db10f5c9769147b11ec161f3ec83b92fb3428ab5377f8212ca",
    "dsv4_indexer_bf16_p1": "96c14def89a69e39cafc3680e22c609cc67f3a03f4145063e7b0a7a56173a4c5",
    "dsv4_indexer_bf16_p16": "6791824f682dc50cfc274e9a94a05c30d6e3721c18f800643c79976388477b73",
    "dsv4_indexer_bf16_p64": "f19263ddb078128a1dd058f8810eb2433eec19207dd05c177a5f1809ab61aac1",
    "dsv4_indexer_bf16_p256": "09863c282ec2c92d38b9e1a5f70e921222c31907bcfa5188686b119b0d6c25c1",
    "dsv4_indexer_fp4_p1": "6c4f8b15a21448ff9b491951e46ccaa343265c0b59d9f73caae7d1830cc69048",
    "dsv4_indexer_fp4_p16": "35b8aeba4f8801576e1544c3f637aa434c7045fc46101fa73fae7e5ee8d54c4e",
    "dsv4_indexer_fp4_p64": "a2190c4787002f0991a0d59dd621417cb87ecfc93a095b0e06539ed0eab5b7fd",
    "dsv4_indexer_fp4_p256": "6fa3e3713d65b135ed3af7572a4ac666287c1ab0ef1c67922bbbb145e136c235",
    "dsv4_mainkv_fp8mla_p1": "7105fb09727e8babf4d4f2c8ed691811e1b5a4f2c76cfd5e39659b63010b7dbc",
    "dsv4_mainkv_fp8mla_p64": "af880529acfac979509c7a019c2e811e7baabe646c2e838d9c762daf2921aed4",
    "dsv4_mainkv_bf16_p1": "679cf1818203e4ed1e4ced0f075ea94305a88a66627ae2075705d3ab472a89f3",
    "dsv4_mainkv_bf16_p64": "331c9d29a7ad6552d1ad712f7d4013e1cd12858c643699ab32fd4a00a509f525",
    "dsv4_mainkv_fp8mla_bfround_p64": "3afad399e8f80eeb24606af06c759d250691002531dc4bed0bf59598e15af9e2",
    "example_fp8_inbf16": "b48acf1dc4a1415d6e63dc5a466e6125fc205ca0fb2634a3229d7917923f47a1",
    "example_fp8_infp32": "c5f2679381bae406ed5ac3bffff48043603ccdbf8bd385068a68eb26c8b6e893",
    "example_fp4_inbf16": "d470398188c9dfa71305dcd5824d4c04dcd1b3a8f228508a4faa9a94e5d48d2b",
    "example_fp4_infp32": "84d739f896f21811a7a814f71cdde2e428245845ace998e8dc0a1e0bd47c1ced",
    "example_ln_neox_head": "b5ca2ca76e63758d3ad0269f0421d8dfe9bb4cba9e51a00d4e4565a5f67e41f9",
    "example_d192_norope": "b3960b075bddf84c8a79939c57e8261b8c09a93f7efc8924e34bd62f188823fd",
    "example_d1024_r128": "bd9a27eb1c9cdf9ff3f969340b5028bde2e82776bc864dcca8791684aec62e3f",
}


def current_keys() -> dict[str, str]:
    """Every shipped variant's build key with FIXED_TOOLCHAIN for sm_90a (tools/golden_keys.py prints them)."""
    return {p.variant.name: p.key for p in plan(shipped_variants(), FIXED_TOOLCHAIN, ("sm_90a",))}


def test_shipped_build_keys_are_unchanged() -> None:
    assert current_keys() == GOLDEN_KEYS


def test_every_input_of_the_binary_changes_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A different nvcc, tvm-ffi, host compiler, flags, header, template or target gives another key."""
    from dataclasses import replace

    from kernelgen.build import buildplan, lifecycle

    [v] = [x for x in shipped_variants() if x.name == "dsv4_indexer_fp8_p64"]

    def key(toolchain: Toolchain = FIXED_TOOLCHAIN, archs: tuple[str, ...] = ("sm_90a",)) -> str:
        return plan([v], toolchain, archs)[0].key

    base = key()
    changed = {
        "nvcc": key(replace(FIXED_TOOLCHAIN, nvcc_version="release 13.1")),
        "tvm-ffi": key(replace(FIXED_TOOLCHAIN, tvm_ffi_version="0.1.16")),
        "c++": key(replace(FIXED_TOOLCHAIN, cxx_version="c++ 13")),
        "arch": key(archs=("sm_100a",)),
        "packed-f32": key(replace(FIXED_TOOLCHAIN, defines=("-DKERNELGEN_PACKED_F32",))),
    }
    with monkeypatch.context() as m:
        m.setattr(buildplan, "CUDA_FLAGS", buildplan.CUDA_FLAGS + ("-lineinfo",))
        changed["flags"] = key()
    real_headers = lifecycle.read_headers
    with monkeypatch.context() as m:
        m.setattr(lifecycle, "read_headers", lambda: {**real_headers(), "numeric.cuh": b"// edited\n"})
        changed["header"] = key()
    real_render = lifecycle.render_variant
    with monkeypatch.context() as m:
        m.setattr(lifecycle, "render_variant", lambda *a, **k: real_render(*a, **k) + "// template edit\n")
        changed["template"] = key()
    assert all(k != base for k in changed.values()), [name for name, k in changed.items() if k == base]
    assert len(set(changed.values())) == len(changed)
