"""Pure tier: tuning records you can trust. A record file is read entry by entry: an invalid entry (bad
schema or types, a launch id that does not parse or breaks a guard, bucket bounds that are not positive and
increasing, an empty or inconsistent choice) is skipped with one warning naming the file, the entry and
why, and the lookup falls back (user record -> shipped record -> the default launch). A write keeps every
valid entry it did not replace and moves the rest aside to `<name>.rejected.json`, never deletes them."""
from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from typing import Any, Callable

import pytest

from kernelgen import knobs, resources
from kernelgen.cli import main
from kernelgen.codegen.guards import violations
from kernelgen.codegen.launch import default_plan
from kernelgen.errors import TuningError
from kernelgen.runtime.op import tuned_plan
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch
from kernelgen.tune import records
from kernelgen.tune.gpu import GpuInfo

pytestmark = pytest.mark.pure

INDEXER = load_spec("dsv4_indexer")
V = INDEXER.variant("dsv4_indexer_fp8_p64")
W = INDEXER.variant("dsv4_indexer_bf16_p64")
X = INDEXER.variant("dsv4_indexer_fp4_p64")
H200 = GpuInfo("NVIDIA H200", "9.0", 132, 140, 4800)
RTX = GpuInfo("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 188, 95, 1792)  # nothing shipped
FAST, SLOW = "t16.b4.v8.pf", "t8.b8.v8"


def _record(v: Any, gpu: GpuInfo, choice: tuple[tuple[int, str], ...] = ((64, FAST), (4096, SLOW))) -> records.Record:
    return records.Record(v.name, v.content_key(), {i: f"code-of-{i}" for i in (FAST.removesuffix(".pf"), SLOW)}, gpu, (1, 64, 4096),
                          {FAST: {1: 1.0, 64: 1.5, 4096: 9.0}, SLOW: {1: 2.0, 64: 3.0, 4096: 4.0}}, {}, choice)


def _file_with(directory: Path, gpu: GpuInfo, edit: Callable[[dict[str, Any]], None], *variants: Any) -> Path:
    """A record file holding valid records of `variants` (default V and W), then V's entry edited in place."""
    for v in variants or (V, W):
        records.write(directory, _record(v, gpu))
    path = records.record_file(directory, gpu)
    raw = json.loads(path.read_text())
    edit(raw["variants"][V.content_key()])
    path.write_text(json.dumps(raw, indent=1))
    return path


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(entry: dict[str, Any]) -> None:
        entry[key] = value
    return edit


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda entry: entry.pop(key)


# -- reading: an invalid entry is skipped, named, and the lookup falls back -------------------------------------

def test_an_empty_choice_falls_back_to_the_shipped_record_then_the_defaults(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """It gave an IndexError from plan_routes in kernelgen.load (and in export)."""
    from kernelgen.runtime.export import plan_for_arch

    shipped = records.write(tmp_path / "shipped", _record(V, H200))  # current for this template, as shipped ones are
    monkeypatch.setattr(resources, "tuned_dir", lambda: tmp_path / "shipped")
    with knobs.scope(CACHE_DIR=str(tmp_path)):
        user = _file_with(knobs.tuning_dir(), H200, _set("choice", []))
        _file_with(knobs.tuning_dir(), RTX, _set("choice", []))
        with caplog.at_level(logging.WARNING):
            assert tuned_plan(V, H200)[1] == str(shipped), "the shipped H200 record serves instead"
            assert tuned_plan(V, RTX) == (default_plan(V), "defaults")
            assert plan_for_arch(V, "sm_120a") == (default_plan(V), "defaults")
        assert tuned_plan(W, H200)[1] == str(user), "the file's other entry is still used"
    said = [r.getMessage() for r in caplog.records if str(user) in r.getMessage()]
    assert said and V.name in said[0] and V.content_key() in said[0] and "choice is empty" in said[0]
    assert all("\n" not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("bad_id, why", [
    ("t8.b8", "'t8.b8' is not a launch id"),
    ("t8.b8.v8.fast", "'t8.b8.v8.fast' is not a launch id"),
    (8, "launch id must be a string"),
])
def test_a_launch_id_that_does_not_parse_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                    bad_id: Any, why: str) -> None:
    """'t8.b8' gave a ValueError traceback."""
    path = _file_with(tmp_path, RTX, _set("choice", [[64, FAST], [4096, bad_id]]))
    with caplog.at_level(logging.WARNING):
        assert records.lookup([tmp_path], RTX, V) is None
    assert records.lookup([tmp_path], RTX, W) is not None
    assert str(path) in caplog.text and why in caplog.text and V.name in caplog.text


def test_a_launch_id_that_breaks_a_guard_is_blamed_on_the_record_not_on_the_spec(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """'t3.b8.v8' parsed, reached the build and was reported as a guard violation in the user's spec file."""
    with knobs.scope(CACHE_DIR=str(tmp_path)):
        path = _file_with(knobs.tuning_dir(), RTX, _set("choice", [[64, "t3.b8.v8"], [4096, SLOW]]))
        with caplog.at_level(logging.WARNING):
            plan, where = tuned_plan(V, RTX)
    assert (plan, where) == (default_plan(V), "defaults")
    assert not any(violations(V.with_launch(c)) for c in plan.configs)
    message = next(r.getMessage() for r in caplog.records if str(path) in r.getMessage())
    assert "t3.b8.v8" in message and "[guard threads_per_token_pow2]" in message and V.name in message
    assert "dsv4_indexer.yaml" not in message


@pytest.mark.parametrize("edit, why", [
    (_set("choice", [[-5, FAST], [4096, SLOW]]), "bound -5"),
    (_set("choice", [[0, FAST], [4096, SLOW]]), "bound 0"),
    (_set("choice", [[4096, SLOW], [64, FAST]]), "increase"),
    (_set("choice", [[64, FAST], [64, SLOW]]), "increase"),
    (_set("choice", [[100, FAST], [4096, SLOW]]), "not one of the record's buckets"),
    (_set("choice", [[64.5, FAST], [4096, SLOW]]), "bound 64.5 must be a positive integer"),
    (_set("choice", [[True, FAST], [4096, SLOW]]), "bound True must be a positive integer"),
    (_set("choice", [[64, FAST, 1], [4096, SLOW]]), "[bound, launch id]"),
    (_set("choice", "t8.b8.v8"), "choice must be a list"),
    (_set("buckets", [64, 1, 4096]), "increase"),
    (_set("buckets", [-1, 64, 4096]), "bucket -1"),
    (_set("buckets", []), "buckets is empty"),
    (_set("buckets", "1,64"), "buckets must be a list"),
    (_set("timings_us", {FAST: {"one": 1.0}}), "'one'"),
    (_set("timings_us", {FAST: {"1": "fast"}}), "must be a non-negative number"),
    (_set("timings_us", {"t8.b8": {"1": 1.0}}), "'t8.b8' is not a launch id"),
    (_set("failures", {SLOW: "wrong: 3 codes differ"}), "recorded as failed"),
    (_set("failures", []), "failures must be an object"),
    (_set("variant", 7), "variant must be a string"),
    (_drop("code"), "missing 'code'"),
    (_drop("timings_us"), "missing 'timings_us'"),
])
def test_each_kind_of_invalid_entry_is_skipped_with_its_reason(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                edit: Callable[[dict[str, Any]], None],
                                                                why: str) -> None:
    """Negative, zero, unsorted or unmeasured bounds were accepted silently; a wrong type made the whole
    file 'corrupt'."""
    path = _file_with(tmp_path, RTX, edit)
    with caplog.at_level(logging.WARNING):
        assert records.lookup([tmp_path], RTX, V) is None
        found = records.lookup([tmp_path], RTX, W)
    assert found is not None and found[1] == path, "one bad entry does not hide the file's others"
    assert str(path) in caplog.text and why in caplog.text, caplog.text


def test_an_entry_that_is_not_an_object_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _file_with(tmp_path, RTX, lambda entry: None)
    raw = json.loads(path.read_text())
    raw["variants"][V.content_key()] = [1, 2]
    path.write_text(json.dumps(raw))
    with caplog.at_level(logging.WARNING):
        assert records.lookup([tmp_path], RTX, V) is None
    assert records.lookup([tmp_path], RTX, W) is not None and "must be an object" in caplog.text


def test_an_invalid_entry_is_reported_once_per_process(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _file_with(tmp_path, RTX, _set("choice", []))
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            records.lookup([tmp_path], RTX, V)
    assert caplog.text.count("choice is empty") == 1


# -- writing: nothing that was not replaced is lost -------------------------------------------------------------

def _rejected(path: Path) -> list[dict[str, Any]]:
    aside = records.rejected_file(path)
    assert aside.name == path.name.removesuffix(".json") + ".rejected.json"
    return list(json.loads(aside.read_text())["rejected"])


def test_a_write_keeps_the_valid_entries_and_moves_the_invalid_one_aside(tmp_path: Path) -> None:
    """One malformed entry made the whole file 'ignored', and the next write kept only its new record."""
    path = _file_with(tmp_path, RTX, _drop("timings_us"))
    bad = json.loads(path.read_text())["variants"][V.content_key()]
    records.write(tmp_path, _record(X, RTX))
    kept = json.loads(path.read_text())["variants"]
    assert set(kept) == {W.content_key(), X.content_key()}
    assert records.lookup([tmp_path], RTX, W) is not None and records.lookup([tmp_path], RTX, X) is not None
    [aside] = _rejected(path)
    assert aside["key"] == V.content_key() and aside["variant"] == V.name and aside["entry"] == bad
    assert "missing 'timings_us'" in aside["reason"] and aside["from"] == path.name
    records.write(tmp_path, _record(V, RTX))  # a fresh tune of the variant replaces it; the rejected entry stays aside
    assert records.lookup([tmp_path], RTX, V) is not None and len(_rejected(path)) == 1
    assert records.all_records(tmp_path) and all(not p.name.endswith(".rejected.json")
                                                 for p, _, _ in records.all_records(tmp_path))


@pytest.mark.parametrize("content", [b'{"schema": 1, "gpu": {"name": "NVIDIA', b"\xff\xfe garbage \x00",
                                     b'{"schema": 99, "gpu": {}, "variants": {"k": {}}}', b"[1, 2]"])
def test_an_unreadable_file_is_moved_aside_whole_not_deleted(tmp_path: Path, content: bytes) -> None:
    path = records.record_file(tmp_path, RTX)
    path.write_bytes(content)
    records.write(tmp_path, _record(V, RTX))
    assert records.lookup([tmp_path], RTX, V) is not None
    [aside] = _rejected(path)
    assert aside["key"] == "" and aside["reason"]
    kept = aside.get("text", "").encode() if "text" in aside else __import__("base64").b64decode(aside["base64"])
    assert kept == content


def test_entries_of_another_board_in_the_same_file_are_moved_aside(tmp_path: Path) -> None:
    """An H200 NVL and an H200 SXM share a file name (the slug has no bandwidth); a write from the other
    board used to drop every entry of the first."""
    nvl = GpuInfo("NVIDIA H200", "9.0", 132, 140, 3350)
    path = _file_with(tmp_path, H200, lambda entry: None)
    records.write(tmp_path, _record(X, nvl))
    assert set(json.loads(path.read_text())["variants"]) == {X.content_key()}
    aside = _rejected(path)
    assert {a["key"] for a in aside} == {V.content_key(), W.content_key()}
    assert all("another GPU" in a["reason"] for a in aside)


def test_a_write_that_would_leave_an_invalid_record_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    records.write(tmp_path, _record(W, RTX))
    before = records.record_file(tmp_path, RTX).read_bytes()
    with pytest.raises(TuningError, match=f"{V.name}: record not written: choice is empty"):
        records.write(tmp_path, _record(V, RTX, choice=()))
    assert records.record_file(tmp_path, RTX).read_bytes() == before


def test_a_rewritten_record_file_has_the_mode_of_a_normally_created_file(tmp_path: Path) -> None:
    """mkstemp created the file 0600 while every other file kernelgen writes follows the umask."""
    old = os.umask(0o022)
    try:
        records.write(tmp_path, _record(V, RTX))
        records.write(tmp_path, _record(W, RTX))
        _file_with(tmp_path / "b", RTX, _drop("code"))
        records.write(tmp_path / "b", _record(X, RTX))
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(old)
    plain = stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)
    assert plain == 0o644
    for path in (records.record_file(tmp_path, RTX), records.record_file(tmp_path / "b", RTX)):
        assert stat.S_IMODE(path.stat().st_mode) == plain, path
    aside = records.rejected_file(records.record_file(tmp_path / "b", RTX))
    assert stat.S_IMODE(aside.stat().st_mode) == plain


# -- kernelgen tune --show --------------------------------------------------------------------------------------

def test_tune_show_marks_invalid_entries_and_unreadable_files(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """--show listed an empty choice, a bad id and a guard-breaking id as normal records."""
    from kernelgen import cli

    monkeypatch.setattr(cli.out, "width", 1000)  # one table row per line, to find each entry's row
    with knobs.scope(CACHE_DIR=str(tmp_path)):
        _file_with(knobs.tuning_dir(), RTX, _set("choice", [[64, "t3.b8.v8"], [4096, SLOW]]))
        _file_with(knobs.tuning_dir(), H200, _set("choice", []))
        (knobs.tuning_dir() / "nvidia-b200-sm100-148sms.json").write_text("{ not json")
        assert main(["tune", "--show"]) == 0
    rows = capsys.readouterr().out.splitlines()
    def row(*words: str) -> str:
        [found] = [r for r in rows if all(w in r for w in words)]
        return found
    assert "invalid: choice is empty" in row("user", "nvidia-h200", V.name)
    assert "invalid:" in row("user", "rtx", V.name) and "threads_per_token_pow2" in row("user", "rtx", V.name)
    assert "invalid:" not in row("user", "rtx", W.name) and "invalid:" not in row("user", "nvidia-h200", W.name)
    assert "invalid: not JSON" in row("user", "nvidia-b200")
    assert not [r for r in rows if "shipped" in r and "invalid" in r]


def test_a_full_disk_during_a_record_write_is_one_line_naming_the_file(tmp_path: Path, monkeypatch) -> None:
    """ENOSPC while writing a record (a tune's last step) is a StorageError naming the record file, and
    the file as it was stays whole."""
    import errno

    from kernelgen.errors import StorageError

    records.write(tmp_path, _record(V, RTX))
    path = records.record_file(tmp_path, RTX)
    before = path.read_bytes()

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records, "_write_text", full)
    with pytest.raises(StorageError) as info:
        records.write(tmp_path, _record(W, RTX))
    message = str(info.value)
    assert str(path) in message and "No space left on device" in message and "\n" not in message
    assert path.read_bytes() == before
