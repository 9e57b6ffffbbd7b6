"""Where the host time of one checked call goes (microseconds per call, 8 tokens, on the local GPU), beside
a bare torch kernel launch and an empty tvm-ffi function taking the same seven tensors, in one process.

    python tools/host_profile.py [spec] [variant]"""
from __future__ import annotations

import sys
import tempfile

import torch

from kernelgen import load
from kernelgen.measure.inputs import timing_inputs
from kernelgen.measure.timing import launch_args, per_call_us

# The floor of any tvm-ffi call with this argument list: seven tensors converted, nothing done with them.
EMPTY = r"""
#include <tvm/ffi/container/tensor.h>
void empty7(tvm::ffi::TensorView, tvm::ffi::TensorView, tvm::ffi::TensorView, tvm::ffi::TensorView,
            tvm::ffi::TensorView, tvm::ffi::TensorView, tvm::ffi::TensorView, double) {}
"""


def empty_function() -> object:
    import tvm_ffi.cpp

    module = tvm_ffi.cpp.load_inline("kernelgen_empty7", cpp_sources=EMPTY, functions=["empty7"],
                                     build_directory=tempfile.mkdtemp(prefix="kernelgen-empty7-"))
    return module.empty7


def main() -> int:
    spec, name = (sys.argv[1:3] if len(sys.argv) > 2 else ("dsv4_indexer", "dsv4_indexer_fp8_p64"))
    op = load(spec, name)
    inputs = timing_inputs(op.variant, 8)
    args = launch_args(inputs)
    x, w, b, f, p, loc, cache, eps = args
    tensors = tuple(t if t is not None else x[:0] for t in args[:7])
    empty7 = empty_function()
    small = torch.zeros(8, device=x.device)
    rows = {
        "checked call op(...)": lambda: op(x, w, f, p, loc, cache, bias=b),
        "op.launch(...) (checks in C)": lambda: op.launch(*args),
        "Python table checks (debug mode)": lambda: op.checker.check(x, w, b, f, p, loc, cache),
        "tvm-ffi call (7 tensors)": lambda: op.function(*tensors, eps),
        "empty tvm-ffi function (7 tensors)": lambda: empty7(*tensors, eps),
        "bare torch kernel launch (add_)": lambda: small.add_(1.0),
        "torch current_stream only": lambda: torch.cuda.current_stream(x.device).cuda_stream,
    }
    for label, fn in rows.items():
        print(f"{label:36} {per_call_us(fn):7.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
