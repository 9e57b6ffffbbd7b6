"""The one build lifecycle: plan, find, lock, find again, stage, ninja, publish, load. Everything that builds goes through here."""
from __future__ import annotations

import logging
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from .. import knobs, resources
from .._version import __version__
from ..codegen.guards import precheck, violations
from ..codegen.launch import LaunchPlan, default_plan
from ..codegen.render import render_variant
from ..errors import BuildError, GuardViolation, StorageError, ToolchainError, storage_error, writing
from ..layout.layout import layout_of
from ..spec.group import Group
from ..spec.variant import Variant
from . import devicecode, processes
from .buildplan import (
    Unit,
    build_key,
    failed_outputs,
    first_error_line,
    headers_digest,
    ninja_text,
    storage_cause,
    trim_nvcc,
)
from .locks import locked
from .store import (
    CACHE_ELSEWHERE,
    Artifact,
    clean_dead_staging,
    is_published,
    kernels_dir,
    new_staging,
    publish,
    published_problem,
    record_ninja,
    write_file,
)
from .toolchain import Toolchain


log = logging.getLogger("kernelgen.build")


@dataclass(frozen=True)
class Planned:
    variant: Variant
    source: str | None  # None: the key came from the memo of this source's keys (render with text())
    key: str
    launch_plan: LaunchPlan
    archs: tuple[str, ...]

    def text(self) -> str:
        """The kernel's CUDA source (rendered now where the plan took its key from the memo)."""
        return self.source if self.source is not None else render_variant(self.variant, plan=self.launch_plan)


def read_headers() -> dict[str, bytes]:
    folder = resources.include_dir() / "kernelgen"
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.cuh"))}


def plan(variants: list[Variant], toolchain: Toolchain, archs: tuple[str, ...],
         launch_plans: list[LaunchPlan | None] | None = None, portable: bool = False,
         cache_dir: Path | None = None) -> list[Planned]:
    """Precheck and render every variant (with its launch plan; None = its default launch) before
    anything is written."""
    headers = headers_digest(read_headers())
    memo = KeyMemo(toolchain, archs, portable, cache_dir, headers)
    out = []
    for v, lp in zip(variants, launch_plans or [None] * len(variants)):
        lp = lp or default_plan(v)
        key = memo.get(v, lp)
        if key is not None:
            out.append(Planned(v, None, key, lp, archs))
            continue
        source = render_variant(v, plan=lp)  # prechecks the guards first
        key = build_key(source, headers, toolchain, archs, portable)
        memo.put(v, lp, key)
        out.append(Planned(v, source, key, lp, archs))
    memo.save()
    return out


@lru_cache(maxsize=1)
def renderer_digest() -> str:
    """Digest of everything a rendered source is made from: every template file and every module of kernelgen (the
    tables, the renderer, the guards): an edited checkout renders anew, never from a stale memo."""
    files = {}
    for root in (resources.template_dir(), Path(__file__).resolve().parents[1]):
        files.update({f"{root.name}/{p.relative_to(root).as_posix()}": p.read_bytes() for p in sorted(root.rglob("*"))
                      if p.is_file() and p.suffix in (".j2", ".cuh", ".py")})
    return headers_digest(files)


class KeyMemo:
    """The build keys of kernels rendered before, by what renders them (the kernel's and its launch plan's repr,
    every template file, kernelgen's version) and what else enters the key (toolchain, targets, linking): a cache
    hit then renders nothing (and imports no jinja2). Kept beside the kernels in the cache (render_keys.json), one
    table per salt (renderer, toolchain, targets): the newest SALTS tables are kept, each at most ENTRIES keys, so
    an edited checkout or a long tuning session does not grow it without end. Best effort: a memo that cannot be
    read or written only costs renders."""

    FILE = "render_keys.json"
    SALTS = 16
    ENTRIES = 50_000

    def __init__(self, toolchain: Toolchain, archs: tuple[str, ...], portable: bool, cache_dir: Path | None,
                 headers: str) -> None:
        import hashlib
        import json

        from .buildplan import CUDA_FLAGS

        self.path = kernels_dir(cache_dir) / self.FILE
        salt = json.dumps([renderer_digest(), headers, list(CUDA_FLAGS), __version__, toolchain.fingerprint(),
                           list(archs), portable])
        self.salt = hashlib.sha256(salt.encode()).hexdigest()[:32]
        try:
            tables = json.loads(self.path.read_text())
            self.tables: dict[str, dict[str, str]] = {k: v for k, v in tables.items() if isinstance(v, dict)}
        except (OSError, ValueError, AttributeError):
            self.tables = {}
        self.keys = self.tables.pop(self.salt, {})
        self.added = False

    @staticmethod
    def _id(v: Variant | Group, lp: LaunchPlan) -> str:
        import hashlib

        return hashlib.sha256(f"{v!r}|{lp!r}".encode()).hexdigest()[:32]

    def get(self, v: Variant | Group, lp: LaunchPlan) -> str | None:
        return self.keys.get(self._id(v, lp))

    def put(self, v: Variant | Group, lp: LaunchPlan, key: str) -> None:
        self.keys[self._id(v, lp)] = key
        self.added = True

    def save(self) -> None:
        import json

        if not self.added:
            return
        keys = dict(list(self.keys.items())[-self.ENTRIES:])
        tables = {**dict(list(self.tables.items())[-(self.SALTS - 1):]), self.salt: keys}  # this salt is the newest
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            knobs.write_atomic(self.path, json.dumps(tables))  # atomic: readers see the old memo or the new one
        except OSError:
            pass


