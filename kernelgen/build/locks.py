"""Cross-process exclusive locks (flock on lock files): the one helper the kernel cache and the tuning records use."""
from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import IO, Iterable, Iterator

from ..errors import writing


@contextlib.contextmanager
def locked(paths: Iterable[Path], elsewhere: str = "use another folder") -> Iterator[None]:
    """Hold an exclusive lock on each lock file (made, with its folder, where missing) for the block. Taken
    in sorted order, so two holders of overlapping sets never deadlock; released when the block ends, and
    by the kernel when the process dies. A lock file that cannot be made is one line naming it, ending on
    `elsewhere` (the fix)."""
    handles: list[IO[str]] = []
    try:
        for path in sorted(set(paths)):
            with writing(path, elsewhere):
                path.parent.mkdir(parents=True, exist_ok=True)
                handle = open(path, "a+")
            handles.append(handle)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        for handle in reversed(handles):
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
