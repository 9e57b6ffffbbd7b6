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
    "dsv32_indexer_fp8_p64": "7d7bd1a54a960d81301251383afe5e88885aeda5b68d50c08eeec79226040c7c",
    "dsv32_indexer_bf16_p64": "c241337d129977816c7bb420ab3f1ae2cf86ac07603cc33a5a56ffb2cba06c49",
    "dsv4_indexer_fp8_p1": "9efd321c7625fe32496b07a99aaf836cc387c42c2461162bd72a8398d28c72a4",
    "dsv4_indexer_fp8_p16": "30095b4a6bb55919ee4cac73ad2e2ded21ffb83b08bb93177f1fbaac8cfa4ee7",
    "dsv4_indexer_fp8_p64": "81117c892c08ebe12d7d5d9b8bb67d9c01e269a5383f849ea748e7b6ebe4611c",
    "dsv4_indexer_fp8_p256": "214d0b8dc6f5a5b7d159d6a69556640a07784a069304cef08af80f87c1cc9236",
    "dsv4_indexer_bf16_p1": "8f6b1b17b47d3bd4fe55c1fbb41d82c2945f4572d6caeb6e07c6c0924ac9e86f",
    "dsv4_indexer_bf16_p16": "8c32f96caff17013a4db3d4ffc9cbda584ba6a13b2b5c5263699530454f1a847",
    "dsv4_indexer_bf16_p64": "21de73cbc41808f00a37764ada667a01d892b7686ef18a8d1284b4b3133d9d3d",
    "dsv4_indexer_bf16_p256": "da623847b6d26cee870b932e17541d6eae1ae2e024acc3f804790d22fac8287a",
    "dsv4_indexer_fp4_p1": "d2f7dc90b25ef975dbe7ba0d630de2138eca81b65f10b933e016eaa81943d4f1",
    "dsv4_indexer_fp4_p16": "066e097a3ab0a33dbfed30c43fdc1f10e047829a74df0ba1442145818184c2af",
    "dsv4_indexer_fp4_p64": "5f28e67fac0e5a1f2bd3ccaa476ff992cb21120f011cdb9cb6fcaab5502c3696",
    "dsv4_indexer_fp4_p256": "bd3842adf42e60b47d6b4610803d5eb36eacf3e83a6ceb94f81cf054c178fb23",
    "dsv4_mainkv_fp8mla_p1": "ee5deb5ae9e863dca9a0edb2c6477983287c26c1883dc75a43d2fc49edc13257",
    "dsv4_mainkv_fp8mla_p64": "3f01007865b502a473d822b9ef5d7ad5b13d495868c0949a5698a64659f25924",
    "dsv4_mainkv_bf16_p1": "eed4a1ab1f1b7ee28c00eeb05db635fa071c45532b8f1f619c85272c29165a04",
    "dsv4_mainkv_bf16_p64": "7cc5a52b774f47f80982c026acef5a2c67b0ed8b0b5aafa02e83c867f30addcf",
    "dsv4_mainkv_fp8mla_bfround_p64": "b684d77bce667883fe8144f367bb40b220aa5733dbc96cc93896eca4a8e9756e",
    "example_fp8_inbf16": "0e39105f0a8efbde53e22e418c66bcbb9135fe160ef6f32aa8e01c485b58c55c",
    "example_fp8_infp32": "3ada51a7c8a39943ab01855eb2647c918b0553dea71e67515c0b5dadbc152258",
    "example_fp4_inbf16": "0fa00952c12064916dcbaec4e04ca6ea801cb310531ef9b8d5e9bee7f6372511",
    "example_fp4_infp32": "8d95d98721a19f70151fc2acdfa9c1b36a8366f670cefd5f765eec24858da770",
    "example_ln_neox_head": "f49c5be2797d17290001142ecb826f1f5c77d65765bea96d4e547c2830f9de51",
    "example_d192_norope": "88e44f32ddfbacf720b2c551943b470c613c297dad71cbf7114e941d87cb211c",
    "example_d1024_r128": "5cf7dc39b475cd811bbbb031255ca242b776d581710d448d6a30125c2d2e4a32",
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
