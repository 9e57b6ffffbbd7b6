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
    "llama3_8b_bf16_q": "90ce034c8151bf626731eb38e816e68149d2b2e2a58221cb9af7dfffb9a28ea7",
    "llama3_8b_bf16_k": "0d2cd388c82ab3be2577b580e9db34992ebfe2ea2d30ae8d18389b1c424ab7a5",
    "llama3_8b_bf16_v": "70df49bd9bf8de2bc6dd59138830622ab2a6db69c415b7e970d453f4618648aa",
    "llama3_8b_fp8_q": "00a39c8e885c775c9f9ce54e71b1acdbda3d021281f45ddaa3ce2f8aee7783e5",
    "llama3_8b_fp8_k": "2666023dba290f29d9e466fcdaf742f2bad652c3d2f807a9f8610c4094f6b8e0",
    "llama3_8b_fp8_v": "0cf0d36d0ff9868f94152261103d983e3ed1193355029b2755796393bc6c0f14",
    "qwen3_8b_bf16_q": "7ddfe16fda13f700d6609732b60513d8ce75986ca4e0d12beeed5cc68ba5c61b",
    "qwen3_8b_bf16_k": "fae0570ed1784afd46a9ef7b6b4e947f4554e664267a308916bdc2f6fef1beb9",
    "qwen3_8b_bf16_v": "524a6677a40f110a3f1519dfa8d59ce067ce45cb315a155a29a0af0b58e8ed66",
    "cake_8_1_q": "4267b9a7f63a9b0ff45c182215448e837b8248bd12e62dfed175f46558fda428",
    "cake_8_1_k": "307e92ffef45e0f4bd40a9de8243b5eadb76a96df7470f6ab7971e774e5a2120",
    "cake_8_1_v": "8a395bb5ddfb7681920d00a82af3ee3936161b15581c4400e746abf9e801dd5a",
    "cake_64_8_q": "74fa73eeaeb9bb9c7c6e81d2e10fd69323d77dae870bdcd83f164d65461c7004",
    "cake_64_8_k": "9233ec2b183944e87411e06370c292af04755426883143f13d58f3a81e5247c4",
    "cake_64_8_v": "0d0add6891950922efe21082d54285fc0ee2038402aa8499e32c25ed57e9c466",
    "cake_8_1_fp8_q": "b4b84d3bfe0b2f701043142060b6f2fb1d700b951f589c45f50c556d5aee32f6",
    "cake_8_1_fp8_k": "5cb02a6d1f0da847a6a27afa78a0efe8f696daaf9dc0b809a0def4301a548d3e",
    "cake_8_1_fp8_v": "14f97779bd90172f3c921de48575dacc1ea456d4eb7e992b30432d5a2042ea81",
    "cake_64_8_fp8_q": "d683e5387de3c16256df415d434b5d60ae5295d4b810539275ddef92cb9ce980",
    "cake_64_8_fp8_k": "cda5cdb09a473ee106e069dd6f3938967209c6ab8f444d9e1748e69b998fb560",
    "cake_64_8_fp8_v": "73d98e7812fb790902d3a523434ee685642ee7d801a0a438b12089c692da9ea6",
    "gptoss_bf16_q": "4232b7f0bc39349e6f73e3b22601005abf6015129fce7ff269ad49b6f4b95c6c",
    "gptoss_bf16_k": "94d7c00f84f6bff7441b4ee7ff402ab3749e6c640660ef1f7423eae86da34479",
    "gptoss_bf16_v": "d673a3859095906dde634714d4b9256b2f3b9e8f2f5adcabb84980948b25b2c6",
    "llama3_8b_bf16": "2d8a3ab8cbda3a52966cf9f20cd5413c78726c30aecf0e7d04dce829986e3959",
    "llama3_8b_fp8": "a41aad21376761d7c7ee79f6efff1dfe98b9e40c1f11fb570150e1d27cdd34d0",
    "qwen3_8b_bf16": "63953ac3fbff02dcb47c2c4a02ec3f2ad448813ec5deb94811f12050e393b0c1",
    "cake_8_1": "ff556109249c498ee9c59feda54cd7124252601a1f7e49558807dd177b0c9f53",
    "cake_64_8": "a8ddae7f88c2ae11d1a8828851d209573a4ab5d21f59561556c2908face09b72",
    "cake_8_1_fp8": "c08975c932908295d9d182d73a41de3914eeb5aa3343e954d8a48aca39cdbd9b",
    "cake_64_8_fp8": "10b75a50126c8be02e3b411782a87592b2042185217c097fb32cb8d2517eb303",
    "gptoss_bf16": "710c2e592327726e1bf04f0049dffb0d0a2b67fa963aa67bce525edc94d6bdd5",
    "dsv32_indexer_fp8_p64": "d50e9537a8380408753a4ed5a9be171ed323ebab92f3afe72630bf310188d310",
    "dsv32_indexer_bf16_p64": "3c8608f2e07f49a8df9ebe23423db5e7952bf03d361f17c3744476a6edabf264",
    "dsv4_indexer_fp8_p1": "5f0817e52414597e2da5e4a28c6b92a391f04161371255f6bc68979d052dfbee",
    "dsv4_indexer_fp8_p16": "2ed36b74700deb8844a92f96aa44225936f6395ebbac5e347f285d24829aff95",
    "dsv4_indexer_fp8_p64": "843b8ca0b7683703f69b321b7c0a173bfbfa5968f1db93926ad2a802d3a79911",
    "dsv4_indexer_fp8_p256": "5b74d8e4b4b4ed96d82890edd292860415c4b34d80d896b1ebc20823af68e6f7",
    "dsv4_indexer_bf16_p1": "dff5759121af1634640279139f6c41eb6bc291e002d9af91253fac86853ee310",
    "dsv4_indexer_bf16_p16": "22552161e220849cc82a41571ebafd562d44715d5991fa4f3c5b59967b84a0dd",
    "dsv4_indexer_bf16_p64": "6527764d6521e982ea7ed5e2b7b51c2c6d5f5b2d9f5909f3708f4bed12831d49",
    "dsv4_indexer_bf16_p256": "0f038ce6a173f30a81420acf105082e13f84e4b33b31f67bb4884e6af35f1ae4",
    "dsv4_indexer_fp4_p1": "4c1f526815ebf9b1ca01523ec8a5183eb811991b591ee99d06296a54ebf3cbd8",
    "dsv4_indexer_fp4_p16": "67ab6c887d53968f5436ed4f09e7326ca568ea09b01b893e2e7f6c28e1f86d90",
    "dsv4_indexer_fp4_p64": "dfbdb695baf9a226f7f92415a472f91f5226dd5e0ce54799b0cae8f19b1a3761",
    "dsv4_indexer_fp4_p256": "1d2b61d92cd2136018c39a016b34aca0e796bea694549d95c021763d42d1bfd8",
    "dsv4_mainkv_fp8mla_p1": "8e008645faf91eaf997f942bebdc8aadfc943dd7174ca1439a9d2dc1d3d6a41f",
    "dsv4_mainkv_fp8mla_p64": "809db6d990908aea2363dab0301d8e3cd1bddc4be07254fb09b4e29597fa26ef",
    "dsv4_mainkv_bf16_p1": "af995fe67d85acc39e012d708a141e4b752558eae2503a943483d0b0bdee6844",
    "dsv4_mainkv_bf16_p64": "21238f96502c0ebe417f87ea795cad652ef24cadb7836722c0c306f13f5dff5e",
    "dsv4_mainkv_fp8mla_bfround_p64": "3d9925ea77c7f740d22ed4814de61e9e8388ab6c4dd3d6c72237e55185e68388",
    "dsv4_mainkv_nvfp4_p64": "a82477ec84bda42143caf7c6f4f560961525e517a36bd7ecbb77356fb5c4ee0f",
    "example_fp8_inbf16": "eaee7bd4626c5722c2dbf797a3fc0721f5e08e4e3b5b6f7199f1bafadbc79078",
    "example_fp8_infp32": "a675c9586d0f3c6989a5d443b9daf484473901e906aba1e89ad55dd594b94768",
    "example_fp4_inbf16": "bdfb183270329d5f21ec6eff972807c7d92641a23b97db4015b44df5f1adae99",
    "example_fp4_infp32": "d9b1b11c663bec7eff87f09be0b0a6793908d0461df445ee24b09862fa3bb6f4",
    "example_ln_neox_head": "1da2803a27e747faa964cdd408fce5641a0505574b5d350a0c13eebbb75e8b97",
    "example_d192_norope": "291ad94fb8467352534febc54eb6f9ab8e8e4abba421e7a631e03356d86eb40c",
    "example_d1024_r128": "086e0c0236f32d535e0f0be8fa5ea2246032d8539350fd0673d26aebcbb28908",
    "example_nvfp4": "8e2109a76bc70d6051ea17d7692def13296aaa3766da9e3f9e5bd7effa0dc473",
    "example_nvfp4_d64_neox": "023cadbe50ad77211d1f0cb638ec245c51e9c391bac1db8acfc7ea87e2c3a230",
    "llama3_8b_k_bf16_p16": "848ecd3948a89acd296add96b677e9c13967c347b99c5ad57295f85e09fc020e",
    "llama3_8b_v_bf16_p16": "f94c52deefc4c2cafb01d63dd6883e00a8f7e8a6cc828fc076f0e9a5bc78863e",
    "llama3_8b_k_fp8_p16": "09a36894474db939f781f0ed131a9bf062252211e7e09416e893fa417489e8d5",
    "llama3_8b_v_fp8_p16": "5a1b9e69ba9ba212826161a3c9a89c6c85483610cc1cfc86b5b919f38f79f16b",
    "qwen3_8b_k_bf16_p16": "918d4300fa90ede26f5fee150ce9b2e5fcec633e638d8851246354a52ba3dda4",
    "qwen3_30b_k_bf16_p16": "59625f61b3877d608e85ddd2e14b39b19ced56e96b9e9f3f19b2f85a93e6ad88",
    "gptoss_k_bf16_p16": "135e22695e347ab3c95ed389310a4b0faeb906ccdc8cbd9e5704475d3ff8b196",
    "vllm_dsv32_indexer_fp8vllm_p64": "f92cf342b8644249ca4043e06b4f8c6854152bdeeef2b75feee303197033db83",
    "vllm_dsv32_indexer_fp8vllmue8m0_p64": "820a078000b93d692cd357a89912992c0798f64b905e25ce395a69a257b4d95a",
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
