"""Pure search: probe every candidate, keep the promising, time them per token-count bucket, pick with
a tie rule, merge neighbouring buckets. Timings come from a Timer, so a simulated one tests it all."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..spec.launchparams import IN_TIE_ORDER
from ..codegen.launch import launch_variant, resolve
from ..spec.group import Group
from ..spec.variant import Launch, Variant
from .space import admits

# Powers of two up to 256 (decode steps), coarser above (prefill).
DEFAULT_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384, 65536, 262144, 1048576)
TIE = 0.02  # within 2% of the fastest, the simpler configuration wins


class Failed(Exception):
    """A candidate failed: kind is 'compile', 'wrong', 'crash' or 'launch'; the message says why."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


class Timer(Protocol):
    def __call__(self, launch: Launch, num_tokens: int) -> float:
        """Median microseconds per call; raises Failed."""


@dataclass
class Outcome:
    """Everything measured for one variant: per-config timings per bucket, failures, the choice."""

    timings: dict[str, dict[int, float]] = field(default_factory=dict)  # launch id -> bucket -> us
    failures: dict[str, str] = field(default_factory=dict)  # launch id -> "kind: message"
    choice: list[tuple[int, str]] = field(default_factory=list)  # (max bucket, launch id), merged
    code: dict[str, str] = field(default_factory=dict)  # instance id -> key of the device code timed (devicecode.py)


_TIE_SIGN = {"low": 1, "high": -1}


def simplicity(launch: Launch, default: Launch) -> tuple[int, ...]:
    """Order for ties: the default first, then the launch table's tie order (no PDL, then no prefetch, then
    fewer threads per token, wider loads, fewer tokens per block, no loop: spec/launchparams.py)."""
    return (launch != default, *(_TIE_SIGN[p.prefer] * getattr(launch, p.name) for p in IN_TIE_ORDER))


def choose(times: dict[str, float], default: Launch, previous: str | None, tie: float = TIE) -> str:
    """The launch id for one bucket: among those within `tie` of the fastest, the default, else the
    previous bucket's choice (so neighbouring buckets merge), else the simplest."""
    best = min(times.values())
    close = [lid for lid, us in times.items() if us <= best * (1 + tie)]
    if default.id in close:
        return default.id
    if previous in close:
        return previous  # type: ignore[return-value]
    return min(close, key=lambda lid: simplicity(Launch.from_id(lid), default))


