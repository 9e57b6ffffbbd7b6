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
 "dsv32_indexer_fp8_p64": "d148075c6c8f6ac13f678c2b52159300db86e885c66defbb8260484d4ebf1ae6",
 "dsv32_indexer_bf16_p64": "524f4a6255cc77e74f212fe1fccf3ed9d2227c54f502e210dac9d1e26c7eec41",
 "dsv4_indexer_fp8_p1": "cd048bfe00482c9051827d41b4c5549186bdd24d12d9103ad503921bc235264e",
 "dsv4_indexer_fp8_p16": "6c0c9bc24431b7320806dfb07d30ecf1c9ac0959abc97b147bcd98a270cd6a5c",
 "dsv4_indexer_fp8_p64": "96b52441a99de354e173de4e0f4edd959ba9c4fcf67f83e02487338993369a1b",
 "dsv4_indexer_fp8_p256": "4e94ef155df514b1468494ab249a00e91e50c476a63d1a55933c9d8e1055ddae",
 "dsv4_indexer_bf16_p1": "2cd0c2f083b966e84bcc5fc8dc64f99fb6e76c1b6880f802963a353bd3e1f668",
 "dsv4_indexer_bf16_p16": "1fe5cbc9745a38d6a3ee208567714708a4d052bd0a72e270a4a03228ca30ddca",
 "dsv4_indexer_bf16_p64": "d227a845fcfec2ca66b01fcc26fd4640303de1d7649cd0efa00620f3f5846c6f",
 "dsv4_indexer_bf16_p256": "6061309c660cb86e9a17be80d2abef2019e49411ffe4ce16900128939d2bc134",
 "dsv4_indexer_fp4_p1": "7e7dd64384d1649e8e0b933ef5e56c46cf3c5425d56d6d7c882f819fae553250",
 "dsv4_indexer_fp4_p16": "a46b1e7a8d8df1717bc5ecc7ebdbb71fa777139e8dfa15003ed09d8263865251",
 "dsv4_indexer_fp4_p64": "2cb4368bf59d7f902bf4406e8d52f59d24cf0c59c3b3624fd579c0f0b414ba75",
 "dsv4_indexer_fp4_p256": "70f6d7554799c7b0c5eb08a522628826803c4585af5f5e7691ea0489493e294e",
 "dsv4_mainkv_fp8mla_p1": "ca60b046ca0b0a8bda6c16228aec4728dc8ec908cbd87682fdf2b309c9d0aa15",
 "dsv4_mainkv_fp8mla_p64": "dd47d50352ddc1ab872b804cf3f1d8eddf3aab11bd7ca326fd563b92ad58e5f5",
 "dsv4_mainkv_bf16_p1": "9046e3567537483e29a74b3f25594631ba384a259393b4ebf4b46344c620ffad",
 "dsv4_mainkv_bf16_p64": "7123251e6b7e79151c1c3ae2d93164eb7d00bdd9f616c9301f2ca716a4fdb80a",
 "dsv4_mainkv_fp8mla_bfround_p64": "15836526f11c4b04c4ee6eb446e9976c2d5f9407b40d9e3cfa386680859d7c96",
 "dsv4_mainkv_nvfp4_p64": "61c9f4bc864f411ec4b492efcb1bad082442bc411d0ca4871a068fdfda63c3a7",
 "example_fp8_inbf16": "f50a630e125a43edebb38b05ba9ac4d445d8649916479ce9c098ff7fda78bd50",
 "example_fp8_infp32": "4bbc27f30c1ac4a7192a667d822b15124b9faaa4ce12c90089558cdede966640",
 "example_fp4_inbf16": "4a6415f2524a5301724ea7d68e7aad879816fb5b08cea14ce3136116bbbd69ea",
 "example_fp4_infp32": "db1332a517355cbfe30b19245d72d5a4afc5b488ea81576d89aac781daf8a618",
 "example_ln_neox_head": "d114a99ad87c61cb04d38fb6ba5892782aaab05f94672e4acc10131abe580bcd",
 "example_d192_norope": "95de803392cf2ce27e2ca76bb4e01cb968e26f6e65aea4dfb53d6cba26912a2b",
 "example_d1024_r128": "57861de320b5ae473e424e73576ecde6a29f1d5c9b56596c50d51a7cfa658ee0",
 "example_nvfp4": "49b30db3e58ec9a7ef1f5b94c80f3a3cc5466f5c0d5ce730743a27d8fb68bcbc",
 "example_nvfp4_d64_neox": "4e4125f55147c2e371a984ca7b87ff4fae4c4b70310387af55e36409c5a3f292",
 "llama3_8b_k_bf16_p16": "65e16bc53eb590e84fba3fd687361511c94416dafc752a39013094b2a31675a3",
 "llama3_8b_v_bf16_p16": "dbce9f4d9555ccc268d0d378fdc1a55cc2557a4630cf9dee04eb61b48b32b8f3",
 "llama3_8b_k_fp8_p16": "c66d00cc7302cf11d70ae0489792c99a35e133663b0756c7db9143c335877235",
 "llama3_8b_v_fp8_p16": "83f1048612aa9e10ada73827d6ccec4069d7b59ba8714b9f50d649b2e4bafb39",
 "qwen3_8b_k_bf16_p16": "80b30b7a02b2639708d3385285b7d3bb7167733a74a92c472c78c364e4503f10",
 "qwen3_30b_k_bf16_p16": "84ed9099997fdadf3685b9422474b30952c87889d9e1fd2c5dcfd1a52842a195",
 "gptoss_k_bf16_p16": "e132a288b2f3779ff62405d7d90d2d6a4e263680d80a43a6c2112add581bfa20",
 "vllm_dsv32_indexer_fp8vllm_p64": "053f59fcbd47d4f1c1b7582a923808a6b54390396a8d6c79b549b3e86e1d28d3",
 "vllm_dsv32_indexer_fp8vllmue8m0_p64": "11af9024f1a526731c5b6a79b76286c3ba80df92a223dcc5ec69d6765c0f7c13",
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
