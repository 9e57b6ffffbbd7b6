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
    "dsv32_indexer_fp8_p64": "1ad08afb6c424bf665b6bf5bb81095712f59ab85d7dcccc736bc3bfc29085f37",
    "dsv32_indexer_bf16_p64": "967f97be74f4031b4e02877925f70b2b87af181d9bf54ef319e3103acc6ef9ac",
    "dsv4_indexer_fp8_p1": "21094b66e8031dd641b53d7bd78d026d201494dc99eba9999ade975cf277bd69",
    "dsv4_indexer_fp8_p16": "495064316740ac580804ba7d0a943d950302a346dd9eb2ea229b9964566874b3",
    "dsv4_indexer_fp8_p64": "1d065ee2424c8fcb22231ae18cd7ff81e68825277ad1276f6d20a81cf063c6c1",
    "dsv4_indexer_fp8_p256": "8551b6581f2e1c7b9f022d3b46b1ed6d6dd6c1d333f1cb63cf07b718ebd561fb",
    "dsv4_indexer_bf16_p1": "869b9459e17c592838b79206cfa875410148d3ef040065cf149a94b056e97e64",
    "dsv4_indexer_bf16_p16": "2cb57bdd1664c4312dc97c53c5ec79e465a37863afd2fea23d4cea80ef55778b",
    "dsv4_indexer_bf16_p64": "f66a1f735e76a890ce0b596f67c42dd1fa2870592442f47822be5b75c87edd9f",
    "dsv4_indexer_bf16_p256": "8ff973014f4b1a3f3f73d58437e5cc493e1d8d12f1adc340250974413f1c3a01",
    "dsv4_indexer_fp4_p1": "bf54f1b68d99079f6c7766763960e41dbae5faa4db0067d8cb09942314b5d710",
    "dsv4_indexer_fp4_p16": "276e7bcf330ce3bf670dc7c862a8efa28452f231fed496c82171c0372d5e317f",
    "dsv4_indexer_fp4_p64": "f9207eff34c98b4affff470187dc2ad9ee698ee97eab2ecd3257670a00e4c15f",
    "dsv4_indexer_fp4_p256": "8bee88c2f386388b9b09dbb47dfb403ad7616f5e8cf7ceb6cc9e0fe1b70b5433",
    "dsv4_mainkv_fp8mla_p1": "cb01a67248a29ee1f5b8fbee3bd00994639bc334349ba223c6775ee2ab71ad0b",
    "dsv4_mainkv_fp8mla_p64": "d7388bdcfe96ab24f1b15d7c21409b2074e013fbb58c45c860883f774d039a06",
    "dsv4_mainkv_bf16_p1": "66205978136742bd7e4a282b58d1ad7ad6a26be51ffdb48aa7c2da490c8764e9",
    "dsv4_mainkv_bf16_p64": "25f35096c115e7644817e43219a8deae8d79bd14aaf342de6cc0cc5997a20796",
    "dsv4_mainkv_fp8mla_bfround_p64": "503f6bd4201b3c5bad9dcae2459e83b5ad3498227dde88d0acb1c69bcf1306da",
    "example_fp8_inbf16": "8b8b4e1671f7a21a94e62e2505f5fbb522f6f7320320a096a95afc61392475e7",
    "example_fp8_infp32": "b0f114cfc338b9286aa0c3ade17dfa87b0bc9e5d1a1f6d101cac2eff3feea059",
    "example_fp4_inbf16": "2c9881c021decb23ec4f7e104afb215a91f9f9e32b9ddc069c63ccb88b3ba88a",
    "example_fp4_infp32": "5cad35f9c2234d0a373ce421efdf9215fce8c5e4bafd96ecf2253e483ac4afff",
    "example_ln_neox_head": "c98cb2b25c1ec196afabe97c4b6f54594772ad5a8e49c33c73b8304f018f3e9e",
    "example_d192_norope": "c87116d9b5327fc9a52133bf6a4d8cf3932325a5ea6a1de539ebd5baf4a68d30",
    "example_d1024_r128": "df769875b59ff439871bfd8d07c83965bd670f2d3c4d0b762b867e31916b5a4e",
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
