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
    "dsv32_indexer_fp8_p64": "b351946588de99285dd661ed140bb5160fe3bec15dffc7290028de84986a1814",
    "dsv32_indexer_bf16_p64": "15f83fd3eb9edfef59c6e628335657f08744c5237c540ab67ab8a8281882bb54",
    "dsv4_indexer_fp8_p1": "9345482c10650d9c191ab82a6d49dc94ca494079bfd8920aa5f64a37cc3e6f6d",
    "dsv4_indexer_fp8_p16": "fb26dfabafa3f2e5e29df8528d333b9a8d8582857ee62b9582da2da6b4a7de8d",
    "dsv4_indexer_fp8_p64": "b3e8fa5bcc95ad408529e5975db77891cfaa1572fe898fd201d0bab30c32b0b9",
    "dsv4_indexer_fp8_p256": "bd21d679626f33a906031cd5ad1ea738e4635906e4f9581388e215707457585c",
    "dsv4_indexer_bf16_p1": "59de2dec3e17fa291a2a66b6004bfd92afe645d363a6a25f8d3a32f6159d8a1d",
    "dsv4_indexer_bf16_p16": "3c3310ab1fc994e73b5ae65916346558028571028c861226ffd8252107ecee5f",
    "dsv4_indexer_bf16_p64": "a73fbf3e91c7c3d4de95f93458909fce462148c36f02870da9f0f3546f3d612b",
    "dsv4_indexer_bf16_p256": "f7f87f76fe96ac773bf8bb2f237feb4116a4b81599c76b58c9f4735a7466c40d",
    "dsv4_indexer_fp4_p1": "bdf6195b6eaf66e351a2ed6f379ef8c901929e53eaaa589aec5a84148beef8b9",
    "dsv4_indexer_fp4_p16": "1ca3d0d1562fe1efee1c39835235e86a1f2faa34525d36b612c8d9496fe61a92",
    "dsv4_indexer_fp4_p64": "68c0b227021af1940cd61dd8278b92dc63e9f93b6bfaa48987e708875f6fac73",
    "dsv4_indexer_fp4_p256": "d93c9863768289dab51e0c69032215a663e283471d5b63e4242987bbf15969de",
    "dsv4_mainkv_fp8mla_p1": "b854a7b729bb6452c7b8cacb292fed64cf1f0b7229890ccdab3b08111f0c805c",
    "dsv4_mainkv_fp8mla_p64": "0e5788143ddf82300a54b32f71113be426b2c2ad080049755f4557f7ef21533e",
    "dsv4_mainkv_bf16_p1": "3e5f765d0ef22c696cf2dd214980ef7b0c6d946f594fd4344cb9aece26380316",
    "dsv4_mainkv_bf16_p64": "031b852abb5b5b1c639548e1c656df66b5c4d6ddd608e9661814e85bf787b723",
    "dsv4_mainkv_fp8mla_bfround_p64": "932882c7f060818cbb3b860d50aaac91d3539f6d4dbc4aa035f4225c948e4f44",
    "example_fp8_inbf16": "4c71de003900271dc492a56291b7d941c3a92bab5c274283db760cdc3887f54d",
    "example_fp8_infp32": "a4b165290adc6bb20f04e34d2e74c36d4bb6ae6a5684563e7983492120982ecd",
    "example_fp4_inbf16": "bdc135b1e8080dcd9fca1f4d9a2dcf31b59ed5bf61091eb4a67c732a234906b9",
    "example_fp4_infp32": "debc5d2821927b00ffdfdee7acaa120ce169560b59bccd690c9f712ed56dd01b",
    "example_ln_neox_head": "28f44c35004684a44a48ac933c9e6f5d0cc6d1bd369c5b64f0bfff5ad4114ee7",
    "example_d192_norope": "40aef68cab06ed7149075d384167024e984dca86e58007d5b1e596334e888644",
    "example_d1024_r128": "e65e9bc2b94d476957ae8d560ecb9f3281cbc8c7c048cb96503a8ac23affc823",
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
