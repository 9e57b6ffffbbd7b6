"""The one registry of environment variables kernelgen reads, typed and documented, and the checks a command
makes of the folders they (or its flags) name before it starts working."""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .errors import KernelgenError, StorageError


@dataclass(frozen=True)
class Knob:
    name: str
    doc: str
    default: str | None = None

    def is_set(self) -> bool:
        return os.environ.get(self.name) not in (None, "")

    def get(self) -> str | None:
        return os.environ[self.name] if self.is_set() else self.default


CACHE_DIR = Knob("KERNELGEN_CACHE_DIR", "where built kernels live (default: $XDG_CACHE_HOME/kernelgen)")
CUDA_ARCH_LIST = Knob(
    "KERNELGEN_CUDA_ARCH_LIST",
    "comma- or space-separated targets such as sm_90a,sm_100a (default: the local GPU)",
)
JOBS = Knob("KERNELGEN_JOBS", "parallel nvcc jobs in one ninja run (default: ninja's choice)")
CUDA_HOME = Knob("CUDA_HOME", "CUDA toolkit root holding bin/nvcc and lib64/libcudart", "/usr/local/cuda")
PDL = Knob("KERNELGEN_PDL", "set to 0 to launch (and export) without programmatic dependent launch even where a "
           "tuning record chose it (default: as tuned)")
TUNED = Knob("KERNELGEN_TUNED", "set to 0 to ignore tuning records and use each variant's default launch")
DEBUG = Knob("KERNELGEN_DEBUG", "set to 1 for checks that need a device sync on every call (duplicate out_loc slots)")
XDG_CACHE_HOME = Knob("XDG_CACHE_HOME", "base of the default cache dir (default: ~/.cache)")
SWEEP = Knob("KERNELGEN_SWEEP", "set to 1 to run the GPU tests' every-configuration sweep (marker sweep; also "
             "`-m sweep`): each candidate launch of each checked variant and group, not the fast tier's sample")
BENCH = Knob("KERNELGEN_BENCH", "set to 1 to run the test suite's benchmarks (marker bench, tests/benchmarks/): they "
             "print wall-clock times and are skipped otherwise")
FUZZ_EXAMPLES = Knob("KERNELGEN_FUZZ_EXAMPLES", "how many generated cases each property test of the suite tries "
                     "(default: each test's own count; raise it for a longer hunt)")
VISIBLE_DEVICES = Knob("CUDA_VISIBLE_DEVICES", "CUDA's own: the GPUs a process sees (read, never set: where it names "
                       "GPUs other than by index, the local GPU's target is asked of the CUDA driver, not NVML)")
CUOBJDUMP = Knob("KERNELGEN_CUOBJDUMP", "the cuobjdump that reads SASS for the build tests and tools/sass_count.py "
                 "(default: the one on PATH, else the nvidia-cuda-cuobjdump wheel's that the test extra installs)")


def cache_dir() -> Path:
    explicit = CACHE_DIR.get()
    if explicit:
        return Path(explicit).expanduser()
    return Path(XDG_CACHE_HOME.get() or "~/.cache").expanduser() / "kernelgen"


def directory_problem(path: Path) -> str | None:
    """Why `path` cannot be a folder kernelgen writes in, without creating anything (None when it is one, or
    can be made): 'not a directory' (it, or '(X is a file)' a folder on its way, is a file), 'not writable'."""
    found = path
    while not os.path.lexists(found) and found != found.parent:  # the nearest part of it that exists
        found = found.parent
    if not found.is_dir():
        return "not a directory" if found == path else f"not a directory ({found} is a file)"
    if not os.access(found, os.W_OK | os.X_OK):
        return "not writable" if found == path else f"cannot be created ({found} is not writable)"
    return None


def write_problem(path: Path) -> str | None:
    """Why kernelgen cannot write in folder `path`, found by doing it: the folder is created (with its parents)
    and a temporary file written in it and removed. A permission bit says yes where the file system says no (a
    read-only mount, /proc for root): only a write tells. None when the write worked."""
    import tempfile

    problem = directory_problem(path)
    if problem is not None:
        return problem
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path, prefix=".kernelgen-probe-")
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        return f"cannot be written ({e.strerror or e})"
    return None