def artifact_for(p: Planned, root: Path) -> Artifact:
    return Artifact(p.variant, p.key, root / f"{p.variant.name}-{p.key[:20]}", p.launch_plan, p.archs)


Progress = Callable[[int, int, str], None]  # (steps done, steps in all, what ninja just started)
_STATUS = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")


def run_ninja(build_dir: Path, jobs: int | None, progress: Progress | None = None,
              on_start: Callable[[int], None] | None = None, elsewhere: str = CACHE_ELSEWHERE) -> str:
    """Run ninja, keeping going past failed units (failed_outputs(output) says why each failed), reporting
    each step it starts to `progress` and its pid to `on_start`. ninja and every compiler it starts die
    with this build, however it ends (processes.owned). Returns ninja's own output; raises StorageError
    when the disk refused a write, BuildError when ninja itself failed before running any unit."""
    jobs = jobs if jobs is not None else knobs.jobs()
    if jobs is not None and jobs < 1:
        raise ToolchainError(f"--jobs must be at least 1, got {jobs}")
    ninja = shutil.which("ninja")
    if ninja is None:
        raise ToolchainError("ninja not found on PATH: pip install ninja")
    lines = []
    with processes.owned([ninja, "-k", "0"] + (["-j", str(jobs)] if jobs else []), build_dir) as proc:
        if on_start is not None:
            on_start(proc.pid)
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            m = _STATUS.match(line.strip())
            if m and progress is not None:
                progress(int(m.group(1)), int(m.group(2)), m.group(3))
        code = proc.wait()
    output = "".join(lines).strip()
    if code != 0 and "ninja: error" in output:
        _raise_if_storage(output, build_dir, elsewhere, "ninja")
        raise BuildError(f"ninja failed: {trim_nvcc(output)}")
    return output


def _raise_if_storage(text: str, build_dir: Path, elsewhere: str, who: str) -> None:
    """A build that failed because the disk refused a write is a StorageError naming the build folder
    (with nvcc's or ninja's own line, which names the file), not a compile error."""
    found = storage_cause(text)
    if found is not None:
        code, cause, line = found
        raise StorageError(f"{storage_error(OSError(code, cause), build_dir, elsewhere=elsewhere)} ({who}: {line})")


def _device_code(library: Path, a: Artifact, archs: tuple[str, ...]) -> dict[str, object]:
    """The manifest's record of what each instance runs (build/devicecode.py); none where it cannot be read
    (then tuning records cannot be checked against this artifact, and loads use the default launch)."""
    try:
        return {"device_code": devicecode.instance_keys(library.read_bytes(), a.launch_plan.configs, archs)}
    except devicecode.DeviceCodeError as exc:
        log.warning("kernelgen: %s: cannot read its kernels' device code (%s)", a.variant.name, exc)
        return {}


