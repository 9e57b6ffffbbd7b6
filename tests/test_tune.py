"""Tuner tier (no GPU): search, buckets, merging, tie-breaks, failures as data, records on disk,
metadata rejection and run-time record lookup, all with a simulated timer replaying timings."""
from __future__ import annotations

import json
import multiprocessing
from dataclasses import replace
from pathlib import Path

import pytest

from kernelgen import knobs
from kernelgen.codegen.launch import ALL_TOKENS, plan_routes, resolve
from kernelgen.runtime.op import tuned_plan
from kernelgen.spec.parse import load_spec, parse_spec
from kernelgen.spec.variant import Launch
from kernelgen.tune import records
from kernelgen.tune.gpu import GpuInfo
from kernelgen.tune.search import (
    DEFAULT_BUCKETS,
    Failed,
    Outcome,
    choose,
    merge_buckets,
    probe_buckets,
    search,
    select,
)
from kernelgen.tune.space import candidates, default_space, rejection

pytestmark = pytest.mark.pure

V = load_spec("dsv4_indexer").variant("dsv4_indexer_fp8_p64")
DEFAULT = resolve(V).launch
H200 = GpuInfo("NVIDIA H200", "9.0", 132, 140, 4800)
B200 = GpuInfo("NVIDIA B200", "10.0", 148, 179, 8000)
RTX = GpuInfo("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 188, 95, 1792)


class Replay:
    """A simulated GPU: time(launch, n) from a formula or table; counts every call."""

    def __init__(self, table: dict[str, float | Exception], scale: dict[int, float] | None = None) -> None:
        self.table, self.scale, self.calls = table, scale or {}, []

    def __call__(self, launch: Launch, n: int) -> float:
        self.calls.append((launch.id, n))
        value = self.table.get(launch.id, 10.0)
        if isinstance(value, Exception):
            raise value
        return value * self.scale.get(n, 1.0)


def test_space_offers_only_valid_points_and_says_why_it_rejects() -> None:
    valid, rejected = candidates(V, default_space(V))
    assert valid[0] == DEFAULT and len(valid) == len(set(valid))
    assert all(rejection(V, c) is None for c in valid)
    assert rejected and all("[guard " in why for _, why in rejected)
    assert any("at most 64 values" in why for l, why in rejected if l.threads_per_token == 1)


def test_a_spec_tune_section_narrows_the_space() -> None:
    spec = parse_spec("family: fused_norm_rope_store\nname: s\nvariants:\n  - {name: a}\n"
                      "tune:\n  threads_per_token: [16, 32]\n  pdl: [false]\n  buckets: [1, 64, 4096]\n", "s.yaml")
    valid, _ = candidates(spec.variants[0], default_space(spec.variants[0], spec.tune_overrides()))
    assert {c.threads_per_token for c in valid[1:]} == {16, 32} and not any(c.pdl for c in valid)
    assert spec.tune_buckets() == (1, 64, 4096)


def test_search_picks_the_fastest_per_bucket_and_merges_neighbours() -> None:
    small, big = Launch(32, 2, 4, True, True), Launch(8, 32, 8)
    # small wins at N <= 64, big wins above; every other candidate is slower everywhere.
    def timer(launch: Launch, n: int) -> float:
        base = {small.id: 1.0 if n <= 64 else 50.0, big.id: 3.0 if n <= 64 else 20.0}.get(launch.id, 60.0)
        return base * (1 if n <= 64 else n / 1024)
    valid, _ = candidates(V, default_space(V))
    assert small in valid and big in valid
    outcome = search(valid, DEFAULT_BUCKETS, timer, DEFAULT)
    assert outcome.choice == [(64, small.id), (DEFAULT_BUCKETS[-1], big.id)]
    plan = plan_routes(V, [(b, Launch.from_id(lid)) for b, lid in outcome.choice])
    assert plan.launch_for(1) == small and plan.launch_for(64) == small and plan.launch_for(65) == big
    assert plan.launch_for(10**9) == big and plan.routes[-1].max_tokens == ALL_TOKENS


def test_probing_prunes_before_timing_every_bucket() -> None:
    valid, _ = candidates(V, default_space(V))
    timer = Replay({c.id: 1.0 + i for i, c in enumerate(valid)})
    search(valid, DEFAULT_BUCKETS, timer, DEFAULT, keep=4)
    full = len(valid) * len(DEFAULT_BUCKETS)
    assert len(timer.calls) < full / 2, (len(timer.calls), full)  # four probes of every candidate, then finalists


def test_a_winner_just_above_the_middle_bucket_survives_probing() -> None:
    # The shape of an H200 FlashMLA tuning: one mapping wins at 4096 tokens only, and at every other
    # probed bucket three others beat it. Probed only at 1, 1024 and 262144 it was never timed at 4096.
    buckets = load_spec("dsv4_indexer").tune_buckets()
    assert probe_buckets(buckets) == (1, 1024, 4096, 262144)
    valid, _ = candidates(V, default_space(V))
    mid_winner, rivals = valid[5], valid[1:4]
    def timer(launch: Launch, n: int) -> float:
        if launch == mid_winner:
            return 1.0 if n == 4096 else 5.0
        return 2.0 + rivals.index(launch) * 0.01 if launch in rivals else 9.0
    outcome = search(valid, buckets, timer, DEFAULT)
    assert (4096, mid_winner.id) in outcome.choice, outcome.choice


def test_ties_go_to_the_default_then_to_the_neighbouring_choice() -> None:
    other, third = Launch(32, 2, 4), Launch(16, 4, 8)
    assert choose({DEFAULT.id: 1.015, other.id: 1.0}, DEFAULT, None) == DEFAULT.id
    assert choose({DEFAULT.id: 1.05, other.id: 1.0}, DEFAULT, None) == other.id
    assert choose({DEFAULT.id: 2.0, other.id: 1.01, third.id: 1.0}, DEFAULT, other.id) == other.id
    assert choose({DEFAULT.id: 2.0, Launch(32, 2, 4, False, True).id: 1.0, other.id: 1.01}, DEFAULT, None) == other.id


def test_a_tie_in_the_first_bucket_joins_the_next_buckets_choice() -> None:
    simpler, wider = Launch(64, 4, 4, True, True), Launch(128, 1, 4, True, True)
    timings = {DEFAULT.id: {1: 3.0, 4: 3.0, 16: 3.0}, simpler.id: {1: 1.309, 4: 1.50, 16: 1.53},
               wider.id: {1: 1.314, 4: 1.38, 16: 1.44}}
    assert select(timings, (1, 4, 16), DEFAULT) == [(16, wider.id)]
    # not within the tie: the first bucket keeps its own route
    timings[wider.id][1] = 1.40
    assert select(timings, (1, 4, 16), DEFAULT) == [(1, simpler.id), (16, wider.id)]
    # a bucket that followed its previous choice on a tie keeps following it
    timings = {DEFAULT.id: {1: 3.0, 4: 3.0, 16: 3.0}, simpler.id: {1: 1.0, 4: 1.01, 16: 2.0},
               wider.id: {1: 1.5, 4: 1.0, 16: 1.0}}
    assert select(timings, (1, 4, 16), DEFAULT) == [(4, simpler.id), (16, wider.id)]


def test_merge_buckets() -> None:
    assert merge_buckets([(1, "a"), (2, "a"), (4, "b"), (8, "a")]) == [(2, "a"), (4, "b"), (8, "a")]


def test_failures_are_data_and_never_chosen() -> None:
    fast_but_wrong, crashes = Launch(32, 2, 4), Launch(16, 4, 8)
    timer = Replay({fast_but_wrong.id: Failed("wrong", "3 codes differ"), crashes.id: Failed("crash", "exit -11"),
                    DEFAULT.id: 5.0})
    outcome = search([DEFAULT, fast_but_wrong, crashes, Launch(8, 8, 8, True)], (1, 4096), timer, DEFAULT)
    assert outcome.failures == {fast_but_wrong.id: "wrong: 3 codes differ", crashes.id: "crash: exit -11"}
    assert {lid for _, lid in outcome.choice} <= {DEFAULT.id, Launch(8, 8, 8, True).id}
    again = Replay({})
    search([DEFAULT, fast_but_wrong], (1, 4096), again, DEFAULT, known=outcome)
    assert fast_but_wrong.id not in {lid for lid, _ in again.calls}, "a failed candidate is never retried"


def _code(gpu: GpuInfo, timings: dict[str, dict[int, float]], key: str | None = None) -> dict[str, str]:
    """Device-code keys of the timed instances, as a tuner would take them from the library it timed: one per
    instance and GPU arch (or all `key`)."""
    ids = {records.instance_id(lid) for lid in timings}
    return {i: key or f"{gpu.capability}:{i}" for i in ids}


def _record(gpu: GpuInfo, timings: dict[str, dict[int, float]], choice: list[tuple[int, str]],
            code: dict[str, str] | None = None) -> records.Record:
    """A record as the tuner writes one: every route's bound is a bucket (the last may serve all counts)."""
    buckets = tuple(sorted({1, 4096} | {b for b, _ in choice if b != ALL_TOKENS}))
    timed = {**timings, **{lid: {} for _, lid in choice}}
    return records.Record(V.name, V.content_key(), code or _code(gpu, timed), gpu, buckets, timings, {},
                          tuple(choice))


def test_records_round_trip_and_apply_only_to_the_same_gpu_and_template(tmp_path: Path) -> None:
    fast = Launch(32, 2, 4, False, True)
    records.write(tmp_path, _record(RTX, {fast.id: {1: 1.0}}, [(ALL_TOKENS, fast.id)]))
    found = records.lookup([tmp_path], RTX, V)
    assert found is not None and found[0].routes() == [(ALL_TOKENS, fast)]
    assert records.lookup([tmp_path], H200, V) is None
    assert records.lookup([tmp_path], B200, V) is None
    other_board = replace(H200, bandwidth_gbs=3350)
    records.write(tmp_path, _record(H200, {fast.id: {1: 1.0}}, [(ALL_TOKENS, fast.id)]))
    assert records.lookup([tmp_path], H200, V) is not None
    assert records.lookup([tmp_path], other_board, V) is None


def test_runtime_uses_the_record_for_the_gpu_and_defaults_elsewhere(tmp_path: Path) -> None:
    fast = Launch(32, 2, 4, True, True)
    with knobs.scope(CACHE_DIR=str(tmp_path)):
        records.write(knobs.tuning_dir(), _record(RTX, {fast.id: {1: 1.0}}, [(64, fast.id), (ALL_TOKENS, DEFAULT.id)]))
        plan, where = tuned_plan(V, RTX)
        assert where.endswith(".json") and plan.launch_for(1) == fast and plan.launch_for(65) == DEFAULT
        shipped = tuned_plan(V, H200)[1]
        assert shipped.endswith("nvidia-h200-sm90-132sms.json"), "the shipped H200 record applies on an H200"
        assert tuned_plan(V, B200) == (plan_routes(V, [(ALL_TOKENS, DEFAULT)]), "defaults")
        with knobs.scope(PDL="0"):
            assert tuned_plan(V, RTX)[0].launch_for(1) == replace(fast, pdl=False)
        from kernelgen.runtime.export import plan_for_arch

        assert plan_for_arch(V, "sm_120a")[0].launch_for(1) == fast
        with knobs.scope(PDL="0"):  # an export compiles its routes in: the knob applies at export time
            assert plan_for_arch(V, "sm_120a")[0].launch_for(1) == replace(fast, pdl=False)
        with knobs.scope(TUNED="0"):
            assert tuned_plan(V, RTX)[1] == "defaults"


def test_merge_keeps_old_timings_and_rechooses(tmp_path: Path) -> None:
    a, b = Launch(32, 2, 4), Launch(16, 4, 8)
    pick = lambda r: select(r.timings, r.buckets, DEFAULT)  # noqa: E731
    records.write(tmp_path, _record(H200, {DEFAULT.id: {1: 5.0, 4096: 5.0}, a.id: {1: 2.0, 4096: 9.0}}, []), pick)
    records.write(tmp_path, _record(H200, {b.id: {1: 9.0, 4096: 1.0}}, []), pick)
    [(_, _, merged)] = records.all_records(tmp_path)
    assert set(merged.timings) == {DEFAULT.id, a.id, b.id}
    assert merged.choice == ((1, a.id), (4096, b.id))


def _writer(directory: str, i: int) -> None:
    lid = Launch(32, 2, 4).id if i % 2 else DEFAULT.id
    records.write(Path(directory), records.Record(V.name, V.content_key(), _code(H200, {lid: {}}), H200,
                                                  (1 << i,), {lid: {1 << i: float(i + 1)}}, {}, ((1 << i, lid),)),
                  lambda r: select(r.timings, r.buckets, DEFAULT))


def test_eight_processes_writing_at_once_lose_no_record(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), i)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert all(p.exitcode == 0 for p in procs)
    [(_, _, merged)] = records.all_records(tmp_path)
    assert sorted(b for t in merged.timings.values() for b in t) == [1 << i for i in range(8)]


