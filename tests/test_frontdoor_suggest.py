"""Pure tier: the command line helps a newcomer (issue 26 item 5): "did you mean" for spec names and
subcommands, `kernelgen recall` a subcommand like the others, and help text for every spec argument."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kernelgen import cli, resources
from kernelgen.errors import SpecError

pytestmark = pytest.mark.pure


def test_a_misspelt_shipped_spec_name_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SpecError, match=r"^dsv4_indxer: no such spec file; did you mean dsv4_indexer\? "
                                        r"\(shipped specs: .*dsv4_indexer"):
        resources.find_spec("dsv4_indxer")
    assert cli.main(["list", "dsv4_indxer"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert "did you mean dsv4_indexer?" in line


def test_a_misspelt_spec_path_suggests_its_neighbour(tmp_path: Path) -> None:
    (tmp_path / "my_kernels.yaml").write_text("")
    with pytest.raises(SpecError, match=rf"did you mean {tmp_path / 'my_kernels.yaml'}\?"):
        resources.find_spec(str(tmp_path / "my_kernel.yaml"))


def test_a_name_like_nothing_gets_no_suggestion() -> None:
    with pytest.raises(SpecError) as caught:
        resources.find_spec("zzzz")
    assert "did you mean" not in str(caught.value)
    with pytest.raises(SpecError) as caught:
        resources.find_spec("x" * 5000)  # no quadratic similarity search on a huge name
    assert "did you mean" not in str(caught.value)


@pytest.mark.parametrize(("typed", "meant"), [("biuld", "build"), ("lst", "list"), ("recal", "recall"),
                                              ("export_", "export")])
def test_a_misspelt_subcommand_gets_a_suggestion(typed: str, meant: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([typed, "dsv4_indexer"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: '{typed}' is not a kernelgen command (did you mean {meant}?)"), line


def test_an_unknown_subcommand_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["zzzz"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "did you mean" not in line and "commands: list, render, check, build" in line


def test_recall_help_is_a_kernelgen_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["recall", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: kernelgen recall "), text
    assert "--max-context" in text and "--plot" in text


def test_every_spec_argument_has_help_text() -> None:
    [commands] = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [f"{name} {action.dest}" for name, sub in commands.choices.items() for action in sub._actions
               if action.dest in ("spec", "specs") and not action.help]
    assert not missing
    assert {name for name, sub in commands.choices.items()
            if any(a.dest in ("spec", "specs") for a in sub._actions)} >= {"list", "render", "check", "build", "bench",
                                                                           "tune", "export", "recall"}


def test_build_variants_selects_by_name_and_suggests_before_any_work(capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`kernelgen build --variants` takes variants and launch groups by name across the specs given; a misspelt
    name is one line with the nearest name, before the toolchain or the cache is touched."""
    import kernelgen.cli.common as common

    specs = common._specs(["mla", "dsv4_mainkv"])
    got = common._kernels_of(specs, "deepseek_v3_layer_fp8,dsv4_mainkv_v41_p64")
    assert [k.name for k in got] == ["deepseek_v3_layer_fp8", "dsv4_mainkv_v41_p64"]
    assert len(common._kernels_of(specs, None)) == sum(len(s.kernels) for s in specs)
    monkeypatch.setattr(common, "_toolchain", lambda: pytest.fail("the toolchain was touched"))
    assert cli.main(["build", "mla", "dsv4_mainkv", "--variants", "dsv4_mainkv_v41", "--arch", "sm_90a"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line == ("error: --variants: no variant or launch group named 'dsv4_mainkv_v41' in mla, dsv4_mainkv "
                    "(did you mean dsv4_mainkv_v41_p64?); `kernelgen list SPEC` shows them")
    assert cli.main(["build", "mla", "--variants", "deepseek_v3_kv_bf16_p65", "--arch", "sm_90a"]) == 1
    assert "did you mean deepseek_v3_kv_bf16_p64?" in capsys.readouterr().err


def test_the_python_api_names_its_keyword_and_the_cli_its_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU and no target: kernelgen.load says arch=, the command line says --arch (issue 38 item 4)."""
    import kernelgen
    from kernelgen.build import toolchain
    from kernelgen.errors import ToolchainError

    monkeypatch.delenv("KERNELGEN_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setattr(toolchain, "local_arch", lambda: None)
    with pytest.raises(ToolchainError, match=r'pass arch="sm_90a" \(comma-separated'):
        kernelgen.load("mla", "deepseek_v3_kv_bf16_p64")
    with pytest.raises(ToolchainError, match=r"^arch=: sm_91 is not a target"):
        kernelgen.load("mla", "deepseek_v3_kv_bf16_p64", arch="sm_91")
    with pytest.raises(ToolchainError, match=r"pass --arch sm_90a \(comma-separated"):
        toolchain.resolve_archs(None)
