"""Pure tier: the build cache under storage faults and foreign artifacts, with a fake nvcc (a shell script).

A full disk, a read-only file system or a folder without permission is one line naming the path and the
cause, wherever in build or export it strikes; nvcc's words survive a staging folder that cannot hold its
log; an artifact whose manifest names another build key or arch is rebuilt, never loaded."""
from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from kernelgen.build import toolchain as tc
from kernelgen.build.lifecycle import build
from kernelgen.build.store import kernels_dir
from kernelgen.cli import main
from kernelgen.errors import BuildError, StorageError, os_error_message, storage_error
from kernelgen.spec.parse import load_spec

pytestmark = pytest.mark.pure

NAME = "dsv32_indexer_bf16_p64"

# Stands in for nvcc: writes the file after -o (an "object" naming its gencode, a "library" holding its
# objects, so archs differ).
# FAKE_NVCC_PIDS: append its pid (and its child's); FAKE_NVCC_SLEEP: hang that long first, with a child,
# as nvcc waits on cicc and ptxas; FAKE_NVCC_SAYS: print that and fail; FAKE_NVCC_FAILS_FOR: fail where the
# command line holds that text (e.g. one arch's gencode). Output sent to a file on disk
# (a log in the staging folder) goes to /dev/full: the staging folder is full.
FAKE_NVCC = """#!/bin/sh
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
if [ -f /dev/stdout ]; then exec >/dev/full 2>&1; fi
[ -n "$FAKE_NVCC_PIDS" ] && echo $$ >> "$FAKE_NVCC_PIDS"
if [ -n "$FAKE_NVCC_SLEEP" ]; then sleep "$FAKE_NVCC_SLEEP" & echo $! >> "$FAKE_NVCC_PIDS"; wait; fi
if [ -n "$FAKE_NVCC_SAYS" ]; then echo "$FAKE_NVCC_SAYS" >&2; exit 1; fi
case " $* " in *"$FAKE_NVCC_FAILS_FOR"*) [ -n "$FAKE_NVCC_FAILS_FOR" ] && { echo "error: no $FAKE_NVCC_FAILS_FOR" >&2; exit 1; };; esac
case " $* " in
  *" -shared "*) for a in "$@"; do case "$a" in *.o) cat "$a";; esac; done > "$out";;  # link: the objects
  *) echo "built from $*" > "$out";;
esac
"""


def fake_toolchain(folder: Path) -> tc.Toolchain:
    nvcc = folder / "fake-nvcc"
    folder.mkdir(parents=True, exist_ok=True)
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(0o755)
    return tc.Toolchain(str(nvcc), str(folder), "fake release", "fake c++", "0", (), str(folder))


def variant() -> Any:
    return load_spec("dsv32_indexer").variant(NAME)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tc.Toolchain:
    toolchain = fake_toolchain(tmp_path / "fake-cuda")
    monkeypatch.setattr(tc, "detect", lambda: toolchain)  # the CLI and export detect through this
    return toolchain


def fail_opening(monkeypatch: pytest.MonkeyPatch, matches: Callable[[Path], bool], code: int) -> None:
    """Writes to matching paths fail as on a full, read-only or forbidden disk: with no file name in the
    exception, as write() raises it."""
    real = io.open

    def fake_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, os.PathLike)) and set(mode) & set("wax+") and matches(Path(file)):
            raise OSError(code, os.strerror(code))
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", fake_open)
    monkeypatch.setattr(builtins, "open", fake_open)


def fail_os(monkeypatch: pytest.MonkeyPatch, name: str, matches: Callable[[Path], bool], code: int) -> None:
    real = getattr(os, name)

    def fake(path: Any, *args: Any, **kwargs: Any) -> Any:
        if matches(Path(path)):
            raise OSError(code, os.strerror(code), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, name, fake)


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


# ---- the translation itself (pure) ----

