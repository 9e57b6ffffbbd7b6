"""YAML loading that remembers where every key and value came from (file:line:col).

A spec is untrusted text: it may come from a pull request or a download. Loading it is bounded in
size, nesting depth, alias use and expanded size, so a hostile file fails fast with one line instead
of a traceback, a hang or gigabytes of memory (YAML "billion laughs").
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import SpecError

Path_ = tuple[Any, ...]

# Limits on a spec file. Real specs are a few KiB, nest about 5 deep and use a handful of aliases.
MAX_SPEC_BYTES = 1 << 20  # 1 MiB of UTF-8 text
MAX_DEPTH = 64  # nested mappings/sequences
MAX_ALIASES = 100  # `*name` uses
MAX_NODES = 100_000  # values and keys once every alias is expanded
MAX_INT_CHARS = 32  # digits of one integer: bigger ones are never sizes, and cost quadratic time to read
MAX_SHOWN = 40  # characters of a spec value quoted in an error message

# Characters a spec may not contain: C0/C1 controls (tab, CR and LF excepted), DEL, lone surrogates,
# U+FFFE/U+FFFF, and the Unicode line/paragraph separators (YAML counts those as line breaks where
# editors do not, so every line number after them would be wrong).
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff\u2028\u2029]")
_CONTROL_NAMES = {0x00: "NUL", 0x07: "BEL", 0x08: "backspace", 0x0B: "vertical tab", 0x0C: "form feed",
                  0x1B: "ESC", 0x7F: "DEL", 0x85: "NEL", 0x2028: "line separator", 0x2029: "paragraph separator"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_INT_TAG = "tag:yaml.org,2002:int"
_VALUE_TAG = "tag:yaml.org,2002:value"  # what YAML 1.1 resolves a plain `=` to; SafeLoader cannot build it
_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


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


def quote(value: object) -> str:
    """A spec value as an error message shows it: repr() escapes newlines and control characters
    (the message stays one line) and long values are cut (the line stays readable)."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN - 3]}..."


def _short_tag(tag: str) -> str:
    """A tag as the spec spells it: 'tag:yaml.org,2002:int' -> '!!int'."""
    return tag.replace("tag:yaml.org,2002:", "!!", 1)


def _unsupported_tag(where: Where, tag: str) -> SpecError:
    return SpecError(f"{where}: tag {quote(_short_tag(tag))} is not supported in a spec; remove it "
                     "(a spec holds plain values)")


def _where(file: str, mark: yaml.Mark) -> Where:
    return Where(file, mark.line + 1, mark.column + 1)


def where_in_text(text: str, offset: int, file: str) -> Where:
    """file:line:col of a character offset, counting line breaks the way YAML marks do."""
    breaks = list(_LINE_BREAK.finditer(text, 0, offset))
    line_start = breaks[-1].end() if breaks else 0
    return Where(file, len(breaks) + 1, offset - line_start + 1)


def _char_name(char: str) -> str:
    code = ord(char)
    name = _CONTROL_NAMES.get(code, "control character" if code < 0xA0 else "character")
    return f"{name} (U+{code:04X})"


def _check_text(text: str, file: str) -> None:
    """Reject what no spec needs before YAML sees it: oversized files and invisible characters."""
    size = len(text.encode("utf-8", "surrogatepass")) if len(text) * 4 > MAX_SPEC_BYTES else len(text)
    if size > MAX_SPEC_BYTES:
        raise SpecError(f"{file}:1:1: spec is {size} bytes, over the limit of {MAX_SPEC_BYTES} bytes (1 MiB, "
                        f"MAX_SPEC_BYTES); a spec describes variants, not data: split it")
    bad = _FORBIDDEN.search(text)
    if bad:
        where = where_in_text(text, bad.start(), file)
        raise SpecError(f"{where}: {_char_name(bad.group())} is not allowed in a spec; delete it (a spec is plain text)")


class _GuardedLoader(yaml.SafeLoader):
    """SafeLoader whose composer counts as it goes: nesting depth, alias uses and the node count
    with aliases expanded. PyYAML composes recursively and expands nothing itself, so checking here,
    before any recursion gets deep and before anything is expanded, is cheap and always in time."""

    def __init__(self, text: str, file: str) -> None:
        super().__init__(text)
        self.file = file
        self.depth = 0
        self.alias_uses = 0
        self.expanded = 0  # nodes composed so far, each alias counting as the whole node it names
        self.open_anchors: set[str] = set()  # anchors whose node is still being composed
        self.anchor_sizes: dict[str, int] = {}

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._use_alias(event)
            return super().compose_node(parent, index)
        nests = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if nests and self.depth >= MAX_DEPTH:
            raise self._error(event, f"nesting deeper than {MAX_DEPTH} levels (MAX_DEPTH); "
                                     "a spec needs about 5: flatten this structure")
        anchor, before = event.anchor, self.expanded
        self._count(event, 1)
        if anchor is not None:
            self.open_anchors.add(anchor)
        self.depth += nests
        node = super().compose_node(parent, index)
        self.depth -= nests
        if anchor is not None:
            self.open_anchors.discard(anchor)
            self.anchor_sizes[anchor] = self.expanded - before
        return node

    def _use_alias(self, event: yaml.AliasEvent) -> None:
        self.alias_uses += 1
        if self.alias_uses > MAX_ALIASES:
            raise self._error(event, f"more than {MAX_ALIASES} alias uses (MAX_ALIASES); "
                                     "write the values out or use a 'defaults:' or 'matrix:' section")
        if event.anchor in self.open_anchors:
            raise self._error(event, f"alias *{event.anchor} is used inside the node &{event.anchor} it names "
                                     "(a recursive alias); refer to an anchor only after its node ends")
        self._count(event, self.anchor_sizes.get(event.anchor, 1))  # an unknown one the composer reports

    def _count(self, event: yaml.Event, nodes: int) -> None:
        self.expanded += nodes
        if self.expanded > MAX_NODES:
            raise self._error(event, f"more than {MAX_NODES} YAML values, counting keys and what each alias "
                                     "expands to (MAX_NODES); split the spec or use fewer aliases")

    def _error(self, event: yaml.Event, message: str) -> SpecError:
        return SpecError(f"{_where(self.file, event.start_mark)}: {message}")


