"""YAML loading that remembers where every key and value came from (file:line:col)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import SpecError

Path_ = tuple[Any, ...]


@dataclass(frozen=True)
class Where:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Located:
    """Plain Python data plus the source position of each value and mapping key."""

    data: Any
    file: str
    values: dict[Path_, Where]
    keys: dict[Path_, Where]

    def at(self, path: Path_) -> Where:
        """Position of the value at path, falling back to the nearest enclosing value."""
        while path not in self.values and path:
            path = path[:-1]
        return self.values.get(path, Where(self.file, 1, 1))

    def key_at(self, path: Path_) -> Where:
        return self.keys.get(path) or self.at(path)


def _where(file: str, mark: yaml.Mark) -> Where:
    return Where(file, mark.line + 1, mark.column + 1)


class _Builder:
    def __init__(self, file: str) -> None:
        self.file = file
        self.values: dict[Path_, Where] = {}
        self.keys: dict[Path_, Where] = {}
        self.merged: set[Path_] = set()  # keys that came from a `<<:` merge and may be overridden
        self.loader = yaml.SafeLoader("")

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.values[path] = _where(self.file, node.start_mark)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        return self.loader.construct_object(node, deep=True)

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict[Any, Any]:
        explicit = sum(1 for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge")
        self.loader.flatten_mapping(node)  # `<<: *anchor` pairs now come first; explicit keys override them
        merged = len(node.value) - explicit
        out: dict[Any, Any] = {}
        for i, (key_node, value_node) in enumerate(node.value):
            key = self.loader.construct_object(key_node, deep=True)
            where = _where(self.file, key_node.start_mark)
            if not isinstance(key, (str, int, bool, float)):
                raise SpecError(f"{where}: mapping keys must be plain names")
            if key in out and i >= merged and path + (key,) not in self.merged:
                first = self.keys[path + (key,)]
                raise SpecError(f"{where}: duplicate key '{key}' (first given at line {first.line})")
            self.keys[path + (key,)] = where
            if i < merged:
                self.merged.add(path + (key,))
            else:
                self.merged.discard(path + (key,))
            out[key] = self.build(value_node, path + (key,))
        return out


def load_yaml(text: str, file: str) -> Located:
    """Parse text; a YAML syntax error becomes a one-line SpecError with its position."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _where(file, mark) if mark else Where(file, 1, 1)
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        raise SpecError(f"{where}: YAML syntax error: {problem}") from None
    if node is None:
        return Located({}, file, {(): Where(file, 1, 1)}, {})
    builder = _Builder(file)
    try:
        data = builder.build(node, ())
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        where = _where(file, mark) if mark else Where(file, 1, 1)
        raise SpecError(f"{where}: {exc.problem}") from None
    return Located(data, file, builder.values, builder.keys)
