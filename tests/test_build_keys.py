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
 "dsv32_indexer_fp8_p64": "65def8c5609cac1c99c2d313c58c9e86ec610db2845d7bea731f6aac471ee306",
 "dsv32_indexer_bf16_p64": "da3a2da12bb9d0712c4952924f6aee4798dd7dfa024f7eb6d3a597e5eb9f72fa",
 "dsv4_indexer_fp8_p1": "f8d35d9dac1b6fdd388196ffb9f8b961997f24d8ab931349b8657e288c6441b2",
 "dsv4_indexer_fp8_p16": "a1197a9365ee6460928240681f3511746136606a94ff94aecc01bc2afd7217b9",
 "dsv4_indexer_fp8_p64": "5f6987cf156718d77c90b9cec66dab0912ccaaf56faa67d24abbac2a8d01e3f3",
 "dsv4_indexer_fp8_p256": "67ed5835242601d0b0ed8e0246631b98a6c8ba19078c2dc7e24854c072072af6",
 "dsv4_indexer_bf16_p1": "3a6efefd32362d0b43d0eb2299f189a6b4060b1f9da473af39a86d9fcc32d6ee",
 "dsv4_indexer_bf16_p16": "873f756a9d5005df001d1e7adb519fe1aa2a897c3f5b4d9b2f453cb12a7fbe2b",
 "dsv4_indexer_bf16_p64": "ec99b993a12d3f274cfb975d0e53f4e9bbb7b035f31ee3c40439804fcd680120",
 "dsv4_indexer_bf16_p256": "7638bb7998e5007eeea1e75a65adcbd1d873ba5ab8c4c55138426cbeb9076546",
 "dsv4_indexer_fp4_p1": "06cfd667411129580c3c5c609aa56f5e9bdbb31b40e4b72fa848ccedf2560325",
 "dsv4_indexer_fp4_p16": "df13caf6e78bff9e53385d94976468742e685a93b6a60e90b6cd1ef952238357",
 "dsv4_indexer_fp4_p64": "263befca9b463e3f08837a71bd6cf8989823b59e4c69874f060c433a50cbf807",
 "dsv4_indexer_fp4_p256": "fcce8a5d84da39e7c9cf7cd654c7771884496600dc97c0d2e9cea708d212c09d",
 "dsv4_mainkv_fp8mla_p1": "16c0ae53c312ae4a8c92fdd56dd3aefa87e0f088e27e3a71de4b4f1be7b543f2",
 "dsv4_mainkv_fp8mla_p64": "484193347a9d8faf2218a0de4010268f02d087fb71fc458b7010ab9c41a5faf1",
 "dsv4_mainkv_bf16_p1": "22673016586e6d0120ed109eb25d20f685d0d31250779fbff64ea8f1748b6888",
 "dsv4_mainkv_bf16_p64": "62281520f37e88b69a1ce9103fb9230366765c0c73b6fe2a48256e6f427cc216",
 "dsv4_mainkv_fp8mla_bfround_p64": "654b17774833494ef036c247dbb188bc5f95e8f5b83be5dc1f1ce184e22cfc1a",
 "dsv4_mainkv_nvfp4_p64": "60cc33822d3d0f53d008a972a3d64ef986f1555692f20d1d882a0f8c5bfad076",
 "example_fp8_inbf16": "ebd702b8fea3b00ece4fa9e0730c20ee2d4eeeac1510d9287b42aee79c4045cd",
 "example_fp8_infp32": "510958728a0cf8ba4597bdc31757351bb4356c15695b361438261505f554834b",
 "example_fp4_inbf16": "ae7e3d3073208313248cbdfea8c21ed762669f549468cff83cc2570f2cc0ffc7",
 "example_fp4_infp32": "c108d13de4d7d2b6c9bc5412674adec246363f3b4500b22409c8def6bf77e8e8",
 "example_ln_neox_head": "a9cf53810532ec85bad0c22a19a8d1862130fa9cfb504241c6ef50b4ba2fe0f8",
 "example_d192_norope": "2943f5d312b57bb740935b077ea4d4e52e533983712d1249f7eb66f3b11c39c7",
 "example_d1024_r128": "25b3463f0de10935c5a5f5abb60ef47715432d148573e8a117641da974163970",
 "example_nvfp4": "6d1de893c93bbc6f312fea29888ed95ede9cb2bb9bfb1c2d7c9883bed8f82f2e",
 "example_nvfp4_d64_neox": "147e2d669a9640ac01e5965d430ee706560df64921f622b98d035e8d5bb51388",
 "llama3_8b_k_bf16_p16": "35ec5ca3d0fc7a79be7c756e4417f72bb2ee78816b30cb7e57416d51c1de4e78",
 "llama3_8b_v_bf16_p16": "d13d6ad47250fa5943f1a04957669ec6c6af46dde175fc40dccca87f19771582",
 "llama3_8b_k_fp8_p16": "2b4b978612359f7345127efd4464908492915a0859f0baa1cf29160fa46db6fe",
 "llama3_8b_v_fp8_p16": "f06d16e5cf0ffd95dc07dee5b22ed0f4d53c0a006b5830081ee165ae2337c32f",
 "qwen3_8b_k_bf16_p16": "d027067a4413a62869e0e9004dd20e3281814fedaac58e72dca3a0aaee0ed814",
 "qwen3_30b_k_bf16_p16": "0268efe5406648b69e9b72566400f9ff0183e33d0843164e695af9bc462e6ed4",
 "gptoss_k_bf16_p16": "2e4117effffc22a2b413f8686a6ef54fadc2162267aee9f71fe553e7e0cb687f",
 "vllm_dsv32_indexer_fp8vllm_p64": "48f9f996476a9f5c7194ab7f22b3000732071486ddf83f379ed69100fa74fe98",
 "vllm_dsv32_indexer_fp8vllmue8m0_p64": "145eb03cb263fdc523e61849017d1dcaf97e361335d6c70ba39eea38182d2d9a",
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
