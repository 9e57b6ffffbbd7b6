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
    "dsv32_indexer_fp8_p64": "c8ee8337530fba5c84d5149c4fb422560645a6212e542d119661824492203629",
    "dsv32_indexer_bf16_p64": "c61804c9d4444462b2f7ef65fde796da2beaac3152ef15b6550498785b027e57",
    "dsv4_indexer_fp8_p1": "91876f246ebd396628e2b7cb51f57a9a2d121f19827b4f9a3509a2542f92d6be",
    "dsv4_indexer_fp8_p16": "98f847f2d37e5eed8df46a6c9a767daf37945f694d9d93236e2644924f644e44",
    "dsv4_indexer_fp8_p64": "b0ac78c38e1d79afe7289efaef6141de327d0094e480abbe435c54cf55057b82",
    "dsv4_indexer_fp8_p256": "b68c391cb7b6f69cb1a3ec7b6160f31f7229ae0fcec930a55c0a26701ef883d2",
    "dsv4_indexer_bf16_p1": "08479a8018ebb0dad65b67bbc4504a55854c9ec11e3984b440bf29cf97696cb5",
    "dsv4_indexer_bf16_p16": "502a419256d5d6eb4d7221fd08151398dc897a0eaf9788b77dec68abc5268769",
    "dsv4_indexer_bf16_p64": "869d5e574ed4ae3fa2a65588053a9346830d0ad2bcfab414c44282ca303d2069",
    "dsv4_indexer_bf16_p256": "5cd85e8fe2ca463abca6b07b0627834c3bda718beaa3ff4c194ffeffdf5d7587",
    "dsv4_indexer_fp4_p1": "832996176895d2733077b7367c812d5a64be08f7d462b8ac271ec2b1fb876622",
    "dsv4_indexer_fp4_p16": "19c94eddc0ae7e6e53446f1ec4feb42233754f49f06aba04e69c549152a14775",
    "dsv4_indexer_fp4_p64": "a0f0afef87779068a15b61c1fddd2192d30201a23022a21bb48c13be5df35eb9",
    "dsv4_indexer_fp4_p256": "33dad5f4db6fa01c0cf984501ee98410fd60039b4f269d14145ca300154907ee",
    "dsv4_mainkv_fp8mla_p1": "c9d4c5100a2a740d38af3a661e3c551ac81e9e734a179fdccc4f8707a2d401f7",
    "dsv4_mainkv_fp8mla_p64": "111c9abf9475d3b6c19d627eedb6b5fcfa9e9a003ab553c6f6c39318083c4216",
    "dsv4_mainkv_bf16_p1": "44b8fe50ebf43df47c5430924b2c5c907c550790519ec15bb1cba8b0a940a106",
    "dsv4_mainkv_bf16_p64": "a3b56ea24b9158b4a42b4c605b14cfa7c380fbfe659a02d93c30b5f885661dc9",
    "dsv4_mainkv_fp8mla_bfround_p64": "b2fefa3990b785394d157bca36d786f9bd25edb47ae86deaa428b53761be44ab",
    "example_fp8_inbf16": "f92758f78de8fa440dff8aa799820e3970de1321e4df5af71116fa0bdaf594c8",
    "example_fp8_infp32": "d8daba623dc647a041246f890731dc73590eb2d10a77364a1b0cb833256816d8",
    "example_fp4_inbf16": "a77683387dd76f0a58958e0fbfedc50a144afd0ac0b228d4ce9f536ada858878",
    "example_fp4_infp32": "34395aef3bd1b194967098c36ae4aaf633ee3acdec418c0512a152b281d517c0",
    "example_ln_neox_head": "3dbd311e6995eaad1fe318af415396680916095da3a1742d9e86ae9b759ff9c7",
    "example_d192_norope": "ac58f77ec5fcdbff5358957e8d9299b9f12739f4abd0da55b5c8d55a32a4a41b",
    "example_d1024_r128": "9c7f5eca78db7a7e5a9ca03f19e9b799c197c6a9f265f8e7a696f7d4aed77245",
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
