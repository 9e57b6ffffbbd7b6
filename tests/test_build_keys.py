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
    "dsv32_indexer_fp8_p64": "3f04bdce9fc228f156cd1dca4bbd98ff113508640b18a5c0736300aec7ba4057",
    "dsv32_indexer_bf16_p64": "ed8e3fee498b51c691d337c4e9b5e8b74d596eedf18c485d81f5be0a00e46e8a",
    "dsv4_indexer_fp8_p1": "0d0e86df1244de7b8941293611e9e8a9f00f4c5704b68e92bd040608785dfe48",
    "dsv4_indexer_fp8_p16": "aa3706661d6d031280d8874bff056642307553808a25c26e09e07f544562977f",
    "dsv4_indexer_fp8_p64": "1e1b179d2db40d310934f56c319ea3c6aa69cf26cdd9e2dd90d38f28d98f21f9",
    "dsv4_indexer_fp8_p256": "1fee90bedb0996ae5816285d4351dfda34cb50733a841aab1d48624386d28b21",
    "dsv4_indexer_bf16_p1": "11f3bafd308339dc8311f84b2eb16bee6bd6f38e2391705e5186bdeca4acffce",
    "dsv4_indexer_bf16_p16": "be5798426d9d391f74c7b883e3ebe97591347420606552da5f9a23b0895e3ab3",
    "dsv4_indexer_bf16_p64": "94be1dd83dc0e2730ac34b70c426501e290e1aa56d7adb7daa97d0239b4132c5",
    "dsv4_indexer_bf16_p256": "aef607d36c7e49706cdcdc2672018c1eece5c332570b2ea6b9bc22c37d569988",
    "dsv4_indexer_fp4_p1": "d2d88a88bcc44369e0749b63ff65d638cdc31f850a4bd67d3efcfb2d69879321",
    "dsv4_indexer_fp4_p16": "d2dafd4c144a28a092c0fbebdf7bd8866e00d00102a510d560212c3e7216ba6a",
    "dsv4_indexer_fp4_p64": "a5d6ff8366924121e90765139ffc045baa5431ae99d438f04fde094af6980b3f",
    "dsv4_indexer_fp4_p256": "cd2343870d2faae508b380f6ef1b51476d3381e629f80beb10b9d22c3eac71a5",
    "dsv4_mainkv_fp8mla_p1": "2b3887cb6bb797d400892bf17a661ec682a2aa96842360a36dc0ac17de921964",
    "dsv4_mainkv_fp8mla_p64": "d4cdc44a148e4e11381077df3082afd83102c444d6312d6357b82b2504bba5f0",
    "dsv4_mainkv_bf16_p1": "5dc0c7c992beb8e4166d3c85acfc8587701e9a6889fffe4e03998c2ec0ddde69",
    "dsv4_mainkv_bf16_p64": "a447e912636e4ceba7849bbd1337411b87ccd751f5beb0b7fe3ccb1bc29b1fd6",
    "dsv4_mainkv_fp8mla_bfround_p64": "4aa29d3a3bf8ae325fb75a86d71f241fe6720f1cf81750edc13266771b7866f7",
    "example_fp8_inbf16": "58526a2a92193941cb48ff8b0503c019b339ec056b62c4ddf7527c8f65175a0d",
    "example_fp8_infp32": "621141d710f01b114839c08041eb2e3736ad5aed178e8f9cd74ee3d34342e1fc",
    "example_fp4_inbf16": "f11843d7f1daa82af0f5e200d495cff127919f2f4169e201539a808d08125518",
    "example_fp4_infp32": "e8320328146fd4bba92e864534da8429b7b55d2fa9ca74c10c6066c00e910a5c",
    "example_ln_neox_head": "517e32ef576fa7a8ed78b872db34a109f2c8b88cc217112bb9954cac95af4c1c",
    "example_d192_norope": "c18e8ec9b1242951b99e124efec4b4fa09e270973d893277f80a44e324aab41a",
    "example_d1024_r128": "cf814a8215a9c601469f6f964ab0361c28882c45ea823ca88b4743e2f46ad590",
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
