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
    "dsv32_indexer_fp8_p64": "36f06817eccb8839fb4817cea9ac538641dbc88ebe614ac59b7ec39316644b8e",
    "dsv32_indexer_bf16_p64": "76e9d13a437738c3dd316b1ffab92979e7908dcb6f4b4fd317b9f8427bd28540",
    "dsv4_indexer_fp8_p1": "62b6dd061801473fcce9cc28f3ea44f8ea519446aa8487440d2438104f02723c",
    "dsv4_indexer_fp8_p16": "7c1158dcc84252a32cbcfedce589fbeb20dc429bf137e50ff930f66c426b48f8",
    "dsv4_indexer_fp8_p64": "98af672e0fa24f39a5c1a9492b3f88026fa7558cd50bba6dec2e31c8313c15a7",
    "dsv4_indexer_fp8_p256": "8eea576fb690b585c11911ecf7d4e26851adced90ac804bc5868efd30999ec21",
    "dsv4_indexer_bf16_p1": "c7ff86f3b9110ddccdf5f7a3c658c2478f7865df17bc44ad28c768667943b830",
    "dsv4_indexer_bf16_p16": "8c5390a5ba198998cbfec4a079151f2614b804fc4bffbe34fedf4c853443c557",
    "dsv4_indexer_bf16_p64": "8c30331b0ce83fd06aa0d83a098dda02686a283d3456748c48171fe09bf83172",
    "dsv4_indexer_bf16_p256": "530a6d421a8b0ce57b5eb20c7d422fd31bd64a65bb4ca8c2d20239074bab444b",
    "dsv4_indexer_fp4_p1": "24e41557901aa3bf3a741c3fb2db55a2bc6a41037fd81b7e4621c0cfa97b677d",
    "dsv4_indexer_fp4_p16": "0381c7b64378225cca9d7107db044329e98a0f1f8406a670365d88b418e2e4dc",
    "dsv4_indexer_fp4_p64": "e4fe471d77e5fb822c5862a6a7420a56da10dcdaa19052e0597c299559e0d726",
    "dsv4_indexer_fp4_p256": "943f64e452a5cb07cc620fa7dd37d0e03a77f8f62a2cefd824f5705e0afdd5f7",
    "dsv4_mainkv_fp8mla_p1": "008f79111bfb65674839ed5d3723c2bbe1702d0d945449d9474d44f4c877ae15",
    "dsv4_mainkv_fp8mla_p64": "7275a80ab217da990b5988c7c23e2a2d3657ca3b0730595de8ebc64b1d37b562",
    "dsv4_mainkv_bf16_p1": "7b30fcd63fb620ebb1d1649593d525d32faff47acfa01f78f1da1dd448f853b6",
    "dsv4_mainkv_bf16_p64": "2101ccdc386b50aaa7ca089a6a7db8200d2653e8f51688061430dc0d4cd8457c",
    "dsv4_mainkv_fp8mla_bfround_p64": "367e7c159de66790b301e92cb76ef8b35c9e0023cf979478608dca927facc658",
    "example_fp8_inbf16": "a40b4df88df67c7eca642f54cc7e26fde96f1b4846b0f1bbd890de81b15c520e",
    "example_fp8_infp32": "6f4730d1b64d51fc4ca9f9276f5f6f1307c2dde347b4a7e7343ef78bcc4686d9",
    "example_fp4_inbf16": "25c8360d445b5bb50d8e09bdb5119d449827dee8bc4d11306c1f309d421f070d",
    "example_fp4_infp32": "e8a5707d383a20f83d561b4a79f5cdc7be5b9cf098446d449804e848aed99871",
    "example_ln_neox_head": "d1b2aa7d560e5614def7640ce0239513e175aff854756af9a242a9f38f1c78e4",
    "example_d192_norope": "a1296a3d705d39bed378de154b8710088a75c867a5aa617889c282caef0b2fe3",
    "example_d1024_r128": "cb6e7b165be1940a1cf7ec4b41c163f8dfc33c13e40c29ad77101136f37b26dd",
}


def test_shipped_build_keys_are_unchanged() -> None:
    keys = {p.variant.name: p.key for p in plan(shipped_variants(), FIXED_TOOLCHAIN, ("sm_90a",))}
    assert keys == GOLDEN_KEYS


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
