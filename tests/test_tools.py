"""Pure tier: the maintained tools under tools/ (their logic), and the repository's front door (every tool has its
line, every cited file exists, the extras and CI run what the README promises)."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"


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


def test_files_the_readme_and_docs_cite_exist() -> None:
    """Every tools/ and docs/ file the README, docs/ and device_run.sh name is in the tree; tools/results/ is gone
    (its files are cited only as git history, inside a `git ...` command)."""
    missing = []
    for doc in [ROOT / "README.md", TOOLS / "README.md", TOOLS / "device_run.sh", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"`git [^`]*`", "", doc.read_text())  # `git show REV:tools/...`, `git log -- tools/...`
        for m in re.finditer(r"\b(tools|docs)/([\w*/-]+(?:\.[\w*]+)+)", text):
            if m.group(1) == "tools" and m.group(2).startswith("results/") or not list((ROOT / m.group(1)).glob(m.group(2))):
                missing.append(f"{doc.relative_to(ROOT)}: {m.group(0)}")
    assert missing == [], "cited but not in the tree: " + ", ".join(sorted(set(missing)))
    assert not (TOOLS / "results").exists(), "tools/results/ is replaced by evidence/ (tools/evidence.py)"


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
    assert f"no record: tune it (kernelgen tune {untuned.spec_name})" in rows[untuned.name]
    other = tmp_path / "x.json"
    other.write_text("{}")
    with pytest.raises(SystemExit, match=r"x\.json is not a tuning record file"):
        tuning_summary.main(str(other))


def test_tuning_summary_flag_takes_optional_parameters_as_set_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """--flag min_blocks splits a record's launches by whether the occupancy bound is set (the H200 probe's records
    hold both); a parameter with no off value (vec) is refused in one line."""
    tuning_summary = _tool(monkeypatch, "tuning_summary")
    text = tuning_summary.flag_ab(str(ROOT / "evidence" / "h200_2026-12-07" / "occupancy_probe_records.json"),
                                  "min_blocks")
    row = next(line for line in text.splitlines() if line.startswith("| cake_64_8_fp8_q |"))
    assert "65536: 452.83 / 472.61 = 0.96x" in row  # evidence/h200_2026-12-07.md: best uncapped against best capped
    with pytest.raises(SystemExit, match=r"^tuning_summary: --flag takes a flag .* not 'vec'$"):
        tuning_summary.flag_ab(str(ROOT / "evidence" / "h200_2026-12-07" / "occupancy_probe_records.json"), "vec")


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


def _device_run_folder(folder: Path) -> Path:
    """A small RESULTS_DIR as tools/device_run.sh writes it, with numbers a wrong parser would not reproduce."""
    folder.mkdir()
    (folder / "gpu.txt").write_text("name, clocks.current.sm [MHz], clocks.current.memory [MHz]\n"
                                    "NVIDIA H200, 1980 MHz, 3201 MHz\nNVIDIA H200, 1980 MHz, 3201 MHz\n")
    (folder / "pytest_gpu.log").write_text(
        "....sF.E\n=========================== short test summary info ===========================\n"
        "SKIPPED [4] tests/test_gpu.py:12: 9 passed is not a summary\n"
        "FAILED tests/test_gpu.py::test_a - AssertionError: 3 passed, 1 failed in 2.00s\n"
        "2 failed, 170 passed, 4 skipped, 15 warnings, 1 error in 301.61s (0:05:01)\n")
    (folder / "sanitize_memcheck.log").write_text(
        "========= COMPUTE-SANITIZER\n========= Invalid __global__ write of size 4 bytes\n"
        "sanitize: 376 launches over 26 variants done\n========= ERROR SUMMARY: 2 errors\nmemcheck exit 9\n")
    (folder / "sanitize_groups_racecheck.log").write_text(
        "sanitize: 208 launches over 14 launch groups done\n"
        "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\nracecheck groups exit 0\n")
    (folder / "sanitize_racecheck.log").write_text("========= COMPUTE-SANITIZER\n")  # killed before its end
    (folder / "tune_gqa_kv.log").write_text(
        "tuning: compiled in 19.1 s; timing 3 variants on 1 GPU\na_k: done choice [[1, 't32.b2.v4']]\n"
        "a_v: done choice [[1, 't4.b64.v8']]\nerror: a_q: not tuned: no configuration ran\n"
        "a_k: 72 configurations timed, 0 failed\na_v: 64 configurations timed, 3 failed\nrecords written to cache\n")
    (folder / "tune_example.log").write_text("x: done choice [[1, 't8.b8.v8']]\n")  # cut short: no tables
    row = dict(workload="prefill", us=1.234, tbps=0.5, roofline_pct=12.4)
    (folder / "bench_gqa_kv_prefill.json").write_text(json.dumps(
        {"gpu": "NVIDIA H200", "workload": "prefill", "roofline_gbs": 4193.4, "floor_us": 0.714,
         "rows": [dict(row, variant="k_bf16", tokens=1), dict(row, variant="k_bf16", tokens=262144, us=256.0),
                  dict(row, variant="k_fp8", tokens=1)]}))
    (folder / "bench_gqa_kv_prefill.log").write_text("")
    (folder / "bench_example_decode.log").write_text("Traceback ...\n")  # its bench died: no JSON
    (folder / "hit_attention_prep.txt").write_text("0.412\n0.377\n0.391\n")  # the median is not the mean
    (folder / "hit_mla.txt").write_text("")  # cut short before its first timed build
    return folder


def test_evidence_summarises_counts_exit_statuses_and_bench_rows_stamped_with_the_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evidence = _tool(monkeypatch, "evidence")
    folder = _device_run_folder(tmp_path / "run")
    stamped = evidence.write_stamp(folder)  # what device_run.sh does before its phases
    assert json.loads((folder / "stamp.json").read_text())["digest"] == stamped["digest"]
    assert re.fullmatch(r"[0-9a-f]{16}", stamped["digest"]) and stamped["digest"] == evidence.code_digest()[0]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = head.stdout.strip() if head.returncode == 0 else "unknown"
    assert stamped["commit"] == commit

    assert evidence.main([str(folder), "--out", str(tmp_path / "evidence")]) == 0
    text = (tmp_path / "evidence" / "nvidia-h200.md").read_text()  # one file per GPU, named by its slug
    assert text.startswith("# Evidence: NVIDIA H200\n")
    assert f"- commit: {commit}" in text and f"- code digest: {stamped['digest']} " in text
    assert "NVIDIA H200, 1980 MHz, 3201 MHz (x2)" in text
    assert "| pytest_gpu.log | 170 | 2 | 4 | 1 | 302 |" in text
    assert "| sanitize_memcheck.log | memcheck | 9 | ERROR SUMMARY: 2 errors | 376 launches over 26 variants |" in text
    assert ("| sanitize_groups_racecheck.log | racecheck | 0 | RACECHECK SUMMARY: 0 hazards displayed (0 errors, "
            "0 warnings) | 208 launches over 14 launch groups |") in text
    assert "| sanitize_racecheck.log | racecheck | not recorded (cut short?) | - | - |" in text
    assert "| tune_gqa_kv.log | 2 | 1 | 136 | 3 | yes |" in text
    assert "| tune_example.log | 1 | 0 | 0 | 0 | no: the run was cut short |" in text
    assert "`bench_example_decode.log`: no JSON beside the log: that bench failed" in text
    assert "### prefill on NVIDIA H200 (copy roofline 4193 GB/s, empty kernel 0.71 us)" in text
    assert "| variant | N=1 | N=262144 |" in text
    assert "| k_bf16 | 1.23 / 0.50 / 12% | 256.00 / 0.50 / 12% |" in text and "| k_fp8 | 1.23 / 0.50 / 12% | - |" in text
    assert "| attention_prep | 3 | 0.412, 0.377, 0.391 | 0.391 |" in text
    assert "| mla | 0 | none: cut short | - |" in text

    assert evidence.pytest_counts("===== 1 failed, 2 passed in 0.50s =====")["failed"] == 1
    assert evidence.pytest_counts("collected 3 items\nKilled\n") is None


def test_evidence_says_what_is_missing_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(*args: str) -> str:
        done = _run_tool("tools/evidence.py", *args, "--out", str(tmp_path / "evidence"))
        assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == "", done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        return done.stderr.strip()

    assert run(str(tmp_path / "nowhere")).startswith(f"evidence: no such folder: {tmp_path / 'nowhere'}")
    (tmp_path / "empty").mkdir()
    assert "holds no outputs of tools/device_run.sh" in run(str(tmp_path / "empty"))
    folder = _device_run_folder(tmp_path / "run")
    (folder / "bench_x_decode.json").write_text(json.dumps({"gpu": "NVIDIA H200", "what": "hand-merged"}))
    assert run(str(folder)) == "evidence: bench_x_decode.json is not a `kernelgen bench --json` file (no 'rows')"
    (folder / "bench_x_decode.json").unlink()
    (folder / "gpu.txt").unlink()
    (folder / "bench_gqa_kv_prefill.json").unlink()
    assert "names no GPU" in run(str(folder))
    (folder / "stamp.json").write_text(json.dumps({"commit": "abc", "dirty": 0, "digest": "0123456789abcdef"}))
    assert "holds outputs of other code (digest 0123456789abcdef" in run("--stamp", str(folder))
    assert not (tmp_path / "evidence").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_evidence_digest_is_sha256sum_of_the_tracked_code_and_the_stamp_says_dirty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evidence = _tool(monkeypatch, "evidence")
    repo = tmp_path / "repo"
    files = {"kernelgen/a.py": "a = 1\n", "kernelgen/sub/b.py": "b = 2\n", "templates/k.cu.j2": "{{ x }}\n",
             "specs/s.yaml": "name: s\n", "README.md": "not code\n"}
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "c"]):
        subprocess.run(git + args, check=True, capture_output=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    lines = "".join(f"{hashlib.sha256(files[p].encode()).hexdigest()}  {p}\n"
                    for p in sorted(p for p in files if p != "README.md"))  # what `xargs sha256sum` prints
    digest = hashlib.sha256(lines.encode()).hexdigest()[:16]

    clean = evidence.stamp(repo)
    assert (clean["commit"], clean["dirty"], clean["digest"]) == (head, 0, digest)
    (repo / "README.md").write_text("edited\n")
    (repo / "kernelgen" / "untracked.py").write_text("")  # not tracked: not in the digest, but the tree is dirty
    outside = evidence.stamp(repo)
    assert (outside["dirty"], outside["digest"]) == (2, digest)
    (repo / "specs" / "s.yaml").write_text("name: t\n")
    assert evidence.stamp(repo)["digest"] != digest
    assert evidence._commit_text(outside) == f"{head} dirty (2 paths changed or untracked)"
    copy = repo / "copy"  # a copied tree inside another checkout: its own files on disk, no commit of its own
    for path in ("kernelgen/a.py", "specs/s.yaml"):
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_text(files[path])
    (copy / "kernelgen" / "__pycache__").mkdir()
    (copy / "kernelgen" / "__pycache__" / "a.cpython-312.pyc").write_bytes(b"\0")
    copied = evidence.stamp(copy, commit="abc1234")
    lines = "".join(f"{hashlib.sha256(files[p].encode()).hexdigest()}  {p}\n" for p in ("kernelgen/a.py", "specs/s.yaml"))
    assert (copied["commit"], copied["dirty"]) == ("abc1234", None)
    assert copied["digest"] == hashlib.sha256(lines.encode()).hexdigest()[:16]
    assert copied["digest_of"] == "files on disk (no git checkout)"


def test_peer_sglang_page_bytes_are_kernelgens_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's page rule (kv_layout.cuh, as the peer tool transcribes it) and kernelgen's layout of the variant
    that writes each layout agree for every page size."""
    from dataclasses import replace

    from kernelgen.layout.layout import layout_of
    from kernelgen.spec.parse import load_spec

    peer = _tool(monkeypatch, "peer_sglang")
    sbs = _tool(monkeypatch, "side_by_side_sglang")
    spec = load_spec("dsv4_mainkv")
    assert set(sbs.MAINKV) == set(peer.TOKEN_BYTES)
    for layout, name in sbs.MAINKV.items():
        for page_size in (1, 2, 16, 64, 256):
            v = replace(spec.variant(name), page_size=page_size)
            assert layout_of(v).page_bytes == peer.page_bytes(layout, page_size), (layout, page_size)


