"""Pure tier: hostile specs fail fast with one SpecError line (file:line:col, what is wrong, the fix).

Control bytes, deep nesting, recursive aliases, alias bombs, huge matrices, long names, directories and
oversized files each have a test; a hypothesis fuzzer then checks that no other exception, no multi-line
message and no slow case escapes parse_spec. KERNELGEN_FUZZ_EXAMPLES sets how many specs each fuzz test
tries (default 500). How long each hostile case takes to be refused is measured, not asserted, by
tests/benchmarks/test_bench_spec_parse.py (KERNELGEN_BENCH=1).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelgen import knobs, resources
from kernelgen.cli import main
from kernelgen.errors import SpecError
from kernelgen.spec.parse import MAX_NAME_LENGTH, MAX_VARIANTS, Spec, load_spec, parse_spec
from kernelgen.spec.variant import AXES, FAMILY
from kernelgen.spec.yamlsrc import MAX_ALIASES, MAX_DEPTH, MAX_NODES, MAX_SPEC_BYTES

pytestmark = pytest.mark.pure

FUZZ_EXAMPLES = knobs.fuzz_examples(500)
ONE_LINE = re.compile(r"^[^:\n]+:\d+:\d+: ")
BASE = f"family: {FAMILY}\nname: t\n"


def _bomb(levels: int = 9, width: int = 9) -> str:
    """Billion laughs: each anchor lists `width` aliases of the previous one (width**levels values)."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return BASE + "\n".join(lines) + "\n"


def _matrix(**axes: Sequence[object]) -> str:
    return BASE + "matrix:\n" + "".join(f"  {a}: [{', '.join(map(str, v))}]\n" for a, v in axes.items())


