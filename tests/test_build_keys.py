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
    "dsv32_indexer_fp8_p64": "fd029d7e5de4ae79b32f89c8814506b6f0b20453b540302c0e097dfbe22c0001",
    "dsv32_indexer_bf16_p64": "3fa3dc18a7601956ee0b20494bf7123b3e7bd29dbf77e3921a4238f916387c94",
    "dsv4_indexer_fp8_p1": "d2a78ebef9f44cc4a7fad8d465fbc9ea76c4a276dfe70732b9deeb26e371a7ea",
    "dsv4_indexer_fp8_p16": "abb2739040b826b15253b3f29d202e31c8bf051715baa8dfa6a86a3e33d0bc7a",
    "dsv4_indexer_fp8_p64": "6377aca573a93aefb9f6c32c29842c1caf17ffccb4b00d91389fe8c46ea72c40",
    "dsv4_indexer_fp8_p256": "b644737f90e25ef791a4ec16b6d703260f8cd531512f7c7bbb6a837446f69774",
    "dsv4_indexer_bf16_p1": "8c2830d99404b9658d09b0d20f8ead6b0681cc964cc08a529c1a9e8141deb765",
    "dsv4_indexer_bf16_p16": "19d5c68c50cc449667cb0e931044a1fb9b2be34a9568727fa423e13d819e5707",
    "dsv4_indexer_bf16_p64": "65d07fa406730c4ffd3f2b327aa1add8d156094907c7b56587479099723fe1de",
    "dsv4_indexer_bf16_p256": "9d3869f66b3bd6fa6e03dcf7eecce17a5db2cbd1886a025110632f4ad16f7d57",
    "dsv4_indexer_fp4_p1": "fd28773ac5b6626999ba15416ca7c77e709c3be91f525bb345eed4f3db85f484",
    "dsv4_indexer_fp4_p16": "59a73009a2f3f1c11b2e171d1fca20d48889b6b78cea313cfddb15b755921123",
    "dsv4_indexer_fp4_p64": "2e5ed9ea3c9187d0d5b4aceb4aa81bbfd627145d55f0590a60127e84cb41bb51",
    "dsv4_indexer_fp4_p256": "a492ef78334096d39bb23cd64b080fa919a1242113cdc600bd6c806c6f8636c2",
    "dsv4_mainkv_fp8mla_p1": "f622cc239acbaba88c1db61b45374f240e073de51dcbea917620aa3d708dc8fa",
    "dsv4_mainkv_fp8mla_p64": "9c79d8706380e0198de28f1db2db6d906cfded252b129be0c74ba58aba110fcc",
    "dsv4_mainkv_bf16_p1": "ac18c87b0e78fa4b01f8a2a6f5b5f688ae30a8432d7b6fe57103ec0fca2d0a30",
    "dsv4_mainkv_bf16_p64": "fc71e6506cc17a105ba12c0f7228e9edae7794417b153e8cc0b9f73b77bd8417",
    "dsv4_mainkv_fp8mla_bfround_p64": "b8f91108b9a4945c69709b5a034de8785f18c8a509f61ac8534e1541927e5a30",
    "dsv4_mainkv_nvfp4_p64": "817843572d024337c8c057a146060b8b73407eca7ef8a0ff1be3379370fd8a0d",
    "example_fp8_inbf16": "f4ae167460cf04baa85403dbd6bc6b7ca7f55a57398aa7de29fab3aecac8a45d",
    "example_fp8_infp32": "851dc10464cc76ae2a19b78b056b98ce8c0e82792be996114df05627425475e7",
    "example_fp4_inbf16": "a800aa0ce51b0f2af62420456ed411eb7bb8622eb087c3bd08e0f5ae28c0dbb0",
    "example_fp4_infp32": "2b2b8d82f7bb1c11151da0e7d33955b727bc9c0e79d67609e812e205a79fd10c",
    "example_ln_neox_head": "e1d7853f67e6ca32eea8a1d64119fe25d1f72f131497bbdeee5017dfb68f3f2c",
    "example_d192_norope": "43cff2d5c217b0e6ce99717365444136394afaa2328e33795a4cf5b472663ad7",
    "example_d1024_r128": "5fd30c518525fb6327efe0d531ceb4202c5d5cbdf9ce11d450f62bbf9568037a",
    "vllm_dsv32_indexer_fp8vllm_p64": "f85d1dc72d8318013cd582223eff3062b41da5f48b4281a3a20df51d5740c528",
    "vllm_dsv32_indexer_fp8vllmue8m0_p64": "ef372e3ed7d41b358ac902332d5a9613f50feba7755028be60d28bfa33583b35",
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
