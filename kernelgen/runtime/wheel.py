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
import json
import re
import zipfile
from pathlib import Path

from .._version import __version__
from ..errors import KernelgenError

PLATFORM = "manylinux_2_28_x86_64"  # the libraries are x86-64 Linux shared objects built by nvcc's host compiler
REQUIRES = ("apache-tvm-ffi", "torch")
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
    """A wheel's distribution and import name: letters, digits and underscores, starting with a letter."""
    clean = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()
    if not clean or not clean[0].isalpha():
        raise KernelgenError(f"--wheel {name!r}: a wheel's name must start with a letter (e.g. mykernels)")
    return clean


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_files(export_dir: Path, name: str, version: str) -> dict[str, bytes]:
    """Every file of the wheel but RECORD, by its path inside the wheel (pure: reads, writes nothing)."""
    manifest_path = export_dir / "manifest.json"
    if not manifest_path.is_file():
        raise KernelgenError(f"{export_dir}: no manifest.json; export first (kernelgen export SPEC -o {export_dir})")
    manifest = json.loads(manifest_path.read_text())
    dist = dist_name(name)
    files: dict[str, bytes] = {f"{dist}/export/manifest.json": manifest_path.read_bytes()}
    for entry in manifest["variants"].values():
        for art in entry["artifacts"].values():
            files[f"{dist}/export/{art['library']}"] = (export_dir / art["library"]).read_bytes()
    package = Path(__file__).resolve().parents[1]
    for top in VENDORED:
        for path in sorted([package / top] if top.endswith(".py") else (package / top).rglob("*.py")):
            files[f"{dist}/_kernelgen/{path.relative_to(package).as_posix()}"] = path.read_bytes()
    files[f"{dist}/__init__.py"] = LOADER.format(name=dist, version=__version__, archs=", ".join(manifest["archs"]),
                                                 wheel_version=version).encode()
    info = f"{dist}-{version}.dist-info"
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
                                 f"Summary: kernels exported by kernelgen {__version__} for {', '.join(manifest['archs'])}\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in REQUIRES)).encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: kernelgen {__version__}\nRoot-Is-Purelib: false\n"
                              f"Tag: py3-none-{PLATFORM}\n").encode()
    files[f"{info}/top_level.txt"] = f"{dist}\n".encode()
    return files


def build_wheel(export_dir: Path, out_dir: Path, name: str, version: str = __version__) -> Path:
    """Write the wheel of an export into out_dir (a temporary name, then renamed: never a half-written wheel)."""
    files = wheel_files(export_dir, name, version)
    dist = dist_name(name)
    info = f"{dist}-{version}.dist-info"
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    target = out_dir / f"{dist}-{version}-py3-none-{PLATFORM}.whl"
    partial = target.with_suffix(".whl.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(files):
            zi = zipfile.ZipInfo(path, _EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, files[path])
    partial.replace(target)
    return target
