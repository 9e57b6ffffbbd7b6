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
 "llama3_8b_bf16_q": "1d93cc52d4a9f9b955e8a3b985efdd50cf69d19f337441329353d65f141bc2cf",
 "llama3_8b_bf16_k": "abc99178594145de306b802321c4e6f53d9d11d864fbe65c921da9ddd546a297",
 "llama3_8b_bf16_v": "44961c83f03ecefe54a91421dfe44ae60c76c26f0429d8572dc9ae238a63f6bd",
 "llama3_8b_fp8_q": "d65e1935f9bbcb53b23a3c1d6336dce73eaa0d492b1ad0b111f50b9870c3467c",
 "llama3_8b_fp8_k": "7655efb276814e6da0f5468b74dfeaf6d85a605e01bdf823776fe65f50df1a02",
 "llama3_8b_fp8_v": "fe2746292fc1dca901f51b8e87e1ba0e143e6fc9457a596da2851356b9dfb8b0",
 "qwen3_8b_bf16_q": "ac4ffe58fa857d65ebb5a0a3a2685f53b1f8ea0047d499adbd9917c548afb7a1",
 "qwen3_8b_bf16_k": "76012584fd8344e48868a619c5d4da6459c4cb31e0e345c03a92486fe25266d7",
 "qwen3_8b_bf16_v": "cfc4875b523f86e70346ab9e01f4b91d394c13c5ada759618ecec4bbe86684e4",
 "qwen3_8b_joint_q": "e0469ed4af1af1ebaab8d6267ec90dfaf53f47bc6c472087f22999e11511bbb7",
 "qwen3_8b_joint_k": "a9909f6addec3f2acc59f78745ea824c397f596c096f968f8b232f7929840442",
 "qwen3_8b_joint_v": "baf0d85244c41aad3ccbf6d286e92eb97cf1f2a5745f79992aba85fb33698743",
 "qwen3_235b_a22b_q": "69b3e5b6343584cc67aed6c13bec4555b985e4cbed4404d2c7d76a5aaf676eb0",
 "qwen3_235b_a22b_k": "e4dd9ed5e96df40ba9ff90ebbc3fe28fd63097e013f3725824b9e907cfc94a5e",
 "qwen3_235b_a22b_v": "143194fd032689e938e7d5cada79134bbdb9108cdfbffdfb60e00c532a134dda",
 "qwen3_30b_a3b_hnd_q": "0cc8158a9efbacf94869a484cb0f4c04dedca0c9919725fd014c5448886edae0",
 "qwen3_30b_a3b_hnd_k": "fa93c79daa4626d73f0f3335eb29634b65693b662995eca296ccd2ed9ccee238",
 "qwen3_30b_a3b_hnd_v": "fee55a758a0638d2c119985293c7e39d0b1d20a88cffdb47124500d62b4066e3",
 "gemma3_4b_q": "c0004f8162d67f9f061ec59bd1663b60be0a429cda4fb762bf1d5bc7e75c96d8",
 "gemma3_4b_k": "382bf2625841c7f720ac542f4cf5349d68a17ec16b80245fd3e0e81588136047",
 "gemma3_4b_v": "3f1e688a42d7db984b490b577dbc23306c9a4c4eaacd975d0e1d97577b718da1",
 "glm4_9b_q": "c54d7e65e975eaf326f9416d89dcbea170589b086a81d47cd4369c4b920a4584",
 "glm4_9b_k": "3dd9b1aafa4b42f5a00e4de8962b8f1727c1a90b9af83d124b55c70592b68694",
 "glm4_9b_v": "df9b6c05ab237dd8e31197441d63f725f3d43ecc6fdff428e7b58ca425559217",
 "cake_8_1_q": "7a63ce4cae1b076a3664564bf66ce7b85e5be3c5cde52983eea39405c3d1ce53",
 "cake_8_1_k": "69ed3c513b8f8bd770d504f2ef4cb0d90c17b014d107b600ae1301b05f77582e",
 "cake_8_1_v": "05579f70a95249bf4c2705afd3c19249b534f997ca1007e137367f0e07a7d2c3",
 "cake_64_8_q": "624f537c8184b78522fff71e677dd4f73006d4bbcd3d66758c14a17c79a514b4",
 "cake_64_8_k": "6bf74a90abf16fae2d224cdaaf4585c0361a7f6ad95312d84eaa4b8ffdcca2b1",
 "cake_64_8_v": "8ff48f1a6354bb8e2dd0fcb16e6e2af2d8c845504470cb568a2760b328409953",
 "cake_8_1_fp8_q": "50c0a61e140231afd11351376caa858d9cc7928b90c0593645ef704ea8d7866d",
 "cake_8_1_fp8_k": "75fa77a0431548ceddcccf0e2cb99d8dc4398b21a15c37462ab45983707d11bc",
 "cake_8_1_fp8_v": "3905e8c6bd1d252a112d0f44c8c7efd925dc446ca21e40e280e83174a38eddf7",
 "cake_64_8_fp8_q": "a727450adab20ac154b62a0e3956bd70392eeb114956f5231b17cdadefcc0a2e",
 "cake_64_8_fp8_k": "1361cd0b143782e1ba916d40734bfcac05145f2467aa3f8844ef355ba85862ee",
 "cake_64_8_fp8_v": "0a091e851bdaa2cd5609b629ced9696a7f5e8a75109fc6ebdbddf35489efc38b",
 "gptoss_bf16_q": "9b698fb6f4ea16eaf6f803652dc5edb381f5437da9f31caaaf634a48d4be193a",
 "gptoss_bf16_k": "e996536a5097fec1f7fd80271ef7100959e135b93249aa6163ebad94f36d7972",
 "gptoss_bf16_v": "05814a277febc8e8c8107bbba71b256e673283565fc7fb241b5c8bbf696ba7c3",
 "llama3_8b_bf16": "6a32ba6dcc7a5096dde53b2ec1efcb96a10360528ab66dae01d0da158de9789a",
 "llama3_8b_fp8": "e5cf3adc635573ecaf1fd54dc5ea135e1e79f59c38d5c5bfac90b50e88cd0528",
 "qwen3_8b_bf16": "e4a71e0a7f00d3c61303634149f5326e74b7622f17321d1cfd3526dce73fd264",
 "qwen3_8b_joint": "b65eda02f60d649cb1ed6ff3a8d51a9449e5b1311e47ba83d9172854d2839ed6",
 "qwen3_235b_a22b": "2781b91732afb10fca616ff92d475416697cb801ed31be54e0a275eb8389726e",
 "qwen3_30b_a3b_hnd": "a302088fc8aa92b6fbbdc0c1bb2231c0e27c5c51551494bb32761ada489d58bc",
 "gemma3_4b": "c109803cfd53fe3fc04e1655a35c2403681d9355b6745faf7f78afa4e28c3f24",
 "glm4_9b": "771fbc98711c3a263d407c815b231247e7624aa1bfd0b82f8ab7ebeb87f9fccb",
 "cake_8_1": "3c299bbf6e1e992232b2293c1fb03feae2d5ccc5c4a03ad85e3216b3e5741a19",
 "cake_64_8": "3f6a5f2a67f1c86a879c41c7328e7793ab19a53fd7ebbd51a9a8b19c677c1247",
 "cake_8_1_fp8": "a8945e1ad72c3772b8f3969c15346231d5f129e2dbe3cadab5ca55f8f7a5cc8f",
 "cake_64_8_fp8": "da237cf44eda37f2ee8c4a1213ebc979ed23fb18110a0149b14509002259852e",
 "gptoss_bf16": "bed6aa22e86e5cdc792d0f1b3d070f3d1d78542c50feee41a4cd68d2bbc6d085",
 "dsv32_indexer_fp8_p64": "1c62316b6ad4849128eb021e5a543c17ff44a53b301b340fe2a07568abaa9547",
 "dsv32_indexer_bf16_p64": "d5bb00ac0ebba2ae53a9737a6c90201566df7d27ce3842e5e69772192e8bec21",
 "dsv4_indexer_fp8_p1": "59eecd4b5a588a9b9de616d861de435ccc7b49cab979e021432adb6e867bb0e2",
 "dsv4_indexer_fp8_p16": "3c6eef1361d4004e13cd4f1aea43ec8a70224547415cf7ff6f1aeba94521a3f9",
 "dsv4_indexer_fp8_p64": "422a612614913376658f590e6a8aa0f2b5f12572b9c11074df5666f7e7e9a465",
 "dsv4_indexer_fp8_p256": "8fcc40617548e381d6d5808c80954baf94aab1f476266f042eb972363970d1cc",
 "dsv4_indexer_bf16_p1": "5e0986217ceecdc2e57137738ee0a394007dd1bc60c67ca204d10c6852fce8f3",
 "dsv4_indexer_bf16_p16": "bc5a1eedddde99aeeb95ba7e8b0a368a1a2e558f990303b296ae3964639d6ba1",
 "dsv4_indexer_bf16_p64": "040c81f8da71064ecad773713fd3eafede46501bc9b59d05dadb37e43a65024e",
 "dsv4_indexer_bf16_p256": "5153a50a980b52cb1c3c41f4004ea126784a1e98087c4f73dee1539a291dd3f6",
 "dsv4_indexer_fp4_p1": "f1cd6423c854b6a82adf17380d2a40b07ca9b54393f42423689851d66fb9f62e",
 "dsv4_indexer_fp4_p16": "d559ac52ed434ebdfabf739b5f0ffb0c7e7dde75f7867d2bc1e7034b74398202",
 "dsv4_indexer_fp4_p64": "5036cf99856d00b771aa1a3ba90b4ee36aa2d5fe34dd06506d6707259c2799cc",
 "dsv4_indexer_fp4_p256": "0e37d0b78bc213588d329c5f67145983d6e58db3b8f4e6ec4c8e3bcea83c411a",
 "dsv4_mainkv_fp8mla_p1": "b115af116224ee6ab585d2724e6226e78ddf3699bc22467a70543725aadc66a9",
 "dsv4_mainkv_fp8mla_p64": "84645a033c1b5e8adfeba732f588b15686df4cf60da2bbfae3bc3794b5be27b6",
 "dsv4_mainkv_bf16_p1": "0ba8119e4c922d21472163c3eed8c4a4feb0f50a14b6f5cbeef4e1786db53c60",
 "dsv4_mainkv_bf16_p64": "538ca35872a7b1bfef733761f20720319a4e4ee3c554c78ac3e1e2569122dc95",
 "dsv4_mainkv_fp8mla_bfround_p64": "8e4c1d74c5c822239a7f117326a2d19afde85dc75ae741f6f9ece69f535228a8",
 "dsv4_mainkv_nvfp4_p64": "af0277fb1688e8c8428285f9f3b5ba51280e942ddbf549761be026612aac3f7f",
 "indexer_q": "ce4e8ff78f328efbd018f40b8ea3529cb63da38f75b432c27c78d018a08b5b53",
 "main_q": "c5e41583fe6e69cf4e72af078e31154c21de7145dab163bd9a90d898cce668b1",
 "main_kv": "14d69262e395383feb205fc42b9849cad61e6e87be19debadc0577f17881e2ce",
 "layer_q_kv": "035d102ea62b905863ab3122ba062d5c1af32c2cb39809a45def944a6b8f2690",
 "example_fp8_inbf16": "99f32c921796ea0bfcf9a28dc8f074e12380771b4396a210340c8a1c8b856283",
 "example_fp8_infp32": "20258bc73f0bb3b24d08ce7c33d384ff74adc149ad64cdf6d42491069e253b77",
 "example_fp4_inbf16": "ff5b61ab696e6114994650f519a2a79da465f05de89256c84fe859844dd4eca4",
 "example_fp4_infp32": "c68669c0cc5a8167e4b33458560a698153ac4e86688e340a143449b79a262dac",
 "example_ln_neox_head": "b9f7a41802caae95da1f9b856747c5cf7b4df253a9fcc81ed2050a2384530022",
 "example_d192_norope": "a92bdf27e9e64d9068c0a0f8741f9b0b0d0ff7b08437dcddfad2536a7f6b9b6e",
 "example_d1024_r128": "a47421671361d36d4b25074ceec1bca6197eee501b0ca5c24bf42702f0319414",
 "example_nvfp4": "7458089843ef0018ba6c0c34f2fcb57f6c980d4da32594c7101e32bc01deaa84",
 "example_nvfp4_d64_neox": "c6b61ea782696f493ab0465cf36d24de806d74572ed3bb37c30fb3cb1c29b8b7",
 "llama3_8b_k_bf16_p16": "8eae5e5d999d65f63c2a53800576380004cbea8393bd31fa4e3430161c323803",
 "llama3_8b_v_bf16_p16": "88596fbbdc4e196e9bb83b5d7cec5a96378a6d7516a1199baae2bd115569a21b",
 "llama3_8b_k_fp8_p16": "0b30be828225f4f47760afb4a9cbbdf8e6de46b606547b763c7f0cc902fd6438",
 "llama3_8b_v_fp8_p16": "da682ffc3ce28939d68062dc2106774f7ed1cdad94f9fcd75e9c6949a6d425fa",
 "qwen3_8b_k_bf16_p16": "b207c962e7abb41c02065bf24085674c15c1571ba413af654ba783fb6639a041",
 "qwen3_30b_k_bf16_p16": "c2af74fdf08e6361be5067bb801a5322ddf3b92a269011fa336ab84e210d57f6",
 "gptoss_k_bf16_p16": "f5e0866ada7be469640e189abaa20013b95bcb560c30e5d0cc258b8eb8fb6426",
 "vllm_dsv32_indexer_fp8vllm_p64": "0d367f3514a289ee215b21fb20f3d17ad7733667f0c47ea3f26bf9ae9b7cfb9a",
 "vllm_dsv32_indexer_fp8vllmue8m0_p64": "0f19bbae41fd7afdf5e884350ad59029a041f1e64b3e71a6ac8c084d5f55c561"
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