def test_an_os_error_becomes_one_line_naming_the_path_the_cause_and_the_fix() -> None:
    full = os_error_message(OSError(errno.ENOSPC, "No space left on device"), "/c/v1/x/build.ninja",
                            free="12.0 KiB free under /c/v1", elsewhere="set KERNELGEN_CACHE_DIR to another folder")
    assert full == ("cannot write /c/v1/x/build.ninja: No space left on device (12.0 KiB free under /c/v1); "
                    "free space there or set KERNELGEN_CACHE_DIR to another folder")
    ro = os_error_message(OSError(errno.EROFS, "Read-only file system"), "/ro/x", elsewhere="export to another -o")
    assert ro == "cannot write /ro/x: Read-only file system; export to another -o"
    denied = os_error_message(OSError(errno.EACCES, "Permission denied"), "/c/locks/a.lock", elsewhere="use another")
    assert denied == "cannot write /c/locks/a.lock: Permission denied; fix its permissions or use another"
    bare = os_error_message(OSError(errno.EDQUOT, ""), "/q")  # no strerror: the system's words for the code
    assert bare.startswith(f"cannot write /q: {os.strerror(errno.EDQUOT)}; free space there or")


def test_storage_error_names_the_given_path_when_the_exception_has_none(tmp_path: Path) -> None:
    err = storage_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "gone" / "f")
    text = one_line(err)
    assert isinstance(err, StorageError)
    assert text.startswith(f"cannot write {tmp_path}/gone/f: No space left on device (")
    assert f"free under {tmp_path})" in text  # the nearest folder that exists


NINJA_OUTPUT = """[1/3] nvcc a-1/a.o
FAILED: [code=1] a-1/a.o 
/usr/local/cuda/bin/nvcc -std=c++17 -c a-1/a.cu -o a-1/a.o
a-1/a.cu(3): error: identifier "x" is undefined
1 error detected
[2/3] nvcc b-2/b.o
warning: b is fine
FAILED: b-2/b.so 
/usr/local/cuda/bin/nvcc -shared b-2/b.o -o b-2/b.so
/tmp/ccX.s: Fatal error: can't write 10 bytes to section .text of b-2/b.so: 'No space left on device'
ninja: build stopped: cannot make progress due to previous errors.
"""


def test_failed_outputs_split_ninjas_output_by_failed_unit() -> None:
    from kernelgen.build.buildplan import failed_outputs

    found = failed_outputs(NINJA_OUTPUT)
    assert found == {"a-1/a.o": 'a-1/a.cu(3): error: identifier "x" is undefined\n1 error detected',
                     "b-2/b.so": "/tmp/ccX.s: Fatal error: can't write 10 bytes to section .text of b-2/b.so: "
                                 "'No space left on device'"}
    assert failed_outputs("[1/1] nvcc a.o\n") == {}


def test_storage_cause_finds_a_refused_write_in_a_compilers_words() -> None:
    from kernelgen.build.buildplan import storage_cause

    code, cause, line = storage_cause(NINJA_OUTPUT) or (0, "", "")
    assert code == errno.ENOSPC and cause == "No space left on device" and line.startswith("/tmp/ccX.s: Fatal")
    assert storage_cause("ninja: error: opening build log: Read-only file system")[:2] == (errno.EROFS,
                                                                                          "Read-only file system")
    assert storage_cause('a.cu(3): error: identifier "x" is undefined') is None


# ---- every write of a build ----

def _staged(name: str) -> Callable[[Path], bool]:
    return lambda p: p.name == name and p.parent.name.startswith(".staging-")


def _in_staging(suffix: str) -> Callable[[Path], bool]:
    return lambda p: p.name.endswith(suffix) and any(part.startswith(".staging-") for part in p.parts)


OPEN_FAULTS = {
    "ninja file": (_staged("build.ninja"), errno.ENOSPC, "build.ninja"),
    "source": (_in_staging(".cu"), errno.ENOSPC, f"{NAME}.cu"),
    "manifest": (_in_staging("manifest.json"), errno.ENOSPC, "manifest.json"),
    "owner record": (_staged("owner.json"), errno.ENOSPC, "owner.json"),
    "audit log": (lambda p: p.name == "builds.log", errno.EACCES, "builds.log"),
    "lock": (lambda p: p.suffix == ".lock", errno.EACCES, ".lock"),
}


