"""Pure tier: the version has one home (kernelgen/_version.py, which pyproject reads), and no stage imports it
back up from the package face."""
from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import pytest

import kernelgen
from kernelgen._version import __version__

pytestmark = pytest.mark.pure

PACKAGE = Path(kernelgen.__file__).parent
PYPROJECT = PACKAGE.parent / "pyproject.toml"
# Not yet switched to `from ._version import __version__` (owned elsewhere when this test was written; the
# lazy package face keeps their import cheap meanwhile). Empty this set once they are.
NOT_YET: set[str] = set()


def test_pyproject_reads_the_version_from_version_py() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads(PYPROJECT.read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kernelgen._version.__version__"}
    assert kernelgen.__version__ == __version__ == "0.1.0"


def test_the_installed_metadata_agrees() -> None:
    try:
        installed = importlib.metadata.version("kernelgen")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("kernelgen is not installed (pip install -e .)")
    assert installed == __version__


def _imports_version_from_the_face(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and any(a.name == "__version__" for a in node.names):
            if node.module in (None, "kernelgen"):  # `from .. import __version__`, `from kernelgen import ...`
                return True
    return False


def test_no_stage_imports_the_package_face_for_the_version() -> None:
    offenders = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                 if p.name != "__init__.py" and _imports_version_from_the_face(p)}
    assert offenders <= NOT_YET, sorted(offenders - NOT_YET)
