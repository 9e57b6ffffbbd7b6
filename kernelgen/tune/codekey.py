"""What a tuning record's timings hold for: the build inputs of the kernel instances they timed (pure).

A timing belongs to one compiled instance (a launch configuration without its launch options) on one
GPU arch. Its key hashes what compiles into that kernel and what launches it: the definition of the
instance in the rendered source (the math and configuration constants, the variant's name left out),
the kernel headers, the nvcc flags and defines, and the compiler's release. Comments, static_asserts
(which compile to nothing), Python host code and the rest of the translation unit (argument checks,
the token-count dispatch) are not in it, so editing them keeps every record; an edit that changes
what a kernel compiles from changes exactly the keys of the instances it touches.
"""
from __future__ import annotations

import hashlib
import json
import re

from ..codegen.launch import ALL_TOKENS, plan_routes
from ..codegen.render import render_variant
from ..spec.variant import Launch, Variant

_OPEN = "namespace kernelgen_generated {"
_CLOSE = "}  // namespace kernelgen_generated"
# A C++ string or char literal, a comment, or anything else: comments go, literals stay.
_TOKENS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|//[^\n]*|/\*.*?\*/', re.S)
_STATIC_ASSERT = re.compile(r'static_assert\((?:[^;"]|"(?:\\.|[^"\\])*")*\);')


def strip_comments(text: str) -> str:
    """C++ text without comments, trailing blanks and empty lines (literals untouched)."""
    bare = _TOKENS.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else "", text)
    return "\n".join(line.rstrip() for line in bare.splitlines() if line.strip())


def kernel_definition(source: str, name: str) -> str:
    """The constants a rendered translation unit compiles its kernels from (its first kernelgen_generated
    namespace: the math and configuration structs), without comments and static_asserts, name-neutral."""
    start = source.index(_OPEN)
    body = source[start:source.index(_CLOSE, start)]
    body = _STATIC_ASSERT.sub("", strip_comments(body))
    return strip_comments(re.sub(rf"\b{re.escape(name)}(?=\b|_)", "VARIANT", body))


def instance_key(v: Variant, instance: Launch, headers: dict[str, bytes], arch: str, compiler: str) -> str:
    """The key of one compiled instance of v on arch: `headers` are the kernel headers by name, `compiler`
    what of the toolchain changes device code (see compiler_fingerprint)."""
    one = plan_routes(v, [(ALL_TOKENS, instance)])
    source = render_variant(v.with_launch(instance), check=False, plan=one)
    payload = {
        "kernel": kernel_definition(source, v.name),
        "headers": {n: strip_comments(text.decode()) for n, text in sorted(headers.items())},
        "arch": arch,
        "compiler": compiler,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def compiler_fingerprint(nvcc_version: str, flags: tuple[str, ...], defines: tuple[str, ...]) -> str:
    """The toolchain's part of an instance key: nvcc's release, the flags and the -D defines."""
    return "|".join((nvcc_version, *flags, *defines))
