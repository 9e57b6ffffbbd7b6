"""An export as a wheel a serving fleet installs with pip: the libraries and the manifest of one export (one arch
set), the parts of kernelgen that load them (the runtime, the layouts, the checks, the spec tables: no renderer, no
build driver, no YAML), and a small loader. Its only dependencies are apache-tvm-ffi and torch: no nvcc, jinja2,
ninja, pyyaml or rich where it is installed.

    import mykernels
    mykernels.names()                      # the variants and launch groups it holds
    op = mykernels.load("llama3_8b_fp8")   # an Op for this GPU's arch, the same checks as kernelgen's
    mykernels.register("llama3_8b_fp8")    # torch.ops.kernelgen.llama3_8b_fp8, for torch.compile

The wheel is built with the standard library alone (a zip with its dist-info and RECORD), and the same export gives
the same bytes."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import struct
import zipfile
from pathlib import Path

from .._version import __version__
from ..errors import KernelgenError
from ..knobs import write_atomic

# ELF e_machine -> the wheel platform's machine word (the libraries are Linux shared objects from nvcc's host compiler)
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
MANYLINUX_FLOOR = (2, 17)  # the oldest manylinux tag; a library needing newer glibc symbols raises it
# Names a wheel may not take: they would shadow what it (or its users) import.
RESERVED = frozenset({"kernelgen", "torch", "tvm_ffi", "apache_tvm_ffi", "triton", "numpy", "jinja2", "yaml", "ninja",
                      "rich"})
# PEP 440 public versions with an optional local part (canonical spellings only: a wheel's file name carries it)
_PEP440 = re.compile(r"(\d+!)?\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?")
# The kernelgen modules a wheel carries: what load_exported, Op, the checks and torch_ops import (tests/test_export.py
# imports the vendored copy with jinja2, yaml, ninja, rich and kernelgen itself blocked).
VENDORED = ("__init__.py", "_version.py", "errors.py", "knobs.py", "resources.py", "build", "codegen", "layout",
            "measure", "runtime", "spec", "tune")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed zip timestamps: the same export gives the same wheel

LOADER = '''"""{name}: fused attention-prep kernels exported by kernelgen {version} for {archs}.

names() lists the variants and launch groups; load(name) gives the op for this GPU (kernelgen's Op: the same
calling convention, checks and layouts, see `op.args` and `op.layout`); register(name) makes
torch.ops.kernelgen.<name> for torch.compile. Needs apache-tvm-ffi and torch only."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EXPORT = Path(__file__).resolve().parent / "export"
__version__ = "{wheel_version}"


def names() -> list[str]:
    return sorted(json.loads((EXPORT / "manifest.json").read_text())["variants"])


def load(name: str, **kwargs: Any) -> Any:
    from ._kernelgen.runtime.export import load_exported

    return load_exported(EXPORT, name, **kwargs)


def register(name: str, **kwargs: Any) -> Any:
    from ._kernelgen.runtime.torch_ops import register as register_op

    return register_op(load(name, **kwargs))