def test_a_corrupt_record_file_is_ignored(tmp_path: Path) -> None:
    path = records.record_file(tmp_path, H200)
    path.write_text('{"schema": 1, "gpu": {"name": "NVIDIA H200"')
    assert records.lookup([tmp_path], H200, V) is None
    path.write_text(json.dumps({"schema": 99, "gpu": H200.as_dict(), "variants": {}}))
    assert records.lookup([tmp_path], H200, V) is None


def test_launch_ids_round_trip() -> None:
    for launch in (Launch(8, 8, 8), Launch(32, 2, 4, True, True), Launch(1, 64, 2, False, True),
                   Launch(4, 16, 8, loop=True), Launch(4, 16, 8, True, True, True)):
        assert Launch.from_id(launch.id) == launch
    assert Launch(4, 16, 8, loop=True, pdl=True).id == "t4.b16.v8.lp.pdl"
    with pytest.raises(ValueError, match="not a launch id"):
        Launch.from_id("t8.b8")
    assert isinstance(Outcome(), Outcome)


def test_a_write_drops_the_old_timings_of_instances_whose_code_changed(tmp_path: Path) -> None:
    """The tuner keys every instance it built: an old timing of an instance now built to other code is dropped at
    the next write, the timings of unchanged code are kept, and the choice is made again from what is left."""
    fast = Launch(32, 2, 4, False, True)
    pick = lambda r: select(r.timings, r.buckets, DEFAULT)  # noqa: E731
    records.write(tmp_path, _record(H200, {fast.id: {1: 1.0}, DEFAULT.id: {1: 2.0}}, [(ALL_TOKENS, fast.id)]), pick)
    changed = {fast.instance.id: "edited-kernel", DEFAULT.id: _code(H200, {DEFAULT.id: {}})[DEFAULT.id]}
    records.write(tmp_path, _record(H200, {DEFAULT.id: {1: 2.5}}, [(ALL_TOKENS, DEFAULT.id)], code=changed), pick)
    [(_, _, merged)] = records.all_records(tmp_path)
    assert set(merged.timings) == {DEFAULT.id} and merged.timings[DEFAULT.id] == {1: 2.5}
    assert fast.instance.id not in merged.code and [lid for _, lid in merged.choice] == [DEFAULT.id]


