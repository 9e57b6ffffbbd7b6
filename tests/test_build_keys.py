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
    "dsv32_indexer_fp8_p64": "91fda439ba932c43b2f8dad4fe2eb028f7708d77263813fdcdfa77b0fd351656",
    "dsv32_indexer_bf16_p64": "c01453f5301d547076594084267452c0409e28c7d6d49ff1207f3d6f6048fe40",
    "dsv4_indexer_fp8_p1": "c70c19956e20b1ef5a4be9de2ee9311ad049c1270e543d3270a0e94ed99d4a0f",
    "dsv4_indexer_fp8_p16": "9cdb3b12b1559841e45f2f043da2ea7cdf7c2238d65a7a9c5c813e9f6169f49e",
    "dsv4_indexer_fp8_p64": "e9f4c3e333759f59f632c759221372b4e9894d7805b3bb8e670359dfd422c46c",
    "dsv4_indexer_fp8_p256": "5ee53138aee714b120584a2482b9dc3909dfba532ac88063b539182900c758c5",
    "dsv4_indexer_bf16_p1": "92f108fa4c46f111b25e5eb6d11b3010406e9eeec5f342b2bd3fff3affc442f2",
    "dsv4_indexer_bf16_p16": "4fd3143d877931a3b078600110968f65e8d58c071c6cd1fc537e676b32355fef",
    "dsv4_indexer_bf16_p64": "806eb4e690aec97b45eb67ae805bd8a417db455651548de4433794358820eb20",
    "dsv4_indexer_bf16_p256": "d96603de57b27fdb68abe239cba997b54c8868652bb1ff3413ceef366ee9bfba",
    "dsv4_indexer_fp4_p1": "c545abaf1b5d03f4e5535021423b330157c7a2b324f11cc2807828b32a18aacd",
    "dsv4_indexer_fp4_p16": "d74abc8912946395543a69f8edc1e33381d4e9b88763a83f9ee2ff97cf496e70",
    "dsv4_indexer_fp4_p64": "06f789a7b9710c709f3e30a4019f1a4d00fc87742870da7eb38d596573e523a5",
    "dsv4_indexer_fp4_p256": "913ae48b9343fdf1b4b4f7b2095f3b8621a1fbd4ae055a7d0c93bbc1bae8715c",
    "dsv4_mainkv_fp8mla_p1": "c0582ff73fe112644da3eb2c2c6c2b5e3cad18064dc432cdd803f57430982a17",
    "dsv4_mainkv_fp8mla_p64": "dd8e1c2155636de55f6c147e2b09082f643118b35ac11f11b1ded538f7aa5a0f",
    "dsv4_mainkv_bf16_p1": "0c5fa5b879063f667da42a5c3ed1161783f0d3bba422a7b6e112ce156a6aad07",
    "dsv4_mainkv_bf16_p64": "dc0200d3ff4cdf96389e7c421ce0cce23402255d11828db4e670a0e4d411728c",
    "dsv4_mainkv_fp8mla_bfround_p64": "0afc930706f156fb2fc0a8021ce312ebf910de52d20dd9206d326ead2b1781c7",
    "example_fp8_inbf16": "b52f72235189fd2a368a36b6b31a23a99a67c949049da7e630318a98590c7d5c",
    "example_fp8_infp32": "4a8749cca9a54e95c17f3bf929fa155179bd78a9a8e5224b57672bcff01ac8ac",
    "example_fp4_inbf16": "792c0f55200ce6f7aed62cc8f372bab002101697bf2784bde4c0fd8b4c9bdea7",
    "example_fp4_infp32": "5cddcda83eda82459ef3ecb0144ecf9723b014c86b28656c718e924f75291dec",
    "example_ln_neox_head": "adce1c0a621c8579b1203f2e3d1a4f91142decef4d5855dbf28089c94a7de16e",
    "example_d192_norope": "bca6f46ea47c4206fb2d948a3400518ef5d2124d24a907cb3c9e2e96d83daed5",
    "example_d1024_r128": "ad6373e49c3328e5d10ee222b40f913dbda6441bec62e5e2b105fb3a7de25980",
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