def check_cache_dir(write: bool = True) -> Path:
    """cache_dir(), refused (StorageError) in one line naming the variable it came from where it cannot be a
    folder, or with `write` one kernelgen can write in: the check a command makes before it starts working."""
    path = cache_dir()
    fix = f"point {CACHE_DIR.name} at a folder kernelgen may write in"
    if CACHE_DIR.is_set():
        named, where = path, f"{CACHE_DIR.name}={CACHE_DIR.get()}"
    elif XDG_CACHE_HOME.is_set():  # the cache is $XDG_CACHE_HOME/kernelgen: name the variable's own folder
        named, where = path.parent, f"{XDG_CACHE_HOME.name}={XDG_CACHE_HOME.get()}"
        fix = f"point {XDG_CACHE_HOME.name} or {CACHE_DIR.name} at a folder kernelgen may write in"
    else:
        named, where = path, f"{path} (the default cache)"
        fix = f"set {CACHE_DIR.name} to a folder kernelgen may write in"
    look = write_problem if write else directory_problem
    problem = look(named)
    if problem is None and named != path:
        problem = look(path)
        where += f": the cache folder {path}" if problem else ""
    if problem is None or (not write and not problem.startswith("not a directory")):
        return path
    raise StorageError(f"{where}: {problem}; {fix}")


def check_folder(option: str, path: Path, write: bool = True) -> Path:
    """An output folder a flag names (e.g. -o DIR), refused in one line before any work where it cannot be one,
    or with `write` one kernelgen can write in."""
    problem = write_problem(path) if write else directory_problem(path)
    if problem is not None and (write or problem.startswith("not a directory")):
        raise StorageError(f"{option} {path}: {problem}; give {option} a folder kernelgen may write in")
    return path


def check_file(option: str, path: Path) -> Path:
    """An output file a flag names (e.g. --plot x.png), refused before any work where its folder cannot be made."""
    if path.is_dir():
        raise StorageError(f"{option} {path}: is a directory; give {option} a file name")
    problem = write_problem(path.parent)
    if problem is not None:
        raise StorageError(f"{option} {path}: its folder {path.parent}: {problem}; write it elsewhere")
    return path


def tuning_dir() -> Path:
    """The user's tuning records (the shipped ones live in the package's cache/)."""
    return cache_dir() / "tuning"


def pdl_allowed() -> bool:
    return PDL.get() != "0"


def visible_devices() -> str | None:
    """CUDA_VISIBLE_DEVICES as set, an empty value included (it hides every GPU); None where unset."""
    return os.environ.get(VISIBLE_DEVICES.name)


def debug() -> bool:
    return DEBUG.get() == "1"


def sweep() -> bool:
    return SWEEP.get() == "1"


def bench() -> bool:
    return BENCH.get() == "1"


def use_tuned() -> bool:
    return TUNED.get() != "0"


def arch_list() -> str | None:
    return CUDA_ARCH_LIST.get()


def jobs() -> int | None:
    value = JOBS.get()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise KernelgenError(f"{JOBS.name}={value!r} is not a positive integer; unset it or set e.g. {JOBS.name}=8")
    return int(value)


def fuzz_examples(default: int) -> int:
    """KERNELGEN_FUZZ_EXAMPLES as a positive count, else `default` (the test's own)."""
    value = FUZZ_EXAMPLES.get()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise KernelgenError(f"{FUZZ_EXAMPLES.name}={value!r} is not a positive integer; unset it or set e.g. "
                             f"{FUZZ_EXAMPLES.name}=2000")
    return int(value)


def cuobjdump() -> str | None:
    """The cuobjdump to disassemble with: the one KERNELGEN_CUOBJDUMP names, else CUDA's on PATH, else the one
    NVIDIA's nvidia-cuda-cuobjdump wheel installs (the test extra's: nvidia/cu13/bin or, from a CUDA 12 wheel,
    nvidia/cuda_cuobjdump/bin), else None."""
    import importlib.util
    import os
    import shutil

    found = CUOBJDUMP.get() or shutil.which("cuobjdump")
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13", "cuda_cuobjdump"):
            candidate = Path(root) / sub / "bin" / "cuobjdump"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def cuda_home() -> Path:
    return Path(CUDA_HOME.get() or "")


@contextlib.contextmanager
def scope(**values: str | None) -> Iterator[None]:
    """Set knobs by Python name for a block (tests): scope(CACHE_DIR="/tmp/x")."""
    knobs = {name: globals()[name] for name in values}
    saved = {k.name: os.environ.get(k.name) for k in knobs.values()}
    try:
        for name, value in values.items():
            env = knobs[name].name
            if value is None:
                os.environ.pop(env, None)
            else:
                os.environ[env] = value
        yield
    finally:
        for env, old in saved.items():
            if old is None:
                os.environ.pop(env, None)
            else:
                os.environ[env] = old


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write a file atomically: a temporary file beside path, then a rename. It is created with the mode any new file
    gets (0666 less the umask), since mkstemp's 0600 would make a rewritten file unreadable to others."""
    import secrets

    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