@pytest.mark.parametrize("where", sorted(OPEN_FAULTS))
def test_a_write_that_fails_anywhere_in_a_build_is_one_line_naming_its_path(
        where: str, fake: tc.Toolchain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    matches, code, name = OPEN_FAULTS[where]
    cache = tmp_path / "cache"
    fail_opening(monkeypatch, matches, code)
    with pytest.raises(StorageError) as info:
        build([variant()], fake, ("sm_90a",), cache)
    text = one_line(info.value)
    assert text.startswith(f"cannot write {kernels_dir(cache)}/") and name in text.split(":")[0], text
    assert os.strerror(code) in text and "KERNELGEN_CACHE_DIR" in text, text
    assert not list(kernels_dir(cache).glob(".staging-*")), "a failed build removes its staging folder"


@pytest.mark.parametrize("calls, code", [(("mkdir",), errno.EROFS), (("rename", "replace"), errno.EROFS)])
def test_a_read_only_cache_fails_staging_or_publish_in_one_line(calls: tuple[str, ...], code: int, fake: tc.Toolchain,
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    matches = (lambda p: p.name.startswith(".staging-")) if calls == ("mkdir",) else (lambda p: NAME in p.name)
    for call in calls:
        fail_os(monkeypatch, call, matches, code)
    with pytest.raises(StorageError) as info:
        build([variant()], fake, ("sm_90a",), cache)
    text = one_line(info.value)
    assert text.startswith(f"cannot write {kernels_dir(cache)}") and "Read-only file system" in text, text
    assert not [p for p in kernels_dir(cache).iterdir() if p.name.startswith((NAME, ".staging-"))]


def test_the_cli_says_which_file_a_full_disk_refused(fake: tc.Toolchain, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Not `error: : No space left on device`: the path is named."""
    fail_opening(monkeypatch, _staged("build.ninja"), errno.ENOSPC)
    assert main(["build", "dsv32_indexer", "--arch", "sm_90a", "--cache-dir", str(tmp_path / "c")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    errors = lines[next(i for i, line in enumerate(lines) if line.startswith("error:")):]
    assert len(errors) == 1 and errors[0].startswith(f"error: cannot write {tmp_path}/c/"), lines
    assert "build.ninja: No space left on device (" in errors[0]


def test_nvcc_reporting_a_full_disk_is_a_storage_error_not_a_compile_error(fake: tc.Toolchain, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVCC_SAYS", "/tmp/ccfGwiGu.s: Fatal error: can't write 1167 bytes to section .text of "
                                         "x.o: 'No space left on device'")
    cache = tmp_path / "cache"
    with pytest.raises(StorageError) as info:
        build([variant()], fake, ("sm_90a",), cache)
    text = one_line(info.value)
    assert text.startswith(f"cannot write {kernels_dir(cache)}/.staging-") and "No space left on device (" in text
    assert "KERNELGEN_CACHE_DIR" in text and "can't write 1167 bytes" in text, text


def test_nvcc_words_survive_a_staging_folder_that_cannot_hold_its_log(fake: tc.Toolchain, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake nvcc's output to a file on disk goes to /dev/full; the error must still be nvcc's own."""
    monkeypatch.setenv("FAKE_NVCC_SAYS", "k.cu(3): error: kernelgen test breakage")
    with pytest.raises(BuildError) as info:
        build([variant()], fake, ("sm_90a",), tmp_path / "cache")
    assert "kernelgen test breakage" in str(info.value) and "printed nothing" not in str(info.value)


def test_compile_only_keeps_nvcc_words_too(fake: tc.Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelgen.build.lifecycle import compile_only

    monkeypatch.setenv("FAKE_NVCC_SAYS", "k.cu(3): error: kernelgen test breakage")
    [result] = compile_only([variant()], fake, ("sm_90a",))
    assert not result.ok and "kernelgen test breakage" in result.message


def test_compile_only_builds_all_archs_in_one_call_and_names_the_arch_that_fails(
        fake: tc.Toolchain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kernelgen check`: one nvcc call per variant for every arch; where it fails, one call per arch says which."""
    from kernelgen.build.lifecycle import compile_only

    calls = tmp_path / "calls"
    monkeypatch.setenv("FAKE_NVCC_PIDS", str(calls))
    archs = ("sm_90a", "sm_100a", "sm_120a")
    assert all(r.ok for r in compile_only([variant()], fake, archs))
    assert len(calls.read_text().split()) == 1
    calls.unlink()
    monkeypatch.setenv("FAKE_NVCC_FAILS_FOR", "code=sm_100a")
    results = compile_only([variant()], fake, archs)
    assert [(r.arch, r.ok) for r in results] == [("sm_90a", True), ("sm_100a", False), ("sm_120a", True)]
    assert "error: no code=sm_100a" in results[1].message
    assert len(calls.read_text().split()) == 1 + 3


# ---- export's writes ----

EXPORT_FAULTS = {
    "library copy": ("open", lambda p: p.suffix == ".so" and "out" in p.parts, errno.ENOSPC, f"{NAME}.so"),
    "manifest": ("open", lambda p: p.name == "manifest.json" and p.parent.name == "out", errno.ENOSPC, "manifest.json"),
    "folder": ("mkdir", lambda p: p.name == "out", errno.EACCES, "out"),
}


@pytest.mark.parametrize("where", sorted(EXPORT_FAULTS))
def test_an_export_that_cannot_write_its_output_says_where_in_one_line(where: str, fake: tc.Toolchain, tmp_path: Path,
                                                                       cache_dir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelgen.runtime.export import export

    call, matches, code, name = EXPORT_FAULTS[where]
    if call == "open":
        fail_opening(monkeypatch, matches, code)
    else:
        fail_os(monkeypatch, call, matches, code)
    with pytest.raises(StorageError) as info:
        export([variant()], ("sm_90a",), tmp_path / "out")
    text = one_line(info.value)
    assert text.startswith(f"cannot write {tmp_path}/out") and name in text.split(":")[0], text
    assert os.strerror(code) in text and "-o" in text, text


# ---- a manifest must name the key and arch it is loaded for ----

def test_manifest_problem_names_both_keys_and_archs() -> None:
    from kernelgen.build.store import manifest_problem

    ok = {"key": "a" * 64, "archs": ["sm_90a"]}
    assert manifest_problem(ok, "a" * 64, ("sm_90a",)) is None
    other = manifest_problem({"key": "b" * 64, "archs": ["sm_100a"]}, "a" * 64, ("sm_90a",))
    assert other is not None and "bbbbbbbbbbbb" in other and "sm_100a" in other
    assert "aaaaaaaaaaaa" in other and "sm_90a" in other
    assert manifest_problem({"key": "a" * 64, "archs": ["sm_100a"]}, "a" * 64, ("sm_90a",)) is not None
    assert manifest_problem({"archs": ["sm_90a"]}, "a" * 64, ("sm_90a",)) is not None  # no key: not ours
    assert manifest_problem({"key": 3, "archs": "sm_90a"}, "a" * 64, ("sm_90a",)) is not None


def test_an_artifact_of_another_arch_copied_into_a_key_is_rebuilt_not_loaded(
        fake: tc.Toolchain, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    [blackwell] = build([variant()], fake, ("sm_100a",), cache)
    [hopper] = build([variant()], fake, ("sm_90a",), cache)
    assert b"sm_90a" in hopper.library.read_bytes()  # the fake "library" names its gencode
    shutil.rmtree(hopper.directory)
    shutil.copytree(blackwell.directory, hopper.directory)  # library and manifest, hashes consistent
    [again] = build([variant()], fake, ("sm_90a",), cache)
    assert again.directory == hopper.directory
    assert b"sm_90a" in again.library.read_bytes() and b"sm_100a" not in again.library.read_bytes()
    manifest = json.loads((again.directory / "manifest.json").read_text())
    assert manifest["key"] == hopper.key and manifest["archs"] == ["sm_90a"]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(blackwell.key[:12] in m and hopper.key[:12] in m and "sm_100a" in m and "sm_90a" in m for m in warned), warned
