"""Where the host time of one checked call goes (microseconds per call, 8 tokens, on the local GPU).

    python tools/host_profile.py [spec] [variant]"""
from __future__ import annotations

import sys
import time
from typing import Callable

import torch
import tvm_ffi

from kernelgen import load
from kernelgen.timing import launch_args, timing_inputs


def per_call_us(fn: Callable[[], object], calls: int = 2000) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main() -> int:
    spec, name = (sys.argv[1:3] if len(sys.argv) > 2 else ("dsv4_indexer", "dsv4_indexer_fp8_p64"))
    op = load(spec, name)
    inputs = timing_inputs(op.variant, 8)
    args = launch_args(inputs)
    x, w, b, f, p, loc, cache, eps = args
    device = tvm_ffi.device(str(x.device))
    stream = torch.cuda.current_stream().cuda_stream
    def stream_context() -> None:
        with tvm_ffi.use_raw_stream(device, stream):
            pass

    rows = {
        "checked call op(...)": lambda: op(x, w, f, p, loc, cache, bias=b),
        "unchecked op.launch(...)": lambda: op.launch(*args),
        "fast_ok checks only": lambda: op.checker.fast_ok(x, w, b, f, p, loc, cache),
        "tvm-ffi call, no stream context": lambda: op.function(*(t if t is not None else x[:0] for t in args[:7]), eps),
        "stream context only": stream_context,
        "torch current_stream only": lambda: torch.cuda.current_stream(x.device).cuda_stream,
    }
    for label, fn in rows.items():
        print(f"{label:34} {per_call_us(fn):7.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
