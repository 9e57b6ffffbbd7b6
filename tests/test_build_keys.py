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
    "dsv32_indexer_fp8_p64": "162044721cabc9842e98c615597bceb775de7de45af658f1be7634468d84d284",
    "dsv32_indexer_bf16_p64": "380334abb9b8b42a7d8e4ea0724230f5aec6e61081c7fe8203b4363d24a27956",
    "dsv4_indexer_fp8_p1": "59be6da442311d41e516d6efaf2324d3dceba14a730356121178ba4cb7942682",
    "dsv4_indexer_fp8_p16": "35e74947e9353ab7f5b75e8f6b7ce49c16ce0ec194b2610ae20e5796bf000958",
    "dsv4_indexer_fp8_p64": "9d399289264d05e4d0253a38f1bc8f57fc12d3c3bcd901909aa3ce59256b269e",
    "dsv4_indexer_fp8_p256": "36f2988e562485e13fbc01cfafbfb14f5f01cb38422826d7e352484b8cbe14d4",
    "dsv4_indexer_bf16_p1": "a947faf946db397d93331793e5a0ad229b79e77bbb2ef1a5dd41ac103481cba8",
    "dsv4_indexer_bf16_p16": "e4c94ac46bf85e2503ae582412772f9b0cca7abe4cd18806a5132b957781fb26",
    "dsv4_indexer_bf16_p64": "2065a6689d00846b913dbf14cad633bb48bbee07d3fe998b0d6cdfc85468ac43",
    "dsv4_indexer_bf16_p256": "e7d9c90309e57b83d072e5672d0519ebe926737d1b2e97d3628694eb09e6c580",
    "dsv4_indexer_fp4_p1": "f5687b2ffb4dc2b54df9d5113a2760468f77dd121d14b80e7d6b70a210e58031",
    "dsv4_indexer_fp4_p16": "e5a3cba1f112a9f9ee4af4172826735cc20d6836fcadb5ed933a48b868c3cbaa",
    "dsv4_indexer_fp4_p64": "e5f567f0841cbe407c33b059e398c7664c9cc040e2c4cef83eb68bc6561d45e5",
    "dsv4_indexer_fp4_p256": "3bb4fbc242058bdea8386b1e205e5cba5d7bd9e2eb98a93d51fc4ecc293f67ee",
    "dsv4_mainkv_fp8mla_p1": "f48e265d76630c542ebb977a26ebc0f35e4723893cf7637b9098984eb7e24543",
    "dsv4_mainkv_fp8mla_p64": "321446267fdd1269274dab3bde6539f800687789b57ea13582b4606cde7dba40",
    "dsv4_mainkv_bf16_p1": "13f8692cccf238dae5c6c90ef1a161a63e007e3121bd4d0a481ea2c7fdbb77d4",
    "dsv4_mainkv_bf16_p64": "b814b19068f328b1889011e464747732e810a732608798a63cbaa4b4a8405783",
    "dsv4_mainkv_fp8mla_bfround_p64": "3157c911eb1731f96abc9cf725dc4e331c61f95f0b19f5d29e1f14c729523ece",
    "example_fp8_inbf16": "041f8979f9618cc2731c49a35b64389dae9debade3bca02ec88afdb522801d14",
    "example_fp8_infp32": "c2ece9409923245040c5e71d356e34077f265dc0509a6505a2e4a1d851331b5d",
    "example_fp4_inbf16": "853b7597ad0c675d73d1a95ea8eb51df7c152912bbf806d2cda2fc6bc9cc3cf8",
    "example_fp4_infp32": "75d1a4d44f2a049faffca93fee2af1a2d3a8394d4a3a2c8d877b01ff1284a3e4",
    "example_ln_neox_head": "02779f34a80c2b2cf55efc4637f287641112f15ba653830414bdcd385340687c",
    "example_d192_norope": "79e3cb568dd346571cbc490665f2a804bf3e9983adcffa44db60e14764564428",
    "example_d1024_r128": "037ec4a46a0863cb423de537ecf8973324c041b63b1063a4d789167b1ab3f68c",
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
