"""Where shipped templates and specs live, in a checkout and after `pip install .`, and whether the
optional parts of the installation (matplotlib) are there."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from .errors import KernelgenError, SpecError

MAX_SUGGESTED_NAME = 200  # no spec name is longer, and difflib's time grows with the square of the length

_CHECKOUT = Path(__file__).resolve().parents[1]


def _data_dir(folder: str, package: str) -> Path:
    # In a checkout the folders sit beside the package; once installed they are subpackages.
    local = _CHECKOUT / folder
    if (local / "__init__.py").is_file():
        return local
    return Path(str(resources.files(package)))


def template_dir() -> Path:
    return _data_dir("templates", "kernelgen.templates")


def include_dir() -> Path:
    """The directory to pass as -I: headers are included as "kernelgen/<name>.cuh"."""
    return template_dir()


def spec_dir() -> Path:
    return _data_dir("specs", "kernelgen.specs")


def tuned_dir() -> Path:
    """The shipped, read-only tuning records (the repository's cache/ folder)."""
    return _data_dir("cache", "kernelgen.tuned")


def shipped_specs() -> list[Path]:
    return sorted(spec_dir().glob("*.yaml"))


def find_spec(name_or_path: str) -> Path:
    """An existing file path, or a bare shipped-spec name such as 'dsv4_indexer'."""
    import itertools
    import stat

    def mode_of(candidate: Path) -> int | None:
        try:
            return candidate.stat().st_mode
        except (OSError, ValueError):  # missing, a name too long, a NUL in it: no spec file there
            return None

    path = Path(name_or_path)
    mode = mode_of(path)
    if mode is not None and stat.S_ISREG(mode):
        return path
    if mode is not None and stat.S_ISDIR(mode):
        example = min(itertools.islice(path.glob("*.yaml"), 100), default=None)
        hint = f", e.g. {example}" if example else ""
        raise SpecError(f"{name_or_path}: is a directory, not a spec file; give one of its .yaml files{hint}")
    if mode is not None:  # reading a FIFO or a device could block or never end: refuse before opening it
        raise SpecError(f"{name_or_path}: is not a regular file (a pipe, socket or device); give a .yaml spec file")
    bare = "/" not in name_or_path and path.suffix == ""
    shipped = spec_dir() / f"{name_or_path}.yaml"
    shipped_mode = mode_of(shipped) if bare else None
    if shipped_mode is not None and stat.S_ISREG(shipped_mode):
        return shipped
    names = ", ".join(p.stem for p in shipped_specs())
    hint = _did_you_mean(name_or_path, bare)
    raise SpecError(f"{name_or_path}: no such spec file{hint} (shipped specs: {names})")


def _did_you_mean(name_or_path: str, bare: bool) -> str:
    """'; did you mean X?' for a misspelt spec: a shipped name, or (for a path) a .yaml file beside it."""
    import difflib
    import itertools

    path = Path(name_or_path)
    if len(path.name) > MAX_SUGGESTED_NAME:
        return ""
    choices = {p.stem: p.stem for p in shipped_specs()}  # compared by stem -> shown
    if not bare and path.parent.is_dir():  # a path: its neighbours first, where they share a stem
        choices.update({p.stem: str(p) for p in itertools.islice(path.parent.glob("*.yaml"), 1000)})
    best = difflib.get_close_matches(path.stem, list(choices), n=1, cutoff=0.75)
    return f"; did you mean {choices[best[0]]}?" if best else ""


def require_matplotlib(option: str) -> None:
    """Refuse `option` (e.g. --plot) before any work where matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise KernelgenError(f"{option} needs matplotlib ({exc}): pip install matplotlib "
                             "(or pip install 'kernelgen[plot]')") from None
