"""Pure tier: a record's key follows the code its timings ran, and only that code."""
from __future__ import annotations

from dataclasses import replace

import pytest

from kernelgen.build.lifecycle import read_headers
from kernelgen.codegen.launch import resolve
from kernelgen.spec.parse import shipped_variants
from kernelgen.spec.variant import Launch
from kernelgen.tune.codekey import instance_key, kernel_definition, strip_comments

pytestmark = pytest.mark.pure
V = resolve(next(v for v in shipped_variants() if v.name == "dsv4_indexer_fp8_p64"))
HEADERS = read_headers()
MAIN = "fused_norm_rope_store.cuh"


def key(v=V, launch: Launch | None = None, headers: dict[str, bytes] | None = None, arch: str = "sm_90a",
        compiler: str = "release 13.0") -> str:
    return instance_key(v, launch or v.launch, headers or HEADERS, arch, compiler)


def edited(old: str, new: str) -> dict[str, bytes]:
    text = HEADERS[MAIN].decode()
    assert old in text
    return {**HEADERS, MAIN: text.replace(old, new, 1).encode()}


def test_comments_names_and_host_code_keep_the_key() -> None:
    assert key(headers=edited("// ---- the kernel ---", "/* a block\n   comment */\n// ---- the kernel, reworded ---")) == key()
    assert key(replace(V, name="renamed_variant", spec_name="other")) == key()
    assert key(replace(V, origin="x.yaml:1:1")) == key()


def test_an_edit_to_device_code_or_to_the_instance_changes_the_key() -> None:
    assert key(headers=edited("constexpr int kHadamardExchangeBytes = 32768;",
                              "constexpr int kHadamardExchangeBytes = 16384;")) != key()
    assert key(launch=replace(V.launch, vec=4, threads_per_token=16)) != key()
    assert key(launch=replace(V.launch, prefetch=True)) != key()
    assert key(replace(V, page_size=16)) != key()  # other layout constants
    assert key(arch="sm_100a") != key() and key(compiler="release 13.1") != key()


def test_static_asserts_and_comment_markers_inside_strings_are_handled() -> None:
    assert strip_comments('a = "// not a comment"; // a comment\nb;') == 'a = "// not a comment";\nb;'
    src = ('namespace kernelgen_generated {\nstruct n_math { static constexpr const char* kName = "n"; };\n'
           'struct n_cfg0 : n_math {\n  static_assert(kVec > 0,\n                "vec; must be > 0");\n};\n'
           '}  // namespace kernelgen_generated\nvoid n_check() {}\n')
    body = kernel_definition(src, "n")
    assert "static_assert" not in body and "n_check" not in body and "VARIANT_cfg0" in body
