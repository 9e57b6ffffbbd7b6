"""Pure tier: every command validates what it can before it works (issue 26 item 1): a GPU before a tuning
compile, output folders and the cache folder (naming the variable it came from) before a build, matplotlib
before a study or a benchmark; and a failure after a long run keeps its result (the recall table)."""
from __future__ import annotations

import errno
import sys
from pathlib import Path

import pytest

from kernelgen import cli, knobs, recall
from kernelgen.errors import StorageError
from kernelgen.tune.gpu import GpuInfo

pytestmark = pytest.mark.pure

H200 = GpuInfo("NVIDIA H200", "9.0", 132, 141, 4800)
SMALL_STUDY = ["--contexts", "2K", "--topk", "256", "--heads", "4", "--queries", "2", "--needles", "1",
               "--margins", "0.3", "--stores", "fp32,bf16"]


class Worked(Exception):
    """Raised by a stand-in for the expensive step: the command got past its validation."""


def _refuse(*_: object, **__: object) -> None:
    raise Worked("the command started working before it validated its input")


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    assert lines[0].startswith("error: "), text
    return lines[0]


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import kernelgen.tune.gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(kernelgen.tune.gpu, "current", lambda device=None: None)


@pytest.fixture
def a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelgen.tune.gpu

    monkeypatch.setattr(kernelgen.tune.gpu, "current", lambda device=None: H200)


@pytest.fixture
def no_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelgen.build.lifecycle
    import kernelgen.build.toolchain
    import kernelgen.runtime.export
    import kernelgen.tune.runner

    for module, name in ((kernelgen.tune.runner, "compile_candidates"), (kernelgen.tune.runner, "build"),
                         (kernelgen.build.lifecycle, "build"), (kernelgen.build.toolchain, "detect"),
                         (kernelgen.runtime.export, "export"), (cli.common, "_toolchain")):
        monkeypatch.setattr(module, name, _refuse)


@pytest.mark.parametrize("argv", [["tune", "dsv4_indexer", "--arch", "sm_90a"],
                                  ["tune", "dsv4_indexer", "--gpus", "0,1"],
                                  ["tune", "dsv4_indexer"]])
