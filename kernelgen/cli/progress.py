"""Compile progress: a bar on a terminal; piped, a line per finished ninja step and a heartbeat."""
from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from rich.markup import escape

import kernelgen.cli.common as common  # err, _toolchain: see common's docstring

from .common import _count

if TYPE_CHECKING:
    from rich.progress import Progress as Bar


HEARTBEAT_S = 30.0  # piped output gets a line at least this often while ninja works: one compile can take minutes
_VERBS = {"nvcc": "compiled", "link": "linked"}  # the first word of each ninja step's description (buildplan)


def _step_label(step: str) -> str:
    """'nvcc dir/x.o' -> 'compiled x.o': what a finished ninja step made."""
    verb, _, target = step.partition(" ")
    return f"{_VERBS[verb]} {Path(target).name}" if verb in _VERBS and target else step


class _CompileProgress:
    """The compile steps of one command as ninja reports them (lifecycle's Progress callback; ninja, writing
    to a pipe, reports each step as it finishes), counted over every ninja run of the command (export runs
    one per arch, a failing tuning build several) against the total the command knows before the first
    starts. On a terminal a bar (`bar`) shows that total from the start; piped, a line per finished step,
    and one at least every HEARTBEAT_S while ninja is quiet."""

    def __init__(self, what: str, bar: Bar | None) -> None:
        self.what, self.bar, self.task = what, bar, None
        self.total = self.base = 0
        self.run = (0, 0)  # (done, total) of the ninja run reporting now
        self.start = self.said = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.beat: threading.Thread | None = None

    def expect(self, steps: int, headline: str) -> None:
        """Say what will compile and how many steps it takes, before ninja starts."""
        common.err.print(f"{self.what}: {headline}", markup=False, soft_wrap=True)
        with self.lock:
            self.total, self.start, self.said = steps, time.monotonic(), time.monotonic()
        if self.bar is not None:
            self.task = self.bar.add_task(self.what, total=steps, what=self.what, step="")
        elif self.beat is None:
            self.beat = threading.Thread(target=self._heartbeat, name="kernelgen-progress", daemon=True)
            self.beat.start()

    def __call__(self, done: int, total: int, step: str) -> None:
        with self.lock:
            run_done, run_total = self.run
            if done <= run_done or total != run_total:  # the first report of another ninja run
                self.base += run_done
            self.run = (done, total)
            self.total = max(self.total, self.base + total)
            done = self.base + done
        label = _step_label(step)
        if self.bar is None:
            self._line(done, label)
            return
        if self.task is None:
            self.task = self.bar.add_task(self.what, total=self.total, what=self.what, step="")
        self.bar.update(self.task, completed=done, total=self.total, description=escape(f"{self.what}: {label}"),
                        step=escape(label))

    def _line(self, done: int, label: str) -> None:
        left = self.total - done
        common.err.print(f"[{done}/{self.total}] {time.monotonic() - self.start:5.1f} s  {label}"
                         + (f" ({left} to go)" if left > 0 else ""), markup=False, soft_wrap=True)
        self.said = time.monotonic()

    def _heartbeat(self) -> None:
        while not self.stop.wait(min(HEARTBEAT_S / 4, 1.0)):
            with self.lock:
                done, quiet = self.base + self.run[0], time.monotonic() - self.said
            if quiet >= HEARTBEAT_S:
                self._line(done, "still compiling")

    def close(self) -> None:
        self.stop.set()
        if self.beat is not None:
            self.beat.join()
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, visible=False)


@contextlib.contextmanager
def _compiling(what: str, bar: Bar | None = None) -> Iterator[_CompileProgress]:
    """A _CompileProgress for a command's builds: on a terminal in `bar` (one of its own where None)."""
    own = None
    if bar is None and common.err.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        own = bar = Progress(TextColumn("{task.fields[what]}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("{task.fields[step]}"), console=common.err, transient=True)
        own.start()
    progress = _CompileProgress(what, bar if common.err.is_terminal else None)
    try:
        yield progress
    finally:
        progress.close()
        if own is not None:
            own.stop()


def _expect_builds(progress: _CompileProgress, todo: list[Any], archs: tuple[str, ...]) -> None:
    """Announce the builds lifecycle.build will run (runner.unbuilt's list; nothing where all are cached)."""
    from ..tune.runner import STEPS_PER_LIBRARY

    if todo:
        steps = STEPS_PER_LIBRARY * len(todo)
        progress.expect(steps, f"{_count(len({p.variant.name for p in todo}), 'variant')} to compile for "
                               f"{', '.join(archs)}: {steps} steps (nvcc, then link, each)")


def _expect_tuning(progress: _CompileProgress, event: dict[str, Any], archs: tuple[str, ...]) -> None:
    """Announce the tuning compile from runner.tune's "compile" event (nothing where all is cached)."""
    steps, todo, variants = event["steps"], event["to_compile"], event["variants"]
    if not steps:
        return
    what = f"{event['instances']} kernel instances of {_count(variants, 'variant')}" if todo == variants \
        else f"{todo} of {_count(variants, 'variant')}"
    progress.expect(steps, f"{what} to compile for {', '.join(archs)}: {steps} steps (nvcc, then link, each)")
