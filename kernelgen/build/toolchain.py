"""Find nvcc, tvm-ffi and the target architectures; every answer is an explicit value."""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from .. import knobs
from ..errors import ToolchainError

_ARCH = re.compile(r"sm_(\d+)([af]?)\Z")


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    cuda_home: str
    nvcc_version: str
    cxx_version: str
    tvm_ffi_version: str
    include_dirs: tuple[str, ...]  # tvm-ffi and dlpack headers
    tvm_ffi_lib_dir: str
    defines: tuple[str, ...] = ()  # nvcc -D flags from knobs (KERNELGEN_PACKED_F32): they change the binary

    def describe(self) -> str:
        """Which compiler is used, for the build and check output."""
        return f"{self.nvcc} ({self.nvcc_version})" + "".join(f" {d}" for d in self.defines)

    def fingerprint(self) -> str:
        """What of the toolchain changes a binary: goes into every build key."""
        base = f"nvcc={self.nvcc_version}|cxx={self.cxx_version}|tvm_ffi={self.tvm_ffi_version}"
        return base + "".join(f"|{d}" for d in self.defines)


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
    import tvm_ffi
    from tvm_ffi import libinfo

    return Toolchain(
        nvcc=str(nvcc),
        cuda_home=str(home),
        nvcc_version=_first_line_with(nvcc_out, "release"),
        cxx_version=cxx_out.splitlines()[0].strip(),
        tvm_ffi_version=tvm_ffi.__version__,
        include_dirs=(libinfo.find_include_path(), libinfo.find_dlpack_include_path()),
        tvm_ffi_lib_dir=str(Path(libinfo.find_libtvm_ffi()).parent),
    )


PACKED_F32_DEFINE = "-DKERNELGEN_PACKED_F32"  # templates/kernelgen/numeric.cuh: packed float32 pairs on sm_100+


def detect() -> Toolchain:
    found = _detect(str(knobs.cuda_home()))
    return replace(found, defines=(PACKED_F32_DEFINE,)) if knobs.packed_f32() else found


def parse_arch_list(text: str, source: str = "--arch") -> tuple[str, ...]:
    """'sm_90a,sm_100a' (commas or spaces; '9.0' and '90a' accepted) -> ('sm_90a', 'sm_100a')."""
    archs: list[str] = []
    for item in re.split(r"[,\s;]+", text.strip()):
        if not item:
            continue
        name = item if item.startswith("sm_") else "sm_" + item.replace(".", "")
        if not _ARCH.match(name):
            raise ToolchainError(f"{source}: '{item}' is not a CUDA target; write targets like sm_90a,sm_100a,sm_120a")
        if name not in archs:
            archs.append(name)
    if not archs:
        raise ToolchainError(f"{source}: empty target list; write targets like sm_90a")
    return tuple(archs)


def local_arch() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def resolve_archs(explicit: str | None = None, fallback: str | None = None) -> tuple[str, ...]:
    """--arch, else KERNELGEN_CUDA_ARCH_LIST, else `fallback` (compile-only uses), else the local
    GPU, else a clear error."""
    if explicit:
        return parse_arch_list(explicit)
    from_env = knobs.arch_list()
    if from_env:
        return parse_arch_list(from_env, knobs.CUDA_ARCH_LIST.name)
    if fallback:
        return parse_arch_list(fallback)
    local = local_arch()
    if local:
        return (local,)
    raise ToolchainError("no CUDA GPU here and no target given: pass --arch sm_90a (comma-separated for several) "
                         f"or set {knobs.CUDA_ARCH_LIST.name}")
