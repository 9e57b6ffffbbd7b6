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
