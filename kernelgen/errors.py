"""The exception family kernelgen raises; the CLI prints each as one line."""
from __future__ import annotations


class KernelgenError(Exception):
    """Base class: a user-facing error whose str() is one complete line."""


class SpecError(KernelgenError):
    """A spec file is malformed: YAML syntax, unknown key, wrong type, bad value."""


class GuardViolation(KernelgenError):
    """A variant is well-formed but not supported; the message names the guard and the fix."""


class BuildError(KernelgenError):
    """nvcc or ninja failed; the message carries nvcc's own words, trimmed."""


class LayoutMismatch(KernelgenError):
    """A tensor handed to a kernel does not match the variant's shapes, dtypes or cache layout."""


class ToolchainError(KernelgenError):
    """nvcc, CUDA_HOME or the target architecture cannot be found or used."""


class TuningError(KernelgenError):
    """Autotuning could not produce a configuration."""
