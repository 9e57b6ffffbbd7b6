"""Pure tier: build keys are a function of the generated code and the toolchain, nothing else.

Moving a module, renaming a function or reorganising the package must not change any key (a
changed key silently rebuilds every user's cache). The keys below were last updated when
the device code gained launch groups, dense (slots: token) outputs and HND pages (a new kernel, a Params field and
two constants of every math struct) (tools/golden_keys.py prints new keys);
update them only in a commit that changes generated code or the key recipe on purpose, and say so
in that commit."""
from __future__ import annotations

import pytest

from kernelgen.build.lifecycle import plan
from kernelgen.build.toolchain import Toolchain
from kernelgen.spec.parse import shipped_specs, shipped_variants

pytestmark = pytest.mark.pure

FIXED_TOOLCHAIN = Toolchain("nvcc", "/usr/local/cuda", "release 13.0", "c++ 12", "0.1.15", ("/i",), "/l")

GOLDEN_KEYS = {
 "llama3_8b_bf16_q": "331296fda74750edfd1363423dd50563110bd61f80c7d99a0a9d3e1a90314341",
 "llama3_8b_bf16_k": "d2c14367ccc1b01034321261972db337d6a1a04f722ef55fa4489321c76610e8",
 "llama3_8b_bf16_v": "3d938cccce84cc227e236968902bbef3bd673ce2eee71f256848bfe9e442d266",
 "llama3_8b_fp8_q": "7ef55cb1a9937c2d6d534e5262d25e8a6672ae3854fbb99f9eaaea9e305c7d73",
 "llama3_8b_fp8_k": "6c0749863fe74add942b429eb8dee16d12faeb94cf216ff9f944f75dc2494406",
 "llama3_8b_fp8_v": "38cda7b3d317762a791e5ce70dc0b76613a4a7efa1d070626cb022d3ba7d2074",
 "qwen3_8b_bf16_q": "097b836b8a3b558ccf2b61e9fe49557ae64a28d1e475304c2d0c788e2457e128",
 "qwen3_8b_bf16_k": "3a22be9ca32003722d5951eb37669e01b85633a5bf77c6ab05e77714e5b2226c",
 "qwen3_8b_bf16_v": "fbc58cdc273c9271f17313799e1946b1ec9fe125899f5b2e5bdab3d4259878ce",
 "qwen3_8b_joint_q": "6b05f1e9be307ee44d085ad15f3c8e6f89c256db1a0319596e4cce3e883d31af",
 "qwen3_8b_joint_k": "98587a60f584671e43e8d08824bc75f8ac1ed460e1ae0e9ffcd98590c034949d",
 "qwen3_8b_joint_v": "a153bd0bc0a4eceefd69b491405026b9064aa82baa56a920cad5f676e6569efb",
 "qwen3_235b_a22b_q": "1b1bda3a50a1388e06ac9a9141d2cc7129d96b6f592b1ae42cc50a5d85762277",
 "qwen3_235b_a22b_k": "6eeb3b6674c99ac875d7728f26674bfed2bed61bdbbbc446fd8378260c43022d",
 "qwen3_235b_a22b_v": "e8040763b21ffa2017b980947ef1e2d217dec54e96b5e10a9dff9fc537a1eb54",
 "qwen3_30b_a3b_hnd_q": "27573375375dbdbf6d25f00127030d60fdc28ee85c2f5f6ad0488c62027a1818",
 "qwen3_30b_a3b_hnd_k": "ebac1006fe527182a1b9f368f358475df08b04067896f0b667d57565d1dbacba",
 "qwen3_30b_a3b_hnd_v": "4a0c310bf91f2a0ccfb616f982a4b1e99ae5159249bbd48641ff8c9f54b7a713",
 "gemma3_4b_q": "f84460426d42b30a8d14f19f21af0c711cfa6c75d524cf499e7ee663b16e0b27",
 "gemma3_4b_k": "de46dbad6f5c4f7162c6ce0ba429a708f17e17c021ef97278188a0d37c85f448",
 "gemma3_4b_v": "7fb589d03b5e428ea2060249087308bfe21a69b9865375db2714618c6f83370b",
 "glm4_9b_q": "d630f06805d0607fc6f9d5b495cd6f0128455f88242857d44604d322cd78192f",
 "glm4_9b_k": "6f2b69adeece719aab6907c5ea0b6d1de266161d943353c3f71f5fc5e92dd613",
 "glm4_9b_v": "2510898f00c4d569a13b38134b234e9e342dc8cf3d8b1ff9011d85cabcc7b5f5",
 "phi3_mini_q": "76d962aa9d37234f751415dc736038284303c57798da78463f92ee4fc477bd57",
 "phi3_mini_k": "ef3388ac8f174443e8e42e65888c765f0477dd927e0d9de94485e855e92c717a",
 "phi3_mini_v": "301aa071c15f6475bab2e353040f31747bd461ddf94dd5830261868d5360a82a",
 "phi4_mini_q": "a2c3867d90873da2f8ff1dcc1840e3d4f2429a006b159dd2c4150ec963eda23c",
 "phi4_mini_k": "f2cc22db514cfd33eed255f0bce0c5b54bd527d92878c91253be08104d99de69",
 "phi4_mini_v": "9dfe1221488a08d0741c282122a5d95844ecd8f71df450944d721c8f52203adf",
 "cake_8_1_q": "b9f9c2b3a4e59b16591c924673834d0fdc2181a63b985d2da07a8d3fade50e84",
 "cake_8_1_k": "6fd5cb0999078d6ceddeceb31472cef3a0b8587eada116c01ed81c02be548b07",
 "cake_8_1_v": "ce3e752e0cd0970c1fdfe2cdb980d1b0e527b26c68c11185663f2f351440dd61",
 "cake_64_8_q": "58d669a1e97404f904a3acf674c2dc0eee94ef57570a8054720621127fdde78f",
 "cake_64_8_k": "2590208fa2d11005bbc7fce9e35141977cd03f330a1bc1671c624e99b49b609b",
 "cake_64_8_v": "df6d668649f5378c8a311738e6e6b76faf83dd1b82a90ebdab9f5c48a59a47d7",
 "cake_8_1_fp8_q": "35b6861981a92657a3f27cb7fe4802d717f9caf13cab1cd8d402601f330ca2dc",
 "cake_8_1_fp8_k": "2de5611d7f6e390f0b61408b732d9ae538ac312698cdc023db099966ee9a9f63",
 "cake_8_1_fp8_v": "5827db99b8d476d59ad89454787ff16b43004989d4683b01e169d7daab4c46b8",
 "cake_64_8_fp8_q": "df39cb86f07a6ecbdbfccfabf1a0e23007badef74798ee3053597671c73dc113",
 "cake_64_8_fp8_k": "c3dc2e7b895091c453db25d7476b540668eb01b5c95e0faf4bf7bbad3d9f37e3",
 "cake_64_8_fp8_v": "fe3553100d9a2dd1d43b1edf3cdd4967048900fee32f569b2842313c658ddc4e",
 "gptoss_bf16_q": "313c7f1ca50fb387b349a6bbb8d7ff0c42696197e50d0c6b5ddc452cec1af385",
 "gptoss_bf16_k": "a436c471cbb417c85b96d9c2666b3a35f6b368ad2ced5d6c0a0698154edd8e8a",
 "gptoss_bf16_v": "fa48ec0a008d798361d6587434f4f30f37c4ac215ea2a05c2e5d7ca808735e28",
 "llama3_8b_bf16": "ede958412eb053a33cd7c460179b393ffd064d81d5e792227c33761ed272fc08",
 "llama3_8b_fp8": "a40ff7dad5a74d7de14e700dabf16c66565e92c29154ea373420afdfd15fae53",
 "qwen3_8b_bf16": "d75ec7a91fa7ea2c68ea1b121dd3b998fee276da5f6b9e8e9ad72deff8b2b7d8",
 "qwen3_8b_joint": "945df9c341ef3df0d345007baff9ab996d02581be9c0dba9cd4d58c046658611",
 "qwen3_235b_a22b": "2f3ee693b023405b2e451babd93910bfe211bc0300d3bf789c91377f1b13bbef",
 "qwen3_30b_a3b_hnd": "766edc1c32d23ebc6b040a001b345be87690b404b93bff98557420d393c649b8",
 "gemma3_4b": "736d00f5f55a19e7cf8e0c1750e30c8ed50230fb19372d71730403608ed689bd",
 "glm4_9b": "339c5e6ac8fc3bf8920af5d00917ff5c379d7817e679d5b61781c17e91b01647",
 "phi3_mini": "6c73680e81f3d7aa6448c235d74477843dfe065f03fde0637069a3ee5717da18",
 "phi4_mini": "5e60d5433b2f9f0278105da9404456e91fb7938d6d912558e907c5ace4b7cd28",
 "cake_8_1": "cf8f41faf1b86826c09cb92d5e838c761b24bfdd36e78ebffc6ab760e3127aea",
 "cake_64_8": "b0c26e6cb15b72c67cfa516331d4ddea5668441a3f98ef5bd01a70cbefd681a4",
 "cake_8_1_fp8": "21fbf5f0438763d6fa71c4e1f216ebfae3b223c1beaf1ca3050d5e2cf4dd59b4",
 "cake_64_8_fp8": "1a2981ca1c00bd417524b1d8621ddf8d3b604d09ca8882e735bbcbc0b8e4f44c",
 "gptoss_bf16": "e790e5672935df584ac37ce790166c6db1696c9617198976251f82f7a02bbade",
 "dsv32_indexer_fp8_p64": "351c21e71da5413b18fde816677639f49786af3c781f0bc3c6c998d964bbdcb5",
 "dsv32_indexer_bf16_p64": "c8f5f5505314d81dbf6d5b0a7fd8d30d038d70fe6b796e52fbb01453771521eb",
 "dsv4_indexer_fp8_p1": "516f49e08a476f6d1decfd58328b0df1fdeb853a04382ea1e6b78de40bd5e60c",
 "dsv4_indexer_fp8_p16": "3616a81b4e51f3c2bd439811df86ce6914989976215cde0c4f08c095bb2a8c43",
 "dsv4_indexer_fp8_p64": "c6d7bc324498f836bae329d1c2b376b757bb28eed047c58a18423b125457b483",
 "dsv4_indexer_fp8_p256": "b1941391a6aac913e4be785a695d607369aa0dbf6e6c379019240b9555ff43ea",
 "dsv4_indexer_bf16_p1": "12d10939eeab714b9f0a17ee15c86ae51094ffe61accfb7499238998346f9cb4",
 "dsv4_indexer_bf16_p16": "aaf838f9327005044cd39a1e454e0741fa1b9d06856900d0820644698cbe9b8a",
 "dsv4_indexer_bf16_p64": "df6a82bd4815e1f6a5cca8f542d68b13fc4398c6a816da356b5188bc176191fb",
 "dsv4_indexer_bf16_p256": "3d8634c870b6e673ee7286440420a315913ca172f0353a5c6cf7d7a4022df61a",
 "dsv4_indexer_fp4_p1": "606151cb0ff0663f3810197109374885c6c7ad4907f25a0e7d188e51e4eaea8a",
 "dsv4_indexer_fp4_p16": "917f666c42cf6ce5ebf153948bd62ff7439dcc0d944f27c7ceffffc7cfd4a439",
 "dsv4_indexer_fp4_p64": "4ba9aa733dccfb939de02af2ffa30e91449d50c328bf1bff0d04b2fe3b373241",
 "dsv4_indexer_fp4_p256": "1183e0272ae9f09037387e03959a0db731adeddbc47fa4fc88dd7bc3c84cdee6",
 "dsv4_mainkv_fp8mla_p1": "24d5f1728a3cdd0c008d06c9cad0645d14c199128e4fb16fccb322926f5d0348",
 "dsv4_mainkv_fp8mla_p64": "51e5ac34b5d00fe3ef34bae0e3719bb8a69982716fbe0a6dd71f7e91d04c5f40",
 "dsv4_mainkv_bf16_p1": "65ba196edf4b62fc881dd77f23244c5186394320f614e087569405a8879ab0fd",
 "dsv4_mainkv_bf16_p64": "31046e2238b4b0d5de195e3f400df406bbc7a343443966b68b7e4637fcb22671",
 "dsv4_mainkv_fp8mla_bfround_p64": "3d84390d32734db698dc22991cbee57015e3be71c6c0e93e86d42ae51c2f8ce8",
 "dsv4_mainkv_nvfp4_p64": "f0a2f4c27e9456c6243cb9dc891e09eef3da70c62f08c8a6c834b6b69c76063e",
 "indexer_q": "4195750ae7b7c278e0f5b5f792df636dc8fa3cc06b5004e707bb0ac6674b6453",
 "main_q": "f0b4e28834f538a247426db2fcdae4475a0597d4937d484eeeed2b98199adecc",
 "main_kv": "3b543dfa95fae4b384f05664a4056d4be27b6428672469bc73c8214ee6b5f3d2",
 "layer_q_kv": "e5dbcf292d56157b9be9fdb69bf8b6cd385be5a9aaf9764838cbafe41be79b8a",
 "example_fp8_inbf16": "f1cbdf1eda3ff29397f035876153e529db598ada6f294f9dd471448c2a164788",
 "example_fp8_infp32": "511c868797b5a0e980f888ac1885cdfbd23909694dc53dae2858138fa624df93",
 "example_fp4_inbf16": "8d015c0b9b0f9068723f0f1adfe897f71cdf91a40f92b7123ead90929e38b926",
 "example_fp4_infp32": "aadc13fb4ced2edf6b345033ddfee83d14015d6cd9a1626e50c14dc07237bc1d",
 "example_ln_neox_head": "b05108b6047fc35c5d55f2633f746d0d436200aad5bf93c1e78c25d8b93ece2f",
 "example_d192_norope": "e69d6a7b07f6095c810cf889ad270864b25ec034447e321556d3df2f4c8bba69",
 "example_d1024_r128": "eef0361a229a0b900851eef2b8b5a5be1e00990ca0d3de0110b3abb9d4091921",
 "example_nvfp4": "e2bb77a656441d63d99cc261aa2283275d75208a102203eb3a2ae964ac291f9a",
 "example_nvfp4_d64_neox": "30e6d6af8fea8bc7a1f10cef58181b24d851493906ef3fb152749a751d0c50b1",
 "llama3_8b_k_bf16_p16": "3b065c4ddec44b8bbcd8608d1caff07be88202b062c6cdca0487e08b4b0243d4",
 "llama3_8b_v_bf16_p16": "c1a9dc32ca75572d769ec086bed5ef4a47021f7d0b174c208068993d8ebfe546",
 "llama3_8b_k_fp8_p16": "4becf0cc09606d23f4a02774bcf172b919dfca1e926feba63cd7c7f5b5ccebb5",
 "llama3_8b_v_fp8_p16": "3bafe614c41bcdfae751cde9efee44734121fa4856815c771470187a3083b1b5",
 "qwen3_8b_k_bf16_p16": "eba75ceca1c78425042c3f7e4812c112f8d8418845f5cf147da7fa1fc2e0491c",
 "qwen3_30b_k_bf16_p16": "88bbebea824df6c29fe07b621acb0fcb8021b9e016c5f0b1a1c985c2d3a27553",
 "gptoss_k_bf16_p16": "8a63f156fa0268f95af543ef79ff6a21bba0a6bebbe19e62ae19a96618b4a8ab",
 "vllm_dsv32_indexer_fp8vllm_p64": "96129a96ee6bead66b478996d5d03dcf41a9669d493860154dc3779acaa7a1bf",
 "vllm_dsv32_indexer_fp8vllmue8m0_p64": "0257fafe89cd7caff1f7413712e9af5d789eecbb7198c70b525fba32bf404d20"
}


def current_keys() -> dict[str, str]:
    """Every shipped variant's and launch group's build key with FIXED_TOOLCHAIN for sm_90a (tools/golden_keys.py
    prints them)."""
    kernels = [k for spec in shipped_specs() for k in spec.kernels]
    return {p.variant.name: p.key for p in plan(kernels, FIXED_TOOLCHAIN, ("sm_90a",))}


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
