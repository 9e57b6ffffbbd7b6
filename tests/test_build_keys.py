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
    "dsv32_indexer_fp8_p64": "feed77883c6bd2053fad09dace5b7964aa240092d5fe593efd4a87e00611536c",
    "dsv32_indexer_bf16_p64": "b70d4dd7d885c7ef5ce3718ca25bde2913b616c2dae1fcb95ebe2631d2f95c54",
    "dsv4_indexer_fp8_p1": "d391406692871a0f34ae85d3f2c31cf325eb622de52c222e43743f1df89d8e82",
    "dsv4_indexer_fp8_p16": "3bc8dcea32975d2068b07649436dd5929d9b92fd389659f6c840e938df4e7cf9",
    "dsv4_indexer_fp8_p64": "9ed3e8aa338b8ac094a0801e12e139880309bfc39c78a07e28339d282a53aea0",
    "dsv4_indexer_fp8_p256": "bb9707fc9e2e7c411860f12cf9e328c4718d56e17eaa0c9cceb2c614e74a1feb",
    "dsv4_indexer_bf16_p1": "d8b5cd5a09b2a99096d2e132e5bf820a9bfb596c86d031559d41d0a42817bb6f",
    "dsv4_indexer_bf16_p16": "602681a4f2d61d93590a38b472c0cd38b1852a5f5017ecfd1df1a7a14df1eca0",
    "dsv4_indexer_bf16_p64": "5bfd551f331a461c1e2700517061f80517793da5e03d79e8a9b8108bd1402d6b",
    "dsv4_indexer_bf16_p256": "662523e17b001fafed21df58b99fb059854266b38777e56afe4797e1b737e187",
    "dsv4_indexer_fp4_p1": "b598aa3fccf4f20e749cd757081d55d5235ced2fe2e583d950d2d5fa2516f14d",
    "dsv4_indexer_fp4_p16": "61b5b6d3101c400b094a35b757dfb008746cee27035897bbf8da7156e37a7872",
    "dsv4_indexer_fp4_p64": "5a5622102a5181d78a177a565e17dbd15788c2776f456ed7e8fa59c60fb8eeac",
    "dsv4_indexer_fp4_p256": "3e794f545676024e42d57c0d626ecfc5c84e12207a7baa0fcbb763d34ca36209",
    "dsv4_mainkv_fp8mla_p1": "f6cbf20a41410da7d824f18680ae1e356cb896ad507649f18146676e71191071",
    "dsv4_mainkv_fp8mla_p64": "7cd703293396f93adf0714f317e709e4c2367c35938c52189204ea3b018d0293",
    "dsv4_mainkv_bf16_p1": "a0307a33f864536ffc6c803a144dedea2187d9743c4231dc73a43230d15c3ba3",
    "dsv4_mainkv_bf16_p64": "1c805b9d3a46968e11df7210cac78e0d17594ca958a1b500002395f001bd3016",
    "dsv4_mainkv_fp8mla_bfround_p64": "faa95033530cba6241a58603b3d514c980c682cdb06f007ea5c9859e9a019845",
    "example_fp8_inbf16": "5a67529ba915598ce3232f7630fdc27974e1c57276a68ac9df74500895b6f38e",
    "example_fp8_infp32": "2c77477954d9e921bcf33b0f1564dabbb7c65df90d3f151903cf763208d2fd07",
    "example_fp4_inbf16": "5953ead00bb841677bec4bd215bde3b7b98ab3c310040d271793e63b3e0cb9a9",
    "example_fp4_infp32": "a04872c4c3325d95161881d673a9a97eff3631292c25bb81c8f967319bc52451",
    "example_ln_neox_head": "72986889c269f93a17bc7f236ced53af897709aea2abd9f4e2e42a43d9992474",
    "example_d192_norope": "15ea5578ae48534a7ae5d91c9bb021c5f75569afd9068235138ce318d8a672da",
    "example_d1024_r128": "78c9c3441bc9144dcbbf535bfa39637dda98ce230364d014089db072c6fc4e1b",
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
