"""Pure tier: build keys are a function of the generated code and the toolchain, nothing else.

Moving a module, renaming a function or reorganising the package must not change any key (a
changed key silently rebuilds every user's cache). The keys below were last updated when
the device code gained the NVFP4 and vLLM store formats (a new enum and branches: the header's text) (tools/golden_keys.py prints new keys);
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
 "dsv32_indexer_fp8_p64": "e3e33f8eedff976452f416e6d2e5b0370b48cafe56ca4e6462c832061f876bb2",
 "dsv32_indexer_bf16_p64": "f22631788d3c8f8ccb5991fe696825a260561bd104f3a9d163e1fb2bb9fb6eba",
 "dsv4_indexer_fp8_p1": "5467303fb0161e4ba8fe480b4ed46c4f1793b28bbd066c4ccfc0d19e697a3921",
 "dsv4_indexer_fp8_p16": "d1308050ee0aefbb21d10f3329853eaf8fb5a999038b4d32395499ee9b00afaa",
 "dsv4_indexer_fp8_p64": "e3a0d5412bec374f7fd5d2871b1a1b4412d6ce8a7d84aae809211f56fa4bf75e",
 "dsv4_indexer_fp8_p256": "16833b94c3d5e8ef50931b53cdf1bc8724febdc35e860bbe08f010fca92f8a5f",
 "dsv4_indexer_bf16_p1": "d0e3dcb0c967063c5ff4b7c77b52d2690fa86cd2b9cec5d2d61582bf491cb88a",
 "dsv4_indexer_bf16_p16": "de9ab837da21c8dc23600c699b9441190d736934797530d262df733b5ae398d3",
 "dsv4_indexer_bf16_p64": "60c170d15174a3bbdbb7943bb94b7057c638643aad61166c73ab259387bff7ab",
 "dsv4_indexer_bf16_p256": "82d90ffc4049d4e1be01830a2fde1d5308deb8d28d729e79fd7263fcab43ffdf",
 "dsv4_indexer_fp4_p1": "383324d75fea873e3c953d5fed7c26b9256776591b032d9460833f3fd2c0d971",
 "dsv4_indexer_fp4_p16": "9f7ae2fe9b3d78bec0a8eb27b0a157a606796684b3c88921f44ebd6863093a59",
 "dsv4_indexer_fp4_p64": "8e2dd1c7462fbed9e479e83b6b2288d268ec59e56ba0e1c18ce9c389a1bcce89",
 "dsv4_indexer_fp4_p256": "819dfe2ea2dceca85a6d8d31dd250fd6b91433370394d4b47bd8f8404d738b89",
 "dsv4_mainkv_fp8mla_p1": "e48c6b5bcab6825bb51a117d012661899b160e53b904a30b3992285dbda0d965",
 "dsv4_mainkv_fp8mla_p64": "8cb0fdb2b2013fd716f156e62b92b459a7be92432c74e3ee04bd845d6f903033",
 "dsv4_mainkv_bf16_p1": "71fa4adadb6b4087d66e35076f101f9f75cc3c256d4d0ff734322d8a2c591458",
 "dsv4_mainkv_bf16_p64": "52cd1f174b4785b979ac5cdf286f39e3ea5a228bd2f9e4db67bfd3274e5ffce5",
 "dsv4_mainkv_fp8mla_bfround_p64": "3c3d742fef5df01a7c081c057764b3049aec6459f51c8c83ca65bdcd29092efd",
 "dsv4_mainkv_nvfp4_p64": "13d275ce5b6adc9a6437d8494c895eeb3b8afb62d0904de891d8e858feca0bc9",
 "example_fp8_inbf16": "e597d629b58f459f42240987c31f26546fbcbb4c71655534261c1acf99d9b188",
 "example_fp8_infp32": "8f5a87403d30b94711016d6a01b8cb0f53c3d5675d9f43210bad14d2364e20f0",
 "example_fp4_inbf16": "fe4cd3a16d34144e3875a04d98e0fc1b96ca5e71e2b815a6a95bdc4f6452b5d0",
 "example_fp4_infp32": "3944ef3992a8f9b60aec27431bcf6d49efbb173e3ff3adf3e849f89ed9b34f49",
 "example_ln_neox_head": "8c2126897c8682c097429a8c59372c27476c6d9841c860240cf489815ba09b7d",
 "example_d192_norope": "1e5cc086147e5e5d429448b21cb024d0ed99bc9af332ca9b79a33d9b456a4000",
 "example_d1024_r128": "681f8d3af666616ff1692b9aa1237a286edf774ca565669c9a750e1903f67704",
 "example_nvfp4": "d2dc8c02d50f68e8f5f094b54e1590e62054772c14c3479480f6b67d75df484a",
 "example_nvfp4_d64_neox": "e91f2efa75875dde00bc0985c4dc24779bbfd75b21f4086db0a424ebcd747cbb",
 "vllm_dsv32_indexer_fp8vllm_p64": "94f779a6667b52e5720ed03bb01205130e19d38ce54bf8a7f131349aa58162c1",
 "vllm_dsv32_indexer_fp8vllmue8m0_p64": "fdf317891acd054be1cdadc9152d0ccf841a7202caac84e809204dfe8b10b2ac",
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
