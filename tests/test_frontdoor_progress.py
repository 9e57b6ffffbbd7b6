"""Pure tier: progress that moves (issue 26 item 2). build, check, export and tune say how many compile steps
they will run before the first starts, print a line as each finishes (with the elapsed time and what is
left) when the output is piped, and a line at least every HEARTBEAT_S while ninja is quiet; the terminal
bar shows the known total from the start, never `0/?`. ninja is stood in for by fakes that report steps
through the lifecycle's Progress callback, as run_ninja does."""
from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kernelgen import cli
from kernelgen.build.toolchain import Toolchain
from kernelgen.tune.gpu import GpuInfo

pytestmark = pytest.mark.pure

FAKE_TOOLCHAIN = Toolchain("/fake/nvcc", "/fake", "release 13.0", "c++ 13", "0.1", ("/fake/include",), "/fake/lib")
STEP_LINE = re.compile(r"^\[(\d+)/(\d+)\] +\d+\.\d s  (.*)$")


class Stop(Exception):
    """Ends a command once the part under test has run."""


@pytest.fixture
def toolchain(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelgen.build.toolchain

    monkeypatch.setattr(kernelgen.build.toolchain, "detect", lambda: FAKE_TOOLCHAIN)
    monkeypatch.setattr(cli.common, "_toolchain", lambda: FAKE_TOOLCHAIN)


def _ninja(progress: Any, steps: list[str], pause: float = 0.0) -> None:
    for i, step in enumerate(steps, 1):
        time.sleep(pause)
        progress(i, len(steps), step)


def _steps(names: list[str]) -> list[str]:
    return [s for n in names for s in (f"nvcc {n}-0123/{n}.o", f"link {n}-0123/{n}.so")]


def _step_lines(err: str) -> list[tuple[int, int, str]]:
    return [(int(m[1]), int(m[2]), m[3]) for m in map(STEP_LINE.match, err.splitlines()) if m]


def test_piped_build_says_its_total_first_and_a_line_per_finished_step(
        monkeypatch: pytest.MonkeyPatch, cache_dir: Path, toolchain: None, capsys: pytest.CaptureFixture[str]) -> None:
    import kernelgen.build.lifecycle

    names = ["dsv4_indexer_bf16_p1", "dsv4_indexer_bf16_p16"]
    seen: list[str] = []

    def fake_build(variants: list[Any], *args: Any, progress: Any = None, **kwargs: Any) -> list[Any]:
        seen.append(capsys.readouterr().err)  # what the user saw before ninja's first step finished
        _ninja(progress, _steps(names))
        raise Stop

    monkeypatch.setattr(kernelgen.build.lifecycle, "build", fake_build)
    with pytest.raises(Stop):
        cli.main(["build", "specs/dsv4_indexer.yaml", "--arch", "sm_90a"])
    assert re.search(r"building: 12 variants to compile for sm_90a: 24 steps", seen[0]), seen[0]
    lines = _step_lines(capsys.readouterr().err)
    assert [(d, t) for d, t, _ in lines] == [(1, 24), (2, 24), (3, 24), (4, 24)]
    assert lines[0][2] == "compiled dsv4_indexer_bf16_p1.o (23 to go)"
    assert lines[1][2] == "linked dsv4_indexer_bf16_p1.so (22 to go)"


def test_the_terminal_bar_shows_the_known_total_from_the_start(
        monkeypatch: pytest.MonkeyPatch, cache_dir: Path, toolchain: None) -> None:
    import kernelgen.build.lifecycle

    screen = io.StringIO()
    monkeypatch.setattr(cli.common, "err", Console(file=screen, force_terminal=True, width=160, highlight=False))
    frames: list[str] = []

    def fake_build(variants: list[Any], *args: Any, progress: Any = None, **kwargs: Any) -> list[Any]:
        time.sleep(0.3)  # rich redraws ten times a second
        frames.append(screen.getvalue())
        progress(1, 24, "nvcc dsv4_indexer_bf16_p1-0123/dsv4_indexer_bf16_p1.o")
        time.sleep(0.3)
        frames.append(screen.getvalue()[len(frames[0]):])
        raise Stop

    monkeypatch.setattr(kernelgen.build.lifecycle, "build", fake_build)
    with pytest.raises(Stop):
        cli.main(["build", "dsv4_indexer", "--arch", "sm_90a"])
    assert "0/24" in frames[0] and "0/?" not in frames[0], frames[0]
    assert "1/24" in frames[1] and "compiled dsv4_indexer_bf16_p1.o" in frames[1], frames[1]


def test_piped_output_moves_while_ninja_is_quiet(
        monkeypatch: pytest.MonkeyPatch, cache_dir: Path, toolchain: None, capsys: pytest.CaptureFixture[str]) -> None:
    import kernelgen.build.lifecycle

    monkeypatch.setattr(cli.progress, "HEARTBEAT_S", 0.1)

    def slow_build(variants: list[Any], *args: Any, progress: Any = None, **kwargs: Any) -> list[Any]:
        _ninja(progress, _steps(["dsv4_indexer_bf16_p1"]), pause=0.5)
        raise Stop

    monkeypatch.setattr(kernelgen.build.lifecycle, "build", slow_build)
    with pytest.raises(Stop):
        cli.main(["build", "dsv4_indexer", "--arch", "sm_90a"])
    err = capsys.readouterr().err.splitlines()
    quiet = [line for line in err if "still compiling" in line]
    assert quiet and quiet[0].startswith("[0/24]"), err
    assert err.index(quiet[0]) < next(i for i, line in enumerate(err) if line.startswith("[1/24]"))


def test_export_counts_its_steps_over_every_arch(
        monkeypatch: pytest.MonkeyPatch, cache_dir: Path, tmp_path: Path, toolchain: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    import kernelgen.runtime.export

    def fake_export(variants: list[Any], archs: tuple[str, ...], out_dir: Path, jobs: Any, progress: Any) -> Path:
        for _ in archs:  # one ninja run per arch, each counting from 1
            _ninja(progress, _steps([v.name for v in variants]))
        raise Stop

    monkeypatch.setattr(kernelgen.runtime.export, "export", fake_export)
    with pytest.raises(Stop):
        cli.main(["export", "dsv4_indexer", "--variants", "dsv4_indexer_bf16_p64", "--arch", "sm_90a,sm_100a",
                  "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert "exporting: 1 variant to compile for sm_90a, sm_100a: 4 steps" in err, err
    assert [(d, t) for d, t, _ in _step_lines(err)] == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_check_counts_a_step_per_variant(
        monkeypatch: pytest.MonkeyPatch, toolchain: None, capsys: pytest.CaptureFixture[str]) -> None:
    """One nvcc call per variant builds every arch: the headline's step count is the variant count."""
    import kernelgen.build.lifecycle

    seen: list[int] = []

    def fake_compile_only(variants: list[Any], toolchain: Any, archs: tuple[str, ...], jobs: Any,
                          progress: Any = None) -> list[Any]:
        seen.append(len(variants))
        _ninja(progress, [f"nvcc {v.name}.o" for v in variants])
        raise Stop

    monkeypatch.setattr(kernelgen.build.lifecycle, "compile_only", fake_compile_only)
    with pytest.raises(Stop):
        cli.main(["check", "dsv4_indexer", "--arch", "sm_90a,sm_100a"])
    err = capsys.readouterr().err
    total = _step_lines(err)[0][1]
    assert total == seen[0] and f"checking: " in err and f": {total} steps" in err, err
    assert _step_lines(err)[0][2] == f"compiled dsv4_indexer_fp8_p1.o ({total - 1} to go)"


def test_tune_shows_its_compile_as_it_goes(monkeypatch: pytest.MonkeyPatch, cache_dir: Path, toolchain: None,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import kernelgen.tune.gpu
    import kernelgen.tune.runner

    monkeypatch.setattr(kernelgen.tune.gpu, "current", lambda device=None: GpuInfo("NVIDIA H200", "9.0", 132, 141, 0))
    seen: list[str] = []

    def fake_build(variants: list[Any], *args: Any, progress: Any = None, **kwargs: Any) -> list[Any]:
        seen.append(capsys.readouterr().err)
        assert progress is not None, "the tuning compile reports no progress"
        _ninja(progress, _steps([v.name for v in variants]))
        raise Stop

    monkeypatch.setattr(kernelgen.tune.runner, "build", fake_build)
    with pytest.raises(Stop):
        cli.main(["tune", "dsv4_indexer", "--variants", "dsv4_indexer_bf16_p64", "--arch", "sm_90a"])
    assert re.search(r"tuning: \d+ kernel instances of 1 variant to compile for sm_90a: 2 steps", seen[0]), seen[0]
    assert [(d, t) for d, t, _ in _step_lines(capsys.readouterr().err)] == [(1, 2), (2, 2)]
