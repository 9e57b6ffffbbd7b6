"""Build tier (no GPU): the torch custom op is registered once, its fake checks metadata only, and
torch.compile(fullgraph=True) traces a module that calls it without a graph break."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kernelgen.errors import LayoutMismatch
from kernelgen.runtime.loader import load
from kernelgen.runtime.torch_ops import register

pytestmark = pytest.mark.build


@pytest.fixture(scope="module")
def op(tmp_path_factory: pytest.TempPathFactory):
    return load("dsv4_indexer", "dsv4_indexer_fp8_p64", arch="sm_90a",
                cache_dir=str(tmp_path_factory.mktemp("torch-ops-cache")))


def fake_inputs(n: int = 4, page_bytes: int = 8448) -> tuple[torch.Tensor, ...]:
    dev = "cuda"  # fake CUDA tensors need no GPU
    return (torch.empty(n, 128, dtype=torch.bfloat16, device=dev), torch.empty(128, device=dev),
            torch.empty(16, 64, device=dev), torch.empty(n, dtype=torch.long, device=dev),
            torch.empty(n, dtype=torch.long, device=dev), torch.empty(2, page_bytes, dtype=torch.uint8, device=dev))


def test_register_is_idempotent_and_declares_the_mutation(op) -> None:
    first, again = register(op), register(op)
    assert first is again is torch.ops.kernelgen.dsv4_indexer_fp8_p64
    schema = str(first.default._schema)
    assert "Tensor(a!) kvcache" in schema and schema.endswith("-> ()")


def test_the_fake_checks_metadata_without_touching_storage(op) -> None:
    f = register(op)
    with FakeTensorMode():
        f(*fake_inputs())  # fake tensors have no data_ptr: the fake must not ask for one
        with pytest.raises(LayoutMismatch, match="kvcache rows are 16384 bytes but dsv4_indexer_fp8_p64 writes 8448"):
            f(*fake_inputs(page_bytes=16384))
        x, w, fr, pos, loc, cache = fake_inputs()
        with pytest.raises(LayoutMismatch, match="x must be bfloat16"):
            f(x.float(), w, fr, pos, loc, cache)


def test_torch_compile_fullgraph_traces_the_op_without_a_graph_break(op) -> None:
    f = register(op)
    graphs: list[torch.fx.GraphModule] = []

    def record(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)
        return lambda *args: None  # trace only: there is no GPU to run it on here

    class Store(torch.nn.Module):
        def forward(self, x, w, fr, pos, loc, cache):
            f(x * 2, w, fr, pos, loc, cache)

    compiled = torch.compile(Store(), fullgraph=True, backend=record)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        inputs = fake_inputs()
    compiled(*inputs)
    assert len(graphs) == 1
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert any("kernelgen.dsv4_indexer_fp8_p64" in t for t in targets), targets
    del mode


def test_cpu_tensors_get_kernelgen_words(op) -> None:
    f = register(op)
    x = torch.randn(4, 128).bfloat16()
    with pytest.raises(LayoutMismatch, match="must be on a CUDA device"):
        f(x, torch.randn(128), torch.randn(16, 64), torch.zeros(4, dtype=torch.long), torch.arange(4),
          op.layout.allocate(2))
