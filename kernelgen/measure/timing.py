"""GPU timing by CUDA-graph replay, and the compulsory bytes a variant moves (its roofline)."""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, Callable

from ..codegen.checks import ARGS
from ..codegen.render import members
from ..layout.layout import layout_of
from ..spec.group import Group
from ..spec.variant import Variant
from .inputs import timing_inputs

if TYPE_CHECKING:
    import torch

INDEX_BYTES = 16  # out_loc + position per token, int64 each


def estimated_bytes(v: Variant | Group, num_tokens: int) -> int:
    """An estimate of the bytes a call moves: each input row read once, each written byte written once,
    16 B of indices per token (weights and freqs cache-resident); a launch group's members' sum. For sizing
    input rotation and quick reports; `kernelgen bench` counts compulsory bytes exactly (bench.compulsory_bytes)."""
    return sum(num_tokens * (m.variant.heads * m.variant.head_dim * m.variant.elem_bytes
                             + layout_of(m.variant).written_bytes_per_token + INDEX_BYTES) for m in members(v))


STAGING_BYTES = 4  # a timing input's rows are drawn in float32 before their cast (inputs.workload_inputs)


def workload_peak_bytes(v: Variant | Group, num_tokens: int) -> int:
    """An upper estimate of the GPU memory the timing inputs of one call take while they are made: every member's
    rows twice (a launch group packs them into one copy), the float32 draw of the widest member's rows, and pages for
    twice the batch (a decode pool). The tuner times a bucket only where this fits the GPU (runner.fitting_buckets)."""
    ms = [m.variant for m in members(v)]  # resolved
    rows = sum(num_tokens * m.x_width * m.elem_bytes for m in ms)
    staging = max(num_tokens * m.x_width * STAGING_BYTES for m in ms)
    pages = sum(2 * num_tokens * layout_of(m).written_bytes_per_token for m in ms)
    return 2 * rows + staging + pages + num_tokens * INDEX_BYTES


def graph_replay_us(call: Callable[[], None], calls: int = 10, reps: int = 15) -> float:
    """Median GPU microseconds per call: `calls` launches captured in one graph, replayed `reps` times."""
    return _rotated_graph_us([call], reps, calls)


def per_call_us(call: Callable[[], object], calls: int = 2000) -> float:
    """Host microseconds per call of a Python callable (the GPU is synchronized before and after)."""
    import time

    import torch

    call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def measure(op: Any, num_tokens: int) -> tuple[float, float]:
    """(GPU microseconds per call by graph replay, GB/s of compulsory bytes) for an Op at num_tokens."""
    args = launch_args(timing_inputs(op.variant, num_tokens))
    us = graph_replay_us(lambda: op.launch(*args))
    return us, estimated_bytes(op.variant, num_tokens) / (us * 1e-6) / 1e9


def launch_args(inputs: dict[str, Any], eps: float = 1e-6) -> tuple[torch.Tensor, ...]:
    return (*(inputs.get(k) for k in ARGS), eps)


def rotation_sets(bytes_per_call: int, num_tokens: int, l2_bytes: int, min_tokens: int = 4096) -> int:
    """How many independent input sets to rotate through so that each call reads from DRAM: enough to
    cover 3x the L2 from min_tokens on (smaller batches stay L2-resident, as in a decode loop)."""
    if num_tokens < min_tokens:
        return 1
    return max(1, -(-3 * l2_bytes // max(bytes_per_call, 1)))


def rotated_graph_us(calls: list[Callable[[], None]], reps: int = 15, min_calls: int = 20) -> float:
    """See _rotated_graph_us; a first timing shortens graphs of long calls (>= 50 us) to 5 launches."""
    if min_calls > 5:
        probe = _rotated_graph_us(calls[:1], 2, 2)
        if probe >= 50:
            min_calls, reps = 5, min(reps, 7)
    return _rotated_graph_us(calls, reps, min_calls)


def _rotated_graph_us(calls: list[Callable[[], None]], reps: int = 15, min_calls: int = 20) -> float:
    """Median GPU microseconds per call: the calls (each on its own inputs) captured round-robin into
    one graph of at least min_calls launches, replayed reps times."""
    import torch

    for call in calls:
        call()
    torch.cuda.synchronize()
    order = [calls[i % len(calls)] for i in range(max(min_calls, len(calls)))]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in order:
            call()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(order))
    del graph
    return statistics.median(times)