def test_side_by_side_compares_fields_by_code_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from kernelgen.layout.layout import layout_of
    from kernelgen.spec.parse import load_spec

    sbs = _tool(monkeypatch, "side_by_side_sglang")
    lay = layout_of(load_spec("dsv4_mainkv").variant("dsv4_mainkv_v41_p64"))
    ours = torch.zeros(2, lay.page_bytes, dtype=torch.uint8)
    theirs = ours.clone()
    theirs[0, 5] = 1  # values[slot 0, dim 5]: code 0 -> 1, one step
    theirs[1, 7] = 0x81  # values[slot 64, dim 7]: code 0 -> -1 (sign-magnitude), one step
    theirs[0, lay.field("scales").offset(3) + 2] = 3  # a scale byte of slot 3: 0 -> 3, three steps
    got = sbs.compare(lay, ours, theirs, torch.tensor([0, 64, 3]))
    assert got["bytes_differ"] == 3
    assert got["values"] == {"values": 3 * 512, "differ": 2, "max_steps": 1, "rows_differ": 2}
    assert got["scales"] == {"values": 3 * 16, "differ": 1, "max_steps": 3, "rows_differ": 1}


def test_peer_flashinfer_takes_its_page_module_from_the_wheel_and_says_what_is_missing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The FlashInfer peer copies the page module's sources, tvm_ffi_utils.h and the header trees out of the wheel
    (nothing else), reads the version from its METADATA, and refuses a wheel without the sources in one line."""
    import zipfile

    peer = _tool(monkeypatch, "peer_flashinfer")
    wheel = tmp_path / "flashinfer_python-0.7.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in (*peer.SOURCES, "csrc/tvm_ffi_utils.h", "include/flashinfer/page.cuh",
                     "cccl/libcudacxx/include/cuda/cmath", "csrc/unrelated.cu", "cutlass/include/x.h"):
            z.writestr(peer.DATA + name, "//")
        z.writestr("flashinfer_python-0.7.2.dist-info/METADATA", "Name: flashinfer-python\nVersion: 0.7.2\n")
    src = tmp_path / "src"
    assert peer.extract(wheel, src) == "0.7.2"
    got = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    assert got == sorted([*peer.SOURCES, "csrc/tvm_ffi_utils.h", "include/flashinfer/page.cuh",
                          "cccl/libcudacxx/include/cuda/cmath"])
    bare = tmp_path / "bare.whl"
    with zipfile.ZipFile(bare, "w") as z:
        z.writestr(peer.DATA + "csrc/page.cu", "//")
    with pytest.raises(SystemExit, match=r"^peer_flashinfer: .*bare.whl has no flashinfer/data/csrc/"
                                         r"flashinfer_page_binding.cu$"):
        peer.extract(bare, tmp_path / "src2")
    flags, _ = peer.toolchain("sm_90a", src)
    assert "-use_fast_math" in flags and "-gencode=arch=compute_90a,code=sm_90a" in flags


def test_flashinfer_side_by_side_counts_code_steps_with_signs(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from kernelgen.layout.layout import layout_of
    from kernelgen.spec.parse import load_spec

    sbs = _tool(monkeypatch, "side_by_side_flashinfer")
    lay = layout_of(load_spec("attention_prep").variant("llama3_8b_nvfp4_v"))
    ours = torch.zeros(2, lay.page_bytes, dtype=torch.uint8)
    theirs = ours.clone()
    theirs[0, 0] = 0x09  # record 0, dim 0: code +0 -> -1 (sign bit 3), one step
    theirs[1, 64 + 1] = 0x20  # record 1 of page 1 (slot 16's head 1), dim 3: 0 -> 2, two steps
    theirs[0, lay.field("scales").offset(8) + 2] = 0x81  # head 0 of slot 1: scale 0 -> -1 (sign bit 7)
    got = sbs.field_steps(lay, ours, theirs, torch.tensor([0, 16, 1]))
    assert got["bytes_differ"] == 3
    assert got["values"] == {"values": 3 * 8 * 128, "differ": 2, "max_steps": 2, "rows_differ": 2}
    assert got["scales"] == {"values": 3 * 8 * 8, "differ": 1, "max_steps": 1, "rows_differ": 1}


def test_ablate_cuts_apply_to_the_current_headers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every cut of tools/ablate.py edits text the kernel headers hold exactly once (a stale cut would time the
    intact kernel under its name), each cut changes its headers, and a cut whose text is gone is refused by name."""
    ablate = _tool(monkeypatch, "ablate")
    intact = ablate.headers_with([], tmp_path / "intact") / "kernelgen"
    for cut, (_, edits) in ablate.CUTS.items():
        cut_dir = ablate.headers_with([cut], tmp_path / cut) / "kernelgen"
        changed = {h.name for h in cut_dir.iterdir() if h.read_bytes() != (intact / h.name).read_bytes()}
        assert changed == {header for header, _, _ in edits}, cut
    monkeypatch.setitem(ablate.CUTS, "gone", ("a cut of text no header holds", [("kernel.cuh", "no such text", "")]))
    with pytest.raises(SystemExit, match=r"cut 'gone': its text occurs 0 times in kernel.cuh"):
        ablate.headers_with(["gone"], tmp_path / "gone")