def test_a_load_uses_a_record_only_where_the_built_kernels_are_the_code_it_timed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """build_tuned builds the record's dispatch, compares the library's device code with the record's keys, and
    where a chosen instance changed says so in one line and builds the default launch (never a stale choice)."""
    from kernelgen.build.store import Artifact
    from kernelgen.codegen.launch import default_plan
    from kernelgen.tune import lookup

    fast = Launch(32, 2, 4, False, True)
    records.write(tmp_path, _record(H200, {fast.id: {1: 1.0}}, [(ALL_TOKENS, fast.id)]))
    built_code: dict[str, str] = {}
    builds: list[object] = []

    class Built(Artifact):
        def device_code(self) -> dict[str, dict[str, str]]:
            return {"sm_90a": dict(built_code)}

    def fake_build(variants, toolchain, archs, cache_dir, jobs, plans, progress, portable):  # noqa: ANN001
        builds.append(plans[0])
        return [Built(v, "key", tmp_path / v.name, p, archs) for v, p in zip(variants, plans)]

    monkeypatch.setattr(lookup, "build", fake_build)
    built_code.update(_code(H200, {fast.id: {}}))
    [(_, found)] = lookup.build_tuned([V], [H200], None, ("sm_90a",), directories=[tmp_path])  # type: ignore[arg-type]
    assert found.source.endswith(".json") and found.plan.launch_for(1) == fast and len(builds) == 1
    built_code[fast.instance.id] = "another kernel"
    builds.clear()
    with caplog.at_level("WARNING"):
        [(artifact, found)] = lookup.build_tuned([V], [H200], None, ("sm_90a",), directories=[tmp_path])  # type: ignore[arg-type]
    assert found.plan == default_plan(V) and artifact.launch_plan == default_plan(V) and len(builds) == 2
    assert found.source == "defaults (record stale)"
    [line] = [r.getMessage() for r in caplog.records if "timed other device code" in r.getMessage()]
    assert fast.instance.id in line and "sm_90a" in line and "kernelgen tune dsv4_indexer" in line


