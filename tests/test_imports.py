"""Pure tier: the package is a pipeline; imports run from later stages to earlier ones, never in a circle."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kernelgen

pytestmark = pytest.mark.pure

PACKAGE = Path(kernelgen.__file__).parent
# Stage order: a module may import its own stage or an earlier one. Deferred imports count too.
STAGES = ("errors", "knobs", "resources", "spec", "layout", "codegen", "build", "measure", "tune", "runtime", "bench",
          "cli")
RANK = {"errors": 0, "knobs": 0, "resources": 0, **{s: i for i, s in enumerate(STAGES)}}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """kernelgen modules imported anywhere in the file, as dotted names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("kernelgen"):
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("kernelgen"))
    return found


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else None


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: {t for t in _imports(p) if t in modules and t != m} for m, p in modules.items()}


def test_imports_run_from_later_stages_to_earlier_ones() -> None:
    backwards = []
    for module, targets in _graph().items():
        stage = _stage(module)
        if stage is None:  # kernelgen/__init__.py and __main__.py re-export the public API
            continue
        backwards += [f"{module} -> {t}" for t in targets if _stage(t) and RANK[_stage(t)] > RANK[stage]]
    assert not backwards


def test_no_import_cycles() -> None:
    graph = _graph()
    graph = {m: {t for t in ts if not t.endswith("__init__") and t != "kernelgen"} for m, ts in graph.items()}
    state: dict[str, int] = {}

    def visit(m: str, trail: list[str]) -> list[str] | None:
        state[m] = 1
        for t in graph.get(m, ()):
            if state.get(t) == 1:
                return trail + [m, t]
            if t not in state:
                found = visit(t, trail + [m])
                if found:
                    return found
        state[m] = 2
        return None

    for module in graph:
        if module not in state:
            cycle = visit(module, [])
            assert cycle is None, " -> ".join(cycle)