def test_tune_without_a_gpu_says_so_before_compiling_and_names_what_works_on_a_cpu(
        argv: list[str], no_gpu: None, no_compile: None, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "needs a CUDA GPU" in line and "kernelgen check dsv4_indexer --arch sm_90a" in line, line
    assert "pass --arch" not in line and "or set KERNELGEN_CUDA_ARCH_LIST" not in line, line  # --arch cannot help tune


def test_the_tuner_itself_checks_the_gpu_before_it_compiles(no_gpu: None, no_compile: None, tmp_path: Path) -> None:
    from kernelgen.errors import TuningError
    from kernelgen.spec.parse import load_spec
    from kernelgen.tune import runner

    spec = load_spec("dsv4_indexer")
    with pytest.raises(TuningError, match="needs a CUDA GPU"):
        runner.tune(list(spec.variants[:1]), spec.path, {}, (1, 4096), [None], ("sm_90a",), tmp_path, tmp_path,
                    None, None, lambda name, event: None)


def test_export_into_a_folder_that_cannot_be_made_fails_before_compiling(
        tmp_path: Path, no_compile: None, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert cli.main(["export", "dsv4_indexer", "--arch", "sm_90a", "-o", str(blocker / "out")]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert str(blocker / "out") in line and "not a directory" in line and "-o" in line, line
    assert cli.main(["export", "dsv4_indexer", "--arch", "sm_90a", "-o", str(blocker)]) == 1
    assert str(blocker) in _one_error_line(capsys.readouterr().err)


def test_the_cache_folder_from_the_environment_is_named_by_its_variable(
        tmp_path: Path, no_compile: None, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with knobs.scope(CACHE_DIR=str(blocker)):
        assert cli.main(["build", "dsv4_indexer", "--arch", "sm_90a"]) == 1
        line = _one_error_line(capsys.readouterr().err)
        assert line.startswith(f"error: KERNELGEN_CACHE_DIR={blocker}: not a directory; "), line
        assert "locks" not in line
    with knobs.scope(CACHE_DIR=str(blocker / "below")):
        assert cli.main(["build", "dsv4_indexer", "--arch", "sm_90a"]) == 1
        assert _one_error_line(capsys.readouterr().err).startswith(
            f"error: KERNELGEN_CACHE_DIR={blocker / 'below'}: not a directory ({blocker} is a file); ")


def test_the_cache_folder_check_names_xdg_cache_home_and_the_cli_flag(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with knobs.scope(CACHE_DIR=None, XDG_CACHE_HOME=str(blocker)):
        with pytest.raises(StorageError, match=rf"^XDG_CACHE_HOME={blocker}: not a directory"):
            knobs.check_cache_dir()
    with knobs.scope(CACHE_DIR=str(tmp_path / "fine" / "cache")):
        # creatable: made by the check, a file written in it and removed (a write is the only sure test, issue 38)
        assert knobs.check_cache_dir() == tmp_path / "fine" / "cache"
        assert list((tmp_path / "fine" / "cache").iterdir()) == []
    with knobs.scope(CACHE_DIR=str(tmp_path / "unmade")):
        assert knobs.check_cache_dir(write=False) == tmp_path / "unmade"  # a read-only use creates nothing
        assert not (tmp_path / "unmade").exists()
    assert knobs.directory_problem(blocker) == "not a directory"
    assert knobs.directory_problem(tmp_path / "new" / "deeper") is None


def test_tune_checks_its_cache_and_record_folders_before_compiling(
        tmp_path: Path, a_gpu: None, no_compile: None, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with knobs.scope(CACHE_DIR=str(blocker)):
        assert cli.main(["tune", "dsv4_indexer", "--arch", "sm_90a"]) == 1
        assert _one_error_line(capsys.readouterr().err).startswith(f"error: KERNELGEN_CACHE_DIR={blocker}: ")
    with knobs.scope(CACHE_DIR=str(tmp_path / "cache")):
        assert cli.main(["tune", "dsv4_indexer", "--arch", "sm_90a", "--out", str(blocker)]) == 1
        line = _one_error_line(capsys.readouterr().err)
        assert f"--out {blocker}: not a directory" in line, line


def test_recall_plot_without_matplotlib_fails_before_the_study(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    monkeypatch.setattr(recall, "run_study", _refuse)
    assert cli.main(["recall", *SMALL_STUDY, "--plot", str(tmp_path / "r.png")]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "--plot needs matplotlib" in line and "pip install matplotlib" in line and "kernelgen[plot]" in line


def test_a_failing_plot_keeps_the_recall_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    def unwritable(rows: object, path: str | Path) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(recall, "plot", unwritable)
    assert cli.main(["recall", *SMALL_STUDY, "--plot", str(tmp_path / "r.png")]) == 1
    captured = capsys.readouterr()
    assert "# Index-key recall by store dtype" in captured.out and "| bf16 |" in captured.out
    assert "Generated by `kernelgen recall --contexts 2K" in captured.out
    assert "r.png" in _one_error_line(captured.err)


def test_bench_plot_without_matplotlib_fails_before_the_gpu_work(
        monkeypatch: pytest.MonkeyPatch, a_gpu: None, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelgen import bench

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(bench, "copy_roofline_gbs", _refuse)
    assert cli.main(["bench", "dsv4_indexer", "--plot", "b.png"]) == 1
    assert "--plot needs matplotlib" in _one_error_line(capsys.readouterr().err)


def test_bench_without_a_gpu_names_what_works_on_a_cpu(no_gpu: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "dsv4_indexer"]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "needs a CUDA GPU" in line and "kernelgen check dsv4_indexer --arch sm_90a" in line, line


def test_bench_json_into_a_folder_that_cannot_be_made_fails_before_the_gpu_work(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, a_gpu: None, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelgen import bench

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(bench, "copy_roofline_gbs", _refuse)
    assert cli.main(["bench", "dsv4_indexer", "--json", str(blocker / "b.json")]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert f"--json {blocker / 'b.json'}: " in line and "not a directory" in line, line


@pytest.mark.parametrize("argv", [["--stores", "fp6"], ["--spec", "dsv4_mainkv", "--stores", "fp8_e4m3"],
                                  ["--topk", "0"]])
def test_a_bad_recall_option_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["recall", "--contexts", "2K", "--heads", "2", "--queries", "1", *argv]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "--stores" in line or "--topk" in line, line


@pytest.mark.parametrize("kwargs, words", [({"stores": ["fp6"]}, "stores=: spec dsv4_indexer has no fp6 variant"),
                                           ({"topk": [0]}, "topk= must be at least 1"),
                                           ({"contexts": []}, "contexts=, topk=, stores= must be non-empty")])
def test_a_bad_recall_argument_from_python_names_the_keyword(kwargs: dict, words: str) -> None:
    from kernelgen import recall
    from kernelgen.errors import KernelgenError

    with pytest.raises(KernelgenError) as caught:
        recall.run_study(**{"contexts": [2048], "heads": 2, "queries": 1, **kwargs})
    assert str(caught.value).startswith(words) and "--" not in str(caught.value), str(caught.value)


def test_a_count_recall_cannot_read_says_what_it_wants(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["recall", "--topk", "many"])
    assert "write counts such as 512 or 64K, comma-separated; got 'many'" in capsys.readouterr().err


def test_an_output_the_permission_bits_allow_but_the_file_system_refuses_fails_before_any_work(
        capsys: pytest.CaptureFixture[str]) -> None:
    """/proc says writable to root, yet nothing can be made there: the check writes to find out, and export
    fails in one line naming the path and the reason before it compiles anything (issue 38 item 2)."""
    import time

    with pytest.raises(StorageError, match=r"^-o /proc/kg-export: (cannot be written|not writable|cannot be created)"):
        knobs.check_folder("-o", Path("/proc/kg-export"))
    start = time.monotonic()
    assert cli.main(["export", "mla", "--variants", "deepseek_v3_kv_bf16_p64", "--arch", "sm_90a",
                     "-o", "/proc/kg-export"]) == 1
    assert time.monotonic() - start < 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith("error: -o /proc/kg-export: ") and "give -o a folder kernelgen may write in" in line
    assert cli.main(["bench", "mla", "--json", "/proc/kg/bench.json"]) == 1
    assert _one_error_line(capsys.readouterr().err).startswith("error: --json /proc/kg/bench.json: its folder /proc/kg")


def test_the_bench_plot_shows_every_baseline_it_timed_and_the_copy_roofline(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    from kernelgen.bench import Row, plot

    rows = [Row("v", "prefill", n, us, 1000 * n, 0.0, 50.0, "t8", eager_us=3 * us, compiled_us=2 * us if n > 1 else None)
            for n, us in ((1, 2.0), (1024, 5.0), (65536, 80.0))]
    seen: list[str] = []
    real = matplotlib.figure.Figure.savefig

    def spy(fig, path, **kw):  # noqa: ANN001, ANN003
        seen.extend(line.get_label() for ax in fig.axes for line in ax.get_lines())
        return real(fig, path, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    plot(rows, str(tmp_path / "b.png"), {"floor_us": 1.0, "gpu": "X", "roofline_gbs": 4000.0})
    assert (tmp_path / "b.png").stat().st_size > 0
    for label in ("v (prefill)", "v: PyTorch eager", "v: PyTorch compiled", "v: copy roofline", "empty kernel",
                  "copy roofline"):
        assert label in seen, (label, seen)
