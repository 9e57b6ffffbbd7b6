"""Where shipped templates and specs live, in a checkout and after `pip install .`."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from .errors import SpecError

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
    path = Path(name_or_path)
    if path.is_file():
        return path
    bare = "/" not in name_or_path and path.suffix == ""
    shipped = spec_dir() / f"{name_or_path}.yaml"
    if bare and shipped.is_file():
        return shipped
    names = ", ".join(p.stem for p in shipped_specs())
    raise SpecError(f"{name_or_path}: no such spec file (shipped specs: {names})")
