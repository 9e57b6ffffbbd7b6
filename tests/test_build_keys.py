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
 "dsv32_indexer_fp8_p64": "2c3574baf32ff3aae39639e18c91918f6a0d2e6a277d85594045ab0559b463b3",
 "dsv32_indexer_bf16_p64": "f919182ea8a011dcd7d1e2a0dbc42ab247d1ce08d38040cafcc929986a10457e",
 "dsv4_indexer_fp8_p1": "f383355414a7bd2f0a15c90a56ee0b4602276b19330fee71b1a933f9257af1cd",
 "dsv4_indexer_fp8_p16": "183def568245306d20367b593d354b66b47d34017f6a36cdfb74ee6857b46b98",
 "dsv4_indexer_fp8_p64": "5d8be16cda9f39281ab81a6ca7434d1b104e9b162e767d4b99c16f295d5b2dbb",
 "dsv4_indexer_fp8_p256": "438088bfb53c33c458192213e31a7edf86196219c05f3bc9757b9051f1f895e5",
 "dsv4_indexer_bf16_p1": "b49f9f768dc2188e09489b306a528b5bdf86e37e292524d9771b62283407870f",
 "dsv4_indexer_bf16_p16": "e2fbc9f1f46758129e5058a7b577d3a73e2029467fe60ea89815b3957621ce90",
 "dsv4_indexer_bf16_p64": "c08bcfb0569d689fe3ad39306c4375ffa743898b22651f092ecfec699956bffe",
 "dsv4_indexer_bf16_p256": "f427673cb8ee8aae682e96d8b2be9335a64d3c4a415e025c9d984006e7f5784c",
 "dsv4_indexer_fp4_p1": "69140078629185ad7f6909019e799d38167f70064851f33587ba39a398eff617",
 "dsv4_indexer_fp4_p16": "56711fe607ae2fc704c6176a205e95de26ce787c656baf49a163fc08101efa5f",
 "dsv4_indexer_fp4_p64": "6840294035ce5aee44b757e5d0abf122ab9bbad19841c5bff287566f45640d1c",
 "dsv4_indexer_fp4_p256": "babf9924952b6f09a0acb35df207011715f0c4b679f6856710627ba02c122a0b",
 "dsv4_mainkv_fp8mla_p1": "4b3c59f2c0f1118eed5b61f06659e2842e155b53d3d8d80bc8060c480ef56027",
 "dsv4_mainkv_fp8mla_p64": "7e6000c03412bfb4dc6a481109585bac512d863ea9734541d0ce50f2888c5a29",
 "dsv4_mainkv_bf16_p1": "47dc6fec30c295d87844bc0603c2ba8e02038f4ff7eb92fc698ea1ac33a1501d",
 "dsv4_mainkv_bf16_p64": "c9806596a5c3af8a1a79b4ed73a1d367e98bb3f0d20c5386214955036b5307d7",
 "dsv4_mainkv_fp8mla_bfround_p64": "2f264bb1f05e461402f238186012b0a295a8e7c3772bea809f0f532845ddd156",
 "dsv4_mainkv_nvfp4_p64": "cca41d30f700724952b572faa77d0ccf5a46f80dc729b27d09f3275440afeea0",
 "example_fp8_inbf16": "8350e7277bda318df850f2314fa23ea1bc3aecb002baf606f267169c8a8c2f15",
 "example_fp8_infp32": "66750f207aff4d55c27a69d997de2b7e4de8b9d6b55c15e75282cbb8dfbf34df",
 "example_fp4_inbf16": "dca2e4c23181b3ff0e2ee318d2f8cf218f3a1434e3dbc6bf34c4fe9e85aca260",
 "example_fp4_infp32": "0111e28931450d97324a0ae733d754cb15ffadd93ec9f8b8e8fb39e9cff8ba07",
 "example_ln_neox_head": "0fdde5a833520c4bce756d2972d773bb72ff09ec3249a987bf47286aa3225391",
 "example_d192_norope": "22448b29a1bb95906200c66582d8195b1fe55a033cdff7be2dd351e39dc9f7db",
 "example_d1024_r128": "f0daa5fefc825bbc979d6fb8e9235e3996a1fde84a99373617041e0a20280e82",
 "example_nvfp4": "d0d9501fffb16fc37739f85ccb4b9ecfcb6d33977c61314de958487b509f30f1",
 "example_nvfp4_d64_neox": "4675772a68ef1b56a89d8b87144ad89a428b0628b7f12f5344f860dab803e55c",
 "llama3_8b_k_bf16_p16": "1038fa8793a023ebec2bc01274d25e502343203eae03d44ab6c84245cb4e72ce",
 "llama3_8b_v_bf16_p16": "57d219ae3627abe8f456a2b779a3324125d51159823b17fbeb41d40e6e028d12",
 "llama3_8b_k_fp8_p16": "b91f98437bb60cc221c69daf21da61d013bcac5282bc4f630f3236c48c818072",
 "llama3_8b_v_fp8_p16": "530df66b2e407c19f62207a92fbf4808614c84065a8e7c859c85ef63cc638f7f",
 "qwen3_8b_k_bf16_p16": "8966ba072f6ac93fefc2060cee70905f0405f4db8bee02de7bfeda09cebd6010",
 "qwen3_30b_k_bf16_p16": "9cc17f2066b01240648e67b2ecac1673add222795a9b14589868a5934bda4a17",
 "gptoss_k_bf16_p16": "300edc3bd54483b36d7b1c245294d27e77ecd65d5c4d6c80f8be1c13ae73de81",
 "vllm_dsv32_indexer_fp8vllm_p64": "1377aa63e4929b6f96869d0c0d1be52c203d3e1485eec2816eb126c3c78293f1",
 "vllm_dsv32_indexer_fp8vllmue8m0_p64": "d7550c183e0ab6f0f541554ea9d677283ce7f727371da687fda831c34c4ce1e1",
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
