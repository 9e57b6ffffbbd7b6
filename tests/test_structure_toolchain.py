"""Pure tier: the toolchain is found without importing tvm-ffi (so torch), a cache-hit build loads nothing,
and arch names are checked against the toolchain's own target list before anything builds.

nvcc is a shell script here (FAKE_NVCC): these tests run no compiler."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelgen import knobs
from kernelgen.build import toolchain as tc
from kernelgen.build.lifecycle import artifact_for, plan
from kernelgen.build.store import kernels_dir, publish
from kernelgen.cli import main
from kernelgen.errors import ToolchainError
from kernelgen.spec.parse import load_spec

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[1]
# What nvcc 13.0 prints for --list-gpu-arch (unsorted, as it is); $FAKE_NVCC_CALLS counts the listings.
FAKE_NVCC = """#!/bin/sh
case "$1" in
  --version) echo "Cuda compilation tools, release 13.0, V13.0.88";;
  --list-gpu-arch) [ -n "$FAKE_NVCC_CALLS" ] && echo list >> "$FAKE_NVCC_CALLS"
                   [ -n "$FAKE_NVCC_NO_LIST" ] && { echo "nvcc fatal: Unknown option" >&2; exit 1; }
                   printf 'compute_75\\ncompute_80\\ncompute_86\\ncompute_90\\ncompute_100\\ncompute_110\\ncompute_103\\ncompute_120\\n';;
  *) echo "fake nvcc: no compiles in the pure tier" >&2; exit 1;;
esac
"""


@pytest.fixture
def cuda_home(tmp_path: Path) -> Path:
    """A CUDA_HOME whose bin/nvcc is FAKE_NVCC, for the test's duration."""
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text(FAKE_NVCC)
    (home / "bin" / "nvcc").chmod(0o755)
    with knobs.scope(CUDA_HOME=str(home), CUDA_ARCH_LIST=None):
        yield home


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, **env})


LOADED = "import sys; print(sorted(m for m in ('torch', 'tvm_ffi', 'numpy') if m in sys.modules))"


def test_import_kernelgen_loads_no_stage() -> None:
    """`import kernelgen` (and so every `kernelgen ...` command) stays light: the API loads on first use."""
    done = _python("import kernelgen, sys, json; print(json.dumps(sorted(m for m in sys.modules if m.startswith("
                   "'kernelgen.') or m in ('torch', 'tvm_ffi', 'jinja2', 'yaml', 'rich'))))", {})
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) <= {"kernelgen._version", "kernelgen.errors"}
    used = _python("import kernelgen; print(kernelgen.load.__module__, kernelgen.Variant.__name__, "
                   "kernelgen.__version__, 'load' in dir(kernelgen))", {})
    assert used.stdout.split() == ["kernelgen.runtime.loader", "Variant", "0.1.0", "True"], used.stderr


def test_an_unknown_name_of_the_package_is_an_attribute_error() -> None:
    import kernelgen

    with pytest.raises(AttributeError, match="module 'kernelgen' has no attribute 'lod'"):
        kernelgen.lod  # noqa: B018


def test_toolchain_is_found_without_importing_tvm_ffi(cuda_home: Path) -> None:
    done = _python(f"from kernelgen.build import toolchain as tc; t = tc.detect(); print(t.fingerprint()); {LOADED}",
                   {"CUDA_HOME": str(cuda_home)})
    assert done.returncode == 0, done.stderr
    fingerprint, loaded = done.stdout.splitlines()
    assert loaded == "[]"
    import importlib.metadata

    assert f"tvm_ffi={importlib.metadata.version('apache-tvm-ffi')}" in fingerprint


def test_tvm_ffi_dirs_are_the_ones_tvm_ffi_names() -> None:
    """The package layout read without importing it is what tvm-ffi's own libinfo says (headers, dlpack,
    libtvm_ffi), and the version is its __version__: a build key does not change with the way it is found."""
    done = _python("import tvm_ffi, json; from tvm_ffi import libinfo; from pathlib import Path; print(json.dumps("
                   "[tvm_ffi.__version__, libinfo.find_include_path(), libinfo.find_dlpack_include_path(), "
                   "str(Path(libinfo.find_libtvm_ffi()).parent)]))", {})
    assert done.returncode == 0, done.stderr
    version, include, dlpack, lib = json.loads(done.stdout)
    found = tc.tvm_ffi_location()
    assert (found.version, found.include_dirs, found.lib_dir) == (version, (include, dlpack), lib)


def _publish_fakes(cache: Path, spec: str, archs: tuple[str, ...]) -> int:
    """Put every variant of spec into the cache as a build would have (a stand-in library): a cache hit."""
    variants = list(load_spec(spec).variants)
    root = kernels_dir(cache)
    for i, p in enumerate(plan(variants, tc.detect(), archs)):
        a = artifact_for(p, root)
        staged = root / f".staging-fake-{i}"
        staged.mkdir(parents=True)
        (staged / a.library.name).write_bytes(b"not a real library: a cache hit never loads it")
        publish(staged, a, {"key": a.key, "archs": list(archs)})
    return len(variants)


