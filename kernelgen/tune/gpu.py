"""The identity of a GPU that tuning records are keyed by: model, compute capability, SMs, memory bandwidth."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class GpuInfo:
    name: str  # e.g. "NVIDIA H200"
    capability: str  # e.g. "9.0"
    sms: int
    memory_gb: int
    bandwidth_gbs: int  # theoretical DRAM bandwidth from the memory clock and bus width; 0 = unknown

    @property
    def slug(self) -> str:
        """File name of this GPU's record file, e.g. 'nvidia-h200-sm90-132sms'."""
        model = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
        return f"{model}-sm{self.capability.replace('.', '')}-{self.sms}sms"

    def matches(self, other: GpuInfo) -> bool:
        """Records apply across boards of one model: name, capability and SM count must agree; bandwidth
        must agree where both are known (an H200 NVL and an H200 SXM differ there)."""
        same = (self.name, self.capability, self.sms) == (other.name, other.capability, other.sms)
        known = self.bandwidth_gbs and other.bandwidth_gbs
        return same and (not known or abs(self.bandwidth_gbs - other.bandwidth_gbs) <= 0.05 * self.bandwidth_gbs)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GpuInfo:
        return cls(str(d["name"]), str(d["capability"]), int(d["sms"]), int(d.get("memory_gb", 0)),
                   int(d.get("bandwidth_gbs", 0)))


def from_properties(props: Any) -> GpuInfo:
    """GpuInfo from torch.cuda.get_device_properties(...) (or anything with the same attributes)."""
    clock_khz = getattr(props, "memory_clock_rate", 0) or 0
    bus_bits = getattr(props, "memory_bus_width", 0) or 0
    bandwidth = int(2 * clock_khz * 1e3 * bus_bits / 8 / 1e9) if clock_khz and bus_bits else 0
    return GpuInfo(props.name, f"{props.major}.{props.minor}", int(props.multi_processor_count),
                   int(round(props.total_memory / 2**30)), bandwidth)


def current(device: int | None = None) -> GpuInfo | None:
    """The GPU torch would use (the driver's first visible one where torch is not imported: no torch import), or
    None where there is none."""
    from ..build.driver import properties

    props = properties(device)
    return None if props is None else from_properties(props)