def merge_buckets(per_bucket: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Neighbouring buckets that chose the same configuration become one route."""
    merged: list[tuple[int, str]] = []
    for bucket, lid in per_bucket:
        if merged and merged[-1][1] == lid:
            merged[-1] = (bucket, lid)
        else:
            merged.append((bucket, lid))
    return merged


def select(timings: dict[str, dict[int, float]], buckets: tuple[int, ...], default: Launch,
           tie: float = TIE) -> list[tuple[int, str]]:
    """Per-bucket choices from recorded timings (a config missing a bucket does not compete there)."""
    per_bucket: list[tuple[int, str]] = []
    previous: str | None = None
    for b in buckets:
        times = {lid: t[b] for lid, t in timings.items() if b in t}
        if not times:
            continue
        previous = choose(times, default, previous, tie)
        per_bucket.append((b, previous))
    # Backwards: a bucket that took a choice of its own on a tie (the first bucket has no previous one to
    # follow) joins the next bucket's choice when that one is within `tie` there too. Without this, an H200
    # tuning routed N = 1 alone to the simpler of two mappings 0.4% apart, one route more for nothing.
    for i in range(len(per_bucket) - 2, -1, -1):
        (b, lid), nxt = per_bucket[i], per_bucket[i + 1][1]
        own = i == 0 or per_bucket[i - 1][1] != lid
        times = {k: t[b] for k, t in timings.items() if b in t}
        if own and lid not in (default.id, nxt) and nxt in times and times[nxt] <= min(times.values()) * (1 + tie):
            per_bucket[i] = (b, nxt)
    return merge_buckets(per_bucket)


def select_admitted(promises: tuple[str, ...], timings: dict[str, dict[int, float]], buckets: tuple[int, ...],
                    default: Launch) -> list[tuple[int, str]]:
    """select among the launches a kernel whose spec made `promises` admits (space.admits)."""
    return select({lid: t for lid, t in timings.items() if admits(promises, Launch.from_id(lid))}, buckets, default)


def select_for(v: Variant | Group, timings: dict[str, dict[int, float]], buckets: tuple[int, ...]) -> list[tuple[int, str]]:
    """select for one kernel: among the launches it admits, its default launch breaking ties. What the tuner,
    `tune --rechoose` and a record lookup choose by."""
    return select_admitted(v.promises, timings, buckets, resolve(launch_variant(v)).launch)


def _measure(timer: Timer, launch: Launch, n: int, outcome: Outcome) -> float | None:
    if launch.id in outcome.failures:
        return None
    try:
        us = timer(launch, n)
    except Failed as exc:
        outcome.failures[launch.id] = str(exc)
        outcome.timings.pop(launch.id, None)
        return None
    outcome.timings.setdefault(launch.id, {})[n] = us
    return us


def probe_buckets(buckets: tuple[int, ...]) -> tuple[int, ...]:
    """Where every candidate is timed: the smallest bucket, the middle one and the one above it, and the
    second-largest (the largest costs the most to time and rarely ranks differently from its neighbour;
    finalists are timed there). The turn from latency-bound to bandwidth-bound mappings sits near the
    middle and each side of it has winners of its own: probed at 1024 but not at 4096, one H200 tuning
    of FlashMLA dropped its 4096-token winner (4.15 us) and routed that bucket to a 4.58 us mapping."""
    mid = len(buckets) // 2
    picks = (buckets[0], buckets[mid], buckets[min(mid + 1, len(buckets) - 1)], buckets[max(len(buckets) - 2, 0)])
    return tuple(dict.fromkeys(picks))


def search(candidates: list[Launch], buckets: tuple[int, ...], timer: Timer, default: Launch,
           keep: int = 3, recheck: int = 3, known: Outcome | None = None,
           progress: Callable[[str], None] | None = None) -> Outcome:
    """Tune one variant. `known` timings (from an earlier run) are reused, not re-timed."""
    outcome = known or Outcome()
    say = progress or (lambda _: None)
    alive = [c for c in candidates if c.id not in outcome.failures]
    survivors: list[Launch] = [default] if default in alive else []
    for n in probe_buckets(buckets):
        say(f"probe N={n}: {len(alive)} candidates")
        times = {}
        for c in alive:
            us = outcome.timings.get(c.id, {}).get(n)
            us = us if us is not None else _measure(timer, c, n, outcome)
            if us is not None:
                times[c.id] = us
        ranked = sorted(times, key=times.__getitem__)[:keep]
        survivors += [c for c in alive if c.id in ranked and c not in survivors]
    survivors = [c for c in survivors if c.id not in outcome.failures]
    for n in buckets:
        say(f"bucket N={n}: {len(survivors)} finalists")
        for c in survivors:
            if n not in outcome.timings.get(c.id, {}):
                _measure(timer, c, n, outcome)
        _recheck(timer, survivors, n, outcome, recheck)
    finalists = {c.id: outcome.timings[c.id] for c in survivors if c.id in outcome.timings}
    outcome.choice = select(finalists, buckets, default)
    return outcome


def _recheck(timer: Timer, survivors: list[Launch], n: int, outcome: Outcome, top: int) -> None:
    """Re-time the fastest few interleaved (a, b, c, a, b, c) and keep each one's median of three."""
    timed = [c for c in survivors if n in outcome.timings.get(c.id, {})]
    ranked = sorted(timed, key=lambda c: outcome.timings[c.id][n])[:top]
    if len(ranked) < 2:
        return
    samples = {c.id: [outcome.timings[c.id][n]] for c in ranked}
    for _ in range(2):
        for c in ranked:
            try:
                samples[c.id].append(timer(c, n))
            except Failed as exc:
                outcome.failures[c.id] = str(exc)
    for lid, values in samples.items():
        if lid in outcome.failures:
            outcome.timings.pop(lid, None)
        else:
            outcome.timings[lid][n] = statistics.median(values)
