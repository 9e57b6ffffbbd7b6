"""Benchmark (marker bench; runs with KERNELGEN_BENCH=1, skipped otherwise): how long parse_spec and the command
line take to refuse each hostile spec of tests/test_spec_hostile.py. The unit tests there hold the behaviour (one
positioned line, nothing written); the times are printed here, not asserted against a budget, since a shared CI
machine's wall clock says little about the code. The one bound, LIMIT_S, catches what the limits exist for: a
case that hangs or blows up (before them: minutes, or never). It is over 10x the slowest case measured on a busy
2-core machine (best of three): 0.7-1.1 s for 4097 listed variants (PyYAML reading 16k values), 0.4 s for
3000-deep nesting, 0.2-0.3 s for a 5000-value matrix list and a 100000-part sexagesimal number, the others under
20 ms.

    KERNELGEN_BENCH=1 python -m pytest -q tests/benchmarks
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernelgen.cli import main
from kernelgen.errors import SpecError
from kernelgen.spec.parse import MAX_SPEC_BYTES, load_spec, parse_spec
from test_spec_hostile import BASE, CLI_FILES, HOSTILE, TOO_MANY_LISTED

pytestmark = pytest.mark.bench

LIMIT_S = 15.0  # a hang, not a slow machine: over 10x the slowest case measured (1.1 s, 2 busy cores)
REPEATS = 3  # the best of three: the time the code takes, less the machine's interruptions


def best_of(call: object, repeats: int = REPEATS) -> float:
    """The shortest wall-clock time of `repeats` calls of call()."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


@pytest.fixture
def say(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str],
        record_property: object) -> object:
    """say(seconds): print the case's time (also without -s) and keep it in the JUnit XML (--junitxml)."""
    def report(seconds: float) -> None:
        record_property("seconds", seconds)  # type: ignore[operator]
        with capsys.disabled():
            print(f"\n  {request.node.name}: {seconds * 1e3:.1f} ms", end="")
    return report


def refused(text: str) -> None:
    with pytest.raises(SpecError):
        parse_spec(text, "s.yaml")


@pytest.mark.parametrize("text", [pytest.param(t, id=n) for n, t, _ in HOSTILE]
                         + [pytest.param(TOO_MANY_LISTED, id="too many listed variants")])
def test_bench_parse_spec_refuses_hostile_text(text: str, say: object) -> None:
    seconds = best_of(lambda: refused(text))
    say(seconds)  # type: ignore[operator]
    assert seconds < LIMIT_S


def test_bench_load_spec_refuses_an_oversized_file(tmp_path: Path, say: object) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(BASE.encode() + b"#" * (4 * MAX_SPEC_BYTES))

    def load() -> None:
        with pytest.raises(SpecError):
            load_spec(big)

    seconds = best_of(load)  # reads the first MiB and stops
    say(seconds)  # type: ignore[operator]
    assert seconds < LIMIT_S


@pytest.mark.parametrize("command", ["list", "check"])
@pytest.mark.parametrize("name", list(CLI_FILES))
def test_bench_cli_refuses_hostile_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], say: object, command: str,
                                        name: str) -> None:
    (tmp_path / name).write_bytes(CLI_FILES[name])
    for env in ("HOME", "XDG_CACHE_HOME", "KERNELGEN_CACHE_DIR"):
        monkeypatch.setenv(env, str(tmp_path))
    monkeypatch.chdir(tmp_path)

    def run() -> None:
        assert main([command, name]) == 1

    seconds = best_of(run)
    capsys.readouterr()  # the error lines the command printed
    say(seconds)  # type: ignore[operator]
    assert seconds < LIMIT_S
