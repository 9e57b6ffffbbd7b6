"""The exception family kernelgen raises; the CLI prints each as one line."""
from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Iterator


class KernelgenError(Exception):
    """Base class: a user-facing error whose str() is one complete line."""


class SpecError(KernelgenError):
    """A spec file is malformed: YAML syntax, unknown key, wrong type, bad value."""


class GuardViolation(KernelgenError):
    """A variant is well-formed but not supported; the message names the guard and the fix."""


class BuildError(KernelgenError):
    """nvcc or ninja failed; the message carries nvcc's own words, trimmed."""


class LayoutMismatch(KernelgenError):
    """A tensor handed to a kernel does not match the variant's shapes, dtypes or cache layout."""


class ToolchainError(KernelgenError):
    """nvcc, CUDA_HOME or the target architecture cannot be found or used."""


class TuningError(KernelgenError):
    """Autotuning could not produce a configuration."""


class StorageError(KernelgenError):
    """A file or folder cannot be written: a full disk, a read-only file system, no permission."""


def argument(name: str, flags: bool = False, flag: str | None = None) -> str:
    """How an error names an argument: the Python keyword (`topk=`) for an API call, the flag (`--topk`, or
    `--<flag>` where the CLI calls it otherwise) where the CLI made the call (`flags`), so that the words match
    what the user typed."""
    return f"--{(flag or name).replace('_', '-')}" if flags else f"{name}="


_FULL = {errno.ENOSPC, errno.EDQUOT}
_FORBIDDEN = {errno.EACCES, errno.EPERM}


def os_error_message(exc: OSError, path: str | os.PathLike[str], action: str = "write", free: str | None = None,
                     elsewhere: str = "use another folder") -> str:
    """The one line for an OSError met while writing `path`: what, where, why, and the fix (`elsewhere`
    says where else to write, e.g. 'set KERNELGEN_CACHE_DIR to another folder'). `path` wins over the
    exception's own file name, which write() leaves empty and copies set to the source."""
    cause = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
    if exc.errno in _FULL:
        fix = f"free space there or {elsewhere}"
        cause += f" ({free})" if free else ""
    elif exc.errno in _FORBIDDEN:
        fix = f"fix its permissions or {elsewhere}"
    else:  # read-only, or anything else: write somewhere else
        fix = elsewhere
    return f"cannot {action} {os.fspath(path)}: {cause}; {fix}"


def _size(n: float) -> str:
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}"


def free_space(path: str | os.PathLike[str]) -> str | None:
    """'12.0 KiB free under /x' for the nearest existing folder at or above path (inodes too when none
    are left, which also reads as a full disk); None when even that cannot be asked."""
    folder = Path(path)
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    text = f"{_size(st.f_bavail * st.f_frsize)} free under {folder}"
    return text + ", no free inodes" if st.f_files and not st.f_favail else text


def storage_error(exc: OSError, path: str | os.PathLike[str], action: str = "write",
                  elsewhere: str = "use another folder") -> StorageError:
    """The StorageError for an OSError met writing `path` (with the free space where the disk is full).
    Raise it `from None`: its one line says all a user needs."""
    free = free_space(path) if exc.errno in _FULL else None
    return StorageError(os_error_message(exc, path, action, free, elsewhere))


@contextlib.contextmanager
def writing(path: str | os.PathLike[str], elsewhere: str = "use another folder") -> Iterator[None]:
    """Turn any OSError of the block into the StorageError naming `path`."""
    try:
        yield
    except OSError as exc:
        raise storage_error(exc, path, elsewhere=elsewhere) from None
