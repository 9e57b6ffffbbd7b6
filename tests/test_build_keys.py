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
    "llama3_8b_q": "5a1a5e5221279e679439d8d519aa2300a716569f98ec18e70a45942640e8a396",
    "llama3_8b_k": "6ef08e35d4704c51b277635c957415d91993f5386cba595c10f7112324e28165",
    "llama3_8b_v": "215b2c33c3f3c59a16182bc98555d59c390b4372ed1ef9df838f6c94fa7a6b84",
    "llama3_8b_k_fp8": "ca572284cd312d8e3c1a7c1cb5b88a4b779436eaae840e6de6e5245655c91ec3",
    "llama3_8b_v_fp8": "5717dd615bc87accb936bd1c308890a91c79f1c85bd0d94412e06bc3ff8a2a34",
    "qwen3_8b_q": "b4c805212cb70f06e0fe613e0043fb7f0b42ddb7b211b01dea2b3f91aa288566",
    "qwen3_8b_k": "549a8303a9b54dcb1503201c9e7b0029bcf6bdd6399ec9f843e8d35e44301c55",
    "cake_8_1_q": "d2cec50623bc1ca4ca5551c58b2bd1e55a735fecc9c55848bed738d9cf491201",
    "cake_8_1_k": "1cb32acd5173e876983816f2059253b60a027aca7b20d615e2df29817df3c696",
    "cake_8_1_v": "5420b3ef70be8c5d60fe162e1be9bd74fa9951c3d1904260785afc347781a121",
    "cake_64_8_q": "1815dfded3eef311623d33ccd25b8b7afb0b3b4b397e36d205c4d5c400918990",
    "cake_8_1_q_fp8": "4fe3cbaa481835cfebc95bf7951ba2abda3ba13140275eab02481b455a95bf40",
    "cake_8_1_k_fp8": "4f6078a0717a95fa646c89f1e6703b7271225386c8be0bd2c86bf8c847263436",
    "cake_8_1_v_fp8": "1cd4ff6832b5c86c2f215f8c166c196660c255b8ba9cd0c0682bb0557be5df5f",
    "cake_64_8_q_fp8": "69e5a533c1fa90038a210b156e6d22f5682c4b4213fb8b5e133eb7666f4ba15c",
    "qwen3_8b_k_fp8": "e2cda656def4d51981c9d5b63b795ffc26b5f067d72d73608fbf8a1b9bcb2181",
    "gptoss_q": "cba496d6b98b192686c252dbb7a97f6327ca16316e91195260ebad24d792eb3c",
    "gptoss_k": "1a9c090eca2a725f1b0604c03756b4d72b6f9fd4e162602cae0c13598d17b927",
    "gptoss_v": "5c5882a46773f80c939670ad0b044ea2e47bd6d7511f7f2c0438f5a7803ff798",
    "llama3_8b_bf16": "70c262d1f2d123ac056fe810f1ee792e206c21100ed6591a16b7acd3c0eef03b",
    "llama3_8b_fp8": "9bab09513ec2dcd077e626f586dbd6399ed6a79f3fd1ce6d01611ac9b1fdfe63",
    "qwen3_8b_bf16": "4ce0c6bb3b8d521fbd96df71415eb33231c4005e7a4524d51d5af27629996d41",
    "cake_8_1": "b6a03c4299da280e1d3c39da5ae05bd465261f79afa852871cfe64c7ac5a1009",
    "cake_64_8": "43c4e3bf540a5846b6f722ac28d230c7c2ef5c3e8d50b779c533f43db84c8664",
    "cake_8_1_fp8": "32ea28ce518e0be2cb88bd0d1acab6756b198e522326bf7c9a64c24b8c54f518",
    "cake_64_8_fp8": "64ab7c7c1c0803db958837aa0779217505875ad340f43bbb933a673c70fc1df0",
    "gptoss_bf16": "38835b5a8f24be39c9ee5883847f6f042e6f6e4ad5549f6d59ff647cee126a6a",
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