MILLION = _matrix(head_dim=list(range(1, 101)), page_size=list(range(1, 101)), rope_dim=list(range(100)))
# name, text, the start of the expected message (after "s.yaml:")
HOSTILE = [
    ("nul", BASE + "variants: [{name: a\x00b}]\n", "3:20: NUL (U+0000) is not allowed in a spec; delete it"),
    ("esc", BASE + "description: \x1b[31mred\n", "3:14: ESC (U+001B) is not allowed in a spec"),
    ("c1", BASE + "description: a\x9bb\n", "3:15: control character (U+009B) is not allowed"),
    ("line separator", BASE + "description: a\u2028b\n", "3:15: line separator (U+2028) is not allowed"),
    ("deep flow", BASE + "defaults: " + "[" * 3000 + "]" * 3000 + "\n",
     f"3:{10 + MAX_DEPTH}: nesting deeper than {MAX_DEPTH} levels (MAX_DEPTH)"),
    ("deep block", BASE + "".join(" " * i + f"k{i}:\n" for i in range(300)),
     f"{3 + MAX_DEPTH}:{1 + MAX_DEPTH}: nesting deeper than {MAX_DEPTH} levels"),
    ("self alias", BASE + "defaults: &d {launch: *d}\n", "3:23: alias *d is used inside the node &d it names"),
    ("self alias in list", BASE + "x: &a [1, [*a]]\n", "3:12: alias *a is used inside the node &a it names"),
    ("alias bomb", _bomb(), f"8:10: more than {MAX_NODES} YAML values, counting keys and what each alias expands"),
    ("many aliases", BASE + "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n",
     f"4:{5 + 4 * MAX_ALIASES}: more than {MAX_ALIASES} alias uses (MAX_ALIASES)"),
    ("million variants", MILLION, ("4:3: matrix expands to 1000000 variants (100 head_dim x 100 page_size x 100 "
                                   f"rope_dim), over the limit of {MAX_VARIANTS} (MAX_VARIANTS)")),
    ("huge matrix list", _matrix(page_size=list(range(1, 5001))), "4:3: matrix expands to 5000 variants (5000 page_size)"),
    ("empty matrix", BASE + "matrix: {}\n", "3:9: matrix is empty: list at least one axis, e.g. store: [fp8_e4m3, bf16]"),
    ("null matrix", BASE + "matrix:\n", "3:8: matrix must be a mapping (key: value lines), got nothing"),
    ("long variant name", BASE + f"variants: [{{name: {'a' * 5000}}}]\n",
     f"3:19: variant name 'aaaa{'a' * 32}... is 5000 characters, over the limit of {MAX_NAME_LENGTH} (MAX_NAME_LENGTH)"),
    ("long spec name", f"family: {FAMILY}\nname: {'n' * 5000}\nvariants: [{{name: a}}]\n",
     f"2:7: name 'nnnn{'n' * 32}... is 5000 characters, over the limit of {MAX_NAME_LENGTH}"),
    ("long generated name", f"family: {FAMILY}\nname: {'n' * 90}\nmatrix: {{head_dim: [2147483647]}}\n",
     f"3:9: variant name '{'n' * 36}... is 102 characters, over the limit of {MAX_NAME_LENGTH} (MAX_NAME_LENGTH)"),
    ("newline in a name", BASE + 'variants: [{name: "a\\nb"}]\n', "3:19: variant name 'a\\nb' must be a C identifier"),
    ("huge hex int", BASE + f"variants: [{{name: a, head_dim: 0x{'f' * 20000}}}]\n",
     "3:32: number '0xffff"),
    ("sexagesimal int", BASE + f"variants: [{{name: a, head_dim: 1{':00' * 100000}}}]\n",
     "3:32: number '1:00:00"),
    ("bad explicit tag", BASE + "variants: [{name: a, hadamard: !!bool maybe}]\n",
     "3:32: 'maybe' cannot be read as !!bool; remove the explicit tag or fix the value"),
    ("bad timestamp tag", BASE + "tune: {buckets: [1, !!timestamp 64]}\n",
     "3:21: '64' cannot be read as !!timestamp; remove the explicit tag or fix the value"),
    ("python tag", BASE + "variants: [{name: !!python/object/apply:os.system echo}]\n",
     "3:19: tag '!!python/object/apply:os.system' is not supported in a spec; remove it"),
    ("unknown tag", BASE + "variants: [{name: a, store: !foo bf16}]\n",
     "3:29: tag '!foo' is not supported in a spec; remove it (a spec holds plain values)"),
    ("unknown tag on a key", BASE + "variants: [{name: a, !foo store: bf16}]\n", "3:22: tag '!foo' is not supported"),
    ("unknown tag on a list", BASE + "variants: !foo [{name: a}]\n",
     "3:11: tag '!foo' is not supported in a spec; remove it (a spec holds plain values)"),
    ("unknown local tag", "%TAG ! tag:example.com,2000:\n---\n" + BASE + "variants: [{name: !foo a}]\n",
     "5:19: tag 'tag:example.com,2000:foo' is not supported in a spec; remove it"),
    ("bad base64", BASE + "variants: [{name: a, hadamard: !!binary abc$}]\n",
     "3:32: 'abc$' cannot be read as !!binary; remove the explicit tag or fix the value"),
    ("python tag on a list", BASE + "variants: !!python/object/apply:os.system [echo hi]\n",
     "3:11: tag '!!python/object/apply:os.system' is not supported in a spec; remove it"),
    ("set tag", BASE + "variants: [!!set {name, store}]\n", "3:12: tag '!!set' is not supported"),
    ("description mapping", BASE + "description: {a: 1}\nvariants: [{name: a}]\n",
     "3:14: description must be a string, got a mapping; write it as text, in quotes if it holds ': ' or starts "
     "with { or ["),
    ("description list", BASE + "description: [a, b]\nvariants: [{name: a}]\n", "3:14: description must be a string, got a list"),
    ("description number", BASE + "description: 42\nvariants: [{name: a}]\n", "3:14: description must be a string, got a number"),
    ("description empty", BASE + "description:\nvariants: [{name: a}]\n", "3:13: description must be a string, got nothing"),
    ("head_dim 1e30 text", BASE + "variants: [{name: a, head_dim: 1e30}]\n",
     "3:32: head_dim must be an integer from 1 to 2147483647, got '1e30'"),
    ("head_dim 1e30 float", BASE + "variants: [{name: a, head_dim: 1.0e+30}]\n",
     "3:32: head_dim must be an integer from 1 to 2147483647, got 1e+30"),
    ("head_dim 10**30", BASE + f"variants: [{{name: a, head_dim: {10 ** 30}}}]\n",
     f"3:32: head_dim must be an integer from 1 to 2147483647, got {10 ** 30}"),
    ("page_size 2**62", BASE + f"variants: [{{name: a, page_size: {2 ** 62}}}]\n",
     f"3:33: page_size must be an integer from 1 to 2147483647, got {2 ** 62}"),
    ("page_size 2**31", BASE + f"variants: [{{name: a, page_size: {2 ** 31}}}]\n",
     f"3:33: page_size must be an integer from 1 to 2147483647, got {2 ** 31}"),
    ("page_size in a matrix", _matrix(page_size=[64, 2 ** 40]),
     f"4:19: page_size must be an integer from 1 to 2147483647, got {2 ** 40}"),
    ("rope_dim in defaults", BASE + "defaults: {rope_dim: 0x100000000}\nvariants: [{name: a}]\n",
     f"3:22: rope_dim must be an integer from 0 to 2147483647, got {2 ** 32}"),
    ("negative head_dim", BASE + "variants: [{name: a, head_dim: -128}]\n",
     "3:32: head_dim must be an integer from 1 to 2147483647, got -128"),
    ("bool head_dim", BASE + "variants: [{name: a, head_dim: yes}]\n",
     "3:32: head_dim must be an integer from 1 to 2147483647, got True"),
    ("two documents", BASE + "variants: [{name: a}]\n---\nx: 1\n", "4:1: YAML syntax error: but found another document"),
    ("oversized", BASE + "#" * MAX_SPEC_BYTES,
     f"1:1: spec is {MAX_SPEC_BYTES + len(BASE)} bytes, over the limit of {MAX_SPEC_BYTES} bytes (1 MiB, MAX_SPEC_BYTES)"),
]


