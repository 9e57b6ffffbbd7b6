"""GPU arch names <-> compute capabilities, in one place: 'sm_90a' <-> '9.0' (pure)."""
from __future__ import annotations


def arch_of_capability(capability: str) -> str:
    """'9.0' -> 'sm_90a', '12.0' -> 'sm_120a': the arch-specific target kernelgen builds from sm_90 up
    (plain 'sm_86' below it, where no arch-specific form exists)."""
    major, _, minor = capability.partition(".")
    return f"sm_{int(major)}{int(minor or 0)}" + ("a" if int(major) >= 9 else "")


def capability_of_arch(arch: str) -> str:
    """'sm_90a' -> '9.0', 'sm_120a' -> '12.0', 'sm_100f' -> '10.0', 'sm_86' -> '8.6'."""
    digits = arch.removeprefix("sm_").rstrip("af")
    return f"{digits[:-1]}.{digits[-1]}"
