"""Find nvcc, tvm-ffi and the target architectures (checked against nvcc's own list); every answer is an
explicit value. Nothing here imports tvm-ffi or torch unless it must (a cache-hit build loads nothing)."""
from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .. import knobs
from ..errors import ToolchainError
from .arch import ARCH, Targets, arch_of_capability, parse_gpu_arch_listing


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    cuda_home: str
    nvcc_version: str
    cxx_version: str
    tvm_ffi_version: str
    include_dirs: tuple[str, ...]  # tvm-ffi and dlpack headers
    tvm_ffi_lib_dir: str

    def describe(self) -> str:
        """Which compiler is used, for the build and check output."""
        return f"{self.nvcc} ({self.nvcc_version})"

    def fingerprint(self) -> str:
        """What of the toolchain changes a binary: goes into every build key."""
        return f"nvcc={self.nvcc_version}|cxx={self.cxx_version}|tvm_ffi={self.tvm_ffi_version}"


def _first_line_with(text: str, needle: str) -> str:
    return next((line.strip() for line in text.splitlines() if needle in line), text.strip().splitlines()[-1])


def find_nvcc() -> Path | None:
    """$CUDA_HOME/bin/nvcc; where CUDA_HOME is not set and /usr/local/cuda has none, nvcc on PATH; else None.
    A CUDA_HOME that is set but holds no nvcc is an error, not a silent fall-back to another compiler."""
    nvcc = knobs.cuda_home() / "bin" / "nvcc"
    if nvcc.is_file():
        return nvcc
    found = shutil.which("nvcc")
    if knobs.CUDA_HOME.is_set():
        elsewhere = f"unset it to use {found} from PATH" if found else "no nvcc is on PATH either"
        raise ToolchainError(f"CUDA_HOME={knobs.cuda_home()} has no bin/nvcc; point CUDA_HOME at a CUDA toolkit "
                             f"root, or {elsewhere}")
    return Path(found) if found else None


@dataclass(frozen=True)
class TvmFfi:
    """Where tvm-ffi's headers and libtvm_ffi are, and its version (the build key's part of it)."""

    version: str
    include_dirs: tuple[str, ...]  # tvm/ffi headers, dlpack headers
    lib_dir: str


def _literal_version(path: Path) -> str | None:
    """`__version__ = ... = '0.1.15'` from a generated _version.py, read as text (never run)."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return None


def _wheel_layout(package: Path) -> TvmFfi | None:
    """tvm-ffi as its wheel installs it: include/ (tvm/ffi and dlpack headers), lib/libtvm_ffi.so and the
    _version.py its __version__ comes from; None for another layout (a source checkout)."""
    include, lib = package / "include", package / "lib"
    if not ((include / "tvm" / "ffi").is_dir() and (include / "dlpack").is_dir() and (lib / "libtvm_ffi.so").is_file()):
        return None
    version = _literal_version(package / "_version.py")
    return TvmFfi(version, (str(include), str(include)), str(lib)) if version else None


def _asked_of_tvm_ffi() -> TvmFfi:
    """The slow way, for layouts other than the wheel's: import tvm_ffi (which imports torch) and ask it."""
    import tvm_ffi
    from tvm_ffi import libinfo

    return TvmFfi(tvm_ffi.__version__, (libinfo.find_include_path(), libinfo.find_dlpack_include_path()),
                  str(Path(libinfo.find_libtvm_ffi()).parent))


@lru_cache(maxsize=1)
def tvm_ffi_location() -> TvmFfi:
    """tvm-ffi's headers, library and version, found without importing it where it is installed from its
    wheel: importing tvm_ffi imports torch, 1.2 s of what was a 1.9 s cache-hit `kernelgen build`."""
    spec = importlib.util.find_spec("tvm_ffi")
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainError("tvm-ffi is not installed (no tvm_ffi package on sys.path): pip install apache-tvm-ffi")
    for folder in spec.submodule_search_locations:
        found = _wheel_layout(Path(folder).resolve())
        if found is not None:
            return found
    return _asked_of_tvm_ffi()


