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
    "dsv32_indexer_fp8_p64": "3f0258e2c226fc205aaf62cc63fbefa11da6e1f5c4aa3a05bcb42ad2069d4ac9",
    "dsv32_indexer_bf16_p64": "f0f33b165848714c4d3449279fdb79951c9a5df71911d413d33a4c1ff799db14",
    "dsv4_indexer_fp8_p1": "a4e4023fd448df8cbcd1983384cbff94188e5132942b454b508ecc6b54b0ef7d",
    "dsv4_indexer_fp8_p16": "87eb9ddb833d689e3093fbe62c0c5d6d9e2f9d365736e08991f3540b0fa03e5b",
    "dsv4_indexer_fp8_p64": "3e26db792f7bd34c6739665c9fddccbef46958af4443e913f5ef4d50a5be6d43",
    "dsv4_indexer_fp8_p256": "c3aa9d2f54684049f35af59f81792fcf3346bde94074286bb2325a3bf80dbfe1",
    "dsv4_indexer_bf16_p1": "9b624ee3660fff99b38900861182ec1e49722dae5531d9c0ed23092944162cf5",
    "dsv4_indexer_bf16_p16": "2864ce44f63287f49b9faec192407f38b360dd158bc638a1fb607b2d21ebf7de",
    "dsv4_indexer_bf16_p64": "f749d40b316fce4d26eb62cde7d46cb6815308d553279ddff74c887c127ac6b6",
    "dsv4_indexer_bf16_p256": "70a3931a4b39eee76ffe3cf3e3de14539d5257677b502fa0be967671e6a8227f",
    "dsv4_indexer_fp4_p1": "6f9d351ba84429c16c8e12f3634576bed4a66a83835bda31e838fd240dabcdfd",
    "dsv4_indexer_fp4_p16": "689c8ab9df4d23cfd18202e12237bd7374ba92cec9a5b5762ed6f14fab7171e2",
    "dsv4_indexer_fp4_p64": "6a50d80dda6a87b7b7244572a8e9bf93376417c87c29305f59f308d46796bd4c",
    "dsv4_indexer_fp4_p256": "80dee71c4674fb390068e920a3db457027ad6d75e0f081e3e9c6e2eb16c95a25",
    "dsv4_mainkv_fp8mla_p1": "6e655084af811642689ba211fc1ce761592eee805aa46b0f19bd5ff830274a7a",
    "dsv4_mainkv_fp8mla_p64": "400467ef1017886cfd874f74c17f77f359e524e7fd51dbc176c22549038b2a51",
    "dsv4_mainkv_bf16_p1": "05c8c5194b12fdb78ff29e328b32f29f17880a8d7e3dc752fea97a595ca67aa6",
    "dsv4_mainkv_bf16_p64": "7a885a2530d75603e123992e704fd180974dbb35f2061919941553cf1527e0de",
    "dsv4_mainkv_fp8mla_bfround_p64": "0793e1ce6c481fb6b34320a1f6268cba7926acc542de32f2cd2c90697f82d53b",
    "example_fp8_inbf16": "9618961d021fe4a486653483090402ff68e953a2ff4e9f50af12f57860e2313c",
    "example_fp8_infp32": "26baca8b8229ef2e6f99c0cd467373ba2e43437a6b2ab8bfbfeb6d3edfcb4387",
    "example_fp4_inbf16": "2426ecb6ef355328df9505e80da4e66a561be9019aa08debbc82d0cd1e32f206",
    "example_fp4_infp32": "accecf7af96bbe947b9dbe50ca0406f7b8bf8b41acc0f01c46a3c969a725b4d9",
    "example_ln_neox_head": "002cf7090c64efbf62719b7f4471b5bc10dc428d6ef458fea63a1313ce3f7095",
    "example_d192_norope": "1afaa3411eadd68720f83bf47f8101ab9ebb734d3b83c530ed6960769f883c37",
    "example_d1024_r128": "e2333cee9b775efb167b01749349c83282c68616cc6fcbc07950b67f3932a89f",
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
