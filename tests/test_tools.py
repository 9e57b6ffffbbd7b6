"""Pure tier: the maintained tools under tools/ (their logic), and the repository's front door (every tool and
every result file has its line, every cited file exists, the extras and CI run what the README promises)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
RESULTS = TOOLS / "results"


def _tool(monkeypatch: pytest.MonkeyPatch, name: str):  # noqa: ANN202 (a module)
    monkeypatch.syspath_prepend(str(TOOLS))
    return __import__(name)


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.is_file() and p.name != "README.md"}


def _listed(readme: Path) -> set[str]:
    """The file names in the first column of the README's table rows."""
    return {m.group(1) for m in re.finditer(r"^\| `([^`/]+)` \|", readme.read_text(), re.M)}


def test_every_tool_has_its_line_in_tools_readme() -> None:
    readme = TOOLS / "README.md"
    assert readme.is_file(), "tools/README.md is missing: one line per maintained tool"
    files, listed = _files(TOOLS), _listed(readme)
    assert files - listed == set(), f"tools/README.md has no line for {sorted(files - listed)}"
    assert listed - files == set(), f"tools/README.md lists {sorted(listed - files)}, which tools/ does not hold"


def test_every_result_file_has_its_line_and_command() -> None:
    readme = RESULTS / "README.md"
    files, listed = _files(RESULTS), _listed(readme)
    assert files - listed == set(), f"tools/results/README.md has no line for {sorted(files - listed)}"
    assert listed - files == set(), f"tools/results/README.md lists {sorted(listed - files)}, which are not there"
    assert not any(f.endswith((".patch", ".log.gz")) for f in files), "rejected patches live in git history"


def test_files_the_readme_and_docs_cite_exist() -> None:
    missing = []
    for doc in [ROOT / "README.md", TOOLS / "README.md", RESULTS / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text() if doc.exists() else ""
        for m in re.finditer(r"tools/(results/)?([\w*-]+(?:\.[\w*]+)+)", text):
            folder = RESULTS if m.group(1) else TOOLS
            if not list(folder.glob(m.group(2))):
                missing.append(f"{doc.relative_to(ROOT)}: {m.group(0)}")
    assert missing == [], "cited but not in the tree: " + ", ".join(sorted(set(missing)))


def test_perf_md_is_a_short_design_note() -> None:
    lines = (ROOT / "docs" / "perf.md").read_text().count("\n")
    assert lines <= 250, f"docs/perf.md has {lines} lines: a design note, not a lab notebook (history is in git)"


def test_the_test_extra_runs_the_plot_tests_and_leaves_ray_to_its_own_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~\[ ]", d)[0] for d in extras["test"]}
    assert "matplotlib" in names, "[test] lacks matplotlib: the recall and bench plot tests would skip in CI"
    assert "ray" not in names, "[test] pulls ray (240 MB) although tests/test_tune_ray.py skips without it"
    assert any(d.startswith("ray") for d in extras["ray"])


def test_ci_runs_the_readmes_build_command_in_a_fresh_venv() -> None:
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    build = re.search(r"^ +pip install (torch==\S+) \. && (kernelgen build .+)$", readme, re.M)
    assert build, "README.md lost its build command (pip install torch==... . && kernelgen build ...)"
    assert "-m venv" in ci and f"install -q {build.group(1)} ." in ci, ".ci/run does not install the README's way"
    assert build.group(2).strip() in ci, f".ci/run does not run the README's `{build.group(2).strip()}`"


def test_bench_tables_prints_one_row_per_variant_and_a_dash_where_a_size_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench_tables = _tool(monkeypatch, "bench_tables")
    row = dict(us=1.234, tbps=0.5, roofline_pct=12.4)
    data = {"workload": "decode", "gpu": "GPU X", "roofline_gbs": 4050.2, "floor_us": 0.714,
            "rows": [dict(row, variant="a", tokens=1), dict(row, variant="a", tokens=128), dict(row, variant="b", tokens=1)]}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    text = bench_tables.table(str(path))
    assert text.startswith("### decode on GPU X (copy roofline 4050 GB/s, empty kernel 0.71 us)")
    assert "| variant | N=1 | N=128 |" in text
    assert "| a | 1.23 / 0.50 / 12% | 1.23 / 0.50 / 12% |" in text
    assert "| b | 1.23 / 0.50 / 12% | - |" in text


def test_tuning_summary_has_a_row_per_shipped_variant_and_refuses_other_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tuning_summary = _tool(monkeypatch, "tuning_summary")
    from kernelgen.spec.parse import shipped_variants

    shipped = json.loads((ROOT / "cache" / "nvidia-h200-sm90-132sms.json").read_text())
    tuned, untuned, *_ = shipped_variants()
    shipped["variants"] = {tuned.content_key(): shipped["variants"][tuned.content_key()]}  # none for `untuned`
    path = tmp_path / "records.json"
    path.write_text(json.dumps(shipped))
    text = tuning_summary.main(str(path))
    rows = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ") and " | " in line}
    assert set(rows) >= {v.name for v in shipped_variants()}, "a shipped variant has no row"
    assert re.search(r"\| \d+: t\d+\.b\d+\.v\d+", rows[tuned.name]) and "no record" not in rows[tuned.name]
    assert f"no record for this code: re-tune (kernelgen tune {untuned.spec_name})" in rows[untuned.name]
    other = tmp_path / "x.json"
    other.write_text("{}")
    with pytest.raises(SystemExit, match=r"x\.json is not a tuning record file"):
        tuning_summary.main(str(other))


def _run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_sanitize_refuses_a_name_that_selects_nothing_in_one_line_before_any_gpu_work() -> None:
    done = _run_tool("tools/sanitize.py", "--specs", "dsv4_indexr")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "no shipped spec named dsv4_indexr" in done.stderr.strip().splitlines()[-1]


def test_sanitize_groups_refuse_a_group_name_that_selects_nothing_and_candidates_without_groups() -> None:
    done = _run_tool("tools/sanitize.py", "--groups", "--variants", "phi5_mini")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "sanitize: no shipped launch group in the shipped specs named phi5_mini"
    done = _run_tool("tools/sanitize.py", "--candidates")
    assert done.returncode == 2 and "--candidates runs launch groups: add --groups" in done.stderr.strip().splitlines()[-1]


def test_ab_kernels_refuses_more_than_two_launch_ids_in_one_line() -> None:
    done = _run_tool("tools/ab_kernels.py", ".", "dsv4_indexer:dsv4_indexer_fp8_p64", "--launch", "a/b/c")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "give one configuration id, or OLD_ID/NEW_ID" in done.stderr.strip().splitlines()[-1]