def test_a_cache_hit_build_imports_neither_torch_nor_tvm_ffi(cuda_home: Path, tmp_path: Path) -> None:
    """`kernelgen build SPEC --arch sm_90a` with everything built runs no ninja and loads nothing."""
    cache = tmp_path / "cache"
    count = _publish_fakes(cache, "dsv32_indexer", ("sm_90a",))
    before = (kernels_dir(cache) / "builds.log").read_text()
    done = _python(f"from kernelgen.cli import main; rc = main(['build', 'dsv32_indexer', '--arch', 'sm_90a', "
                   f"'--cache-dir', {str(cache)!r}]); {LOADED}; sys.exit(rc)",
                   {"CUDA_HOME": str(cuda_home)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
    assert f"built or found {count} variants" in done.stdout
    assert (kernels_dir(cache) / "builds.log").read_text() == before  # nothing was compiled


# --- arch names, against the toolchain's own list ---

def test_an_arch_the_toolchain_does_not_know_fails_at_once_naming_its_targets(cuda_home: Path) -> None:
    with pytest.raises(ToolchainError) as caught:
        tc.parse_arch_list("sm_90a,sm_91")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"--arch: sm_91 is not a target of {cuda_home / 'bin' / 'nvcc'}")
    assert "sm_75, sm_80, sm_86, sm_90, sm_100, sm_103, sm_110, sm_120" in message  # sorted, from the listing
    assert "sm_90a" in message and "sm_100f" in message  # the arch-specific and family forms are named


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a", "sm_120a", "sm_100f", "sm_103f", "sm_86", "90a", "10.0"])
def test_forms_of_a_listed_target_are_valid(cuda_home: Path, arch: str) -> None:
    assert tc.parse_arch_list(arch)[0].startswith("sm_")


@pytest.mark.parametrize("arch", ["sm_91", "sm_121a", "sm_86a", "sm_90f", "sm_70"])
def test_targets_nvcc_does_not_build_are_refused(cuda_home: Path, arch: str) -> None:
    """sm_86a and sm_90f: nvcc has arch-specific forms from sm_90 and family forms from sm_100 only."""
    with pytest.raises(ToolchainError, match=f"{arch} is not a target of"):
        tc.parse_arch_list(arch)


def test_the_env_list_is_checked_and_named(cuda_home: Path) -> None:
    with knobs.scope(CUDA_ARCH_LIST="sm_91"), pytest.raises(ToolchainError, match="^KERNELGEN_CUDA_ARCH_LIST: sm_91"):
        tc.resolve_archs(None)


def test_the_listing_is_asked_once_per_nvcc(cuda_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls"
    monkeypatch.setenv("FAKE_NVCC_CALLS", str(calls))
    for text in ("sm_90a", "sm_100a", "sm_90a,sm_120a"):
        tc.parse_arch_list(text)
    tc.resolve_archs("sm_100f")
    assert calls.read_text().splitlines() == ["list"]


def test_an_nvcc_that_cannot_list_its_targets_leaves_the_check_to_it(cuda_home: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An nvcc without --list-gpu-arch: the names are checked for form only, and nvcc itself judges them."""
    monkeypatch.setenv("FAKE_NVCC_NO_LIST", "1")
    assert tc.parse_arch_list("sm_91") == ("sm_91",)
    with pytest.raises(ToolchainError, match="'hopper' is not a CUDA target"):
        tc.parse_arch_list("hopper")


def test_without_nvcc_the_names_are_checked_for_form_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No nvcc anywhere: building says so itself (detect); parsing does not invent a target list."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with knobs.scope(CUDA_HOME=None):
        monkeypatch.setattr(knobs, "cuda_home", lambda: tmp_path / "none")
        assert tc.parse_arch_list("sm_91") == ("sm_91",)


def test_cli_build_with_an_unknown_arch_fails_before_any_work(cuda_home: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    assert main(["build", "dsv4_indexer", "--arch", "sm_91", "--cache-dir", str(tmp_path / "c")]) == 1
    assert time.monotonic() - start < 5
    err = capsys.readouterr().err
    assert err.startswith("error: --arch: sm_91 is not a target of") and err.count("\n") == 1, err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("command", [["check", "dsv4_indexer"], ["export", "dsv4_indexer", "-o", "OUT"]])
def test_check_and_export_refuse_an_unknown_arch_too(cuda_home: Path, tmp_path: Path, command: list[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in command] + ["--arch", "sm_90a,sm_91"]
    assert main(argv) == 1
    assert capsys.readouterr().err.startswith("error: --arch: sm_91 is not a target of")
