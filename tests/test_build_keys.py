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
    "dsv32_indexer_fp8_p64": "ae69385204618bdcfd2e86ed3053ce7222995ad13dee0f154ba9c96e1486fcd7",
    "dsv32_indexer_bf16_p64": "2a581199dbe232bd2ce1f66d0f0b79d49cf675fde05d974c46da02e2049dfa91",
    "dsv4_indexer_fp8_p1": "957b3dddd7be9534e71bb73b0a12af24effcb75722db080ac712d6003c27e4a0",
    "dsv4_indexer_fp8_p16": "30b92ce0b62d4c38355ff985ef66c856d1de421af5a024d6a2b849b345f2d22f",
    "dsv4_indexer_fp8_p64": "22819413b23bb9968f9fa5c040df4b4d6ffd953012a0a3207117d7f219de6e50",
    "dsv4_indexer_fp8_p256": "dda85ea2b1ebc0be0a6b55ed5be20b035607c14dc4f9f46869d04e47d039565b",
    "dsv4_indexer_bf16_p1": "e7114dc98048bda41d21ed5c36b29f212bfc720f05022f5db4583d17f84ca3a7",
    "dsv4_indexer_bf16_p16": "9d38a36f58398545646100bcf79e30b9260b13ce7163ff4ba88c5715091dba46",
    "dsv4_indexer_bf16_p64": "fcefa5f2f770c627f24e320875c2c1d76eec912131d55966f9245e9925dbe623",
    "dsv4_indexer_bf16_p256": "e909265e3a921f2579b523d74c23de8402ad2f156c7e2d0cc3ad4a865444a9d8",
    "dsv4_indexer_fp4_p1": "66a8932ded4caf631c38a400ebc135271f7e353d99e28b63f909b6f56b67abe0",
    "dsv4_indexer_fp4_p16": "fb31573ad699f4bd0027b1c41f63cae611e0addf05d018249cf06dcee6bb6209",
    "dsv4_indexer_fp4_p64": "59bc13b8eb89e867f9ff2fb377acf678e811d4ded4f9a47edae48d48c5c19b7f",
    "dsv4_indexer_fp4_p256": "7b3e1e6b358644d5add2cf72c9523104ada5979a42e930c30cbe8bbea75dda78",
    "dsv4_mainkv_fp8mla_p1": "fb0ebdab7fdb8da442c68e4d5d6453b1605ff0c4254063eddfc7da1e4bc91fa3",
    "dsv4_mainkv_fp8mla_p64": "8f674645706092429b081063c24faeaa8b249fa3899091a197f20cf1aa775aeb",
    "dsv4_mainkv_bf16_p1": "a69c338f3872a27c653cec080166b9060f5bcc267ac058bd64ade3f62a6ddd19",
    "dsv4_mainkv_bf16_p64": "aa161f80650a52dbad8d1b2133b4ed1cb111df06cdaac0b5217966cfcaa2ec6b",
    "dsv4_mainkv_fp8mla_bfround_p64": "813b7baa81467fc6ddc3517b6dbd91afe04cd87a866b144e5531cecb3eca8ca4",
    "example_fp8_inbf16": "2999b5fc48ccc97260b1814344abdfe1be1ab5b76c39d3ad12e7dc67a32a06c6",
    "example_fp8_infp32": "7b6ac3e292d924aeed9fb21bc8a9bc87bc851a1e4e24365c7f90878e506d497b",
    "example_fp4_inbf16": "77c53babf423a25c0d08576d922ed69754419439cd385fc1984539722fdfca9c",
    "example_fp4_infp32": "28115c6e7021f2b5d12e2af68e84fa9b86b95554f767ed367510bb422c59a8cd",
    "example_ln_neox_head": "97ba0d1b68704cbba0e690347c9d28b2155835ab75e3b4662115fd49aeb58bd1",
    "example_d192_norope": "ca3a578d1925cfadb36461e78b6595fa1c30515b6e7faa12b4d7d54f33e88429",
    "example_d1024_r128": "cf43d2f9b6fe59f47427f0ac2454d474f41b8ec2f97e499c0590fe946d68655d",
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
