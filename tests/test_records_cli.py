"""Pure tier: `kernelgen check` keeps its title and each guard message on one line (a narrow table wrapped
its title; a long guard message wrapped onto a second line), so the output can be grepped line by line."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernelgen import cli

pytestmark = pytest.mark.pure


def test_check_prints_its_title_and_each_guard_message_on_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("family: fused_norm_rope_store\nname: s\nvariants:\n"
                    "  - {name: a, store: fp8_flashmla, head_dim: 256}\n")
    monkeypatch.setattr(cli.common, "_toolchain", lambda: None)  # the precheck refuses it: nothing is compiled
    assert cli.main(["check", str(spec), "--arch", "sm_90a"]) == 1
    captured = capsys.readouterr()
    assert "kernelgen check: 1 variants x sm_90a" in captured.out.splitlines()[0]
    [line] = [l for l in captured.err.splitlines() if l.strip()]
    assert line.startswith(f"error: a [sm_90a]: {spec}:4:") and line.endswith("[guard flashmla_shape]")
