"""Pure tier (ninja and a fake nvcc, no compiler): no compiler process outlives a killed build, and the next
build removes a staging folder whose owner is gone, dead or a zombie.

A builder subprocess runs a build whose fake nvcc hangs (with a child, as nvcc waits on cicc and ptxas);
the test kills it for real (kill -9 of the builder alone, of its process group, SIGTERM, SIGINT), then
reads /proc: nothing of the build's session may still run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Callable

import pytest
from test_build_faults import fake_toolchain, variant

from kernelgen.build import processes
from kernelgen.build.lifecycle import build
from kernelgen.build.store import Owner, clean_dead_staging, kernels_dir, owner_json, parse_owner, staging_is_stale

pytestmark = pytest.mark.pure

ARCHS = ("sm_90a",)
# The builder takes Ctrl-C as an interactive Python does (KeyboardInterrupt), even when the test runner was started
# with SIGINT ignored (a shell's background job, nohup ...&), which every child would otherwise inherit.
BUILDER = textwrap.dedent("""
    import signal
    import sys
    from pathlib import Path
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, sys.argv[3])
    from test_build_faults import fake_toolchain, variant
    from kernelgen.build.lifecycle import build
    build([variant()], fake_toolchain(Path(sys.argv[1])), ("sm_90a",), Path(sys.argv[2]))
""")


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from the state on (read here, not through the code under test)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def running(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def in_session(sid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        fields = stat_fields(int(name)) if name.isdigit() else None
        if fields and int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


KILLS = {
    "kill -9 of the builder alone": lambda p: os.kill(p.pid, signal.SIGKILL),
    "kill -9 of its process group": lambda p: os.killpg(p.pid, signal.SIGKILL),
    "SIGTERM": lambda p: os.kill(p.pid, signal.SIGTERM),
    "SIGINT": lambda p: os.kill(p.pid, signal.SIGINT),
}


@pytest.mark.parametrize("kill", sorted(KILLS))
def test_no_compiler_outlives_a_killed_builder(kill: str, tmp_path: Path) -> None:
    cache, pids = tmp_path / "cache", tmp_path / "nvcc-pids"
    env = {**os.environ, "FAKE_NVCC_SLEEP": "600", "FAKE_NVCC_PIDS": str(pids)}
    builder = subprocess.Popen([sys.executable, "-c", BUILDER, str(tmp_path / "fake"), str(cache),
                                str(Path(__file__).parent)], env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sessions: set[int] = set()
    try:
        assert wait_for(lambda: pids.exists() and len(pids.read_text().split()) >= 2, 60), "nvcc never started"
        nvcc = [int(p) for p in pids.read_text().split()]
        sessions = {int(fields[3]) for fields in map(stat_fields, nvcc) if fields}
        assert len(sessions) == 1 and builder.pid not in nvcc
        KILLS[kill](builder)
        assert wait_for(lambda: not any(map(running, nvcc)), 15), f"nvcc outlived its builder ({kill})"
        assert wait_for(lambda: not in_session(next(iter(sessions))), 15), "ninja or a shell outlived its builder"
        assert wait_for(lambda: not running(builder.pid), 15)
        # the builder is a zombie now (not reaped): its staging folder, if it left one, is stale
        assert (stat_fields(builder.pid) or ["?"])[0] == "Z"
        root = kernels_dir(cache)
        if kill.startswith("kill -9"):  # no cleanup can run in the builder itself
            assert list(root.glob(".staging-*")), "the killed builder left its staging folder"
        [again] = build([variant()], fake_toolchain(tmp_path / "fake"), ARCHS, cache)
        assert again.library.is_file()
        assert not list(root.glob(".staging-*")), "the next build removed the dead builder's staging folder"
    finally:
        for sid in sessions:  # on failure, leave nothing running behind the test
            for pid in in_session(sid):
                os.kill(pid, signal.SIGKILL)
        builder.kill()
        builder.wait()


def test_an_exception_in_the_builder_stops_its_compilers_before_it_propagates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any exception raised in the builder while nvcc runs (here from a signal handler, as a caller's
    timeout would) leaves build() only after the compilers are gone."""
    pids = tmp_path / "nvcc-pids"
    monkeypatch.setenv("FAKE_NVCC_SLEEP", "600")
    monkeypatch.setenv("FAKE_NVCC_PIDS", str(pids))

    def timeout(signum: int, frame: object) -> None:
        raise TimeoutError("the caller's deadline passed")

    def fire_once_compiling() -> None:
        if wait_for(lambda: pids.exists() and len(pids.read_text().split()) >= 2, 60):
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, timeout)
    try:
        threading.Thread(target=fire_once_compiling, daemon=True).start()
        with pytest.raises(TimeoutError, match="deadline passed"):
            build([variant()], fake_toolchain(tmp_path / "fake"), ARCHS, tmp_path / "cache")
    finally:
        signal.signal(signal.SIGALRM, previous)
    nvcc = [int(p) for p in pids.read_text().split()]
    try:
        assert not any(map(running, nvcc)), "the compilers were stopped before the exception left build()"
        assert not list(kernels_dir(tmp_path / "cache").glob(".staging-*"))
    finally:
        for pid in filter(running, nvcc):
            os.kill(pid, signal.SIGKILL)


