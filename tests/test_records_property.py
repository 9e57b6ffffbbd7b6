"""Pure tier, property: random corruptions of a valid record file (byte flips, truncation, deleted keys,
values of the wrong type, bad launch ids, empty choices, unsorted or negative bounds) never raise from the
op's record lookup, from export's, or from `kernelgen tune --show`; and the next write keeps every entry
that was usable, moves everything else to `.rejected.json`, and loses nothing. KERNELGEN_FUZZ_EXAMPLES
sets how many files each run tries (default 80)."""
from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kernelgen import cli, knobs, resources
from kernelgen.codegen.guards import violations
from kernelgen.runtime.export import plan_for_arch
from kernelgen.runtime.op import tuned_plan
from kernelgen.spec.parse import load_spec
from kernelgen.tune import records

pytestmark = pytest.mark.pure

EXAMPLES = knobs.fuzz_examples(80)
INDEXER = load_spec("dsv4_indexer")
VARIANTS = [INDEXER.variant(n) for n in ("dsv4_indexer_fp8_p64", "dsv4_indexer_bf16_p64", "dsv4_indexer_fp4_p64")]
NEW = INDEXER.variant("dsv4_indexer_fp8_p16")  # what the write after the corruption tunes
RTX = records.GpuInfo("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 188, 95, 1792)
FAST, SLOW = "t16.b4.v8.pf", "t8.b8.v8"
IDS = ["t8.b8", "t3.b8.v8", "", "x", "t8.b8.v8.zz", "t-8.b8.v8", "t0.b0.v0", "t99999999999.b1.v8", "t32.b2.v4.pf.pdl",
       "t128.b8.v8", FAST, SLOW]
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                 st.text(max_size=8), st.lists(st.integers(-5, 5), max_size=3), st.just({}), st.sampled_from(IDS))


def _record(v: Any) -> records.Record:
    return records.Record(v.name, v.content_key(), {records.instance_id(i): f"code-of-{i}" for i in (FAST, SLOW)}, RTX, (1, 64, 4096),
                          {FAST: {1: 1.0, 64: 1.5, 4096: 9.0}, SLOW: {1: 2.0, 64: 3.0, 4096: 4.0}}, {},
                          ((64, FAST), (4096, SLOW)))


def _valid_file() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        for v in VARIANTS:
            records.write(Path(tmp), _record(v))
        return dict(json.loads(records.record_file(Path(tmp), RTX).read_text()))


VALID = _valid_file()


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON tree (keys of objects, indices of lists), the root's children first."""
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    out = []
    for key, child in children:
        out += [prefix + (key,), *_paths(child, prefix + (key,))]
    return out


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


def _corrupt_tree(data: st.DataObject, raw: Any) -> None:
    """One structural fault: a key deleted, a value replaced (wrong type, bad id, out-of-order or negative
    bound), a choice emptied or reversed."""
    paths = _paths(raw)
    inside = [p for p in paths if p[0] == "variants" and len(p) > 1]
    if inside and data.draw(st.integers(0, 3)):  # mostly inside entries: the file stays readable
        paths = inside
    if not paths:
        return
    path = data.draw(st.sampled_from(paths))
    parent, key = _at(raw, path[:-1]), path[-1]
    kind = data.draw(st.sampled_from(["delete", "replace", "bound", "empty", "reverse"]))
    if kind == "delete":
        del parent[key]
    elif kind == "replace":
        parent[key] = data.draw(JUNK)
    elif kind == "bound":
        parent[key] = data.draw(st.integers(-10, 10**7))
    elif isinstance(parent[key], list):
        parent[key] = [] if kind == "empty" else parent[key][::-1]


def _corrupt_bytes(data: st.DataObject, text: bytes) -> bytes:
    if not (text and data.draw(st.booleans()) and data.draw(st.booleans())):  # mostly structural faults alone
        return text
    kind = data.draw(st.sampled_from(["flip", "truncate"]))
    at = data.draw(st.integers(0, len(text) - 1))
    if kind == "truncate":
        return text[:at]
    return text[:at] + bytes([text[at] ^ data.draw(st.integers(1, 255))]) + text[at + 1:]


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (a NaN the corruption put in equals itself)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _aside(path: Path) -> list[dict[str, Any]]:
    aside = records.rejected_file(path)
    return list(json.loads(aside.read_text())["rejected"]) if aside.is_file() else []


class _Said(logging.Handler):
    """Every message kernelgen logs during one example."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _show() -> int:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        return cli.main(["tune", "--show"])


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_corrupted_record_file_never_raises_and_the_next_write_loses_nothing(data: st.DataObject) -> None:
    raw = json.loads(json.dumps(VALID))
    for _ in range(data.draw(st.integers(0, 3))):
        _corrupt_tree(data, raw)
    content = _corrupt_bytes(data, json.dumps(raw, indent=1).encode())
    with tempfile.TemporaryDirectory() as tmp, knobs.scope(CACHE_DIR=tmp), \
            mock.patch.object(resources, "tuned_dir", lambda: Path(tmp) / "shipped"):  # none: a fast --show
        path = records.record_file(knobs.tuning_dir(), RTX)
        path.parent.mkdir(parents=True)
        path.write_bytes(content)
        said = _Said()
        logging.getLogger("kernelgen").addHandler(said)
        try:
            for v in VARIANTS:  # the JIT path's lookup and export's: a plan that runs, or the defaults
                for plan, _ in (tuned_plan(v, RTX), plan_for_arch(v, "sm_120a")):
                    assert not any(violations(v.with_launch(c)) for c in plan.configs)
            assert _show() == 0
        finally:
            logging.getLogger("kernelgen").removeHandler(said)
        assert all("\n" not in m for m in said.messages), said.messages  # each fault said in one line
        before = records.scan(path)
        assert before is not None
        event("whole file unusable" if before.gpu is None else "some entries rejected" if before.rejected
              else "every entry usable")
        records.write(knobs.tuning_dir(), _record(NEW))
        after = records.scan(path)
        assert after is not None and not after.rejected and NEW.content_key() in after.records
        aside = _aside(path)
        same_gpu = before.gpu is not None and before.gpu.matches(RTX)
        for key, record in before.records.items():
            if same_gpu:
                assert key in after.records and _same(after.records[key].to_json(), record.to_json()), key
            else:
                assert any(a["key"] == key and _same(a["entry"], record.to_json()) for a in aside), key
        for bad in before.rejected:
            assert any(a["key"] == bad.key and a["reason"] == bad.reason
                       and all(_same(a[k], c) for k, c in bad.content.items()) for a in aside), bad
        if before.gpu is None:
            assert len(aside) == 1 and ("text" in aside[0] or "base64" in aside[0])