def error_of(text: str) -> str:
    """The SpecError parse_spec raises for text, checked to be one file:line:col line."""
    with pytest.raises(SpecError) as info:
        parse_spec(text, "s.yaml")
    message = str(info.value)
    assert len(message.splitlines()) == 1 and ONE_LINE.match(message), message
    return message


@pytest.mark.parametrize("text, expected", [pytest.param(t, e, id=n) for n, t, e in HOSTILE])
def test_hostile_spec_is_refused_with_one_line(text: str, expected: str) -> None:
    assert error_of(text).startswith(f"s.yaml:{expected}")


TOO_MANY_LISTED = BASE + "variants: [" + ", ".join(f"{{name: v{i}}}" for i in range(MAX_VARIANTS + 1)) + "]\n"


def test_too_many_listed_variants() -> None:
    message = error_of(TOO_MANY_LISTED)
    assert message.startswith(f"s.yaml:3:11: spec defines {MAX_VARIANTS + 1} variants (0 from the matrix), over "
                              f"the limit of {MAX_VARIANTS} (MAX_VARIANTS); split it into several specs")


def test_limits_are_inclusive() -> None:
    """Exactly at each limit still loads: the limits refuse hostile files, not big honest ones."""
    nested = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)  # defaults: [...] is the MAX_DEPTH-th level
    assert "defaults must be a mapping" in error_of(BASE + f"defaults: {nested}\n")
    aliases = BASE + "a: &a 1\nb: [" + ", ".join(["*a"] * MAX_ALIASES) + "]\n"
    assert "unknown top-level key 'a'" in error_of(aliases)
    spec = parse_spec(_matrix(head_dim=list(range(1, 65)), page_size=list(range(1, 65))), "s.yaml")
    assert len(spec.variants) == MAX_VARIANTS == 64 * 64
    name = "v" * MAX_NAME_LENGTH
    assert parse_spec(BASE + f"variants: [{{name: {name}}}]\n", "s.yaml").variants[0].name == name


