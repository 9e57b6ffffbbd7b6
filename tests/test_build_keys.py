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
    "dsv32_indexer_fp8_p64": "c37a8763dd5d00514461f1f7f79518c2453f2376d99d97a77e455bbb56bb3ee4",
    "dsv32_indexer_bf16_p64": "0f29498840e1d84fb2c879cfded00374e5ceeea9f93bbbe371be64064c7e38a7",
    "dsv4_indexer_fp8_p1": "d94258f2a745bb628493c2e8fe385dbdd8e282cf0013e910ad2b5df343b42da3",
    "dsv4_indexer_fp8_p16": "512008e6153dc36a72e42a2f096630bf0de5797d996af5cc4e8fc8d007e29cd0",
    "dsv4_indexer_fp8_p64": "8f943d5f79d2ef2f39da52e8155982741d962d002836f805428e8677c3906dc2",
    "dsv4_indexer_fp8_p256": "ff68097ea20fc518ef924af497e62ebe3639d200e574b761f393e43a6abe9920",
    "dsv4_indexer_bf16_p1": "87776d8c6f417cbe426153fb59df9979f726dd552dd7e7c6619bba3724bc7291",
    "dsv4_indexer_bf16_p16": "5daf457b3e37e12354caba1449db008c847aea0f39f37a8f947c621ca30a4bcf",
    "dsv4_indexer_bf16_p64": "8de2cea1257bd3a2752d183cf0e6bffda4aecea906f57a67432cc4418e951f51",
    "dsv4_indexer_bf16_p256": "634554513b4cdbc85b13c1af41fe3fe9c92f3f0af358681d32e10e9c6fedaa5a",
    "dsv4_indexer_fp4_p1": "23103360e247671e198f8ae2d4ffa14f8b639f7bd112374fa41106a13a43f711",
    "dsv4_indexer_fp4_p16": "27e093c6b74f83f0ef450d75589cba0156fb154dbc09bac1afe33da083be45f7",
    "dsv4_indexer_fp4_p64": "be1a01cca7a7243c867c8ee9cfa2711fcabef5ad705149b2cae06d2fe334d0f5",
    "dsv4_indexer_fp4_p256": "3c16beb07ee74d92489aba15f4cd65b43f2ae5ce34cb53de4767040dfb38a98e",
    "dsv4_mainkv_fp8mla_p1": "23c97d668ef2f7f41ecf2b8a2bc598ce5c4aa8f575e294535d7c546bb4b4254a",
    "dsv4_mainkv_fp8mla_p64": "8d9aa0c8fd16e6bdbc74262951dffb4664f2b993535e03787aecaafb44f590a3",
    "dsv4_mainkv_bf16_p1": "41b62d989a2f8a46c8532e5fe382b840627033130df9d99f7ceaa3fe73eed928",
    "dsv4_mainkv_bf16_p64": "e15154c89764be5f410ccd7b163a3be315837ff40d63805058086982cae1f89f",
    "dsv4_mainkv_fp8mla_bfround_p64": "8a994cfb5ae4f5a5758f8ec6e0a07444674d198adcd09bc73caabee667ba9360",
    "example_fp8_inbf16": "0db2ecc6d9f77a69275bea018488aeedc0fb7fabc4c74bcf0a5235598bcc6640",
    "example_fp8_infp32": "236fdb6f6fbc183e978c8599c8f7a3ad8433d16aed350552db8146daf86117bc",
    "example_fp4_inbf16": "bae4162bd7f2ef991ec4d365d9cdd04ca0684fa73d0a69a818dd30b33b497974",
    "example_fp4_infp32": "a70a485db587a8545acf2b6554f845be82a6f41d4a362239f2bbb2e111d0c20b",
    "example_ln_neox_head": "cfb1845be98ff1a578972dc82b3e5ecacec877245ece6d5077c7ff3629643d51",
    "example_d192_norope": "57e6540676939490226a42918fff0498788c20124887bdc3c2c9102f026149b8",
    "example_d1024_r128": "38199697be8d30e24e542dc088c44bdf439b5c5cfd44aa4259fbd5c46c3dcbc5",
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
