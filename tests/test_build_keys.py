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
    "dsv32_indexer_fp8_p64": "56d7171820e3735065416c926b48e35901166b1ae99c17501617300ff4afc098",
    "dsv32_indexer_bf16_p64": "2c86ea2eb42c42c5871b6ffe74149f1c1164301eac697d94f68e9fc8c66e9025",
    "dsv4_indexer_fp8_p1": "1150e8076f2f72623d502c2820d529eadc10041e4b299acf51b2f003974fbb97",
    "dsv4_indexer_fp8_p16": "9092b75732ec6cbdf134bfc80d4023aab9a4eaddaff6ce8f0069768fcb603264",
    "dsv4_indexer_fp8_p64": "6677b5477d167a7fdcf97045efa15935185ea343c23f31b2427bb8b79774dedc",
    "dsv4_indexer_fp8_p256": "4fbb0b9911d182da0df61d23d1375dad4c663bbe9ed631872742ce70c8c09ece",
    "dsv4_indexer_bf16_p1": "7615a69b1bedabf468fd9b3edfbc45904e0a35fb43fc27e4c9f673bcd8b39d2d",
    "dsv4_indexer_bf16_p16": "b6bf9ac4074238e6b068a583c421b07c026b3bdf593a08576c8a0d9f088da2cc",
    "dsv4_indexer_bf16_p64": "e8c0ac83b4b150d1fd8522e101f2725d6bf40a0730f79d7ad07a2c042852e7bf",
    "dsv4_indexer_bf16_p256": "685f185abc2c4f67c904045052c1cc02d247ad7b4c46aeaf2a7bfcd502682bfe",
    "dsv4_indexer_fp4_p1": "aff08f554b6a98164f4b9e493330aaa0f7b5c3991df19c0cffe93796c3c8a237",
    "dsv4_indexer_fp4_p16": "a110c20a34c5b34919c15f3fd8e8b06e81cba891671b80a29caa4f08fdde1197",
    "dsv4_indexer_fp4_p64": "f84afb71ac991d456207f64149f46f3ff8328eb8c9e4872a3a17e2ed3aa26f71",
    "dsv4_indexer_fp4_p256": "8e679c395b4c72cffb0792832aa241e1422ed1bffb931e7e68a2d56118dc875b",
    "dsv4_mainkv_fp8mla_p1": "7c5ceeb7702b808f0f2e4a0403339076e3e2cad9724b188e5f048ba7708d98fa",
    "dsv4_mainkv_fp8mla_p64": "5dda1f95bc7aa38a95fb257197b24987ac7ea37f275f15b71e5dff951efa68bd",
    "dsv4_mainkv_bf16_p1": "bc923ef7338ead631230c9bcf5bedffcf0590bb3d8ec9cd207ee609e3ca1943a",
    "dsv4_mainkv_bf16_p64": "f7e875e9df62a9a7b5ab57defd1048e9f6cbf079328a7bb9f1b6f7c5ce41d5ee",
    "dsv4_mainkv_fp8mla_bfround_p64": "56d59d8b1b2638183ff2ee097068540573beb8d8cf0b77fe4c95771770db96af",
    "example_fp8_inbf16": "5826751e398d9c0ce7176bd0edcee130996905e70d742082c127a96753291ec9",
    "example_fp8_infp32": "812bb7e87509cac065f0ed2477c6b7153e6f80441da23494b0e8c598a29fe14a",
    "example_fp4_inbf16": "8792f68cbe5aedff2f3e991443bb051b7067d44d066e0dc7347e49746daf4fc6",
    "example_fp4_infp32": "3c04504d85cb88810d1f9aac0b087651e31af7c03af00e39ede4f9979031d70f",
    "example_ln_neox_head": "027f43f3b44df9929d2fa57623f4c8019b35a6c6dfbd3b15016f22bae576d50b",
    "example_d192_norope": "3f35fb4ddfa43fe30ae5a7bcb281a47746030c0673a5aa3c42cfa9f83b3da9ad",
    "example_d1024_r128": "1a5dd5e2aeac45720a955ebd715c294423281153dbebb4f13e78bfee4170fecf",
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
