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
 "dsv32_indexer_fp8_p64": "1d7e99ed3b82a44b2e74e45913304cb0c0b83d29add632f58faf08919d984074",
 "dsv32_indexer_bf16_p64": "303eef7d194eab1c67aeaf3e9e21249dd8b59c6d8f59bb2760aeb3319d82049e",
 "dsv4_indexer_fp8_p1": "1e894a3abeac7bec311e63a3ec093d1b816462d85e91a5db09e5b9e447440aeb",
 "dsv4_indexer_fp8_p16": "747e08e91afdd4bd8290f57f320a34ecf752b77db83882bf86d99145409eedce",
 "dsv4_indexer_fp8_p64": "a811df6168508c5212a3f3638db4775093a8635da26da868c9cfe980a5bd5788",
 "dsv4_indexer_fp8_p256": "357280243c08072a135f74f43c8a6c42a00b533c9a8a75b9e1f127fe7496f034",
 "dsv4_indexer_bf16_p1": "2682226874294f9e7e898755ad4611051d0d8f4bf86f20d85de0e6f66f3c8ce4",
 "dsv4_indexer_bf16_p16": "133f241a489b263e52328713928fb31db0b71f12e98842dcdefbad9c35c48cb7",
 "dsv4_indexer_bf16_p64": "cf44ee5c2b6d79630c27a7c382fcf4c3a2ac35c86bb66dd108d37b5a4a5ae1a7",
 "dsv4_indexer_bf16_p256": "be9914a617a5d61d618ab9aa845c8f324c2c914f46d99ed6e3b74fa59fb8dd9a",
 "dsv4_indexer_fp4_p1": "76254316de7c869b00597918294b9c0ac79e62d7d98bebb40267c80e2be0296c",
 "dsv4_indexer_fp4_p16": "8f727e801950d8cbacd4f976803e45396041de5956c86fc31f5dcdb70f44b128",
 "dsv4_indexer_fp4_p64": "99a31ea5e6818f097e52d7f81ab3b5d399c4f14e7b5fe95f99b2109944468b20",
 "dsv4_indexer_fp4_p256": "cbf769f401f3663b92bb8f8c5f91a62b101c373edf6c5aba0717ca589958e06d",
 "dsv4_mainkv_fp8mla_p1": "a6037b66c088a7ea6b7b4d2a1201c76971234af46449a16aedc10a3f149b34d4",
 "dsv4_mainkv_fp8mla_p64": "7f2437c935767cc81bad25ad7898a57a75b0d581ad6c55daffbbd7949c935253",
 "dsv4_mainkv_bf16_p1": "b4e4e57e6afdc4852bb32c5119466df4917b0739b516c3d587eef5222545c4f8",
 "dsv4_mainkv_bf16_p64": "b844d400aefe3f37624accbf67f10df2ddb9eb4608c637d9f636602e27702f6c",
 "dsv4_mainkv_fp8mla_bfround_p64": "b77a3b0d95872b6f39a3f8f3c2a075193b61be0d12e298934ac8ae524c7ec75a",
 "dsv4_mainkv_nvfp4_p64": "db7710a172ac3df18a81f7e4a0d016bae4c236620f8eed905a31df1d0d250d0a",
 "example_fp8_inbf16": "5dddf5dc760bb4af125f74d9f8d0e14ffcb3babc971dfe667d515a9517f89d7c",
 "example_fp8_infp32": "bd89bdda00567f4bb72b5174735f603056e09b742018b05e76b63d42f6744c57",
 "example_fp4_inbf16": "b6f0d088393aea7c6448919897117e0db2794bd1d9eae5c2d141d227caabffe1",
 "example_fp4_infp32": "f3dfbdfce34d3b0cc26de1009b21509980770f76a6547bf6b57d42e08f8b01e3",
 "example_ln_neox_head": "252d2c89ba3c9b91fdeda43a6ef68092aef5620a94d571a95a19c3a2908fb864",
 "example_d192_norope": "014cd471cde9e2d9d58f8b946370380c756618c2e2d5cc15ef90bf66bcf72944",
 "example_d1024_r128": "29c59dacbfb9d4fc98e65b0b224d0910ebd29cc0551198b594f740888138dc9c",
 "example_nvfp4": "3933d8b62b8faeb24cbfa99a523c42c97d86c88769bb04cb75e428f62cacc65d",
 "example_nvfp4_d64_neox": "496e80e13e6a9581a6befc35a4f3c606562e5e085201e91fee8e2e75e4bddf88",
 "llama3_8b_k_bf16_p16": "733cf3519e64c940400c00410f982f1fa933d33fab11ea1b39c20cb1088b266a",
 "llama3_8b_v_bf16_p16": "2cdcb3cf743d80b107d4fbbb862166c44622c848b5b874eb2ad4b07239cb9e99",
 "llama3_8b_k_fp8_p16": "bf4e689eb2415b90ed842263454f7dea6bef7e4de83c2690111f8637bfc3a822",
 "llama3_8b_v_fp8_p16": "6e16674ddae75d6976a99f4feb73408a25819cd260e7794cb10bef8ba9a105dc",
 "qwen3_8b_k_bf16_p16": "bd3dd3b10a58e89b33b3baf631ad3e8ffbb387e05bd649ddaad1a156031f755d",
 "qwen3_30b_k_bf16_p16": "7563e7d1ef58f03c691da0ac3f557930b018c3241f982f9412a1ac261a105cb1",
 "gptoss_k_bf16_p16": "b9d43ea8cdfeec90c6e4b21803342320a5bfb5774d4dc3311af412b8146c6261",
 "vllm_dsv32_indexer_fp8vllm_p64": "8257252b7abb76f9b940195aeaec16f883e217df2507ccd57799e3db03677b9d",
 "vllm_dsv32_indexer_fp8vllmue8m0_p64": "914f14bdee850bb1baac76fe56cfc6ae20d2405cf1f627128bbdc07a3f14c18b",
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