def test_aliased_mapping_with_a_merge_is_read_the_same_each_time() -> None:
    """A mapping with a `<<:` merge is flattened once, so where an alias repeats it, the key it overrides
    is no duplicate."""
    spec = parse_spec(BASE + "defaults: {launch: &l {<<: {vec: 4, pdl: true}, vec: 8}}\n"
                             "variants: [{name: a}, {name: b, launch: *l}]\n", "s.yaml")
    assert [(v.launch.vec, v.launch.pdl) for v in spec.variants] == [(8, True), (8, True)]


def test_directory_is_not_a_spec_file(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(BASE + "variants: [{name: a}]\n")
    for loader in (load_spec, resources.find_spec):
        with pytest.raises(SpecError) as info:
            loader(str(tmp_path))
        message = str(info.value)
        assert "\n" not in message
        assert message == (f"{tmp_path}: is a directory, not a spec file; give one of its .yaml files, "
                           f"e.g. {tmp_path / 'x.yaml'}")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_special_file_is_refused_before_reading() -> None:
    with pytest.raises(SpecError, match=r"^/dev/zero: is not a regular file"):
        load_spec("/dev/zero")  # reading it would never end


def test_oversized_file_is_refused_reading_one_mib(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(BASE.encode() + b"#" * (4 * MAX_SPEC_BYTES))
    with pytest.raises(SpecError) as info:
        load_spec(big)
    assert str(info.value) == (f"{big}:1:1: spec file is over the limit of {MAX_SPEC_BYTES} bytes (1 MiB, "
                               "MAX_SPEC_BYTES); a spec describes variants, not data: split it")


def test_non_utf8_byte_is_located(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(BASE.encode() + "description: é ".encode() + b"caf\xe9\n")
    with pytest.raises(SpecError) as info:
        load_spec(bad)
    assert str(info.value) == f"{bad}:3:19: spec is not UTF-8 text (byte 0xe9 at offset 57); save it as UTF-8"


# -- the command line: one `error:` line, exit 1, no traceback, nothing written -------------------------------------

CLI_FILES = {
    "nul.yaml": BASE.encode() + b"variants: [{name: a\x00}]\n",
    "esc.yaml": BASE.encode() + b"description: \x1b[2J\n",
    "deep.yaml": (BASE + "defaults: " + "[" * 3000 + "]" * 3000 + "\n").encode(),
    "self.yaml": (BASE + "defaults: &d {launch: *d}\n").encode(),
    "bomb.yaml": _bomb().encode(),
    "million.yaml": MILLION.encode(),
    "empty.yaml": (BASE + "matrix: {}\n").encode(),
    "long.yaml": (BASE + f"variants: [{{name: {'a' * 5000}}}]\n").encode(),
    "big.yaml": BASE.encode() + b"#" * (MAX_SPEC_BYTES + 1),
    "desc.yaml": (BASE + "description: {a: 1}\nvariants: [{name: a}]\n").encode(),
    "tag.yaml": (BASE + "variants: [{name: a, store: !foo bf16}]\n").encode(),
    "huge_page.yaml": (BASE + f"variants: [{{name: a, page_size: {2 ** 62}}}]\n").encode(),
    "main.yaml": (BASE + "variants: [{name: main}]\n").encode(),
}


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture
def hostile_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hostile files in a private working directory that is also HOME and every cache, so any write shows."""
    for name, data in CLI_FILES.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "a_dir").mkdir()
    for env in ("HOME", "XDG_CACHE_HOME", "KERNELGEN_CACHE_DIR"):
        monkeypatch.setenv(env, str(tmp_path))
    monkeypatch.chdir(tmp_path)  # short relative names keep each message inside the console's width
    return tmp_path


@pytest.mark.parametrize("command", ["list", "check"])
@pytest.mark.parametrize("name", [*CLI_FILES, "a_dir"])
def test_cli_hostile_file_prints_one_error_line(hostile_dir: Path, capsys: pytest.CaptureFixture[str],
                                                command: str, name: str) -> None:
    before = _snapshot(hostile_dir)
    assert main([command, name]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    position = "" if name == "a_dir" else r"\d+:\d+:"
    assert re.match(rf"^error: {re.escape(name)}:{position} \S", lines[0]), lines[0]
    assert captured.out == ""
    assert _snapshot(hostile_dir) == before


# -- the fuzzer -----------------------------------------------------------------------------------------------------

FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=timedelta(seconds=2), database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_spec_or_one_line_error(text: str) -> None:
    """parse_spec's whole contract on hostile input: a Spec within the limits, or one positioned line."""
    try:
        spec = parse_spec(text, "fuzz.yaml")
    except SpecError as exc:
        message = str(exc)
        assert len(message.splitlines()) == 1 and "\n" not in message, repr(message)
        assert ONE_LINE.match(message), repr(message)
        return
    assert isinstance(spec, Spec)
    assert 1 <= len(spec.variants) <= MAX_VARIANTS
    assert all(len(v.name) <= MAX_NAME_LENGTH for v in spec.variants)


VALID = [
    (resources.spec_dir() / "example.yaml").read_text(),
    BASE + "defaults: &d {head_dim: 256, launch: {vec: 4}}\nmatrix:\n  store: [fp8_e4m3, bf16]\n  page_size: [1, 64]\n"
    "overrides:\n  t_bf16_p64: {launch: {tokens_per_block: 16}}\nvariants:\n  - {<<: *d, name: extra, store: fp4_e2m1}\n"
    "tune:\n  buckets: [1, 16, 256]\n  vec: [4, 8]\n",
]
# Fragments a mutation splices in: YAML syntax, tags, anchors, odd numbers, control and exotic characters,
# names with path separators and shell metacharacters.
FRAGMENTS = [
    "&a ", "*a", "*d", "<<: ", "<<: *d", "[", "]", "{", "}", ": ", ", ", "- ", "? ", "\n", "\n  ", "\n    - ", "\t",
    "'", '"', "|", ">-", "#", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "---\n", "...\n", "!", "!!int ", "!!bool ",
    "!!float ", "!!binary ", "!!set ", "!!omap ", "!!timestamp ", "!!python/object:os.system ", "!foo ", "~", "null",
    "-.inf", ".nan", "1e999", "-0", "0o17", "0b101", "0x" + "f" * 40, "1:2:3:4", "9" * 40, "2001-02-03", "\x00",
    "\x1b", "\x7f", "\x85", "\u2028", "\ufeff", "\ud800", "\uffff", "é", "名前", "🙂", "\u202e", "a" * 300,
    "../../etc/passwd", "a/b", "C:\\x", "$(rm -rf /)", "`id`", "; ls", "|| true", "name", "matrix", "variants",
    "store", "page_size", "head_dim", "launch", "overrides", "tune", "buckets", "fp8_e4m3", "bf16", "true", "4096",
]
fragments = st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8))


@st.composite
def mutated_specs(draw: st.DrawFn) -> str:
    """A valid spec with a few random inserts, deletions, replacements and duplications."""
    text = draw(st.sampled_from(VALID))
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        if op == "insert":
            text = text[:i] + draw(fragments) + text[i:]
        elif op == "delete":
            text = text[:i] + text[j:]
        elif op == "replace":
            text = text[:i] + draw(fragments) + text[j:]
        else:
            text = text[:j] + text[i:j] * draw(st.integers(2, 50)) + text[j:]
    return text


def mostly(good: st.SearchStrategy[object], bad: st.SearchStrategy[object], odds: int = 9) -> st.SearchStrategy[object]:
    """`good` odds times in odds + 1: right often enough to reach later checks, wrong often enough to test them."""
    return st.integers(0, odds).flatmap(lambda i: bad if i == odds else good)  # hypothesis favours 0: make it good


AXIS_VALUES = [c for _, choices in AXES.values() if choices for c in choices]
identifiers = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,20}", fullmatch=True)
hostile_names = st.one_of(
    st.text(max_size=20), st.integers(), st.none(), st.booleans(),
    st.sampled_from(["int", "__x", "_X", "a" * (MAX_NAME_LENGTH + 1), "a" * MAX_NAME_LENGTH, "a/b", "../x", "/etc/x",
                     "x;rm -rf ~", "$(id)", "`id`", "a b", "", "9a", "a\x00b", "a\nb", "a\x1b[2J", "名前", "C:\\x"]),
)
names = mostly(identifiers, hostile_names)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10 ** 40), 10 ** 40), st.integers(-4, 5000),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30), st.sampled_from(AXIS_VALUES), hostile_names,
)
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=5)
                      | st.dictionaries(st.one_of(identifiers, st.text(max_size=8), st.integers()), kids, max_size=5),
                      max_leaves=25)


