"""One summary per GPU of what `tools/device_run.sh` measured, stamped with the code it measured.

    python tools/evidence.py RESULTS_DIR [--out evidence] [--gpu NAME] [--commit REV]   # writes evidence/<gpu>.md
    python tools/evidence.py --stamp RESULTS_DIR [--commit REV]   # device_run.sh, before its phases
    python tools/evidence.py --digest                             # this tree's code digest

RESULTS_DIR is the folder device_run.sh writes (default `.device_run/`, git-ignored): `gpu.txt` (nvidia-smi's
name and clocks), `stamp.json`, `pytest*.log`, `sanitize*.log`, `tune_*.log`, `bench_*.json`, `hit_*.txt`. The
summary, `evidence/<gpu slug>.md` (e.g. `evidence/nvidia-h200.md`), lists the pytest counts, the sanitizer exit
statuses, the tuning runs, one row per variant of every bench JSON (`tools/bench_tables.py`'s tables) and the
cache-hit wall times. The logs
themselves are not committed; the summary is, and is rewritten by every run of device_run.sh.

The stamp is taken when the run begins (`--stamp`): `git rev-parse HEAD`, "dirty" where `git status
--porcelain` lists any path, and the code digest: the first 16 hex digits of the sha256 of the `sha256sum`
lines of the tracked files under kernelgen/, templates/ and specs/, in path order, the same as

    git ls-files kernelgen templates specs | xargs sha256sum | sha256sum | cut -c1-16

Where there is no git checkout (a copied tree), the digest is over the files on disk there (no __pycache__), and
the commit is `--commit`'s or "unknown". A folder holds the outputs of one code digest: `--stamp` refuses a
folder stamped with another."""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tables import table_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("kernelgen", "templates", "specs")
STAMP = "stamp.json"


class EvidenceError(Exception):
    """A missing or unreadable input: printed as one line, exit status 2."""


def _git(root: Path, *args: str) -> str | None:
    """git's output in root, or None where root is not the top of a git checkout (no git, a copied tree, or a
    folder inside another repository)."""
    def run(*a: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None
    top = run("rev-parse", "--show-toplevel")
    if top is None or Path(top.strip()).resolve() != root.resolve():
        return None
    return run(*args)


def _code_files(root: Path) -> tuple[list[str], str]:
    """The files the digest covers, in path order, and where the list came from."""
    listed = _git(root, "ls-files", "-z", "--", *CODE_DIRS)
    if listed is not None:
        return sorted(p for p in listed.split("\0") if p and (root / p).is_file()), "tracked files"
    found = [p.relative_to(root).as_posix() for d in CODE_DIRS for p in (root / d).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".lock")]
    return sorted(found), "files on disk (no git checkout)"


def code_digest(root: Path = ROOT) -> tuple[str, str]:
    """(first 16 hex of sha256 over `sha256sum` lines of the code files, what the files were)."""
    files, source = _code_files(root)
    if not files:
        raise EvidenceError(f"no files under {', '.join(CODE_DIRS)} in {root}: not a kernelgen tree")
    lines = "".join(f"{hashlib.sha256((root / p).read_bytes()).hexdigest()}  {p}\n" for p in files)
    return hashlib.sha256(lines.encode()).hexdigest()[:16], source