def _zombie() -> subprocess.Popen[bytes]:
    """A child that exited and is not reaped yet."""
    child = subprocess.Popen(["true"])
    assert wait_for(lambda: (stat_fields(child.pid) or ["Z"])[0] == "Z", 10)
    return child


def test_a_zombie_builders_staging_folder_is_removed(tmp_path: Path) -> None:
    zombie = _zombie()
    try:
        root = tmp_path / "v1"
        staging = root / f".staging-{zombie.pid}-abc"
        staging.mkdir(parents=True)
        clean_dead_staging(root)
        assert not staging.exists()
    finally:
        zombie.wait()


def test_the_next_build_kills_what_a_dead_builders_ninja_left_running(tmp_path: Path) -> None:
    """The backstop where no parent-death signal came (or a command ignored it): a staging folder whose owner
    is gone but whose ninja session still runs a compiler in it."""
    zombie = _zombie()
    root = tmp_path / "v1"
    staging = root / f".staging-{zombie.pid}-abc"
    staging.mkdir(parents=True)
    stray = subprocess.Popen(["sleep", "600"], cwd=staging, start_new_session=True)  # ninja's session, in staging
    bystander = subprocess.Popen(["sleep", "600"], cwd=tmp_path, start_new_session=True)  # not in staging
    try:
        (staging / "owner.json").write_text(owner_json(Owner(zombie.pid, processes.start_time(zombie.pid), stray.pid)))
        clean_dead_staging(root)
        assert stray.wait(10) == -signal.SIGKILL and not staging.exists()
        assert bystander.poll() is None, "only processes working in the stale staging folder are killed"
    finally:
        for p in (stray, bystander):
            p.kill()
            p.wait()
        zombie.wait()


def test_a_live_builders_staging_folder_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "v1"
    staging = root / f".staging-{os.getpid()}-abc"
    staging.mkdir(parents=True)
    (staging / "owner.json").write_text(owner_json(Owner(os.getpid(), processes.start_time(os.getpid()), None)))
    clean_dead_staging(root)
    assert staging.exists()


# ---- the decisions, pure ----

def test_parse_stat_reads_the_fields_after_a_name_with_spaces_and_parentheses() -> None:
    text = "4242 (a (b) c) Z 1 4242 4200 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0\n"
    stat = processes.parse_stat(4242, text)
    assert stat == processes.ProcStat(4242, "Z", 1, 4200, 987654)
    assert processes.parse_stat(1, "garbage") is None and processes.parse_stat(1, "1 (x) R 1 2") is None


def test_a_process_runs_unless_gone_a_zombie_or_another_process_with_its_pid() -> None:
    live = processes.ProcStat(10, "S", 1, 10, 500)
    assert processes.is_running(live) and processes.is_running(live, 500)
    assert not processes.is_running(None)
    assert not processes.is_running(processes.ProcStat(10, "Z", 1, 10, 500))
    assert not processes.is_running(processes.ProcStat(10, "X", 1, 10, 500))
    assert not processes.is_running(live, 499), "a later process that got the pid is not the owner"


def test_only_running_members_of_the_session_inside_the_folder_are_strays() -> None:
    stats = [processes.ProcStat(1, "S", 0, 7, 0), processes.ProcStat(2, "Z", 1, 7, 0),
             processes.ProcStat(3, "R", 1, 7, 0), processes.ProcStat(4, "R", 1, 8, 0),
             processes.ProcStat(5, "R", 1, 7, 0)]
    cwds = {1: "/c/.staging-1-a", 2: "/c/.staging-1-a", 3: "/c/.staging-1-a/sub (deleted)", 4: "/c/.staging-1-a",
            5: "/c/.staging-1-ab"}
    assert processes.stray_members(stats, 7, cwds, "/c/.staging-1-a") == [1, 3]


def test_owner_records_round_trip_and_decide_staleness() -> None:
    owner = Owner(123, 456, 789)
    assert parse_owner(owner_json(owner)) == owner
    assert parse_owner("{not json") is None and parse_owner(json.dumps({"pid": "x"})) is None
    assert parse_owner(json.dumps({"pid": 5})) == Owner(5, None, None)
    alive = processes.ProcStat(123, "S", 1, 123, 456)
    assert not staging_is_stale(owner, alive)
    assert staging_is_stale(owner, None)
    assert staging_is_stale(owner, processes.ProcStat(123, "Z", 1, 123, 456))
    assert staging_is_stale(owner, processes.ProcStat(123, "S", 1, 123, 999)), "pid reused by another process"
    assert not staging_is_stale(Owner(123, None, None), processes.ProcStat(123, "S", 1, 123, 999))
