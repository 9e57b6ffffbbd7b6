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
    "dsv32_indexer_fp8_p64": "575a8be7445d2cc74201efef9461a8ac07f23fe11497cdda8c0783c463bc28f8",
    "dsv32_indexer_bf16_p64": "99db1ac5d9897b27d0b0832a94cd409b2e3f278a2f8b7c7440fe0aa5589a7b72",
    "dsv4_indexer_fp8_p1": "ec0118c7f748cf179a79279f13c76afcd3b2f82578914f6a372c8dddec9c4f01",
    "dsv4_indexer_fp8_p16": "2324f7eb10794baa001e82927cd5a71bcade16e7c15492212b58548a20b4a721",
    "dsv4_indexer_fp8_p64": "7bff3ac1a9879b3be86d6d762fbcd231e6fc599e388eba753489f0a14325b3b6",
    "dsv4_indexer_fp8_p256": "d78da9346bd3d5019896a05739e58c1bc013d802f09aaf6805e4baa9132d4cf0",
    "dsv4_indexer_bf16_p1": "399435ff450dc90e411022d1164f19cc19d538d81d58ef632ee928862fd580fa",
    "dsv4_indexer_bf16_p16": "cbc16da01e4c3b0920349a91449f2db9ea77e65122bd5c29b9be373176a02e0c",
    "dsv4_indexer_bf16_p64": "f734fe36a7fb379520cdaa417d93d96ead2d704bf00d35e1d55eb86e417d7a9d",
    "dsv4_indexer_bf16_p256": "475d4e47d12fc01962846f8a80dc8c87a0ae4e75f7308913c0dfac00ae96727e",
    "dsv4_indexer_fp4_p1": "28d1a9d37bdd9376798dc5331a34653670326cb1ca6ec957c0e9c6db64e4bb37",
    "dsv4_indexer_fp4_p16": "c2556b840a530fcdceb55d85db31f54ba74b73e2e90ceb5faaee229d06eab6e5",
    "dsv4_indexer_fp4_p64": "8bacfb8d78094d662229881ea417674cea0c78946aa4945d4cbdea923a9c7db1",
    "dsv4_indexer_fp4_p256": "b1d9e23d1bb7bc4a11604f5a609fc0263e4689e7eb802afde3aebdcf68400f0f",
    "dsv4_mainkv_fp8mla_p1": "b47228c6bac320003d1495a3335b77d273e9db66ca231af2027157a90ff2f953",
    "dsv4_mainkv_fp8mla_p64": "9430bc212d40f19527539472d2e49d19cfb41f3439094ee983881dc2f4a713bf",
    "dsv4_mainkv_bf16_p1": "2ec787eb99ff50d29667e9707e8b769bcb8586ee7d2161e87463dd653d495940",
    "dsv4_mainkv_bf16_p64": "164c742553b277359bb00c26aad8419f9ca97de74316a06a0d55f22006f6fd2f",
    "dsv4_mainkv_fp8mla_bfround_p64": "8cce5b92638849f6deb76fb940897d464715b11631a0a423e5c5303cec2956ae",
    "example_fp8_inbf16": "21576bb0e74e37545f27c76b69e48d08b3ca7177c117cb11b8b2540b70d9c1e5",
    "example_fp8_infp32": "272fbd549f6c01e92c0d4ae88bad5b002e97b7098043da7f3aec47bd7d511038",
    "example_fp4_inbf16": "4f7575e44b6da3095d1b3194eab73afdaac7db90c2beefca67e359f12ca7fd0a",
    "example_fp4_infp32": "986476c344a7f4a754be230d088973cffbcfc8aa02cfe2868cb22790d4c9ca0c",
    "example_ln_neox_head": "2202c3de302214027ff0b482d27c99fe8392306217c67690cd2e08f0b5743bbe",
    "example_d192_norope": "34a597a73eb2ce7e9ffeac8c9e5b5ce94c6eb59167a161a213c0efc0106f1f73",
    "example_d1024_r128": "80b38a73df6ee168b6576170cfb4fb5838a75a2447c5db988c009df05e463991",
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
