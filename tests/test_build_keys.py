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
 "llama3_8b_bf16_q": "0b2fcd95c7d7ff70ff8f42fd0ecbb83814776106c73d3b9cf81f8e1edbad8338",
 "llama3_8b_bf16_k": "c3636a5f3425cbf1f4b2a4d39998fe841840e152a59bd139ff4228e5cf16abb5",
 "llama3_8b_bf16_v": "5e71a2445215d4f3f1aa346d780d333fcbf781209c37a520a8594a3e61ef57bf",
 "llama3_8b_fp8_q": "e04f3800883613919240397733290c79ea78c739018ac2a7115cae0081abe574",
 "llama3_8b_fp8_k": "a58c0d625f337040ff209fb73388ab2ed52e0bc209010af641a4f2a2a6028b95",
 "llama3_8b_fp8_v": "9337f535b329fced15fa208dcfc55d486b35d6c44f7ba4ea88a767ed6c84eb48",
 "qwen3_8b_bf16_q": "5aeada4447cd8bc68ac6b6f70a3fae7ed456dc75389e4653b5b02136d67d5e63",
 "qwen3_8b_bf16_k": "6e7a63c7538b934f0a200be40102f4143fd322b7b0181e8eb2e2f7d456a2c371",
 "qwen3_8b_bf16_v": "3183f50b13684f70b8403820ec2a365b511ef80e916d7794521c814b45dbcf15",
 "qwen3_8b_joint_q": "f195fe6497a914c6b91484334707b35e300f14140749aabb2194a07e74a7cfd0",
 "qwen3_8b_joint_k": "81be2c3e81cffd4f98a2fc082a489fb90bf26b215a096a37a6b5177d3d2cbaf7",
 "qwen3_8b_joint_v": "b154ce73e6be2455fd8a98dd6401a063c22ddcf59f6fecd93d2cdb4d716b1403",
 "qwen3_235b_a22b_q": "a05403b220e8a2cffba86eb5933b4be0b8ec4dd0ceb5d69ea92945f3c1d4bc11",
 "qwen3_235b_a22b_k": "492f0a152156611ceac36e4b3c005694a27ab54b6a1af1f9146345e24d6f0187",
 "qwen3_235b_a22b_v": "f62c7b3807c944be03a160e83139f4e24dfb7c63390588ef4324423314ddaf8b",
 "qwen3_30b_a3b_hnd_q": "d5743dcb46399d56a6628362c625e5f2ba395e1702079b0df0865c971bf0db3e",
 "qwen3_30b_a3b_hnd_k": "d035f3076a3b8e74faaa0938e69737089aa4d50e0ed2b62a9b03d21762c8d78f",
 "qwen3_30b_a3b_hnd_v": "a7134033c8cc7d4ac45e3c4985d8b580f7950efbe9df9e6977572a3350576efb",
 "gemma3_4b_q": "3a42361d6c7b3d3e80b6df48beae6d94125b46bb51908e904de9472b32910b6f",
 "gemma3_4b_k": "5fe08670ef52c3f1dbd155232430d859dc9f4a22ecb20d3297ce2f79754344b0",
 "gemma3_4b_v": "d3c7a0123e472b677df5b7356f7bf9995a5559e06b0fbc72b04a692492559fed",
 "glm4_9b_q": "b35a870bb22c0c590c3ea443597d437e2963b4bedf814ba118ada8a32658e8d6",
 "glm4_9b_k": "82766bfe9d30c13be3af6b5ac12be574f2999e4ea0ed469fbb90a9100ea79642",
 "glm4_9b_v": "fcb8af648f13004e2951749af00e9b4340a6799a82ad702e3b06b0fff4969c47",
 "cake_8_1_q": "9f21e08d4e487bbf07a76d3a499a91fd1ca960e0c8a690d9b694b9f0968abe0e",
 "cake_8_1_k": "25a1b8f6b326ee0dbe5d0d710f40a7ece7a247d4e9d19629223cd8c2fc3fe37b",
 "cake_8_1_v": "90d4f92eab62df253cfb0e4a5597171d8b41af483470481446971fad1a267752",
 "cake_64_8_q": "76634a3ed98c46b754ad2db51071fa5f9f5c0a9755fee3752658348dbd697329",
 "cake_64_8_k": "48e904df9d0e5da1640f15816b44a8f0d3929fddeabb68f62af2539e3fcf6b16",
 "cake_64_8_v": "db9e958911e9782ec82bfbd85ea791c016fc0acff19c44c5596fc686051c73ba",
 "cake_8_1_fp8_q": "4cb446233c51f08cbb641c9dba05bb3526c4aede7d1f1cc5caaaba3bf3afd75c",
 "cake_8_1_fp8_k": "c87aa9f16aa997d3a37f49363289e308f17216082ee07043b1b08e3fd76fd745",
 "cake_8_1_fp8_v": "90453d3071ff37334d2bf4f22cc5971740c17908c039f0c3e59531588f2a971a",
 "cake_64_8_fp8_q": "febd18badd3af6f1f1d81441ff7390af0fdb3a5a969a24e078cdabde72bcd503",
 "cake_64_8_fp8_k": "ec6b48daffabdb494441c48aa173cd33f15d3631436d42b0f6e9fefe21c73349",
 "cake_64_8_fp8_v": "e3a63412cff5e75d680b1ffe229376285ceb5af62ec3b8e42eb6c7316b71e396",
 "gptoss_bf16_q": "c2ba2c793b7ac7cdfc6b12555aef44ed316b9ffb8c1c4b8ce57d81b41274345a",
 "gptoss_bf16_k": "1d82be6d8f09c9ec1f4bb6c4bd3bb04a3b3f11ce7ba6263120991eaf848b17e3",
 "gptoss_bf16_v": "9162fffbe54b5c2de200400e7a3cd909c4a53d322854cf3655947c0a5905fcae",
 "llama3_8b_bf16": "f4b35f4c930bec79cef61ae0b857a308917e644074cc70633b1625de219e06ee",
 "llama3_8b_fp8": "f0afd7ad825795e51d1a4ae912c387e0c48ccfc20cf12e6c3c3101c94c669012",
 "qwen3_8b_bf16": "11d92b285ec557a4ff21e854a775a317496803c6ac5349998aa95f67b95020b4",
 "qwen3_8b_joint": "4b825b63e91148c022def611715a5e30bb01d00fff923e940d9136b17d7b36ac",
 "qwen3_235b_a22b": "ff8a98821a4ade0c918dbaec89890581f0d2daa98674b0910ed26ac516d58e93",
 "qwen3_30b_a3b_hnd": "168cf91dc885cb555216717f4fb44f022a8aa58b5f8d8562f91830635fdb7bd8",
 "gemma3_4b": "f1b2d734162fb99ec892ca54976b84b3089b13f47461cc7fe837f8289b10d5c4",
 "glm4_9b": "b5ecbf838bb38a91f73b73c5ce724b1bfc409d7f681a344900101298cd3738be",
 "cake_8_1": "46254cf2776566aa2493e2a388411ebc3d6cb8a2f7ceeff649b60fa881e3b2f7",
 "cake_64_8": "5f3dd218c0e6a0d343e097e777fcb8cf978990c8f0b8e98f8bbb2d851477796b",
 "cake_8_1_fp8": "1d3a4113b147024b4dc5e77dddd59b9e70f394380dfeb5815e320fcbc7c66690",
 "cake_64_8_fp8": "ca0357f47449af0ee42c2ae8b0303ba9982318b13cc4e6aaab54137491f11db6",
 "gptoss_bf16": "8b3e66c5cc065c3d17d3583eca47b42efb56120585a6b9ad3ea2be8727314301",
 "dsv32_indexer_fp8_p64": "d3efba17626fae4e49967235ee4f622ae7d92d500ceff4461287772c9f642b78",
 "dsv32_indexer_bf16_p64": "da5380beed58ae76bc5b1864d776bc21b52ae7445de93c34eff27cf9cdd254ff",
 "dsv4_indexer_fp8_p1": "e9eb2cf81a2c6555c3025e1dadb914356d142973a9133bdfc5f0cf178718fadb",
 "dsv4_indexer_fp8_p16": "06ad7a68270cd77f892ebc68b5a4cedc5ffb4329bc7ccfe75d8e3cb75ce9d011",
 "dsv4_indexer_fp8_p64": "f2a855323ed4a34fa6c736ce89ebe2bb3d848f3dd020eda5d22d25452a901153",
 "dsv4_indexer_fp8_p256": "c6518861420e0cc255da3b3ec0e639423300b03490f174510a0e3eddbb917fea",
 "dsv4_indexer_bf16_p1": "941c96450618fda5c1c52eb25502ac7dfd0906d96bed50560a4a806a62454036",
 "dsv4_indexer_bf16_p16": "8ab406a48d23b8ac6b42d5978a73ab0624d2e6a9569732ef454959d4f3c60862",
 "dsv4_indexer_bf16_p64": "68e76ba961a27f0d5e4af93b43c7aa1caa4b8b2b721f3f98c811b57ef4576a76",
 "dsv4_indexer_bf16_p256": "6dad8b18e2f37f239314d8a781a531d1a9e5d46d0a8d613e084c4773d42740c6",
 "dsv4_indexer_fp4_p1": "f2e4678a2ce9e2ec4a5b98bd1b9931703c24c15bad1177da48c3cd7182f87ca1",
 "dsv4_indexer_fp4_p16": "fb9df465eb7e1d00fdc07e8fa54152d17bbff2997883056350721cf7d0a0f73c",
 "dsv4_indexer_fp4_p64": "44ffb4b5c902423299595241f7145aa050e9720fa995bbcc3d91870f62967f88",
 "dsv4_indexer_fp4_p256": "49c0dd3638eb3278dac44852ff7893d2cf7df4db3c09c8ce5c018296d847eb14",
 "dsv4_mainkv_fp8mla_p1": "198f3b839e5b5927a655313ec4c7873024e1dffc210a4a942ad27bb6ad61e951",
 "dsv4_mainkv_fp8mla_p64": "e662c36f013378fc6757938410e590b567d23ea6bdcc0f95b11919aade4ae1d0",
 "dsv4_mainkv_bf16_p1": "5006a1018ba2035d34da19061dc2ab31b5c78741379707bdb011ec1889001c34",
 "dsv4_mainkv_bf16_p64": "5781d80e1822148de927e9167fc01ed4376220f9dfbd17b8863f7623dc9b0474",
 "dsv4_mainkv_fp8mla_bfround_p64": "314bd74f358656386375615abb4ffeb0634cb18f40f9e66a4d10c01c94c1e52b",
 "dsv4_mainkv_nvfp4_p64": "f84463477f8f6fdcbbe4d74d6f7b9f6b1ae827cbae81069d198288843d658172",
 "indexer_q": "86dcde974f771deb89a98ad53f136435bcb42ce0c8b2d5af61e2693aaf66827e",
 "main_q": "94ebdbbce92d10cbb3cea28801a404064fca58b537aa1c56755a953791304240",
 "main_kv": "2a7e713d4d83aaf701b134e44a396f07862762905ca900f2cd6aba237bdcac5c",
 "layer_q_kv": "520f5d1412ff6147ae47e0f171ac8f8d5e9acee992bb45ca29d3ac6c3b432898",
 "example_fp8_inbf16": "7e8257f2c993585c4cbb72be77d5334c351d27a9f07eb65746b302bb19bdf586",
 "example_fp8_infp32": "7136f2f1fb74ebdeb5a09a3cf295acdc8e29f10475aff563c467e69c7432c066",
 "example_fp4_inbf16": "8ff3e8ab235ce8b103b8bef36dca9b3bd80465f14ee0b8922dd469686b789e95",
 "example_fp4_infp32": "779ca1722d8ef2a565ee1df4bac81176e76f6810402027efe3e922f64709063c",
 "example_ln_neox_head": "681d98c63e71f39ddc329fd169eb9a6a10f730f6f289a5a71a9c8495b6266e57",
 "example_d192_norope": "a041da88d9a98d96387637002270e8086354ac652fd157bf4c085f0dde19eb05",
 "example_d1024_r128": "cb75872d3da2dac9174314d757893f9cd5b94d0af3dbabc63285dc6f6f915273",
 "example_nvfp4": "e37036332fe8f036d9fc9a4001cc95ed82876cb3fbee79d20dbcc7fa36f2a163",
 "example_nvfp4_d64_neox": "15c6286f4369f0a0172f57616614a476e94aa3982e48f45f70a1dc8c80f19910",
 "llama3_8b_k_bf16_p16": "963429e79e4b36a9294306348d2de8b53881a61b2a66081ecab75ddb9c4fceab",
 "llama3_8b_v_bf16_p16": "3ca96c9beb16c8590dbfa04d3164991d61998bde695a0373a7dc8ada644aac16",
 "llama3_8b_k_fp8_p16": "9e2a1d98c4b87e7013e04613b672e7f499199b17fd63e9db6d4a474c6aee1113",
 "llama3_8b_v_fp8_p16": "3cc8d74a299129d1bac5e05b05253a6911931f70961f99c69a56341d4ee184a3",
 "qwen3_8b_k_bf16_p16": "be14c3ebceb1e966abb40cdb291857f525ff957d3763c8acf6fbe164158d39eb",
 "qwen3_30b_k_bf16_p16": "8f5de4479106194eedf2d6ff6a7d3854b229b403cb2cc13467bb9ecc1784260e",
 "gptoss_k_bf16_p16": "97d3e9e4368df11f7434b74f23ab811480e089c2bb9e3df0d92610d1cc724718",
 "vllm_dsv32_indexer_fp8vllm_p64": "9f7ecee558b5e8b172bffc1e2765210180ca3b34043a134b7f43de0258d78311",
 "vllm_dsv32_indexer_fp8vllmue8m0_p64": "f57967208c2b1d12adc2c1beec1758fa03b4d44099525c8a42a0e0230980840a"
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