def axis_values(axis: str) -> st.SearchStrategy[object]:
    """A value the axis takes (sometimes out of range), else anything at all."""
    kind, choices = AXES[axis]
    if choices:
        good: st.SearchStrategy[object] = st.sampled_from(choices)
    elif kind is bool:
        good = st.booleans()
    else:
        good = st.integers(-2, 4096)
    return mostly(good, values)


launch_tables = mostly(st.dictionaries(st.sampled_from(["threads_per_token", "tokens_per_block", "vec", "prefetch",
                                                        "pdl", "bogus"]),
                                       st.one_of(st.integers(-1, 5000), st.booleans(), scalars), max_size=4), values)


@st.composite
def axis_tables(draw: st.DrawFn, with_name: bool) -> dict[object, object]:
    """Settings for defaults, an override or a listed variant: mostly real axes, sometimes junk keys."""
    keys = draw(st.lists(mostly(st.sampled_from([*AXES, "launch"]), names, 30), max_size=5, unique_by=repr))
    table = {k: draw(launch_tables if k == "launch" else axis_values(k) if k in AXES else values) for k in keys}
    if with_name and draw(mostly(st.just(True), st.booleans())):
        table["name"] = draw(names)
    return table


@st.composite
def matrices(draw: st.DrawFn) -> object:
    """A matrix of mostly real axes, each a short list of mostly valid values (and duplicates)."""
    axes = draw(st.lists(mostly(st.sampled_from(list(AXES)), names, 30), min_size=1, max_size=5, unique_by=repr))
    return {a: draw(mostly(st.lists(axis_values(a) if a in AXES else values, min_size=1, max_size=8), values))
            for a in axes}