class _Builder:
    def __init__(self, file: str) -> None:
        self.file = file
        self.values: dict[Path_, Where] = {}
        self.keys: dict[Path_, Where] = {}
        self.merged: set[Path_] = set()  # keys that came from a `<<:` merge and may be overridden
        self.merged_counts: dict[int, int] = {}  # per mapping node: an aliased node is flattened only once
        self.loader = yaml.SafeLoader("")

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.values[path] = _where(self.file, node.start_mark)
        if isinstance(node, yaml.CollectionNode) and node.tag not in _COLLECTION_TAGS:
            # Built as plain data, a tagged collection would silently lose its tag (!!set, !!python/...).
            raise _unsupported_tag(self.values[path], node.tag)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        return self._scalar(node)

    def _scalar(self, node: yaml.Node) -> Any:
        where = _where(self.file, node.start_mark)
        if node.tag == _INT_TAG and len(node.value) > MAX_INT_CHARS:
            raise SpecError(f"{where}: number {quote(node.value)} is longer than {MAX_INT_CHARS} characters "
                            f"(MAX_INT_CHARS); spec numbers are sizes: use a smaller one")
        if node.tag == _VALUE_TAG:
            return node.value
        if node.tag not in self.loader.yaml_constructors:  # `!foo`, `!!python/...`: PyYAML's words name no fix
            raise _unsupported_tag(where, node.tag)
        try:
            return self.loader.construct_object(node, deep=True)
        except Exception:  # noqa: BLE001 - PyYAML's scalar constructors fail on a forced tag in many ways:
            # `!!int abc` ValueError, `!!bool maybe` KeyError, `!!timestamp 64` AttributeError, `!!binary a$`
            # ConstructorError
            raise SpecError(f"{where}: {quote(node.value)} cannot be read as {_short_tag(node.tag)}; "
                            "remove the explicit tag or fix the value") from None

    def _merged_count(self, node: yaml.MappingNode) -> int:
        """How many leading pairs of node came from `<<:` merges (flattening moves them first)."""
        if id(node) not in self.merged_counts:
            explicit = sum(1 for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge")
            self.loader.flatten_mapping(node)  # `<<: *anchor` pairs now come first; explicit keys override them
            self.merged_counts[id(node)] = len(node.value) - explicit
        return self.merged_counts[id(node)]

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict[Any, Any]:
        merged = self._merged_count(node)
        out: dict[Any, Any] = {}
        for i, (key_node, value_node) in enumerate(node.value):
            where = _where(self.file, key_node.start_mark)
            key = self._scalar(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, (str, int, bool, float)):
                raise SpecError(f"{where}: mapping keys must be plain names")
            if key in out and i >= merged and path + (key,) not in self.merged:
                first = self.keys[path + (key,)]
                raise SpecError(f"{where}: duplicate key {quote(key)} (first given at line {first.line})")
            self.keys[path + (key,)] = where
            if i < merged:
                self.merged.add(path + (key,))
            else:
                self.merged.discard(path + (key,))
            out[key] = self.build(value_node, path + (key,))
        return out


def _compose(text: str, file: str) -> yaml.Node | None:
    loader = _GuardedLoader(text, file)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _yaml_error(exc: yaml.YAMLError, text: str, file: str) -> SpecError:
    """Any PyYAML error as one line: position first, then PyYAML's own words."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = _where(file, mark) if mark else Where(file, 1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
    elif isinstance(exc, yaml.reader.ReaderError):
        where, problem = where_in_text(text, exc.position, file), f"unacceptable character: {exc.reason}"
    else:
        where, problem = Where(file, 1, 1), str(exc) or type(exc).__name__
    return SpecError(f"{where}: YAML syntax error: {' '.join(problem.split())}")


def load_yaml(text: str, file: str) -> Located:
    """Parse text; a YAML syntax error or a broken limit becomes a one-line SpecError with its position."""
    _check_text(text, file)
    try:
        node = _compose(text, file)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, file) from None
    except RecursionError:  # cannot happen below MAX_DEPTH; kept so a deep file never shows a traceback
        raise SpecError(f"{file}:1:1: nesting too deep (over {MAX_DEPTH} levels, MAX_DEPTH); flatten the spec") from None
    if node is None:  # no document: the text is empty, blank or only comments
        return Located(None, file, {(): Where(file, 1, 1)}, {})
    builder = _Builder(file)
    try:
        data = builder.build(node, ())
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        where = _where(file, mark) if mark else Where(file, 1, 1)
        raise SpecError(f"{where}: {' '.join(str(exc.problem).split())}") from None
    return Located(data, file, builder.values, builder.keys)
