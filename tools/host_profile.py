"""Where the host time of one checked call goes (microseconds per call, 8 tokens, on the local GPU).

    python tools/host_profile.py [spec] [variant]"""
from __future__ import annotations

import sys

import torch

from kernelgen import load
from kernelgen.measure.inputs import timing_inputs
from kernelgen.measure.timing import launch_args, per_call_us


def main() -> int:
    spec, name = (sys.argv[1:3] if len(sys.argv) > 2 else ("dsv4_indexer", "dsv4_indexer_fp8_p64"))
    op = load(spec, name)
    inputs = timing_inputs(op.variant, 8)
    args = launch_args(inputs)
    x, w, b, f, p, loc, cache, eps = args
    rows = {
        "checked call op(...)": lambda: op(x, w, f, p, loc, cache, bias=b),
        "op.launch(...) (checks in C)": lambda: op.launch(*args),
        "Python table checks (debug mode)": lambda: op.checker.check(x, w, b, f, p, loc, cache),
        "tvm-ffi call (7 tensors)": lambda: op.function(*(t if t is not None else x[:0] for t in args[:7]), eps),
        "torch current_stream only": lambda: torch.cuda.current_stream(x.device).cuda_stream,
    }
    for label, fn in rows.items():
        print(f"{label:34} {per_call_us(fn):7.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
