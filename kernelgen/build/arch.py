"""GPU arch names in one place (pure): 'sm_90a' <-> '9.0', and which names an nvcc's target list admits."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

ARCH = re.compile(r"sm_(\d+)([af]?)\Z")


def arch_of_capability(capability: str) -> str:
    """'9.0' -> 'sm_90a', '12.0' -> 'sm_120a': the arch-specific target kernelgen builds from sm_90 up
    (plain 'sm_86' below it, where no arch-specific form exists)."""
    major, _, minor = capability.partition(".")
    return f"sm_{int(major)}{int(minor or 0)}" + ("a" if int(major) >= 9 else "")


def capability_of_arch(arch: str) -> str:
    """'sm_90a' -> '9.0', 'sm_120a' -> '12.0', 'sm_100f' -> '10.0', 'sm_86' -> '8.6'."""
    digits = arch.removeprefix("sm_").rstrip("af")
    return f"{digits[:-1]}.{digits[-1]}"


# nvcc has arch-specific targets (sm_90a) from compute capability 9 and family targets (sm_100f) from 10 up
_SUFFIX_FROM_MAJOR = {"": 0, "a": 9, "f": 10}


@dataclass(frozen=True)
class Targets:
    """The targets one nvcc builds, from its own `nvcc --list-gpu-arch` (compute_75 ... compute_121)."""

    nvcc: str
    listed: tuple[str, ...]  # as sm_ names, numerically sorted: ('sm_75', ..., 'sm_121')

    def knows(self, arch: str) -> bool:
        m = ARCH.match(arch)
        if m is None:
            return False
        number, suffix = int(m.group(1)), m.group(2)
        major = number // 10  # sm_90 -> 9, sm_120 -> 12
        return arch in self.listed or (f"sm_{number}" in self.listed and major >= _SUFFIX_FROM_MAJOR[suffix])

    def valid_forms(self) -> list[str]:
        return [f"{base}{suffix}" for base in self.listed for suffix in _SUFFIX_FROM_MAJOR if self.knows(base + suffix)]

    def refusal(self, arch: str, source: str) -> str:
        """The one line for an arch this nvcc does not build: its targets, the suffixed forms, a near name."""
        forms = [next((f for f in self.valid_forms() if f.endswith(s)), None) for s in ("a", "f")]
        suffixed = " and ".join(f"{f} ({'arch-specific' if f.endswith('a') else 'family'})" for f in forms if f)
        near = difflib.get_close_matches(arch, self.valid_forms(), n=1)
        return (f"{source}: {arch} is not a target of {self.nvcc}" + (f" (did you mean {near[0]}?)" if near else "")
                + f"; it builds {', '.join(self.listed)} (nvcc --list-gpu-arch)"
                + (f" and their forms such as {suffixed}" if suffixed else "")
                + f"; pass one of those, or point CUDA_HOME at a CUDA toolkit that builds {arch}")


def parse_gpu_arch_listing(text: str) -> tuple[str, ...]:
    """`nvcc --list-gpu-arch` output ('compute_90' per line) -> ('sm_90', ...), numerically sorted."""
    found = {(int(number), f"sm_{number}{suffix}") for number, suffix in re.findall(r"\bcompute_(\d+)([af]?)\b", text)}
    return tuple(name for _, name in sorted(found))
