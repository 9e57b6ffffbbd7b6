"""Pure tier: build keys are a function of the generated code and the toolchain, nothing else.

Moving a module, renaming a function or reorganising the package must not change any key (a
changed key silently rebuilds every user's cache). The keys below were last updated when
the kernel went full-warp with NaN rows defined (tools/golden_keys.py prints new keys);
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
    "dsv32_indexer_fp8_p64": "42e3ed355424ac7d7d1ed5a10d15e021fb86065f455bdc3a78e234c1f5a2fa5a",
    "dsv32_indexer_bf16_p64": "01c3e29471ae991378ca6971bee0ff2cc46e5b8cd50332b05bc47f86efbfa90f",
    "dsv4_indexer_fp8_p1": "33d134dc32c538b3d773613eceae59fd7131d2cf61d18ebfcf0a0c7a5bdd1c47",
    "dsv4_indexer_fp8_p16": "ebdda1eeae50b874fbf4b0bf0c3cfc04d4395d941db9ba4cf48cbdc232971466",
    "dsv4_indexer_fp8_p64": "6fe53701bfb8e34cd195687c0b345dd224a9f9150555946462e6e19e45d42c88",
    "dsv4_indexer_fp8_p256": "1c4bd6582d6d46fa5b3d5f7628daac2a236a742ec8cff0aa4972b71b38f5d197",
    "dsv4_indexer_bf16_p1": "e3d00e8610cff3a53e2bb5072d3bede18e93e9f922637db48270b85e1c83fb01",
    "dsv4_indexer_bf16_p16": "68336d63210eb47aa5d641070896a96492255300ca525394aafa9416ebce2aa0",
    "dsv4_indexer_bf16_p64": "29cd6b495a0b3d14d3d9080c64306a9ceed875177a2f92ea7f770e3c9f6dc801",
    "dsv4_indexer_bf16_p256": "75b697cc0936ca53c975c4802760ca243e7657d7fb1c327cf68aaf80d5d9a846",
    "dsv4_indexer_fp4_p1": "5532d503658a0bfd79411e40f2e287f6a7ec31e83a84e86288acd8a97718d6a3",
    "dsv4_indexer_fp4_p16": "ba9792d1f48613b0096e41defe5748af81d85b384f33f169b6ab4b6aac0f6241",
    "dsv4_indexer_fp4_p64": "a0cd4f15beb98e55e78cf0b139438b084100c576a3eeff56e2f688c577af051f",
    "dsv4_indexer_fp4_p256": "3df457ca9d3fcf5ffca29dab97c3ec4a96a0af9b12b5938fe92e3269c7321332",
    "dsv4_mainkv_fp8mla_p1": "324250807954074fe9b835ce650a806b3eb5ce3b23f97612df7e547e60e06e81",
    "dsv4_mainkv_fp8mla_p64": "2846c4148be06ef682b3ab847871139baa9dd3bc47b33ea1753c05e13b5464b6",
    "dsv4_mainkv_bf16_p1": "589d3af869a5190bda5d8585aef03ccc3ceca868b68dc37f426d214574b83e76",
    "dsv4_mainkv_bf16_p64": "72a2aaf2b2256ce9f11a0188e98360496e9f2b73498daa49c5a83d43f9052a3f",
    "dsv4_mainkv_fp8mla_bfround_p64": "8a021b38ce5bb7b39369f73ecbddf29b863c8f1c8e6266286479af70f6ef6c89",
    "example_fp8_inbf16": "c378053c1e8f3f501b04bd8ee88df51760f229874b97244877b0aa06086fe1de",
    "example_fp8_infp32": "14f9af6bd73a817b761c9159be87a55ca1872bcb43335f69840a8a0b08626a01",
    "example_fp4_inbf16": "d42c003c9683112af757a015eea72551db3a6baf6cd1394990a9e9b95a8395aa",
    "example_fp4_infp32": "b3b8100bc11c88da033ae98e25d1d419266fd0424bf104dce04e5fd39fec0741",
    "example_ln_neox_head": "7c9c5a4afe3a4534c8e6fcbd739fe0aa16e4174929a9a2e10d47c9c056a6fa16",
    "example_d192_norope": "0c9ff9356beae8c393d67537e5013bc694a7bbc834adc6ef71d9aa51cf110e62",
    "example_d1024_r128": "062d89fe9a7c0a46f023ab4875eaf17833b3053570f78b298d4e7c6cfd416ec9",
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
