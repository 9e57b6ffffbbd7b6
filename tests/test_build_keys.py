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
    "dsv32_indexer_fp8_p64": "c5a1f8e640779fc469254ab08cb6a87e94c8d24dab36eb52b84db6c6f4268498",
    "dsv32_indexer_bf16_p64": "eb87f317dd9a29f582da3f5bfaebbbc8b7c64f55fd7ca862597bc8cafbaf9db4",
    "dsv4_indexer_fp8_p1": "5c5f302e3c0c1ce8d688d9be74de36c5f404a47fec02860e3f0c52745b82730a",
    "dsv4_indexer_fp8_p16": "b5afa27a3e7de7a53309ef4bad8b840ae6e2e87bd0a3026889983976897c2a1f",
    "dsv4_indexer_fp8_p64": "b8e24479c984f2ba7d0d18bf5a53f434aa211aa650b7f7ee9df3e37d7aba4467",
    "dsv4_indexer_fp8_p256": "49985995c76525827b4d81d2cad6e268704bca7e6c137b4cc81a065c1c7b8cae",
    "dsv4_indexer_bf16_p1": "94833ed984b812280e219bb79bc9c3c343f412b1c6259f2e43f726c40cdb8579",
    "dsv4_indexer_bf16_p16": "e5078dd5fc844f052f84603f30cfcb8551cf09a9daa53de14ea49df1b4b55af0",
    "dsv4_indexer_bf16_p64": "8411727b648cff250f1e3a83127d34db6bbc61c342b337265d59cbaad3caeecf",
    "dsv4_indexer_bf16_p256": "4580852e44d91c4ef108620de34888f2b0c90e5cc41e820bf776ef3fa1687595",
    "dsv4_indexer_fp4_p1": "2aefd3e107fcba59941434e3216528b3e61705c97bd1acacfaa604aca0e81f98",
    "dsv4_indexer_fp4_p16": "471ad62061c0eb90012d540615527cf5ec6cc10889be1b70e749c5094942b2a3",
    "dsv4_indexer_fp4_p64": "138da1339bf9d8ad6ea5a391fcde1c534a10d6306cfb7bdfc00367927442b02b",
    "dsv4_indexer_fp4_p256": "9310bb1495a29616471ed78414661abc51ed3743c830c4068211c289b20b190b",
    "dsv4_mainkv_fp8mla_p1": "bb79ea73acce370f362d2aca4182f6d8b16759661ab078f418870df693ea204a",
    "dsv4_mainkv_fp8mla_p64": "6c56dd845fdc79b74fa970493af7a2e06a12cb3b6cd82655362c7270c8fba451",
    "dsv4_mainkv_bf16_p1": "262926bb4d31a77be6463ecbec6a8ab2f8b75fbaf574a4cbdde22e12c74cecbd",
    "dsv4_mainkv_bf16_p64": "921d0caa31491186409073c3f81b158240b7acbf9c28d948c6e5c37c9f817910",
    "dsv4_mainkv_fp8mla_bfround_p64": "0df7c3f2efc232e8c8cb8a5783284bef14eb6e675663484da3e6883199877540",
    "example_fp8_inbf16": "3a5edc22dfd1edbbd75eea75fa312c85c156429c3e758c79dcd8e4ded8efafe4",
    "example_fp8_infp32": "693fad54fddb04c657d100a786b2a3486b662b9a2b9b6487d90a9df118b89b51",
    "example_fp4_inbf16": "bebfe23a5ebf8bb160460c31c77a2b4f5f351988ae5424cbbc41f369c69a341d",
    "example_fp4_infp32": "1702aff2ef9e23f3866a759144629cb509de27ebbb848e9c135c84fe1bc2238e",
    "example_ln_neox_head": "cb9a0a8cdab8b52ea89e938306b5af0d0a8560717b84291eaa6b7a3df5497f43",
    "example_d192_norope": "325f2d57ea6a9c2ecc31e2d6eb1d92b92a401445ca94a7fd49124226c360e856",
    "example_d1024_r128": "051a7ca1adea7877e4afa0776fd0c1a5a4b6e8b581e7fa773b96df4e1149b45e",
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
