"""Where the host time of one checked call goes (microseconds per call, 8 tokens, on the local GPU), beside
a bare torch kernel launch and an empty tvm-ffi function taking as many tensors as the variant's symbol, in
one process.

    python tools/host_profile.py [spec] [variant]"""
from __future__ import annotations

import sys
import tempfile

import torch

from kernelgen import load
from kernelgen.measure.inputs import timing_inputs
from kernelgen.measure.timing import launch_args, per_call_us


def empty_function(tensors: int) -> object:
    """The floor of any tvm-ffi call with this argument list: `tensors` tensors converted, nothing done with them."""
    import tvm_ffi.cpp

    params = ", ".join(["tvm::ffi::TensorView"] * tensors + ["double"])
    source = f"#include <tvm/ffi/container/tensor.h>\nvoid empty({params}) {{}}\n"
    module = tvm_ffi.cpp.load_inline(f"kernelgen_empty{tensors}", cpp_sources=source, functions=["empty"],
                                     build_directory=tempfile.mkdtemp(prefix="kernelgen-empty-"))
    return module.empty


def main() -> int:
    spec, name = (sys.argv[1:3] if len(sys.argv) > 2 else ("dsv4_indexer", "dsv4_indexer_fp8_p64"))
    op = load(spec, name)
    inputs = timing_inputs(op.variant, 8)
    args = launch_args(inputs)
    x, w, b, f, p, loc, cache, g, eps = args
    tensors = op.pick(args[:-1])
    empty = empty_function(len(tensors))
    small = torch.zeros(8, device=x.device)
    n = len(tensors)
    rows = {
        "checked call op(...)": lambda: op(x, w, f, p, loc, cache, bias=b, scale=g),
        "op.launch(...) (checks in C)": lambda: op.launch(*args),
        "Python table checks (debug mode)": lambda: op.checker.check(x, w, b, f, p, loc, cache, g),
        f"symbol called directly ({n} tensors)": lambda: op.function(*tensors, eps),
        f"empty tvm-ffi function ({n} tensors)": lambda: empty(*tensors, eps),
        "bare torch kernel launch (add_)": lambda: small.add_(1.0),
        "torch current_stream only": lambda: torch.cuda.current_stream(x.device).cuda_stream,
    }
    for label, fn in rows.items():
        print(f"{label:36} {per_call_us(fn):7.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