SECTIONS: dict[str, st.SearchStrategy[object]] = {
    "description": values,
    "defaults": mostly(axis_tables(False), values),
    "matrix": mostly(matrices(), values),
    "overrides": mostly(st.dictionaries(names, axis_tables(False), max_size=3), values),
    "variants": mostly(st.lists(mostly(axis_tables(True), values), min_size=1, max_size=6), values),
    "tune": mostly(st.dictionaries(st.sampled_from(["vec", "pdl", "buckets", "block_threads", "x"]),
                                   mostly(st.lists(st.one_of(st.integers(-1, 1 << 25), st.booleans()), max_size=6),
                                          values), max_size=3), values),
}


@st.composite
def specs_as_data(draw: st.DrawFn) -> dict[object, object]:
    """A spec's top-level mapping: family and name, mostly a matrix or variants, other sections at random."""
    spec: dict[object, object] = {"family": draw(mostly(st.just(FAMILY), values)), "name": draw(names)}
    sections = draw(st.lists(st.sampled_from(list(SECTIONS)), unique=True, max_size=len(SECTIONS)))
    if draw(mostly(st.just(True), st.just(False))) and not {"matrix", "variants"} & set(sections):
        sections.append(draw(st.sampled_from(["matrix", "variants"])))
    for section in sections:
        spec[section] = draw(SECTIONS[section])
    if draw(mostly(st.just(False), st.just(True), 30)):
        spec[draw(names)] = draw(values)  # an unknown section
    return spec