def test_a_record_choosing_a_promise_serves_only_kernels_whose_spec_made_it(tmp_path: Path) -> None:
    """dsv4_q_paths' main_kv and dsv4_mainkv_fp8mla_p64 share a content key (one record), but only dsv4_mainkv's
    tune: section offers early_reads (its promise that the launch before writes no slot, position or cos/sin). A
    record choosing .er serves dsv4_mainkv with it; main_kv and a Python-built variant choose again from the same
    timings among the launches they admit, and the stale check follows that choice; the tuner's rechoose too."""
    from kernelgen.tune import lookup
    from kernelgen.tune.search import select_for

    opted = load_spec("dsv4_mainkv").variant("dsv4_mainkv_fp8mla_p64")
    plain = load_spec("dsv4_q_paths").variant("main_kv")
    built = replace(opted, name="mine", spec_name="", promises=())
    assert opted.content_key() == plain.content_key() == built.content_key()
    assert (opted.promises, plain.promises) == (("early_reads",), ())
    default = resolve(opted).launch
    pdl = replace(default, pdl=True)
    er = replace(pdl, early_reads=True)
    timings = {default.id: {1: 2.0, 4096: 9.0}, pdl.id: {1: 1.5, 4096: 9.5}, er.id: {1: 1.0, 4096: 9.6}}
    record = records.Record(opted.name, opted.content_key(), _code(H200, timings), H200, (1, 4096), timings, {},
                            ((1, er.id), (ALL_TOKENS, default.id)))
    records.write(tmp_path, record)
    found = lookup.tuned(opted, [H200], [tmp_path])
    assert found.plan.launch_for(1) == er and found.record is not None and found.record.choice == record.choice
    for kernel in (plain, built):
        found = lookup.tuned(kernel, [H200], [tmp_path])
        assert found.plan.launch_for(1) == pdl and found.plan.launch_for(4096) == default, kernel.name
        assert found.record is not None and er.instance.id not in found.record.chosen_instances()
        assert found.record.stale(_code(H200, {pdl.id: {}, default.id: {}})) == []
    assert select_for(plain, timings, (1, 4096)) == [(1, pdl.id), (4096, default.id)]
    assert select_for(opted, timings, (1, 4096)) == [(1, er.id), (4096, default.id)]