@lru_cache(maxsize=4)
def _detect(cuda_home: str) -> Toolchain:
    home = Path(cuda_home)
    nvcc = find_nvcc()
    if nvcc is None:
        raise ToolchainError(f"nvcc not found under {home} (CUDA_HOME unset) or on PATH; install the CUDA "
                             "toolkit or set CUDA_HOME to its root")
    try:
        nvcc_out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
        cxx_out = subprocess.run(["c++", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ToolchainError(f"cannot run {nvcc} --version or c++ --version: {exc}") from None
    tvm_ffi = tvm_ffi_location()
    return Toolchain(
        nvcc=str(nvcc),
        cuda_home=str(home),
        nvcc_version=_first_line_with(nvcc_out, "release"),
        cxx_version=cxx_out.splitlines()[0].strip(),
        tvm_ffi_version=tvm_ffi.version,
        include_dirs=tvm_ffi.include_dirs,
        tvm_ffi_lib_dir=tvm_ffi.lib_dir,
    )


def detect() -> Toolchain:
    return _detect(str(knobs.cuda_home()))


def arch_names(text: str, source: str = "--arch") -> tuple[str, ...]:
    """'sm_90a,sm_100a' (commas or spaces; '9.0' and '90a' accepted) -> ('sm_90a', 'sm_100a'): the form only."""
    archs: list[str] = []
    for item in re.split(r"[,\s;]+", text.strip()):
        if not item:
            continue
        name = item if item.startswith("sm_") else "sm_" + item.replace(".", "")
        if not ARCH.match(name):
            raise ToolchainError(f"{source}: '{item}' is not a CUDA target; write targets like sm_90a,sm_100a,sm_120a")
        if name not in archs:
            archs.append(name)
    if not archs:
        raise ToolchainError(f"{source}: empty target list; write targets like sm_90a")
    return tuple(archs)


@lru_cache(maxsize=8)
def nvcc_targets(nvcc: str) -> Targets | None:
    """What this nvcc builds, asked once per nvcc path and process; None where it cannot say (an nvcc
    without --list-gpu-arch), which leaves judging the names to nvcc itself."""
    try:
        done = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    listed = parse_gpu_arch_listing(done.stdout) if done.returncode == 0 else ()
    return Targets(nvcc, listed) if listed else None


def check_archs(archs: tuple[str, ...], source: str = "--arch") -> tuple[str, ...]:
    """archs, each checked against the toolchain's own target list before anything is built (an unknown
    target used to fail in nvcc, once per variant, after the first compile's time). Without an nvcc
    here the names pass as they are: what builds, detect()s first and says nvcc is missing."""
    nvcc = find_nvcc()
    targets = nvcc_targets(str(nvcc)) if nvcc is not None else None
    for arch in archs:
        if targets is not None and not targets.knows(arch):
            raise ToolchainError(targets.refusal(arch, source))
    return archs


def parse_arch_list(text: str, source: str = "--arch") -> tuple[str, ...]:
    """'sm_90a,sm_100a' (commas or spaces; '9.0' and '90a' accepted) -> ('sm_90a', 'sm_100a'), each a
    target the toolchain's nvcc builds (check_archs); `source` names where the list came from."""
    return check_archs(arch_names(text, source), source)


def local_arch() -> str | None:
    """The local GPU's target (its arch-specific form from sm_90 on), from NVML or the driver: no torch import."""
    from .driver import capability

    found = capability()
    return None if found is None else arch_of_capability("{}.{}".format(*found))


def resolve_archs(explicit: str | None = None, fallback: str | None = None, flag: str = "--arch") -> tuple[str, ...]:
    """--arch, else KERNELGEN_CUDA_ARCH_LIST, else `fallback` (compile-only uses), else the local
    GPU, else a clear error. `flag` is how the caller spells the targets: the CLI's --arch, or a Python
    call's arch= keyword."""
    if explicit:
        return parse_arch_list(explicit, flag)
    from_env = knobs.arch_list()
    if from_env:
        return parse_arch_list(from_env, knobs.CUDA_ARCH_LIST.name)
    if fallback:
        return parse_arch_list(fallback)
    local = local_arch()
    if local:
        return check_archs((local,), "the local GPU")
    example = "--arch sm_90a" if flag.startswith("--") else f"{flag}\"sm_90a\""
    raise ToolchainError(f"no CUDA GPU here and no target given: pass {example} (comma-separated for several) "
                         f"or set {knobs.CUDA_ARCH_LIST.name}")