@st.composite
def dumped_specs(draw: st.DrawFn) -> str:
    """Spec-shaped data of wrong types, huge numbers and odd strings, written out as YAML."""
    data = draw(mostly(specs_as_data(), values))
    return yaml.safe_dump(data, allow_unicode=draw(st.booleans()), sort_keys=False,
                          default_flow_style=draw(st.sampled_from([None, True, False])),
                          width=draw(st.sampled_from([80, 10 ** 6])))


@st.composite
def adversarial_specs(draw: st.DrawFn) -> str:
    """Hand-shaped attacks with random sizes: nesting, alias chains, huge or empty matrices, bad characters."""
    kind = draw(st.sampled_from(["deep", "bomb", "self", "aliases", "matrix", "empty", "name", "char", "listed"]))
    # Sizes around the limits and a few far past them; the biggest honest-looking cases (4096 listed
    # variants, 3000-deep nesting) spend their time in PyYAML and have their own tests above.
    n = draw(st.one_of(st.integers(0, 300), st.sampled_from([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_ALIASES,
                                                             MAX_ALIASES + 1, MAX_NAME_LENGTH + 1, 1000])))
    if kind == "deep":
        open_, close = draw(st.sampled_from([("[", "]"), ("{a: ", "}"), ("- ", "")]))  # "- - 1": block lists
        return BASE + "defaults:\n  " + open_ * n + "1" + close * n * draw(st.sampled_from([0, 1])) + "\n"
    if kind == "bomb":
        return _bomb(draw(st.integers(1, 12)), draw(st.integers(1, 12)))
    if kind == "self":
        return BASE + draw(st.sampled_from(["x: &a [*a]\n", "x: &a {b: *a}\n", "x: &a {<<: *a}\n",
                                            "x: &a [1, &b [*a, *b]]\n", "defaults: &a\n  launch: *a\n"]))
    if kind == "aliases":
        return BASE + "a: &a [1, 2]\nb: [" + ", ".join(["*a"] * n) + "]\n"
    if kind == "matrix":
        sizes = draw(st.lists(st.integers(1, 300), min_size=1, max_size=6))
        axes = dict(zip(["head_dim", "page_size", "rope_dim", "store", "hadamard", "norm"], sizes))
        return _matrix(**{a: list(range(1, k + 1)) for a, k in axes.items()})
    if kind == "empty":
        return BASE + draw(st.sampled_from(["matrix: {}\n", "matrix: []\n", "matrix:\n", "matrix: {store: []}\n",
                                            "matrix: {store: {}}\n", "variants: []\n", "variants: {}\n", ""]))
    if kind == "name":
        name = draw(st.sampled_from(["a", "/", "$", ";", "`", " ", "é", "\\", ".", "-", "\ufeff"])) * n
        return BASE + f"variants: [{{name: {yaml.safe_dump(name, width=10 ** 7).split(chr(10))[0]}}}]\n"
    if kind == "char":
        text = draw(st.sampled_from(VALID))
        i = draw(st.integers(0, len(text)))
        return text[:i] + draw(st.characters(max_codepoint=0x10FFFF)) + text[i:]
    return BASE + "variants: [" + ", ".join(f"{{name: v{i}}}" for i in range(n)) + "]\n"


@FUZZ
@given(mutated_specs())
def test_fuzz_mutated_specs(text: str) -> None:
    assert_spec_or_one_line_error(text)


@FUZZ
@given(dumped_specs())
def test_fuzz_wrong_types_and_values(text: str) -> None:
    assert_spec_or_one_line_error(text)


@FUZZ
@given(adversarial_specs())
def test_fuzz_adversarial_shapes(text: str) -> None:
    assert_spec_or_one_line_error(text)
