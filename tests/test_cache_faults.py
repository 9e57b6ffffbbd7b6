"""Build tier: the kernel cache under races, kills and corruption (each test injects the fault)."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelgen import knobs
from kernelgen.build import toolchain
from kernelgen.build.lifecycle import build
from kernelgen.build.store import file_sha256, kernels_dir
from kernelgen.spec.parse import load_spec

pytestmark = pytest.mark.build

ARCHS = ("sm_90a",)


def counting_cuda_home(tmp_path: Path) -> tuple[Path, Path]:
    """A CUDA_HOME whose nvcc logs each compile (-c) before running the real one."""
    real = toolchain.find_nvcc()
    assert real is not None
    home, log = tmp_path / "cuda", tmp_path / "nvcc-calls.log"
    (home / "bin").mkdir(parents=True)
    (home / "lib64").symlink_to(Path(real).resolve().parent.parent / "lib64")
    wrapper = home / "bin" / "nvcc"
    wrapper.write_text(f'#!/bin/sh\ncase " $* " in *" -c "*) echo "$$ $*" >> {log};; esac\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    return home, log


BUILD_SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from kernelgen.build import toolchain
    from kernelgen.build.lifecycle import build
    from kernelgen.spec.parse import load_spec
    variants = list(load_spec("dsv32_indexer").variants)
    for a in build(variants, toolchain.detect(), ("sm_90a",), Path(sys.argv[1])):
        print(a.library)
""")


def test_eight_processes_build_each_variant_exactly_once(tmp_path: Path) -> None:
    home, log = counting_cuda_home(tmp_path)
    cache = tmp_path / "cache"
    env = {**os.environ, "CUDA_HOME": str(home), "KERNELGEN_JOBS": "2"}
    procs = [subprocess.Popen([sys.executable, "-c", BUILD_SCRIPT, str(cache)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(8)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-500:] for _, err in outs]
    libraries = {tuple(out.split()) for out, _ in outs}
    assert len(libraries) == 1, "all 8 processes load the same artifacts"
    compiles = log.read_text().splitlines()
    assert len(compiles) == 2, compiles  # dsv32_indexer has 2 variants: each compiled once
    hashes = {file_sha256(Path(lib)) for lib in next(iter(libraries))}
    assert len(hashes) == 2


def _lock_is_free(cache: Path) -> bool:
    for lock in (kernels_dir(cache) / "locks").glob("*.lock"):
        with open(lock, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(handle, fcntl.LOCK_UN)
    return True


def _running(pid: int) -> bool:
    """From /proc: the process exists and is no zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _none_running(pids: list[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(map(_running, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(map(_running, pids))


@pytest.mark.parametrize("kill", ["builder", "group"])
def test_a_build_killed_mid_compile_leaves_nothing_that_loads(tmp_path: Path, kill: str) -> None:
    """kill -9 of the builder alone or of its process group: nvcc dies with it (ninja runs in a session
    of its own that gets SIGTERM when the builder dies), nothing is published, and the next build
    removes the dead builder's staging directory."""
    home, log = counting_cuda_home(tmp_path)
    cache = tmp_path / "cache"
    env = {**os.environ, "CUDA_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-c", BUILD_SCRIPT, str(cache)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (log.exists() and log.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.exists(), "the build never started compiling"
    if kill == "builder":
        os.kill(proc.pid, signal.SIGKILL)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
    nvcc = [int(line.split()[0]) for line in log.read_text().splitlines()]  # the wrapper execs nvcc: same pid
    try:
        assert _none_running(nvcc, 30), "nvcc outlived its killed builder"
    finally:
        for pid in filter(_running, nvcc):
            os.kill(pid, signal.SIGKILL)
    root = kernels_dir(cache)
    assert list(root.glob(".staging-*")), "the killed builder left its staging directory"
    assert _lock_is_free(cache), "no lock outlives its process"
    assert not [d for d in root.iterdir() if (d / "manifest.json").exists()], "nothing was published"
    with knobs.scope(CUDA_HOME=str(home)):  # the builder is still a zombie (not reaped): its staging is stale
        artifacts = build(list(load_spec("dsv32_indexer").variants), toolchain.detect(), ARCHS, cache)
    proc.wait()
    assert not list(root.glob(".staging-*")), "the next build removed the dead builder's staging directory"
    assert all(a.library.is_file() for a in artifacts)


def _intact(a: object) -> bool:
    """The artifact's library matches its manifest's hash and loads (tvm-ffi loads without a GPU)."""
    from kernelgen.build.lifecycle import load_module
    from kernelgen.build.store import published_problem

    return published_problem(a) is None and load_module(a.library) is not None  # type: ignore[arg-type]


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_publish_killed_halfway_is_rebuilt_not_loaded(tmp_path: Path) -> None:
    """What a publisher killed between steps leaves: a staged copy and a target directory holding a
    library but no manifest. Neither is loaded; the next build replaces both."""
    cache = tmp_path / "cache"
    v = load_spec("dsv32_indexer").variant("dsv32_indexer_bf16_p64")
    [a] = build([v], toolchain.detect(), ARCHS, cache)
    staged = kernels_dir(cache) / f".staging-{_dead_pid()}-abc"
    (staged / a.directory.name).mkdir(parents=True)
    (staged / a.directory.name / a.library.name).write_bytes(b"partial")
    (a.directory / "manifest.json").unlink()
    a.library.write_bytes(a.library.read_bytes()[:1000])
    damaged = file_sha256(a.library)
    [again] = build([v], toolchain.detect(), ARCHS, cache)
    assert again.directory == a.directory and _intact(again) and file_sha256(again.library) != damaged
    assert not staged.exists()


@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest"])
def test_a_corrupt_cached_library_is_detected_and_rebuilt(tmp_path: Path, damage: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    v = load_spec("dsv32_indexer").variant("dsv32_indexer_bf16_p64")
    [a] = build([v], toolchain.detect(), ARCHS, cache)
    data = bytearray(a.library.read_bytes())
    if damage == "truncate":
        a.library.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
        a.library.write_bytes(bytes(data))
    else:
        (a.directory / "manifest.json").write_text("{not json")
    damaged = file_sha256(a.library)
    [again] = build([v], toolchain.detect(), ARCHS, cache)
    assert _intact(again) and (damage == "manifest" or file_sha256(again.library) != damaged)
    assert caplog.text.count("rebuilding") == 1  # said once, though checked before and under the lock
