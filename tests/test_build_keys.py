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
    "dsv32_indexer_fp8_p64": "9b2e522a133a3c5b1edae6a688d46e5d093bfeb7629d6d5a5fde37338b92e5ed",
    "dsv32_indexer_bf16_p64": "6a85191696080ef3eaed7c34b4b7f0a0745255af6a41338a2e3557247bd8a60f",
    "dsv4_indexer_fp8_p1": "1a7c99270e5192d34a94fa1f170b0715faf47f998213dd97387cc86557490624",
    "dsv4_indexer_fp8_p16": "665ca71a60bd5616c9247a6908abd9cff1053a1252334bd29c713cfb2e0f8833",
    "dsv4_indexer_fp8_p64": "02d56344a01ed08aa9019cc93a2a5a1a1f68554ac887cc6e88f73a38278fc7eb",
    "dsv4_indexer_fp8_p256": "eba9f0378186fa5ceeff67c2cf5356c57e4e6fe04eb00af8a4cf073850992247",
    "dsv4_indexer_bf16_p1": "6d2f07c531848f952372135d4ed0cc52ff3b0152c65bd9b3b7da9e490355294c",
    "dsv4_indexer_bf16_p16": "80e99c65a9292afdeb1ba8be429382a20cb0f5066026c7dd31881806da2c8ad2",
    "dsv4_indexer_bf16_p64": "5d5f576d807c312a5fcc3cdaa338dd129e98db672cacbb7156829d4161b43da5",
    "dsv4_indexer_bf16_p256": "03e63ac64ea681ef497ba9a9f4ebb5bd16b84e2e337db182f4d2964a4f3342b9",
    "dsv4_indexer_fp4_p1": "5f5d1cff8bf1708729561180223b1125d196861ef0a3c28267b3461929a67d26",
    "dsv4_indexer_fp4_p16": "b2134cbdeaae5200a4a198a5670b59d72b641652e89ecfc865ace0333f8e914c",
    "dsv4_indexer_fp4_p64": "0db61330310a803ec5e41777aa5f64be4a7ff0fe05f7905c9ce9a03953ca12a5",
    "dsv4_indexer_fp4_p256": "d1b77fb454f16236c69d9839f8238ecf9d280dbfbbf7b9a80ca2f44e53efa028",
    "dsv4_mainkv_fp8mla_p1": "7ffcc6f66c078a08bfcb43c871b66291e3c02cc06d8e24361ec6d0a90eeb1846",
    "dsv4_mainkv_fp8mla_p64": "96f1e7ff8833bc3caf69c98a6e09609252c85be66fcbfd55cac1ec71e288fcc6",
    "dsv4_mainkv_bf16_p1": "126c9a9b28c67550116ddf0bc5496d06b7b6e85667d2fed2eacd1360c0d0380b",
    "dsv4_mainkv_bf16_p64": "d8ab1f68c4086df5ed14ab4635b9cd3018bb76534b600b999820aa69104652ea",
    "dsv4_mainkv_fp8mla_bfround_p64": "14dedb42e3af02a07d0fe05e6098d65c373801db7441b6d0c00297e5b0b0fae0",
    "example_fp8_inbf16": "efd76f8bb1fb7e42106a3bc8619165b0314ba9b906b1555fe40f013040d61af5",
    "example_fp8_infp32": "7a72f5c832b14b18d42ebb89349c00f502d62ed93f5e0798208f9992dafd40f9",
    "example_fp4_inbf16": "f00e8fb659d12bc7f64aecc1e0ded7f56bef640f9f17dda32fc7334df2f9c74e",
    "example_fp4_infp32": "4a52b2b41bf6b5dd5afe985920b4d3994f5a643f331f3a363b55cbb7d3fda413",
    "example_ln_neox_head": "7f37b3041812282705f9dd4f910907084970085a6857754ff705789332efe4ce",
    "example_d192_norope": "8cf383d7d1b2329807045f08da61e527b3b1c75407fe8a5b108c9ae39e63e6b3",
    "example_d1024_r128": "16c65efb265b5513b147824fa490e065d9f4f51bdb0f03103cfba99c8030ecba",
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
