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
    "dsv32_indexer_fp8_p64": "ed0d58c35dc792fae6ac7459ec1db5bb875993ee13534ccb5e31e9cb938a4167",
    "dsv32_indexer_bf16_p64": "0c532b972a6cc162d7d822e2f38e9343a2d5de10d395f66a210165968c88c289",
    "dsv4_indexer_fp8_p1": "4be63d7659420eda5f46d2b28dc1032252bc8fb45b0bb193d10c2ea826c2becc",
    "dsv4_indexer_fp8_p16": "35ebeaa6f002b636fedae363ec564db4515ee315a9d7cb28675aae05b34f7da6",
    "dsv4_indexer_fp8_p64": "2982288d2a4d58bdf568702a8e3d580068f16137577f8c3b382369b37f3df981",
    "dsv4_indexer_fp8_p256": "4a1997790b4672ae460f33baa82efd1b934fc71c7811db25b2ffde57eba2f0c2",
    "dsv4_indexer_bf16_p1": "8bcce2ff51545b9c07b72a6932f444f843ac019b447ba1d65f6c77552a0b3763",
    "dsv4_indexer_bf16_p16": "2446f514d918466ba1e75601cdccc278b54b48aacd291b56e19255ee9c40f495",
    "dsv4_indexer_bf16_p64": "34c067bee97a0c19eb8b3e6f66c78635c7c9a7800f89bd628a0dd86f0d533895",
    "dsv4_indexer_bf16_p256": "0282feb1ab31638759c5573e4e4dde25c6241077eb5726d625cd91ab53610de2",
    "dsv4_indexer_fp4_p1": "e68a11ad932c160ee7869e42ccaeab12f4763821fc68a14b6e92a718d102dd02",
    "dsv4_indexer_fp4_p16": "c999dd34c8425ca4cbc4c7a357a2896450c16c59b7414bfbb3b76c67e5dddff5",
    "dsv4_indexer_fp4_p64": "04736ab703e0b89cda99e0602f1597fa3911fb53380b7194b987d6980162596e",
    "dsv4_indexer_fp4_p256": "d07d4dfe7b6ff2f7be74057e247d9b4def7b1f10ed20e494d99ba4fdaaf54b25",
    "dsv4_mainkv_fp8mla_p1": "17a95a867c5d1c1d095a5f3e19d638f107d9ae4fa6cffe2ea6c567f0ade9952b",
    "dsv4_mainkv_fp8mla_p64": "c5d62cc1c788ac3b4f89ef9993f53e31e5422a054f7c276a4b8721c8e7f74ad6",
    "dsv4_mainkv_bf16_p1": "833f53ad6cff3db36a8162dc48bb55ecdadd935074f5871dedeb1c1180409324",
    "dsv4_mainkv_bf16_p64": "b9ddcc0d02b5a30d0b8b154501bcf36afc9ad93daefaa5bbb1f17d2d60fc1694",
    "dsv4_mainkv_fp8mla_bfround_p64": "290cb0106575f8549cce64932969bc4eec27ba7b530aac8bbc0766aedc0f1ef2",
    "example_fp8_inbf16": "f0994e3dccf30b10cc3d82152d16a53508ce6d033756d1812155ee4f8c6cb4a2",
    "example_fp8_infp32": "15724fadfdba9c8a58b81287823ee72d492797b7c37dbe0b1e639b0adf96e15a",
    "example_fp4_inbf16": "2d1f50f2c5b13d33cb700a19876907d6fc0a1cd0e15c472de5d7f6e00da7b83e",
    "example_fp4_infp32": "01a98fb2ccaebd101bbfe850200782a0104d789fa3b0bd39333b0d08983e4aaa",
    "example_ln_neox_head": "0b8621c45b67e0284b2d4e7738444945d096a8e6f3a651f41e53f10981118669",
    "example_d192_norope": "f8c4dbcc5c11ed6b514b45d8257b276a2239639bf6f2111a4cb2cd3b20ff9d06",
    "example_d1024_r128": "0e0da0ea0bfe97bffc7a787e04feffca4fb3972455813cc2084da322b43c47ee",
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