def _manifest(a: Artifact, archs: tuple[str, ...], toolchain: Toolchain, library: Path) -> dict[str, object]:
    if isinstance(a.variant, Group):
        layouts = {role: layout_of(v) for role, v in a.variant.members}
        sizes: dict[str, object] = {"members": {role: {"variant": v.name, "page_bytes": layouts[role].page_bytes,
                                                       "bytes_per_token": layouts[role].bytes_per_token}
                                                for role, v in a.variant.members}}
    else:
        layout = layout_of(a.variant)
        sizes = {"page_bytes": layout.page_bytes, "bytes_per_token": layout.bytes_per_token}
    return {
        "variant": a.variant.name,
        "spec": a.variant.spec_name,
        "key": a.key,
        "archs": list(archs),
        "toolchain": toolchain.fingerprint(),
        "kernelgen": __version__,
        **sizes,
        "launch_configs": [c.id for c in a.launch_plan.configs],
        "dispatch": a.launch_plan.describe(),
        **_device_code(library, a, archs),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def build(variants: list[Variant], toolchain: Toolchain, archs: tuple[str, ...],
          cache_dir: Path | None = None, jobs: int | None = None,
          launch_plans: list[LaunchPlan | None] | None = None, progress: Progress | None = None,
          portable: bool = False) -> list[Artifact]:
    """Build (or find) every variant: one ninja graph, atomic publish per variant.

    try to find -> lock -> find again -> build into staging -> rename into place -> unlock.
    Raises BuildError naming every variant that failed, after publishing the ones that built."""
    root = kernels_dir(cache_dir)
    planned = plan(variants, toolchain, archs, launch_plans, portable, cache_dir)
    artifacts = [artifact_for(p, root) for p in planned]
    # The same variant named twice builds once (and must not take its lock twice).
    missing = list({a.directory: (p, a) for p, a in zip(planned, artifacts) if not is_published(a)}.values())
    if missing:
        locks = [root / "locks" / f"{a.directory.name}.lock" for _, a in missing]
        with locked(locks, CACHE_ELSEWHERE):
            # re-checked under the lock (another process may have built it meanwhile); quietly: a
            # corrupt artifact was already reported by the check above
            todo = [(p, a) for p, a in missing if published_problem(a) is not None]
            if todo:
                _build_locked(todo, toolchain, archs, root, jobs, progress, portable)
    return artifacts


def _build_locked(todo: list[tuple[Planned, Artifact]], toolchain: Toolchain, archs: tuple[str, ...],
                  root: Path, jobs: int | None, progress: Progress | None = None, portable: bool = False) -> None:
    with writing(root, CACHE_ELSEWHERE):
        root.mkdir(parents=True, exist_ok=True)
    clean_dead_staging(root)
    staging = new_staging(root)
    try:
        units = []
        for p, a in todo:
            sub = staging / a.directory.name
            write_file(sub / f"{p.variant.name}.cu", p.text())
            units.append(Unit(p.variant.name, f"{a.directory.name}/{p.variant.name}.cu", archs,
                              f"{a.directory.name}/{p.variant.name}.so"))
        write_file(staging / "build.ninja", ninja_text(units, toolchain, str(resources.include_dir()), link=True,
                                                       portable=portable))
        outputs = failed_outputs(run_ninja(staging, jobs, progress, lambda pid: record_ninja(staging, pid)))
        failures = []
        for (p, a), u in zip(todo, units):
            built = staging / u.output
            if not built.is_file():
                failures.append((p.variant, _unit_log(outputs, u)))
                continue
            publish(staging / a.directory.name, a, _manifest(a, archs, toolchain, built))
        if failures:
            for _, text in failures:
                _raise_if_storage(text, staging, CACHE_ELSEWHERE, "nvcc")
            raise BuildError(_failure_text(failures))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _unit_log(outputs: dict[str, str], u: Unit) -> str:
    """nvcc's output for a failed unit (as ninja relayed it): the compile's, else the link's."""
    for target in (u.object, u.output):
        text = outputs.get(target, "")
        if text.strip():
            return text
    return "(nvcc printed nothing)"


def _failure_text(failures: list[tuple[Variant, str]]) -> str:
    first_variant, first_log = failures[0]
    names = ", ".join(v.name for v, _ in failures)
    return (f"nvcc failed for {len(failures)} variant(s) ({names}); first, {first_variant.name}: "
            f"{first_error_line(first_log)}\n{trim_nvcc(first_log)}")


_TMP_ELSEWHERE = "set TMPDIR to another folder"


@dataclass(frozen=True)
class CheckResult:
    variant: str
    arch: str
    ok: bool
    message: str  # "" when ok; nvcc's first error or the guard message otherwise


def one_per_layout(variants: list[Variant]) -> tuple[list[Variant], int]:
    """Variants that differ only in name and page_size compile to the same code up to constants,
    unless page_size changes the store alignment; keep the first of each such group. Forbidden
    variants are always kept (they cost no compile). A launch group is kept once per distinct content and
    launch. Returns (kept, dropped count)."""
    seen: set[tuple[Variant, int]] = set()
    groups_seen: set[tuple[str, object]] = set()
    kept = []
    for v in variants:
        if isinstance(v, Group):  # a group compiles once per distinct content and launch (its name aside)
            if (v.content_key(), v.launch) not in groups_seen:
                groups_seen.add((v.content_key(), v.launch))
                kept.append(v)
            continue
        if violations(v):
            kept.append(v)
            continue
        key = (replace(v, name="", page_size=0), layout_of(v).store_align)
        if key not in seen:
            seen.add(key)
            kept.append(v)
    return kept, len(variants) - len(kept)


def compile_only(variants: list[Variant], toolchain: Toolchain, archs: tuple[str, ...],
                 jobs: int | None = None, check: bool = True, plan: LaunchPlan | None = None,
                 progress: Progress | None = None) -> list[CheckResult]:
    """Compile each variant's device code for each arch into a throwaway dir; failures are results, not
    exceptions. One nvcc --fatbin call per variant builds every arch: the front end parses the whole file and
    instantiates its templates (host code included: an error there fails the check too), cicc and ptxas run per
    arch, and the host compiler's object, the same for every arch and the longest step (about 4 of 12 s for a
    launch group), is left to a real build. A variant that fails is compiled again per arch, so each result
    names the arch that fails. With check=False the Python precheck is skipped (guard parity tests)."""
    results: list[CheckResult] = []
    names: list[str] = []
    with writing(tempfile.gettempdir(), _TMP_ELSEWHERE):
        tmp = tempfile.mkdtemp(prefix="kernelgen-check-")
    try:
        work = Path(tmp)
        for v in variants:
            if check:
                try:
                    precheck(v)
                except GuardViolation as exc:
                    results += [CheckResult(v.name, arch, False, str(exc)) for arch in archs]
                    continue
            write_file(work / f"{v.name}.cu", render_variant(v, check=False, plan=plan), _TMP_ELSEWHERE)
            names.append(v.name)
        together = [Unit(n, f"{n}.cu", archs, f"{n}.fatbin") for n in names]
        failed = names if len(archs) == 1 else [
            u.name for u, ok, _ in _compile_units(work, together, toolchain, jobs, progress) if not ok]
        results += [CheckResult(n, arch, True, "") for n in names if n not in failed for arch in archs]
        alone = [Unit(n, f"{n}.cu", (arch,), f"{n}.{arch}.fatbin") for n in failed for arch in archs]
        for u, ok, log in _compile_units(work, alone, toolchain, jobs, progress):
            results.append(CheckResult(u.name, u.archs[0], ok, first_error_line(log) if log else ""))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    order = {v.name: i for i, v in enumerate(variants)}
    return sorted(results, key=lambda r: (order[r.variant], archs.index(r.arch)))


def device_code(targets: list[tuple[Variant, LaunchPlan]], toolchain: Toolchain, archs: tuple[str, ...],
                jobs: int | None = None, include_dir: Path | None = None,
                progress: Progress | None = None) -> list[dict[str, dict[str, str]]]:
    """{arch: {instance id: key}} of each (variant or group, plan), from its device code alone (nvcc --fatbin
    into a throwaway dir, no host object, no cache): what a tuning record of it would have to hold
    (build/devicecode.py). `include_dir` replaces the kernel headers (tests of what keeps a key). A target
    that does not compile raises BuildError naming it."""
    with writing(tempfile.gettempdir(), _TMP_ELSEWHERE):
        work = Path(tempfile.mkdtemp(prefix="kernelgen-code-"))
    try:
        units = []
        for i, (v, lp) in enumerate(targets):
            write_file(work / f"t{i}.cu", render_variant(v, plan=lp), _TMP_ELSEWHERE)
            units.append(Unit(v.name, f"t{i}.cu", archs, f"t{i}.fatbin"))
        out = []
        for (v, lp), (u, ok, log_text) in zip(targets, _compile_units(work, units, toolchain, jobs, progress,
                                                                       include_dir)):
            if not ok:
                raise BuildError(f"{v.name}: nvcc failed: {first_error_line(log_text)}")
            out.append(devicecode.instance_keys((work / u.output).read_bytes(), lp.configs, archs))
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compile_units(work: Path, units: list[Unit], toolchain: Toolchain, jobs: int | None,
                   progress: Progress | None, include_dir: Path | None = None) -> list[tuple[Unit, bool, str]]:
    """Compile units (no link) with one ninja run in work: (unit, compiled, nvcc's log if it failed)."""
    if not units:
        return []
    headers = str(include_dir or resources.include_dir())
    write_file(work / "build.ninja", ninja_text(units, toolchain, headers, link=False), _TMP_ELSEWHERE)
    outputs = failed_outputs(run_ninja(work, jobs, progress, elsewhere=_TMP_ELSEWHERE))
    done = []
    for u in units:
        ok = (work / u.output).is_file()
        log = "" if ok else _unit_log(outputs, u)
        _raise_if_storage(log, work, _TMP_ELSEWHERE, "nvcc")  # a full TMPDIR is no compile result
        done.append((u, ok, log))
    return done


@lru_cache(maxsize=None)
def _load(path: str) -> Any:
    import tvm_ffi

    return tvm_ffi.load_module(path)


def load_module(library: Path) -> Any:
    """The tvm-ffi module of a published library (loaded once per process)."""
    return _load(str(library))