def test_simulated_device_properties_select_their_own_record(tmp_path: Path) -> None:
    """An sm_120 record (RTX PRO 6000 Blackwell) is used on that GPU and ignored on an H200 and a B200."""
    from types import SimpleNamespace

    from kernelgen.tune.gpu import from_properties

    def props(name: str, major: int, minor: int, sms: int, gib: int, khz: int, bits: int) -> SimpleNamespace:
        return SimpleNamespace(name=name, major=major, minor=minor, multi_processor_count=sms,
                               total_memory=gib * 2**30, memory_clock_rate=khz, memory_bus_width=bits)

    rtx = from_properties(props(RTX.name, 12, 0, 188, 95, 14_000_000, 512))
    h200 = from_properties(props("NVIDIA H200", 9, 0, 132, 140, 2_619_000, 6144))
    b200 = from_properties(props("NVIDIA B200", 10, 0, 148, 179, 4_000_000, 8192))
    assert rtx.capability == "12.0" and rtx.bandwidth_gbs == 1792 and h200.slug == "nvidia-h200-sm90-132sms"
    fast = Launch(32, 2, 4, True, True)
    records.write(tmp_path, _record(rtx, {fast.id: {1: 1.0}}, [(ALL_TOKENS, fast.id)]))
    assert records.lookup([tmp_path], rtx, V) is not None
    assert records.lookup([tmp_path], h200, V) is None and records.lookup([tmp_path], b200, V) is None


