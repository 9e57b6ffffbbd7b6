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
    "dsv32_indexer_fp8_p64": "b990fa8ef408f34ff9fe43f994d6b8b8a1362e0909bcbda8e2ec9ad8569e2349",
    "dsv32_indexer_bf16_p64": "9606c616a713b7294817436d20dd47894a0fbcac8df40683bca4608f05be4ba7",
    "dsv4_indexer_fp8_p1": "28cf944a0e16145caa52e95d45c584bb7d45f38274e413ee2689f76feddd8112",
    "dsv4_indexer_fp8_p16": "fb3f560b1b163a3b7a06e799424f177fa3b1cf65222f8c745a9802bae5fe2933",
    "dsv4_indexer_fp8_p64": "3cce8b39c7e31124f452e282d91c0b29e578be854fb9855e71fb25672c0d9935",
    "dsv4_indexer_fp8_p256": "ef566025ffa65bdce59fc53f461733d74b4df42c3892ffe403510fdfa248fd55",
    "dsv4_indexer_bf16_p1": "27b1a01fc66caf015bc6084c144fdd1cfd6ff9474c7a397bacb6c5210736fe42",
    "dsv4_indexer_bf16_p16": "a71e34705fda824482d07d52ed3ca1ff54901479754108d46f9f81e7b48cb52f",
    "dsv4_indexer_bf16_p64": "2a4f790067d3da1f39337fa6c16fb657137504462ccbe9feea440ced24a2b0a4",
    "dsv4_indexer_bf16_p256": "69fa1d8bd31fa4d6804a8ff539f212fe1d9868d3fb99001676efe2975be1c7ea",
    "dsv4_indexer_fp4_p1": "d7a6c62d57d93352375c16bcd26dc1579444f05d42a77b87978342f0bbf04b4e",
    "dsv4_indexer_fp4_p16": "5a048b7d164916d3b1f3055f502ee85c131dcc7f76bc8f9e704dab00145edc99",
    "dsv4_indexer_fp4_p64": "b61f35b31931be9a08272d6ab7a17d6c11ad9e0328a8003e385fc8af12aca5e7",
    "dsv4_indexer_fp4_p256": "6c83f854e085465f8dd810023a073cba35ec3db5f70ff85853de8a7a96307025",
    "dsv4_mainkv_fp8mla_p1": "c96220e5554f1d2e848efcea8f33fabb0d600bdabf0967774c0ec3430a3d7fc2",
    "dsv4_mainkv_fp8mla_p64": "8d2ff1618f8603db12bdcf4cf725c4995d12f6db8de8fe8ed8edc88cabbc1e5c",
    "dsv4_mainkv_bf16_p1": "72f41b8136e096a5a17cb65d24fbf819cf19fe89383f1a0c56cbf9ca51ea57d0",
    "dsv4_mainkv_bf16_p64": "eee202ebd3f697b95c2b93b68046d51082aa0e4a2d9d4d9cc71b2e0133d4ca00",
    "dsv4_mainkv_fp8mla_bfround_p64": "bdf3c0e79bcfb2cdc371893110c96b0ccf020fb99695d5327bccd756eea2cc0f",
    "example_fp8_inbf16": "ba608a18d90d894d8ec8bfa6e5fb7c5793dbbb45c48f9112eb0a354830488694",
    "example_fp8_infp32": "c89a27aabc5d41bc937684d8877fcf48b760b803fe8803049b0dc62b6f1ef47b",
    "example_fp4_inbf16": "9c339fb65b473565439b65a5791584fc956f27fcc69e537bd2b14b2230417c7e",
    "example_fp4_infp32": "6bf9991f6d3bf51cbea5ace483f4f1d20e303374234c5e1bfaa740f0a4fd881b",
    "example_ln_neox_head": "881be502a3db1ffb51a5cfd06b8b7387dabc823a8f5c316c3a7e4754f4f429db",
    "example_d192_norope": "e7b53c3d59595be9f853c1e60bcbd32f1bcfb7df839e532edf0f0c5713b05181",
    "example_d1024_r128": "73559548225b6e9c0621fb96644c83e185de798efa5d08a4f1d4b4b09b46e86d",
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
