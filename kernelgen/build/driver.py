"""The local GPUs as the CUDA driver reports them (libcuda through ctypes), without importing torch: a command that
only finds its kernels in the cache then starts in a fraction of a second, where `import torch` costs seconds on a
GPU host. Where torch is already imported, its view is used instead (its current device, the same numbers), so a
process that has chosen a device with torch.cuda.set_device keeps it.

The target alone (`capability`, what a build needs) is read from NVML where that is certain: NVML starts in a few
milliseconds, the driver's cuInit in 0.1-0.2 s on an H200, a third of a cache hit's wall time."""
from __future__ import annotations

import ctypes
import re
import sys
from dataclasses import dataclass
from functools import lru_cache

# CUdevice_attribute values (cuda.h)
_MULTIPROCESSOR_COUNT = 16
_MEMORY_CLOCK_RATE = 36  # kHz
_GLOBAL_MEMORY_BUS_WIDTH = 37  # bits
_COMPUTE_CAPABILITY_MAJOR = 75
_COMPUTE_CAPABILITY_MINOR = 76


@dataclass(frozen=True)
class DeviceProperties:
    """The fields of torch.cuda.get_device_properties that kernelgen reads, under the same names."""

    name: str
    major: int
    minor: int
    multi_processor_count: int
    total_memory: int  # bytes
    memory_clock_rate: int  # kHz
    memory_bus_width: int  # bits


@lru_cache(maxsize=1)
def _libcuda() -> ctypes.CDLL | None:
    """The driver, initialized; None where there is none (no GPU, no driver, or cuInit fails)."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        return lib if lib.cuInit(0) == 0 else None
    return None


def _torch_properties(ordinal: int | None) -> DeviceProperties | None:
    import torch

    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(torch.cuda.current_device() if ordinal is None else ordinal)
    return DeviceProperties(p.name, p.major, p.minor, int(p.multi_processor_count), int(p.total_memory),
                            int(getattr(p, "memory_clock_rate", 0) or 0), int(getattr(p, "memory_bus_width", 0) or 0))


def properties(ordinal: int | None = None) -> DeviceProperties | None:
    """The properties of GPU `ordinal` (default: torch's current device where torch is imported, else the first
    visible one), or None where there is no GPU."""
    if "torch" in sys.modules:
        return _torch_properties(ordinal)
    lib = _libcuda()
    if lib is None:
        return None
    count = ctypes.c_int(0)
    index = 0 if ordinal is None else ordinal
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or not 0 <= index < count.value:
        return None
    dev = ctypes.c_int(0)
    if lib.cuDeviceGet(ctypes.byref(dev), index) != 0:
        return None

    def attribute(which: int) -> int:
        value = ctypes.c_int(0)
        return value.value if lib.cuDeviceGetAttribute(ctypes.byref(value), which, dev) == 0 else 0

    name = ctypes.create_string_buffer(256)
    memory = ctypes.c_size_t(0)
    if lib.cuDeviceGetName(name, len(name), dev) != 0 or lib.cuDeviceTotalMem_v2(ctypes.byref(memory), dev) != 0:
        return None
    return DeviceProperties(name.value.decode(errors="replace"), attribute(_COMPUTE_CAPABILITY_MAJOR),
                            attribute(_COMPUTE_CAPABILITY_MINOR), attribute(_MULTIPROCESSOR_COUNT), memory.value,
                            attribute(_MEMORY_CLOCK_RATE), attribute(_GLOBAL_MEMORY_BUS_WIDTH))


# The oldest compute capability CUDA 13 runs; an older GPU NVML lists may be one the driver does not show.
_OLDEST_CAPABILITY = (7, 5)


def capability_from_nvml(capabilities: list[tuple[int, int]], visible: str | None) -> tuple[int, int] | None:
    """The compute capability CUDA's first visible GPU has, decided from NVML's list of every GPU of the machine
    (`capabilities`, in NVML's order) and CUDA_VISIBLE_DEVICES (`visible`, None where unset), where the answer does
    not depend on which GPUs CUDA shows or how it orders them: every GPU has the one capability (and one CUDA runs),
    and CUDA_VISIBLE_DEVICES is unset or a list of distinct indexes of existing GPUs. None otherwise (ask the
    driver): mixed GPUs, no GPU, GPUs named by UUID, or a list CUDA may read as no GPU at all (empty, out of range,
    an index repeated: CUDA then shows none)."""
    if not capabilities or len(set(capabilities)) != 1 or capabilities[0] < _OLDEST_CAPABILITY:
        return None
    if visible is not None:
        entries = [e.strip() for e in visible.split(",")]
        if not all(re.fullmatch(r"[0-9]+", e) and int(e) < len(capabilities) for e in entries):
            return None
        if len({int(e) for e in entries}) != len(entries):
            return None
    return capabilities[0]


def _nvml_capabilities() -> list[tuple[int, int]] | None:
    """Every GPU's compute capability from NVML (libnvidia-ml through ctypes), or None where NVML cannot say."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if lib.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        found = []
        for index in range(count.value):
            handle, major, minor = ctypes.c_void_p(), ctypes.c_int(0), ctypes.c_int(0)
            if (lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0
                    or lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0):
                return None
            found.append((major.value, minor.value))
        return found
    finally:
        lib.nvmlShutdown()


def capability() -> tuple[int, int] | None:
    """The compute capability of the GPU `properties()` describes, or None where there is no GPU: torch's view where
    torch is imported, NVML's where it is certain (`capability_from_nvml`), else the driver's."""
    if "torch" not in sys.modules:
        from .. import knobs

        nvml = _nvml_capabilities()
        fast = capability_from_nvml(nvml, knobs.visible_devices()) if nvml is not None else None
        if fast is not None:
            return fast
    props = properties()
    return None if props is None else (props.major, props.minor)
