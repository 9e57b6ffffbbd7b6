"""Pure tier: the local GPU's target is read from NVML only where NVML's answer is the one the CUDA driver would
give (issue 38 item 1: a cache hit on a GPU machine must not pay the driver's 0.1-0.2 s cuInit for it)."""
from __future__ import annotations

import sys

import pytest

from kernelgen.build import driver, toolchain

pytestmark = pytest.mark.pure

H200 = (9, 0)


@pytest.mark.parametrize(("capabilities", "visible", "expected"), [
    ([H200], None, H200),
    ([H200] * 8, None, H200),
    ([H200] * 8, "3,1", H200),  # any subset of one kind of GPU is that kind
    ([H200] * 2, " 1 ", H200),
    ([(12, 0)], "0", (12, 0)),
    ([], None, None),  # no GPU: the driver says so
    ([H200, (8, 9)], None, None),  # mixed GPUs: which one CUDA shows first is the driver's to say
    ([H200, (8, 9)], "1", None),
    ([H200] * 2, "", None),  # an empty CUDA_VISIBLE_DEVICES hides every GPU
    ([H200] * 2, "2", None),  # out of range: CUDA shows none
    ([H200] * 2, "-1", None),
    ([H200] * 2, "GPU-8d0b3b5e-0000-0000-0000-000000000000", None),  # by UUID: the driver's to resolve
    ([H200] * 2, "MIG-GPU-1/0/0", None),
    ([H200] * 2, "0,0", None),  # a repeated index: CUDA shows no GPU
    ([H200] * 3, "0,1,0", None),
    ([H200] * 2, "0,x", None),  # CUDA would stop at x and show GPU 0; the driver can say so
    ([H200] * 3, "\u00b2", None),  # not an ASCII index (int() would refuse it)
    ([H200] * 3, "\u0661", None),  # an Arabic-Indic 1: int() reads 1, CUDA does not
    ([(6, 1)], None, None),  # older than CUDA 13 runs: the driver may not show it at all
])
def test_nvml_decides_the_target_only_where_the_driver_could_not_disagree(
        capabilities: list[tuple[int, int]], visible: str | None, expected: tuple[int, int] | None) -> None:
    assert driver.capability_from_nvml(capabilities, visible) == expected


def _without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)


def test_the_target_comes_from_nvml_without_asking_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_torch(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(driver, "_nvml_capabilities", lambda: [H200, H200])

    def no_driver(ordinal: int | None = None) -> None:
        raise AssertionError("the driver was asked although NVML was certain")

    monkeypatch.setattr(driver, "properties", no_driver)
    assert toolchain.local_arch() == "sm_90a"
    monkeypatch.setattr(driver, "_nvml_capabilities", lambda: [(8, 6)])
    assert toolchain.local_arch() == "sm_86"


@pytest.mark.parametrize(("nvml", "visible"), [(None, None), ([H200, (8, 9)], None), ([H200], "")])
def test_the_driver_answers_where_nvml_cannot(monkeypatch: pytest.MonkeyPatch, nvml: list[tuple[int, int]] | None,
                                             visible: str | None) -> None:
    _without_torch(monkeypatch)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(driver, "_nvml_capabilities", lambda: nvml)
    asked = []

    def fake(ordinal: int | None = None) -> driver.DeviceProperties | None:
        asked.append(ordinal)
        return None if visible == "" else driver.DeviceProperties("NVIDIA L40S", 8, 9, 142, 48 << 30, 9001000, 384)

    monkeypatch.setattr(driver, "properties", fake)
    assert toolchain.local_arch() == (None if visible == "" else "sm_89")
    assert asked == [None]