def test_ablate_times_the_cuts_that_subsume_others_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """after_norm (leave at the norm) and stores (the math runs, nothing is written) are timed alone: in the "all cuts"
    build they would turn it into a build that writes nothing (the H100 run of a5628f8 read it as stores kept)."""
    ablate = _tool(monkeypatch, "ablate")
    builds = ablate.builds_for(list(ablate.CUTS))
    assert builds["intact"] == [] and all(builds[c] == [c] for c in ablate.CUTS)
    assert set(ablate.ALONE) <= set(ablate.CUTS) and not set(builds["all cuts"]) & set(ablate.ALONE)
    assert set(builds["all cuts"]) == set(ablate.CUTS) - set(ablate.ALONE)
    assert "all cuts" not in ablate.builds_for(["nan_vote", "after_norm"])  # one named part: nothing to combine
    ablate.headers_with(builds["all cuts"], tmp_path / "together")  # its edits apply together (each text once)
    assert set(ablate.ALONE) == {"after_norm", "stores", "pdl_wait", "pdl_trigger", "trigger_after_norm", "skip_64",
                                 "skip_128"}
    combined = ablate.builds_for(["after_norm+skip_64", "nan_vote", "exact_root"])  # a+b: one build with both
    assert combined["after_norm+skip_64"] == ["after_norm", "skip_64"] and combined["all cuts"] == ["nan_vote", "exact_root"]
    ablate.headers_with(combined["after_norm+skip_64"], tmp_path / "combined")


