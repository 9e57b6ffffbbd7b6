"""Pure tier: build keys are a function of the generated code and the toolchain, nothing else.

Moving a module, renaming a function or reorganising the package must not change any key (a
changed key silently rebuilds every user's cache). The keys below were last updated when
the device code gained launch groups and dense (slots: token) outputs (a new kernel, a Params field and a constant
of every math struct) (tools/golden_keys.py prints new keys);
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
    "llama3_8b_bf16_q": "92293a7ef28fb4b3f5c1d542912664ddfc78df10ce0d2d16475652f76ac64404",
    "llama3_8b_bf16_k": "6071513f515328c284c526952d58117a4fcb70033faccfe1734da63c567654c0",
    "llama3_8b_bf16_v": "21a91ee8767f931d02d74ba77231d5fc7a0adcbb527957304206eb02eacc2f9c",
    "llama3_8b_fp8_q": "3ee239aff47148d4d0f399966426b66b519411e301d13f63229443ea7703c112",
    "llama3_8b_fp8_k": "b3b3401a6e00d329df979d6037c18dfda247cdc5c922c77f5d903acbd6ff4023",
    "llama3_8b_fp8_v": "471f10528c98d013d6a7e63b2ee2cb95c003fe6f8a66d79aa57df125365b7a20",
    "qwen3_8b_bf16_q": "f6441f0ef9ebe5e11b839bfebe9efe37ab8003ef9c8e39f491a6286f4f7b30ac",
    "qwen3_8b_bf16_k": "a6c5e034b5173cee04e9deb26b8c74e32c79cf8826378e246e902d6ee27db97c",
    "qwen3_8b_bf16_v": "34809ab7636018d967658e35b59ac93fb8147bce86a24cba4650e4e8d4994506",
    "cake_8_1_q": "d2cec50623bc1ca4ca5551c58b2bd1e55a735fecc9c55848bed738d9cf491201",
    "cake_8_1_k": "1cb32acd5173e876983816f2059253b60a027aca7b20d615e2df29817df3c696",
    "cake_8_1_v": "5420b3ef70be8c5d60fe162e1be9bd74fa9951c3d1904260785afc347781a121",
    "cake_64_8_q": "1815dfded3eef311623d33ccd25b8b7afb0b3b4b397e36d205c4d5c400918990",
    "cake_64_8_k": "e3bf8c98dca145310d5d387a4a132f8dd823f2afe42ac6187634182c0ab8edbc",
    "cake_64_8_v": "80b911b52f405347959633fa4eaddcf0059ae77475842e4058816b1c7189e1bf",
    "cake_8_1_fp8_q": "c1b77ebd4bd8298f25d1b838fd1156c4038203a63558e1c20fddfe18b71bc58d",
    "cake_8_1_fp8_k": "8c63ffe2688530d42d7604bacbcf61781bcd493a055cb4fd5b2519d6e68545e7",
    "cake_8_1_fp8_v": "e04080cecf5cda5ee972fce57d694734a7a1634b45e4f7c5ed00489de8ee5e8e",
    "cake_64_8_fp8_q": "1da0cd233a9d355ef7eb8d6a2ac3e5f171e7fe7837f9154f959add304a808883",
    "cake_64_8_fp8_k": "16c109b91e4f2944ddf6989e9bd12e4a0d9a4c94caafb4e6ad9ebffd8557d7d5",
    "cake_64_8_fp8_v": "ef3fa3646925d350f04c7b409a616b62d618122c34fc10763570b58103ec9b44",
    "gptoss_bf16_q": "7da52e8ceab81663d4731454fa7e8dcceb3c03ec717468ef4b99e102d70917c3",
    "gptoss_bf16_k": "298752576f4380b995aabf6ff290372074aeb4661841182cdeb73cb1b94b1d34",
    "gptoss_bf16_v": "3e66a7ea6847c3eb2f8b7afc17fa030f604f05ec4b6be2e515d7e0e8bc714f20",
    "llama3_8b_bf16": "656f73b2226d048e367840e81261a7fc85febe74e01731c820bde35fdacf573b",
    "llama3_8b_fp8": "44ee1a8d3cfd7ed50baac2025f3af9ec151305f17e1fc18e85ff0c270bd4bdf9",
    "qwen3_8b_bf16": "7078ccf80b1173b3c7d854eccf4adf41e1ce7678a291b7f2f894fb5354437625",
    "cake_8_1": "b6a03c4299da280e1d3c39da5ae05bd465261f79afa852871cfe64c7ac5a1009",
    "cake_64_8": "406e5f8a8c3d911f348f1adb7bf0b01de6cbade575386e802bbbcfff451d28b7",
    "cake_8_1_fp8": "35d85d73a8f2501e423c2f10c3b130c3c4b24b5c61b00dcce0282640d2784fd6",
    "cake_64_8_fp8": "c71fb82d707705e61ffe7a4c900fe15c29a9202ecf9b75a159b1c6a0f80a5cb1",
    "gptoss_bf16": "58bb1b2195ecb8bae82006dd04dd956ff939bd0317d5f79140fd93658ce83405",
    "dsv32_indexer_fp8_p64": "15f1c403792aa508106056c3c7351a8456e45decca48ceb65ab85f2ee1959790",
    "dsv32_indexer_bf16_p64": "ad1eedcca06e3ca50e6b2edee3135e276175ef1051da01a47297a529268ef2d9",
    "dsv4_indexer_fp8_p1": "38bb3c3815c9b669fff7efd50e1ca4e53880c66e35abf6351b4315c135774c1e",
    "dsv4_indexer_fp8_p16": "1d53fb24e55eafdf8da6bfa289afa0a36118e64d79436446a40fcb8db15aaa4f",
    "dsv4_indexer_fp8_p64": "76a148d8047849519e4d9b7052d1e90e76ff4098673eb9662a93270874bc67b1",
    "dsv4_indexer_fp8_p256": "fe8c565829cd85821f75a2b557ab944fb1d47422426ab319acf5a65c172af5d0",
    "dsv4_indexer_bf16_p1": "8a4551173a082f510144b096a742e95f08258ba14e39ac1c9fbde04a95d0dfd1",
    "dsv4_indexer_bf16_p16": "c1bd728689cb78379081f2748e2425c03b02da33a3e7dc26751f4ae14a40c9bc",
    "dsv4_indexer_bf16_p64": "771471ae287432d7ba8597acf8fdd2e92810031afbe8069b70f24289fca0cdd2",
    "dsv4_indexer_bf16_p256": "4fcff7abcb3dddc4ed5cb8290f211f24de269d43d1ec17aea54ec529b4200d43",
    "dsv4_indexer_fp4_p1": "71f0a31ce1f21f22885a8bd333dbb9cc625b13a075dd68255e6af2a1fde4adaf",
    "dsv4_indexer_fp4_p16": "c3bbf3e4d763a2b2e3b50b514bf9dddf1baace67855810a4d8d2092f56fc0b28",
    "dsv4_indexer_fp4_p64": "5727098a4b5a71e12c91d1600b11f9d01db5258bb85553daf0e9f47f0078edd7",
    "dsv4_indexer_fp4_p256": "e95ac51c109a62972a15e4187af57879b2986c99351a4b862eb58e63a64b6583",
    "dsv4_mainkv_fp8mla_p1": "3725a8c9762291ea83fe19ab9f003e2ce5a7f06416ca911059f89863c5e75984",
    "dsv4_mainkv_fp8mla_p64": "206ded037b67e889d1f63714b062f493187fe16d617c952caf21df97b55e4a72",
    "dsv4_mainkv_bf16_p1": "4d65c48e4d59a9c3b397cf56e1dd15fd46b7bbdc6389732fe2ce7a255af4213e",
    "dsv4_mainkv_bf16_p64": "86aa40aaf366b5caf6aef4479ffe51ad793b2ac64fb8a20f37dfe3032e30f9b1",
    "dsv4_mainkv_fp8mla_bfround_p64": "f6d34a7b8e1cb456d42445c247c402ad59c176cc8bd7f49af876209a85aec6f7",
    "dsv4_mainkv_nvfp4_p64": "a24e88711afe35750bdcae842af17b15a0e7131cd68f020b9c3387dd19cd6397",
    "example_fp8_inbf16": "9954a2b952ce57f4614996eec570d87b922a3e05bc5e8a5feb2031e93e63b030",
    "example_fp8_infp32": "572fd5d055c0c159ba65abd939f221422e7fb1f06e5a556e9eaa587bbc178f09",
    "example_fp4_inbf16": "8ab211ff9b5be7d04ef15861ce789f3e2aceb3a579b082433509cd70ab7e9df8",
    "example_fp4_infp32": "b8bbede2fc09982ef798366841e5ec3d0fe63e879152c3677c1d1d08368bf9d6",
    "example_ln_neox_head": "151decbbdafa590b3b444a681c4aeec58865fa7aeda5f7e3f3a7df9f9c6a9e83",
    "example_d192_norope": "af6dcbde56c889d376ed00c8ee15727688ee92768e40de4bccaf0539106dff70",
    "example_d1024_r128": "cd6eb00f4eb23b104a433f72d460b7c10b7745772f33a98270e77743529decc2",
    "example_nvfp4": "13b962bd76593bc284ade16745a6c6fc421131e9474182a5df8a22de025eef41",
    "example_nvfp4_d64_neox": "e24942d61cf510554070e86b26e779477251b81ed521c2b4389ca1687d88a1c1",
    "llama3_8b_k_bf16_p16": "c22c53aa34546c6448e43b120e0bbb068a58c28451d1298a5ab2d45a966cd1fa",
    "llama3_8b_v_bf16_p16": "6a53d1f554b9b850692560c4798b1e7e2718e8f0927deedb41f144784b22f6ea",
    "llama3_8b_k_fp8_p16": "0b7ccc1cd974f7a356a78b35650a274ceaa187a0d426dd1fb5f2e0aab48ba049",
    "llama3_8b_v_fp8_p16": "d0d691c7e0a9e3c7a0e770b50a04453fd7643d1bdc183dc3a543043f4e2a581a",
    "qwen3_8b_k_bf16_p16": "894a248590bafd0f6ac447d3ce2967642bc1e142a45d37842bcf5f4d39222509",
    "qwen3_30b_k_bf16_p16": "fe632892de01f43afdca8d7c55718edd299c1ada1ff910a402b68a93eca4c8bf",
    "gptoss_k_bf16_p16": "03d4185a2f8aecd8d6bcb5169745bc1e8a0321dae47cdc47564b1d95a7ddcb4d",
    "vllm_dsv32_indexer_fp8vllm_p64": "046f7ab78345a49f80c391b237095456bde48588f6f9690eb999672533cc1366",
    "vllm_dsv32_indexer_fp8vllmue8m0_p64": "0fbc8b48de9e67b292670f24b81eb6d287102d2ca75364f25e2e3353ee29c733",
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