def test_a_tuner_killed_during_a_record_write_loses_nothing_written_before(tmp_path: Path) -> None:
    """Killed after writing its temp file but before the rename: the record file keeps its old content,
    the lock dies with the process, and the next writer cleans the leftover and succeeds."""
    import os
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    fast = Launch(32, 2, 4)
    records.write(tmp_path, _record(H200, {fast.id: {1: 1.0}}, [(ALL_TOKENS, fast.id)]))
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_tune as t
        from kernelgen.tune import records
        def hang(*a, **k):
            print("writing", flush=True)
            time.sleep(60)
        os.replace = hang
        records.write(__import__("pathlib").Path({str(tmp_path)!r}),
                      t._record(t.H200, {{"t8.b8.v8": {{1: 9.0}}}}, [(t.ALL_TOKENS, "t8.b8.v8")]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(tmp_path.glob(".*.json.*")), "the killed writer left its temp file"
    found = records.lookup([tmp_path], H200, V)
    assert found is not None and found[0].choice == ((ALL_TOKENS, fast.id),)
    start = time.monotonic()
    records.write(tmp_path, _record(H200, {DEFAULT.id: {1: 2.0}}, [(ALL_TOKENS, DEFAULT.id)]))
    assert time.monotonic() - start < 5, "the dead writer's lock was released"
    assert not list(tmp_path.glob(".*.json.*"))
    [(_, _, merged)] = records.all_records(tmp_path)
    assert set(merged.timings) == {fast.id, DEFAULT.id}


def test_lookup_reads_only_the_gpus_own_record_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fast = Launch(32, 2, 4, False, True)
    records.write(tmp_path, _record(H200, {fast.id: {1: 1.0}}, [(ALL_TOKENS, fast.id)]))
    (tmp_path / "some-other-gpu.json").write_text("{ not json")
    with caplog.at_level("WARNING"):
        found = records.lookup([tmp_path], H200, V)
    assert found is not None and found[1] == records.record_file(tmp_path, H200)
    assert "corrupt" not in caplog.text  # the other GPU's file was never opened
    with caplog.at_level("WARNING"):
        assert records.read_file(tmp_path / "some-other-gpu.json") is None
    assert "corrupt" in caplog.text  # had the lookup opened it, it would have said so


def test_loop_is_off_unless_a_spec_opts_in() -> None:
    from kernelgen.tune.space import candidates, default_space

    plain, _ = candidates(V, default_space(V))
    assert not any(c.loop for c in plain)
    opted, _ = candidates(V, default_space(V, {"loop": (False, True)}))
    assert {c.loop for c in opted} == {False, True}
    assert {replace(c, loop=False) for c in opted} == set(plain)


def test_tokens_of_several_warps_join_the_space_where_the_row_allows() -> None:
    """head_dim 512 without a Hadamard (main KV) gets 64- and 128-thread tokens; so do Hadamard rows, as
    far as their exchange between warps fits its shared memory (refused beyond, with the guard's words)."""
    mainkv = load_spec("dsv4_mainkv").variant("dsv4_mainkv_fp8mla_p64")
    valid, _ = candidates(mainkv, default_space(mainkv))
    wide = {c.id for c in valid if c.threads_per_token > 32}
    assert {"t64.b1.v8", "t64.b4.v8.pf.pdl", "t128.b1.v4.pf", "t128.b2.v4.pdl"} <= wide
    assert not any(c.threads_per_token == 128 and c.vec == 8 for c in valid)  # 128 x 8 > 512 dims
    indexer_256 = replace(V, head_dim=256, rope_dim=64)
    valid, _ = candidates(indexer_256, default_space(indexer_256))
    assert {"t64.b1.v4", "t64.b4.v4"} <= {c.id for c in valid}
    indexer_1024 = replace(V, head_dim=1024, rope_dim=64)
    valid, _ = candidates(indexer_1024, default_space(indexer_1024))
    assert {"t128.b2.v8", "t64.b4.v8"} <= {c.id for c in valid}  # 32 KB of exchange buffers: the limit
    why = rejection(indexer_1024, Launch(128, 4, 8))
    assert why is not None and "must be at most 32768; lower launch.tokens_per_block" in why


def test_a_record_timed_short_of_the_specs_largest_bucket_is_called_out(tmp_path: Path) -> None:
    """A decode-only tuning (--buckets up to 256) with no earlier record gives a record whose last route serves every
    larger count: the tune command warns, naming the route and the bucket to reach. Merged into a record timed to
    the top (a decode re-tune of a full record), it is left alone."""
    from kernelgen.cli.tunecmd import short_of_prefill

    gpu = GpuInfo("NVIDIA H100 80GB HBM3", "9.0", 132, 79, 3352)
    decode = records.Record("llama3_8b_k_bf16_p16", "k" * 24, {}, gpu, (1, 256),
                            {"t16.b16.v4.pdl": {1: 1.0, 256: 1.2}}, {}, ((256, "t16.b16.v4.pdl"),))
    note = short_of_prefill(decode, 1048576)
    assert note is not None and "timed up to N = 256" in note and "(t16.b16.v4.pdl)" in note and "1048576" in note
    full = records.Record("x", "k" * 24, {}, gpu, (1, 1048576), {"t8.b8.v8": {1: 1.5, 1048576: 900.0}}, {},
                          ((1048576, "t8.b8.v8"),))
    assert short_of_prefill(full, 1048576) is None
    merged = records.merge(full, decode)
    assert merged.buckets == (1, 256, 1048576) and short_of_prefill(merged, 1048576) is None
    # the tuner warns from the record as write_merged wrote it: a decode re-tune of a full record is not called out
    records.write(tmp_path, full)
    path, written = records.write_merged(tmp_path, decode)
    assert path == records.record_file(tmp_path, gpu) and written.buckets == (1, 256, 1048576)
    assert short_of_prefill(written, 1048576) is None


def test_buckets_whose_timing_inputs_do_not_fit_the_gpu_are_not_timed() -> None:
    """The absorbed-MLA query (128 heads x 576 dims per token) needs about 180 GiB of timing inputs at 262144 tokens:
    tuned there, every candidate's worker ran out of memory on an H100 and the variant went untuned. Such buckets are
    left to the last bucket that fits; a small row keeps every bucket; an unknown memory size keeps them all."""
    from kernelgen.measure.timing import workload_peak_bytes
    from kernelgen.tune.runner import fitting_buckets

    mla = load_spec("mla")
    q, kv = mla.variant("deepseek_v3_q_absorbed_fp8"), mla.variant("deepseek_v3_kv_fp8_p64")
    buckets = (1, 256, 65536, 262144)
    assert fitting_buckets(q, buckets, 80) == (1, 256, 65536)
    assert fitting_buckets(mla.group("deepseek_v3_layer_fp8"), buckets, 80) == (1, 256, 65536)
    assert fitting_buckets(q, buckets, 141) == (1, 256, 65536)
    assert fitting_buckets(kv, buckets, 80) == buckets and fitting_buckets(q, buckets, 0) == buckets
    assert 170 * 2**30 < workload_peak_bytes(q, 262144) < 190 * 2**30


def test_timing_rows_are_drawn_as_before_with_one_float32_copy() -> None:
    """The rows are (randn * 3) + 0.5 in float32, scaled in place: the same values as the expression they replaced."""
    import torch

    from kernelgen.measure.inputs import workload_inputs

    v = load_spec("mla").variant("deepseek_v3_kv_fp8_p64")
    got = workload_inputs(v, 64, "prefill", seed=3, device="cpu")["x"]
    g = torch.Generator(device="cpu").manual_seed(3)
    want = (torch.randn(64, v.x_width, generator=g) * 3 + 0.5).to(torch.bfloat16)
    assert torch.equal(got, want)
