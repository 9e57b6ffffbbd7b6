"""The builder owns every process it starts: ninja runs in a session of its own that dies with the builder,
and whatever a dead builder left running is found in /proc and killed by the next one (Linux).

Why a session and a parent-death signal, not the builder's process group: ninja puts every command
in a process group of its own, so neither a kill -9 of the builder's group nor one of ninja's group
reaches nvcc, and a builder killed with -9 runs no cleanup at all. So:
- ninja starts in a new session (its pid is the session id, shared by every command and nvcc's
  children, whatever their groups) through a small wrapper that asks the kernel to send ninja SIGTERM
  when the builder dies (PR_SET_PDEATHSIG, kept across exec), however it dies, kill -9 included; on
  SIGTERM ninja sends SIGTERM to each command's group and waits for them. ninja inherits SIGPIPE
  ignored, so the builder's end of the pipe closing first cannot kill ninja before it passes that on.
- on any exit of the build (return, exception, Ctrl-C) the builder stops ninja the same way, then
  SIGKILLs whatever of the session still runs in the build folder; on SIGTERM (where it would kill the
  process) and at interpreter exit it SIGKILLs the sessions outright.
- the next build treats a staging folder whose owner is gone (no such process, a zombie, or another
  process that got its pid) as stale and kills its recorded ninja session before removing it: the
  backstop for a command that ignored SIGTERM.
Only processes whose working folder is the build folder are killed, so a reused session id is harmless."""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Iterator

GRACE_S = 3.0  # how long ninja gets to stop its commands after SIGTERM before the session is killed

# `python -c _WRAPPER BUILDER_PID PROGRAM ARGS...`: SIGTERM (15) on the builder's death, then become PROGRAM.
_WRAPPER = (
    "import os, sys\n"
    "try:\n"
    "    import ctypes\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM\n"
    "except (ImportError, AttributeError, OSError):\n"
    "    pass  # no ctypes or no prctl (not Linux): the next build's sweep is the only backstop\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit('kernelgen: the builder died before ninja started')  # too late for the signal to fire\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


@dataclass(frozen=True)
class ProcStat:
    """What /proc/<pid>/stat says about one process."""

    pid: int
    state: str  # R, S, D, T, ...; Z: a zombie (dead, not yet reaped), X: dead
    ppid: int
    session: int
    start: int  # clock ticks after boot: with the pid, names one process for its whole life


def parse_stat(pid: int, text: str) -> ProcStat | None:
    """Parse /proc/<pid>/stat; None for anything that is not one. The command name in parentheses may
    hold spaces and parentheses itself, so the fields are counted from the last ')'."""
    _, paren, rest = text.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 20:
        return None
    try:
        return ProcStat(pid, fields[0], int(fields[1]), int(fields[3]), int(fields[19]))
    except ValueError:
        return None


def is_running(stat: ProcStat | None, start: int | None = None) -> bool:
    """A process that can still act: it exists, is no zombie, and (when `start` is known) is the process
    recorded, not a later one that got its pid."""
    return stat is not None and stat.state not in ("Z", "X", "x") and (start is None or stat.start == start)


def in_folder(cwd: str, folder: str) -> bool:
    """Whether a working folder (as /proc/<pid>/cwd reads, ' (deleted)' once removed) lies in `folder`."""
    cwd = cwd.removesuffix(" (deleted)")
    return cwd == folder or cwd.startswith(folder.rstrip("/") + "/")


def stray_members(stats: list[ProcStat], session: int, cwds: dict[int, str], folder: str) -> list[int]:
    """The running processes of `session` working in `folder`: what is left to kill."""
    return [s.pid for s in stats if s.session == session and is_running(s) and in_folder(cwds.get(s.pid, ""), folder)]


def read_stat(pid: int) -> ProcStat | None:
    try:
        return parse_stat(pid, Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError):
        return None


def _all_stats() -> list[ProcStat]:
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    return [s for s in map(read_stat, pids) if s is not None]


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def kill_session(session: int, folder: Path, timeout_s: float = 5.0) -> None:
    """SIGKILL every running process of `session` that works in `folder`, until none is left (a shell or
    nvcc may fork while this runs)."""
    where = os.path.realpath(folder)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = [s for s in _all_stats() if s.session == session]
        members = stray_members(stats, session, {s.pid: _cwd(s.pid) for s in stats}, where)
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def start_time(pid: int) -> int | None:
    stat = read_stat(pid)
    return stat.start if stat else None


# ---- the builder's own processes: stopped on every way out ----

_LIVE: dict[int, tuple[Path, int]] = {}  # ninja's pid -> (build folder, pid of the builder that started it)


def _stop(proc: subprocess.Popen[str], folder: Path, grace_s: float = GRACE_S) -> None:
    try:
        if proc.poll() is None:
            proc.terminate()  # ninja passes SIGTERM to each command's process group and waits for them
            proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    finally:  # also after a second Ctrl-C during the wait: a command that ignored SIGTERM, or left a child
        kill_session(proc.pid, folder)


def _kill_all() -> None:
    """Kill every live build's session outright. No Popen call: in a signal handler, the interrupted code
    may hold a Popen's wait lock."""
    for session, (folder, builder) in list(_LIVE.items()):
        if builder == os.getpid():  # not a forked child's copy of its parent's builds
            kill_session(session, folder)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Kill the builds, then die of SIGTERM as the process would have (same exit status for its parent)."""
    _kill_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def _sigterm_stops_builds() -> Iterator[None]:
    """Where SIGTERM would kill the process outright (the default, in the main thread only: Python's rule),
    stop the builds first. A program with its own SIGTERM handler keeps it."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


_atexit_registered = False


def _tied_to_me(command: list[str]) -> list[str]:
    """The command behind the parent-death wrapper (as is where no Python can run it)."""
    if not sys.executable:
        return command
    return [sys.executable, "-I", "-S", "-c", _WRAPPER, str(os.getpid()), *command]


@contextlib.contextmanager
def owned(command: list[str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    """Run `command` (its program an absolute path) in `cwd`, in a session of its own that dies with this
    process; its stdout and stderr come as text lines on proc.stdout. Whatever way the block is left,
    nothing of the session is left running."""
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_kill_all)
        _atexit_registered = True
    # restore_signals=False: ninja inherits Python's ignored SIGPIPE (see the module's comment)
    proc: subprocess.Popen[str] = subprocess.Popen(
        _tied_to_me(command), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        errors="replace", start_new_session=True, restore_signals=False)
    _LIVE[proc.pid] = (cwd, os.getpid())
    try:
        with _sigterm_stops_builds():
            yield proc
    finally:
        _stop(proc, cwd)
        _LIVE.pop(proc.pid, None)
        if proc.stdout is not None:
            proc.stdout.close()