'''


def dist_name(name: str) -> str:
    """A wheel's distribution and import name: letters, digits and underscores, starting with a letter, and not a
    name the wheel's own imports need."""
    clean = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()
    if not clean or not clean[0].isalpha():
        raise KernelgenError(f"--wheel {name!r}: a wheel's name must start with a letter (e.g. mykernels)")
    if clean in RESERVED:
        raise KernelgenError(f"--wheel {name!r}: {clean} would shadow the package of that name where the wheel is "
                             "installed; choose another (e.g. mykernels)")
    return clean


def check_version(version: str) -> str:
    """A wheel version in PEP 440's canonical form (it is part of the file name pip parses)."""
    if not _PEP440.fullmatch(version):
        raise KernelgenError(f"--wheel-version {version!r}: not a PEP 440 version (e.g. 1.2.0, 1.2.0rc1, 1.2.0+h200)")
    return version


def elf_platform(libraries: dict[str, bytes]) -> str:
    """The wheel's platform tag from its libraries (pure): the machine in their ELF headers and the newest glibc
    symbol version they need (at least manylinux_2_17). Refuses libraries of two machines or none that are ELF."""
    machines, glibc = set(), MANYLINUX_FLOOR
    for path, data in libraries.items():
        if data[:4] != b"\x7fELF" or len(data) < 20:
            raise KernelgenError(f"{path}: not an ELF shared library; export again (kernelgen export SPEC -o DIR)")
        order = "<" if data[5] == 1 else ">"
        machine = struct.unpack_from(order + "H", data, 18)[0]
        if machine not in ELF_MACHINES:
            raise KernelgenError(f"{path}: ELF machine {machine} has no manylinux tag here (x86_64 or aarch64)")
        machines.add(ELF_MACHINES[machine])
        for major, minor in re.findall(rb"GLIBC_(\d+)\.(\d+)", data):
            glibc = max(glibc, (int(major), int(minor)))
    if len(machines) != 1:
        raise KernelgenError(f"an export's libraries must share one machine, got {sorted(machines) or 'none'}")
    return f"manylinux_{glibc[0]}_{glibc[1]}_{machines.pop()}"


def requires(manifest: dict) -> tuple[str, ...]:
    """The wheel's dependencies: torch, and the tvm-ffi release line the libraries were built against (its ABI
    is kept within a minor release; the manifest names the version)."""
    built = str(manifest.get("toolchain", {}).get("tvm_ffi") or "")
    parts = re.match(r"(\d+)\.(\d+)\.(\d+)", built)
    if not parts:
        return ("apache-tvm-ffi", "torch")
    major, minor, patch = (int(x) for x in parts.groups())
    return (f"apache-tvm-ffi>={major}.{minor}.{patch},<{major}.{minor + 1}", "torch")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_files(export_dir: Path, name: str, version: str) -> tuple[dict[str, bytes], str]:
    """Every file of the wheel but RECORD, by its path inside the wheel, and the wheel's tag (pure: reads, writes
    nothing)."""
    manifest_path = export_dir / "manifest.json"
    if not manifest_path.is_file():
        raise KernelgenError(f"{export_dir}: no manifest.json; export first (kernelgen export SPEC -o {export_dir})")
    manifest = json.loads(manifest_path.read_text())
    dist = dist_name(name)
    files: dict[str, bytes] = {f"{dist}/export/manifest.json": manifest_path.read_bytes()}
    libraries = {art["library"]: (export_dir / art["library"]).read_bytes()
                 for entry in manifest["variants"].values() for art in entry["artifacts"].values()}
    for library, data in libraries.items():
        files[f"{dist}/export/{library}"] = data
    package = Path(__file__).resolve().parents[1]
    for top in VENDORED:
        for path in sorted([package / top] if top.endswith(".py") else (package / top).rglob("*.py")):
            files[f"{dist}/_kernelgen/{path.relative_to(package).as_posix()}"] = path.read_bytes()
    files[f"{dist}/__init__.py"] = LOADER.format(name=dist, version=__version__, archs=", ".join(manifest["archs"]),
                                                 wheel_version=version).encode()
    info = f"{dist}-{version}.dist-info"
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
                                 f"Summary: kernels exported by kernelgen {__version__} for {', '.join(manifest['archs'])}\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires(manifest))).encode()
    tag = f"py3-none-{elf_platform(libraries)}"
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: kernelgen {__version__}\nRoot-Is-Purelib: false\n"
                              f"Tag: {tag}\n").encode()
    files[f"{info}/top_level.txt"] = f"{dist}\n".encode()
    return files, tag


def build_wheel(export_dir: Path, out_dir: Path, name: str, version: str = __version__) -> Path:
    """Write the wheel of an export into out_dir (a temporary name, then renamed: never a half-written wheel)."""
    files, tag = wheel_files(export_dir, name, check_version(version))
    info = f"{dist_name(name)}-{version}.dist-info"
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(files):
            zi = zipfile.ZipInfo(path, _EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, files[path])
    target = out_dir / f"{dist_name(name)}-{version}-{tag}.whl"
    write_atomic(target, buffer.getvalue())
    return target
