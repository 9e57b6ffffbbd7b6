"""Pure build planning: content-addressed keys, ninja text and nvcc message trimming."""
from __future__ import annotations

import errno
import hashlib
import io
import json
import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING


from .._version import __version__

if TYPE_CHECKING:
    from .toolchain import Toolchain

# -compress-mode=none: the cubins in a library stay readable, so build/devicecode.py digests each kernel
CUDA_FLAGS: tuple[str, ...] = ("-std=c++17", "-O3", "-compress-mode=none", "-Xcompiler", "-fPIC",
                               "-Xcompiler", "-fvisibility=hidden")


@dataclass(frozen=True)
class Unit:
    """One translation unit to compile: a variant's source for a set of targets."""

    name: str  # variant name, also the exported function
    source: str  # path of the .cu file, relative to the build dir
    archs: tuple[str, ...]
    output: str  # .so (build), .o (a compiled object) or .fatbin (a device-only check), relative to the build dir

    @property
    def object(self) -> str:
        """The compiled object: the output itself for a compile-only unit, else beside the .so."""
        return self.output if self.output.endswith((".o", ".fatbin")) else self.output.rsplit(".", 1)[0] + ".o"

    @property
    def device_only(self) -> bool:
        """A check that compiles the device code for its targets into a fatbin (nvcc --fatbin): the whole file
        is parsed and its templates instantiated, host code included, but no host object is built (the host
        compiler's part, the same for every target and the longest step, is left to a real build)."""
        return self.output.endswith(".fatbin")


def headers_digest(headers: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(headers):
        h.update(name.encode() + b"\0" + headers[name] + b"\0")
    return h.hexdigest()


def build_key(source: str, headers: str, toolchain: Toolchain, archs: tuple[str, ...], portable: bool = False) -> str:
    """Hash of everything that changes the binary (portable: the CUDA runtime linked in statically)."""
    fields = {
        "source": source,
        "headers": headers,
        "flags": list(CUDA_FLAGS),
        "toolchain": toolchain.fingerprint(),
        "archs": list(archs),
        "kernelgen": __version__,
    }
    if portable:
        fields["link"] = "static-cudart"
    payload = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def gencode_flags(archs: tuple[str, ...]) -> list[str]:
    flags = []
    for arch in archs:
        number = arch[len("sm_"):]
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
    return flags


def _shell(*words: str) -> str:
    """Words for a ninja command line (ninja runs it through /bin/sh): each quoted for the shell where it
    needs it (a CUDA_HOME with a space stays one argument), then escaped for ninja ('$')."""
    from ninja.ninja_syntax import escape  # ninja's own writer, shipped in the ninja wheel (only builds need it)

    return escape(" ".join(shlex.quote(w) for w in words))


def ninja_text(units: list[Unit], toolchain: Toolchain, include_dir: str, link: bool, portable: bool = False) -> str:
    """build.ninja for units: compile each (+ link into a .so when link). nvcc's diagnostics go to
    ninja, which prints a failed unit's output after its FAILED line, and from there into the builder's
    memory (failed_outputs): no log file in the staging directory, which a full disk would leave empty.
    Portable libraries (exports) link the CUDA runtime statically, so they need no libcudart where they
    are deployed."""
    cudart = ("-cudart", "static") if portable else (f"-L{toolchain.cuda_home}/lib64", "-lcudart")
    includes = [f"-I{d}" for d in dict.fromkeys((include_dir, *toolchain.include_dirs))]
    text = io.StringIO()
    from ninja.ninja_syntax import Writer

    out = Writer(text, width=1 << 30)  # never wrapped: one line per variable, as a reader greps it
    out.variable("ninja_required_version", "1.3")
    out.variable("nvcc", _shell(toolchain.nvcc))
    out.variable("cuda_flags", _shell(*CUDA_FLAGS, *includes))
    out.variable("ldflags", _shell("-shared", f"-L{toolchain.tvm_ffi_lib_dir}", "-ltvm_ffi", *cudart))
    out.newline()
    out.rule("compile", "$nvcc $cuda_flags $gencode -c $in -o $out", description="nvcc $out")
    out.newline()
    out.rule("link", "$nvcc -shared $in -o $out $ldflags", description="link $out")
    out.newline()
    if any(u.device_only for u in units):
        out.rule("device", "$nvcc $cuda_flags $gencode --fatbin $in -o $out", description="nvcc $out")
        out.newline()
    for u in units:  # unit paths are variant names and hex keys: nothing the shell would split
        out.build(u.object, "device" if u.device_only else "compile", u.source,
                  variables={"gencode": _shell(*gencode_flags(u.archs))})
        if link:
            out.build(u.output, "link", u.object)
    return text.getvalue()


_STATIC_ASSERT = re.compile(r'static assertion failed with "(.*)"')
_ERROR = re.compile(r"(error|fatal)", re.IGNORECASE)


_FAILED = re.compile(r"^FAILED: (?:\[code=-?\d+\] )?(.*?)\s*$")
_NINJA_STATUS = re.compile(r"^\[\d+/\d+\] ")


def failed_outputs(ninja_output: str) -> dict[str, str]:
    """What each failed command printed, by output path, from ninja's own output: a 'FAILED: [code=N]
    <outputs>' line, the command line, then the command's output, up to the next status, FAILED or
    'ninja:' line. Paths are as build.ninja names them (ours hold no spaces)."""
    found: dict[str, str] = {}
    targets: list[str] = []
    body: list[str] = []
    for line in ninja_output.splitlines() + ["ninja: end"]:
        m = _FAILED.match(line)
        if m or _NINJA_STATUS.match(line) or line.startswith("ninja: "):
            for target in targets:
                found[target] = "\n".join(body[1:])  # body[0] is the command line
            targets, body = (m.group(1).split() if m else []), []
        elif targets:
            body.append(line)
    return found


# what a write refused by the disk looks like in a compiler's or ninja's words (strerror's text)
_STORAGE_CAUSES = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
                   "Read-only file system": errno.EROFS}


def storage_cause(text: str) -> tuple[int, str, str] | None:
    """(errno, strerror text, the line saying it) for the first line of `text` that says a write was
    refused by the disk: the build failed for want of space, not because of the code."""
    for line in text.splitlines():
        for cause, code in _STORAGE_CAUSES.items():
            if cause in line:
                return code, cause, line.strip()
    return None


def static_assert_message(log: str) -> str | None:
    m = _STATIC_ASSERT.search(log)
    return m.group(1) if m else None


def trim_nvcc(log: str, max_lines: int = 4) -> str:
    """The lines of nvcc's output that matter: the first error and a little context."""
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if _ERROR.search(line):
            return "\n".join(lines[i:i + max_lines])
    return "\n".join(lines[-max_lines:]) or "(no output)"


def first_error_line(log: str) -> str:
    message = static_assert_message(log)
    if message is not None:
        return f'static assertion failed with "{message}"'
    return trim_nvcc(log, 1)
