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
    "dsv32_indexer_fp8_p64": "0feef70eba080a640c01fa5a1d63273c963fb1107466b1edf8374c1e55fcdd62",
    "dsv32_indexer_bf16_p64": "44c4015149dc44ec5e0c068ed6c22fbdbea740f4124894ab5012f676082a3fc9",
    "dsv4_indexer_fp8_p1": "b161e2230fbeb82ca162b2992752b47abfb11cec914c3804fc5793a1b7045938",
    "dsv4_indexer_fp8_p16": "2277b0591a1b2fb3565eca2887c9b2967e52da152e112df7d20aa91a3a3afe9a",
    "dsv4_indexer_fp8_p64": "46d0ecedeb1d2e618bd82b00f7d7fe537d155c9623bf597a0e8f167fa003f0af",
    "dsv4_indexer_fp8_p256": "ab9e490bf6d0cb6dd688a075d81117cdc884ea65a3d1f2b307310aaec162c1ed",
    "dsv4_indexer_bf16_p1": "97ee0f8de91940c892e1a1c9ad39b0c5da9c89d3eed8a8183bd2f53446139769",
    "dsv4_indexer_bf16_p16": "7a7b49b4238bbc81ebd73e03bb2dbfaf8cb99151a366ed1c914ca164bd485a0e",
    "dsv4_indexer_bf16_p64": "68ca964400d56651a425b71c5fd831de94ee8338206e312b7fc54c91abb1054d",
    "dsv4_indexer_bf16_p256": "b9ff6a5cc169c083d7fbde57e10c44acc2f4afc5261728437cd917c8a6ef965a",
    "dsv4_indexer_fp4_p1": "e70ce3563aded74ebe38c3ca66b7e32b1b34dea407e0b8836e759f93dae86945",
    "dsv4_indexer_fp4_p16": "5576332204f500ed460bcbad03b72a6c1da66fc8feee198c309cbfd8bd7e9107",
    "dsv4_indexer_fp4_p64": "12103d7835c7a66d8d0363cb00ecd7b4802381726c0d5d6e3a249a9761895b2c",
    "dsv4_indexer_fp4_p256": "a27a467a86f674ea0c9a7f7e350140e0b7c24f1face227b33f28105e88546f09",
    "dsv4_mainkv_fp8mla_p1": "2dd5eb62ee612b3a5f4dcdeb43d75c828f8ada2fa14b941cb321c1c63ec683f4",
    "dsv4_mainkv_fp8mla_p64": "86cd7ece6cd8ff46d580bfa80158b8096ab36b2aa0221b2cc8e4bb9c4125e923",
    "dsv4_mainkv_bf16_p1": "a85d6c6591fe217e1cdfb145f9b6970857e14fc34694f0a3b156a2a2f0f6f1c1",
    "dsv4_mainkv_bf16_p64": "8f21b7d6b290aa7c925a0c5519fa617c5aa4fb1e6c14d72d8cd37e89a9133c3e",
    "dsv4_mainkv_fp8mla_bfround_p64": "12fed3986d25da290a1e5f92f548230c2e66ff09226dedf9b60e29cb9e07aafc",
    "example_fp8_inbf16": "a9db7a921ed4d0ae0e16dd980ed6e1548fb704aaa6a76498bc5b5c202c76357b",
    "example_fp8_infp32": "5c4f73ad8d5a4afb842616bae94dcc613d7f657d9b8ff9284d0bbc094b5bcb4d",
    "example_fp4_inbf16": "718a39b9e816c1b903e83fb7f36bdb6311d15ab90915bb076a22d7c51e038feb",
    "example_fp4_infp32": "482a87810f8497399b8cdd8916584d360eb1901aae1e615944059ac709bed251",
    "example_ln_neox_head": "80aad2b76164d1fb1e4ceb4d530c33f56997ca7597dcda87d8e4e10abf76e186",
    "example_d192_norope": "cb6baa280d1472a35c873655fe562e935388264bd265e4f9137d85a82d8f4277",
    "example_d1024_r128": "5e7c959b5edf61df0cf894ee4eb7fef3200edd7d9e91de58352f5068a2370157",
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
