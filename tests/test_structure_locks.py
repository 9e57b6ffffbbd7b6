"""Pure tier: one cross-process lock helper serves the kernel cache and the tuning records."""
from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import pytest

import kernelgen
from kernelgen.build import locks
from kernelgen.errors import StorageError

pytestmark = pytest.mark.pure

PACKAGE = Path(kernelgen.__file__).parent


def test_flock_is_called_in_one_module_only() -> None:
    """store.py and tune/records.py each hand-wrote an flock context manager: one helper now."""
    calling = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if any(isinstance(n, ast.Attribute) and n.attr == "flock" for n in ast.walk(ast.parse(p.read_text()))))
    assert calling == ["build/locks.py"]


def test_the_cache_and_the_records_lock_through_it() -> None:
    from kernelgen.build import lifecycle
    from kernelgen.tune import records

    assert lifecycle.locked is locks.locked and records.locked is locks.locked


def _held_elsewhere(path: Path, seconds: float) -> threading.Thread:
    """Hold the lock of path for `seconds` in another thread (flock excludes across open files)."""
    taken = threading.Event()

    def hold() -> None:
        with locks.locked([path]):
            taken.set()
            time.sleep(seconds)
    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait(5)
    return thread


def test_a_lock_waits_for_its_holder(tmp_path: Path) -> None:
    lock = tmp_path / "locks" / "a.lock"
    holder = _held_elsewhere(lock, 0.5)
    start = time.monotonic()
    with locks.locked([tmp_path / "locks" / "b.lock", lock]):  # the folder is made; order does not matter
        waited = time.monotonic() - start
    holder.join()
    assert waited >= 0.3
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == ["a.lock", "b.lock"]


def test_an_unwritable_lock_folder_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StorageError, match=r"^cannot write .*/file/x\.lock: [^;]+; set KERNELGEN_CACHE_DIR to another folder$"):
        with locks.locked([tmp_path / "file" / "x.lock"], elsewhere="set KERNELGEN_CACHE_DIR to another folder"):
            pass


def test_record_writes_keep_their_lock_file_beside_the_record(tmp_path: Path) -> None:
    from kernelgen.spec.parse import load_spec
    from kernelgen.tune import records
    from kernelgen.tune.gpu import GpuInfo

    v, gpu, launch = load_spec("dsv4_indexer").variant("dsv4_indexer_fp8_p64"), GpuInfo("NVIDIA H200", "9.0", 132, 140, 4800), "t8.b8.v8"
    record = records.Record(v.name, v.content_key(), {launch: "code-of-t8.b8.v8"}, gpu, (1,),
                            {launch: {1: 1.0}}, {}, ((1, launch),))
    path = records.write(tmp_path, record)
    assert path.with_suffix(".lock").is_file() and records.lookup([tmp_path], gpu, v) is not None
