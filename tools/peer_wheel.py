"""What the peer builders (peer_sglang.py, peer_flashinfer.py) share: copying a peer's sources out of its wheel,
and the flags that link a tvm-ffi module against CUDA's runtime. Nothing of a peer is kept in this repository."""
from __future__ import annotations

import os
import re
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Callable


def extract(wheel: Path, src: Path, prefix: str, keep: Callable[[str], bool], dist: str,
            required: tuple[str, ...], tool: str) -> str:
    """Copy the wheel's files under `prefix` whose path below it `keep` accepts into src (emptied first); return the
    version in the `dist` distribution's METADATA. Exits with one line naming what `required` file is missing."""
    if src.exists():
        shutil.rmtree(src)
    version = "?"
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            rel = name[len(prefix):] if name.startswith(prefix) else None
            if rel and not name.endswith("/") and keep(rel):
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                (src / rel).write_bytes(z.read(name))
            elif re.fullmatch(rf"{dist}-[^/]+\.dist-info/METADATA", name):
                version = re.search(r"^Version: (\S+)", z.read(name).decode(), re.M).group(1)
    missing = [s for s in required if not (src / s).is_file()]
    if missing:
        sys.exit(f"{tool}: {wheel} has no {', '.join(prefix + m for m in missing)}")
    return version


def cuda_home() -> str:
    return os.environ.get("CUDA_HOME", "/usr/local/cuda")


def link_flags() -> list[str]:
    """A shared library linked against this tvm-ffi and CUDA's runtime (found again at load by rpath)."""
    import tvm_ffi.libinfo as info
    lib = Path(info.find_libtvm_ffi())
    cuda = cuda_home()
    return ["-shared", f"-L{lib.parent}", f"-l{lib.stem.removeprefix('lib')}", f"-L{cuda}/lib64", "-lcudart",
            f"-Wl,-rpath,{cuda}/lib64"]
