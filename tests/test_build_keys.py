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
    "dsv32_indexer_fp8_p64": "268daeeab1fe2b5f5e796746e172d75bca65303ceeddf7570c6edbc04af19e6a",
    "dsv32_indexer_bf16_p64": "c8180ce56b8c20a3257f3a15dec041dd988a67668f6b5da20519b255e472287a",
    "dsv4_indexer_fp8_p1": "7b4b89bbbcabd9ed424d0d365efa23e6e67c4f0854acbf2932877b6381845874",
    "dsv4_indexer_fp8_p16": "844e9e93fd04bec544fd594a409e6fe3d74eac786caeccf734d817d9a4d16470",
    "dsv4_indexer_fp8_p64": "84292763768c5f97ad2c81090d791abb45c61c8c12354fbde036d86ae7654c7b",
    "dsv4_indexer_fp8_p256": "b9d3c4a55c6c7017e5ef7fea8e0ecdd2ef9dd2fc3c3503c0791902ea8df6a35c",
    "dsv4_indexer_bf16_p1": "e98378f4fda5d2393a35f5b730296de25a0a0692453d091dbc3acbce046cd512",
    "dsv4_indexer_bf16_p16": "101adfeb73f83a20f9015c45383cab3cc009e95f68f3a75463899e157803654b",
    "dsv4_indexer_bf16_p64": "6672fa1585767b65648f239e193b2813484bce62fcfe30ddf813fb000258b3f7",
    "dsv4_indexer_bf16_p256": "c38d95b5c39da2e04316e7ab8535701c535bf32579608dce4f22c4d1dee3f349",
    "dsv4_indexer_fp4_p1": "d1a864bb2f40a6c44030c3017a0f87a0655369a86867856c3b9518308c0391bc",
    "dsv4_indexer_fp4_p16": "d19119d5f9e7292d16567f2d920248e78160df0dc232406abf54c75949f5030d",
    "dsv4_indexer_fp4_p64": "424d9cf70d2f3231688fb35be522e652259874c31dd2eb34661c8fb92d47fbc3",
    "dsv4_indexer_fp4_p256": "00eebc961c933dc66fe1aa52cefaf353a38cac3b41823676ab13c51497253aa4",
    "dsv4_mainkv_fp8mla_p1": "ac5dd4f5645de5e65962fd2d44de3b2605257d0b319ab42d41aea5a495ac1d25",
    "dsv4_mainkv_fp8mla_p64": "72b81c2a85fb126fb8be3267ae84d75611f12e321f1a196b1481bde40747c6fe",
    "dsv4_mainkv_bf16_p1": "ca15bf9d4bb83573a0ea15072bdf39dbf649239744e8ef8e68f384f0662dd4cc",
    "dsv4_mainkv_bf16_p64": "309204e7c6e3de3819320595e122b85d9cda1e7d4d7a4fb925138f597ad2e0ba",
    "dsv4_mainkv_fp8mla_bfround_p64": "9a45af9f4f19bb3428424f8a8609ce0d4a0f8c91e8b7a09b45e90c2bc328d70d",
    "example_fp8_inbf16": "9d8f62ea72c1c24072e84e353f17b5bc1406cf3bc036ccbd01c7f1d0c1a60e80",
    "example_fp8_infp32": "d67b253bb9c47faf2ffda611d4630b1ad78eb00ae38a653adde1927fb7a77f0d",
    "example_fp4_inbf16": "08a6be3010cdc57ac91c77304b166794e799ddb58a0c189241c17b0f3c7036ea",
    "example_fp4_infp32": "17a79abd77af4bed192b06e0e37ab2f6089cd1cbd1c9e6075d6f1e0102d0b0c8",
    "example_ln_neox_head": "ef6674eea6c9967cf1674305a81507f5d5a1335481b1b2b8d066546c6222b32e",
    "example_d192_norope": "f95651e3fd15f82e5f227ccc0c4a8491261159c56cca71ee0d721871de342541",
    "example_d1024_r128": "9685a82b4d5110328efe465c4165534dd077dff71a8460ef89314a66c55afd65",
}


def test_shipped_build_keys_are_unchanged() -> None:
    keys = {p.variant.name: p.key for p in plan(shipped_variants(), FIXED_TOOLCHAIN, ("sm_90a",))}
    assert keys == GOLDEN_KEYS


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
