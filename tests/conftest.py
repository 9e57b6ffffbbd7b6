"""Shared fixtures: a private kernel cache per test, tier skips with clear reasons, the opt-in tiers (sweep,
bench) and the golden files under tests/golden/ with their one update path, `--update-goldens`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from kernelgen import knobs
from kernelgen.errors import KernelgenError
from kernelgen.build.toolchain import find_nvcc


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _has_nvcc() -> bool:
    try:
        return find_nvcc() is not None
    except KernelgenError:
        return False


HAS_GPU = _has_gpu()
HAS_NVCC = _has_nvcc()
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
UPDATE_GOLDENS = "--update-goldens"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(UPDATE_GOLDENS, action="store_true", default=False,
                     help="rewrite the golden files under tests/golden/ from the current code (only in a commit that "
                          "changes the generated code or the shipped bytes on purpose, and say so in it)")


def _sweep_asked(config: pytest.Config) -> bool:
    """The every-configuration sweep runs where KERNELGEN_SWEEP=1 or the -m expression names it."""
    return knobs.sweep() or "sweep" in (config.getoption("markexpr", "") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _sweep_asked(config):  # deselected, not skipped: the default tiers' counts are what they run
        swept = [item for item in items if item.get_closest_marker("sweep")]
        if swept:
            config.hook.pytest_deselected(items=swept)
            items[:] = [item for item in items if not item.get_closest_marker("sweep")]
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False); run on the H200")
    no_nvcc = pytest.mark.skip(reason=f"needs nvcc (not under CUDA_HOME={knobs.cuda_home()} nor on PATH)")
    no_bench = pytest.mark.skip(reason=f"a benchmark: runs with {knobs.BENCH.name}=1")
    for item in items:
        if item.get_closest_marker("bench") and not knobs.bench():
            item.add_marker(no_bench)
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(no_gpu)
        elif ("build" in item.keywords or "gpu" in item.keywords) and not HAS_NVCC:
            item.add_marker(no_nvcc)


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    """Every test gets its own kernel cache; the env knob points there for the test's duration."""
    path = tmp_path / "kernel-cache"
    with knobs.scope(CACHE_DIR=str(path)):
        yield path


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache shared by the GPU tests, so each shipped variant is compiled once per session."""
    return tmp_path_factory.mktemp("session-kernel-cache")


_REWRITTEN: list[str] = []


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, Any], None]:
    """golden(name, current): current (JSON data) must equal tests/golden/<name>; with --update-goldens the file
    is rewritten from current instead (and the run's summary lists it)."""
    update = request.config.getoption(UPDATE_GOLDENS)
    test_file = request.node.path.relative_to(request.config.rootpath)

    def check(name: str, current: Any) -> None:
        path = GOLDEN_DIR / name
        text = json.dumps(current, indent=1, sort_keys=True) + "\n"
        if update:
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
                _REWRITTEN.append(str(path.relative_to(GOLDEN_DIR.parent.parent)))
            return
        fix = (f"if the generated code (or the bytes) changed on purpose, run `python -m pytest {test_file} "
               f"{UPDATE_GOLDENS}` and say so in the commit")
        assert path.exists(), f"{path} is missing; {fix}"
        want = json.loads(path.read_text())
        changed = sorted(k for k in set(want) | set(current) if want.get(k) != current.get(k)) \
            if isinstance(want, dict) and isinstance(current, dict) else []
        assert current == want, f"{len(changed)} entries differ from {name} ({', '.join(changed[:8])}" \
                                f"{', ...' if len(changed) > 8 else ''}); {fix}"

    return check


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _REWRITTEN:
        terminalreporter.write_line(f"{UPDATE_GOLDENS}: rewrote {', '.join(sorted(set(_REWRITTEN)))}")