def test_ablate_moves_the_pdl_trigger_or_drops_one_half_of_the_handshake(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """The PDL cuts: trigger_after_norm keeps one launch_dependents, after the norm and before the write vote (not at
    the wait); pdl_trigger keeps none and pdl_wait no wait; weights and global_scale leave no load of their operand."""
    ablate = _tool(monkeypatch, "ablate")

    def kernel(cut: str, header: str = "kernel.cuh") -> str:
        return (ablate.headers_with([cut], tmp_path / cut) / "kernelgen" / header).read_text()

    moved = kernel("trigger_after_norm")
    assert moved.count('"griddepcontrol.launch_dependents;"') == 1 and moved.count('"griddepcontrol.wait;"') == 1
    trigger, norm, vote = (moved.index(t) for t in ("griddepcontrol.launch_dependents", "    normalize(r, o, p);\n",
                                                    "if (!__any_sync(kWarp, write || dry)) return;  // the whole warp"))
    assert norm < trigger < vote
    assert '"griddepcontrol.launch_dependents;"' not in kernel("pdl_trigger")
    assert '"griddepcontrol.wait;"' not in kernel("pdl_wait")
    assert "(w + r.first(c)" not in kernel("weights", "norm.cuh")
    assert "p.global_scale)" not in kernel("global_scale")
    # the probes: never-run stores before the norm (each at its own address, so none is merged away)
    skipped = kernel("skip_64")
    assert skipped.count("st.volatile.shared.u32") == 64 and skipped.count("[%0+252]") == 1
    assert skipped.index("// probe: never runs") < skipped.index("    normalize(r, o, p);\n")


def test_ablate_times_the_launch_it_is_given_at_every_token_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its builds route every token count to the named launch, PDL included (a tuning plan would run the default)."""
    from kernelgen.spec.parse import load_spec
    from kernelgen.spec.variant import Launch

    ablate = _tool(monkeypatch, "ablate")
    v = load_spec("dsv4_mainkv").kernel("dsv4_mainkv_v41_p64")
    named = Launch.from_id("t128.b1.v4.pf.pdl.er.lm")
    plan = ablate.plan_for(v, named.id)
    for n in (1, 32, 1 << 20):
        config, pdl = plan.pick(n)
        assert (config, pdl) == (named.instance, True)


def test_sass_count_bound_is_the_issue_share_a_count_needs_at_the_roofline(monkeypatch: pytest.MonkeyPatch) -> None:
    """--bound's arithmetic: a thread instruction per byte-token at the issue rate of the GPU is a share of 1; the
    per-value count is the thread's count spread over the dims it holds; the estimate is 78 % of the issue rate over
    that share, capped at 100 %; a malformed --bound is refused in one line before anything compiles."""
    sc = _tool(monkeypatch, "sass_count")
    # 1 SM at 1 GHz issues 128e9 thread instructions a second; 128 per token of 4180 B at 4180 GB/s is all of them
    assert sc.issue_share(128, 4180, 1, 1.0, 4180) == pytest.approx(1.0)
    assert sc.issue_share(64, 4180, 2, 1.0, 4180) == pytest.approx(0.25)
    got = sc.bound("attention_prep", "cake_64_8_fp8_q", {"t4.b16.v8": 640, "t8.b16.v8": 640}, 132, 1.98, 4180)
    # 64 heads of 128 bf16 read, 64 x (128 e4m3 + a 4-byte scale) written, 16 B of indices per token
    assert got["t4.b16.v8"]["bytes_per_token"] == 64 * 256 + 64 * 132 + 16
    assert got["t4.b16.v8"]["per_value"] == pytest.approx(640 * 4 / 128)
    share = 64 * 4 * 640 * (4180e9 / 24848) / (132 * 128 * 1.98e9)
    assert got["t4.b16.v8"]["share"] == pytest.approx(share)
    assert got["t4.b16.v8"]["estimate_pct"] == pytest.approx(100 * 0.78 / share)
    assert got["t8.b16.v8"]["estimate_pct"] == pytest.approx(50 * 0.78 / share)  # twice the threads, half the estimate
    assert sc.bound("attention_prep", "cake_64_8_fp8_q", {"t4.b16.v8": 10}, 132, 1.98, 4180)["t4.b16.v8"][
        "estimate_pct"] == 100.0
    with pytest.raises(SystemExit, match=r"^--bound takes a variant, not the launch group cake_64_8_fp8: name a member"):
        sc.bound("attention_prep", "cake_64_8_fp8", {}, 132, 1.98, 4180)
    done = _run_tool("tools/sass_count.py", "attention_prep", "cake_64_8_fp8_q", "t4.b16.v8", "--bound", "132,1.98")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("--bound takes SMS,GHZ,GBS")


def test_sass_count_refuses_a_malformed_launch_id_in_one_line_and_takes_comma_separated_ids() -> None:
    """A launch id it cannot read is named in one line before anything compiles; ids may also come comma-separated."""
    done = _run_tool("tools/sass_count.py", "attention_prep", "cake_64_8_fp8_q", "t4.b16.v8,t4.b16", "--regs")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("sass_count: 't4.b16' is not a launch id like t8.b8.v8")
