"""GPU timing by CUDA-graph replay, and the compulsory bytes a variant moves (its roofline)."""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, Callable

from ..layout.layout import layout_of
from ..spec.variant import Variant
from .inputs import timing_inputs

if TYPE_CHECKING:
    import torch

INDEX_BYTES = 16  # out_loc + position per token, int64 each


def compulsory_bytes(v: Variant, num_tokens: int) -> int:
    """Each input row read once and each written byte written once (norm weights and freqs are cache-resident)."""
    return num_tokens * (v.head_dim * v.elem_bytes + layout_of(v).written_bytes_per_token + INDEX_BYTES)


def graph_replay_us(call: Callable[[], None], calls: int = 10, reps: int = 15) -> float:
    """Median GPU microseconds per call: `calls` launches captured in one graph, replayed `reps` times."""
    import torch

    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


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
    return us, compulsory_bytes(op.variant, num_tokens) / (us * 1e-6) / 1e9


def launch_args(inputs: dict[str, Any], eps: float = 1e-6) -> tuple[torch.Tensor, ...]:
    keys = ("x", "weight", "bias", "freqs", "positions", "out_loc", "kvcache")
    return (*(inputs[k] for k in keys), eps)
