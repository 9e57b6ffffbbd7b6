"""Shared fixtures: a private kernel cache per test, and tier skips with clear reasons."""
from __future__ import annotations

from pathlib import Path

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False); run on the H200")
    no_nvcc = pytest.mark.skip(reason=f"needs nvcc (not under CUDA_HOME={knobs.cuda_home()} nor on PATH)")
    for item in items:
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