def stamp(root: Path = ROOT, commit: str | None = None) -> dict:
    """The commit, whether the tree has changes, and the code digest of the tree at root."""
    digest, source = code_digest(root)
    head = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain")
    changed = len(status.splitlines()) if status is not None else None
    return {"commit": head.strip() if head else (commit or "unknown"), "dirty": changed,
            "digest": digest, "digest_of": source, "at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def _commit_text(s: dict) -> str:
    if s.get("dirty") is None:
        return f"{s.get('commit', 'unknown')} (no git checkout where it ran: whether the tree had changes is unknown)"
    return s["commit"] + (f" dirty ({s['dirty']} paths changed or untracked)" if s["dirty"] else "")


def write_stamp(folder: Path, root: Path = ROOT, commit: str | None = None) -> dict:
    """Stamp folder with the code about to be measured; refuse a folder that holds another code's outputs."""
    folder.mkdir(parents=True, exist_ok=True)
    now = stamp(root, commit)
    path = folder / STAMP
    if path.exists():
        old = _read_json(path)
        if old.get("digest") != now["digest"]:
            raise EvidenceError(f"{folder} holds outputs of other code (digest {old.get('digest')}, this tree "
                                f"{now['digest']}): give RESULTS_DIR a new folder")
        return old
    path.write_text(json.dumps(now, indent=1) + "\n")
    return now


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise EvidenceError(f"{path.name} is not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise EvidenceError(f"{path.name} is not a JSON object")
    return data


# pytest's last line: "2 failed, 170 passed, 4 skipped, 1 error in 12.00s" (with `=` around it without -q)
_PYTEST_SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ [a-z]+(?:, \d+ [a-z]+)*|no tests ran) in (?P<secs>[\d.]+)s\b")
_PLURAL = {"error": "errors", "warning": "warnings"}


def pytest_counts(text: str) -> dict[str, float] | None:
    """Counts of pytest's final summary line (passed, failed, skipped, errors, ..., seconds); None without one."""
    last = None
    for line in text.splitlines():
        m = _PYTEST_SUMMARY.match(line.strip())
        if m:
            last = m
    if last is None:
        return None
    counts: dict[str, float] = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for n, word in re.findall(r"(\d+) ([a-z]+)", last.group("counts")):
        counts[_PLURAL.get(word, word)] = int(n)
    counts["seconds"] = float(last.group("secs"))
    return counts


def sanitizer_result(text: str) -> dict[str, str | None]:
    """The exit status device_run.sh appends ("memcheck exit 0"), the sanitizer's summary and sanitize.py's count."""
    def last(pattern: str) -> re.Match | None:
        found = None
        for line in text.splitlines():
            found = re.match(pattern, line.strip()) or found
        return found
    ex = last(r"^(\w+)(?: groups)? exit (\d+)$")
    summary = last(r"^=+ ((?:ERROR|RACECHECK|INITCHECK|SYNCCHECK) SUMMARY: .*)$")
    done = last(r"^sanitize: (.*) done$")
    return {"tool": ex.group(1) if ex else None, "exit": ex.group(2) if ex else None,
            "summary": summary.group(1) if summary else None, "launches": done.group(1) if done else None}


def tune_result(text: str) -> dict[str, object]:
    """From `kernelgen tune`'s log: kernels tuned ("NAME: done choice ..."), kernels not tuned ("error: NAME: not
    tuned"), the configurations its tables say were timed and failed, and whether it wrote its records."""
    timed = re.findall(r"^(\S+): (\d+) configurations timed, (\d+) failed", text, re.M)
    return {"tuned": len(re.findall(r"^\S+: done choice", text, re.M)),
            "not_tuned": len(re.findall(r"^error: \S+: not tuned", text, re.M)),
            "configurations": sum(int(t[1]) for t in timed), "failed": sum(int(t[2]) for t in timed),
            "finished": bool(re.search(r"^records written", text, re.M))}


def hit_times(text: str) -> list[float]:
    """The wall seconds of a hit phase's file (`hit_<spec>.txt`: one `kernelgen build` of a cached spec per line)."""
    return [float(line) for line in text.split() if re.fullmatch(r"\d+(\.\d+)?", line)]


def gpu_name(folder: Path, benches: list[Path]) -> str:
    smi = folder / "gpu.txt"  # nvidia-smi --query-gpu=name,... --format=csv: a header, then one row per GPU
    if smi.is_file():
        rows = [line.split(",")[0].strip() for line in smi.read_text().splitlines()[1:] if line.strip()]
        if rows:
            return rows[0]
    for path in benches:
        name = _read_json(path).get("gpu")
        if name:
            return str(name)
    raise EvidenceError(f"{folder} names no GPU (no gpu.txt from nvidia-smi, no bench JSON): pass --gpu NAME")


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def summary(folder: Path, gpu: str | None = None, commit: str | None = None, root: Path = ROOT) -> tuple[str, str]:
    """(gpu slug, Markdown summary) of the outputs of tools/device_run.sh in folder."""
    if not folder.is_dir():
        raise EvidenceError(f"no such folder: {folder} (give the RESULTS_DIR tools/device_run.sh wrote)")
    pytests = sorted(folder.glob("pytest*.log"))
    sanitizers = sorted(folder.glob("sanitize*.log"))
    tunes = sorted(folder.glob("tune_*.log"))
    benches = sorted(folder.glob("bench_*.json"))
    hits = sorted(folder.glob("hit_*.txt"))
    if not (pytests or sanitizers or tunes or benches or hits or list(folder.glob("bench_*.log"))):
        raise EvidenceError(f"{folder} holds no outputs of tools/device_run.sh "
                            "(pytest*.log, sanitize*.log, tune_*.log, bench_*.json, hit_*.txt)")
    name = gpu or gpu_name(folder, benches)
    now = stamp(root, commit)
    if (folder / STAMP).is_file():
        measured, note = _read_json(folder / STAMP), ""
        if measured.get("digest") != now["digest"]:
            note = f"- **the code changed during the run**: the tree's digest is now {now['digest']}\n"
    else:
        measured, note = now, "- stamped when summarised (the folder has no stamp.json from the run's start)\n"
    smi = folder / "gpu.txt"
    boards: dict[str, int] = {}
    for line in smi.read_text().splitlines()[1:] if smi.is_file() else []:
        if line.strip():
            boards[line.strip()] = boards.get(line.strip(), 0) + 1
    out = [f"# Evidence: {name}", "",
           "Written by `tools/evidence.py` from the outputs of `tools/device_run.sh`; do not edit by hand.", "",
           f"- commit: {_commit_text(measured)}",
           f"- code digest: {measured.get('digest', '-')} (sha256 over {'/, '.join(CODE_DIRS)}/: "
           f"{measured.get('digest_of', 'tracked files')}; `python tools/evidence.py --digest` prints a tree's)",
           f"- run began: {measured.get('at', '-')}; summarised: {now['at']}"]
    out += [note.rstrip("\n")] if note else []
    out += [f"- GPU (nvidia-smi name, SM clock, memory clock): {b}" + (f" (x{n})" if n > 1 else "")
            for b, n in boards.items()] or [f"- GPU: {name}"]

    out += ["", "## GPU tests", ""]
    if pytests:
        out += ["| log | passed | failed | skipped | errors | seconds |", "|---|---|---|---|---|---|"]
        for p in pytests:
            c = pytest_counts(p.read_text(errors="replace"))
            out.append(f"| {p.name} | no pytest summary line: the run was cut short | | | | |" if c is None else
                       f"| {p.name} | {c['passed']} | {c['failed']} | {c['skipped']} | {c['errors']} | {c['seconds']:.0f} |")
    else:
        out.append("not run")

    out += ["", "## compute-sanitizer", ""]
    if sanitizers:
        out += ["| log | tool | exit status | sanitizer summary | launches |", "|---|---|---|---|---|"]
        for p in sanitizers:
            s = sanitizer_result(p.read_text(errors="replace"))
            status = s["exit"] if s["exit"] is not None else "not recorded (cut short?)"
            tool = s["tool"] or next((t for t in ("memcheck", "racecheck", "initcheck", "synccheck") if t in p.name), None)
            out.append(f"| {p.name} | {_cell(tool)} | {status} | {_cell(s['summary'])} | {_cell(s['launches'])} |")
    else:
        out.append("not run")

    out += ["", "## Tuning", ""]
    if tunes:
        out += ["| log | kernels tuned | not tuned | configurations timed | failed | records written |",
                "|---|---|---|---|---|---|"]
        for p in tunes:
            t = tune_result(p.read_text(errors="replace"))
            out.append(f"| {p.name} | {t['tuned']} | {t['not_tuned']} | {t['configurations']} | {t['failed']} | "
                       f"{'yes' if t['finished'] else 'no: the run was cut short'} |")
        others = sorted(p.name for p in folder.glob("*.json") if p.name != STAMP and not p.name.startswith("bench_"))
        if others:
            out += ["", "Record files in the folder (the tune phase copies `cache/*.json`): "
                    + ", ".join(f"`{r}`" for r in others) + "."]
    else:
        out.append("not run")

    out += ["", "## Benchmarks (`kernelgen bench`, CUDA-graph replay)", ""]
    failed = sorted(p.name for p in folder.glob("bench_*.log") if not p.with_suffix(".json").exists())
    if not benches and not failed:
        out.append("not run")
    out += [f"`{name}`: no JSON beside the log: that bench failed" for name in failed] + ([""] if failed else [])
    for p in benches:
        data = _read_json(p)
        try:
            out += [f"`{p.name}`", "", table_of(data)]
        except (KeyError, TypeError, ValueError) as e:
            raise EvidenceError(f"{p.name} is not a `kernelgen bench --json` file (no {e})") from None

    out += ["", "## Cache hit (`kernelgen build` of a built spec, whole process, warm disk)", ""]
    if hits:
        out += ["| spec | runs | wall seconds | median |", "|---|---|---|---|"]
        for p in hits:
            t = hit_times(p.read_text(errors="replace"))
            spec = p.stem.removeprefix("hit_")
            out.append(f"| {spec} | {len(t)} | {', '.join(f'{x:.3f}' for x in t)} | {sorted(t)[len(t) // 2]:.3f} |"
                       if t else f"| {spec} | 0 | none: cut short | - |")
    else:
        out.append("not run")
    return slug(name), "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="evidence", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, help="the RESULTS_DIR tools/device_run.sh wrote")
    ap.add_argument("--out", type=Path, default=ROOT / "evidence", help="where <gpu>.md goes (default evidence/)")
    ap.add_argument("--gpu", help="the GPU's name, where the folder has no gpu.txt or bench JSON")
    ap.add_argument("--commit", help="the commit, where the tree is not a git checkout")
    ap.add_argument("--stamp", action="store_true", help="stamp FOLDER with the code about to be measured")
    ap.add_argument("--digest", action="store_true", help="print this tree's code digest")
    args = ap.parse_args(argv)
    try:
        if args.digest:
            print(code_digest()[0])
            return 0
        if args.folder is None:
            ap.error("give the folder tools/device_run.sh wrote")
        if args.stamp:
            s = write_stamp(args.folder, commit=args.commit)
            print(f"evidence: {args.folder} stamped: commit {_commit_text(s)}, code digest {s['digest']}")
            return 0
        name, text = summary(args.folder, args.gpu, args.commit)
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"{name}.md"
        path.write_text(text)
        print(path)
        return 0
    except EvidenceError as e:
        print(f"evidence: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
