"""A small paged "compressed KV store" of the kind a serving engine keeps, on kernelgen exports.

Two pools allocated from the layout API (DeepSeek-V4 indexer keys in bf16, main KV in FlashMLA fp8),
a page table per sequence, a prefill step that writes a batch of sequences, and a decode step
captured once in a CUDA graph and replayed with new positions and slots. The kernels come from an
export directory, so this process needs no nvcc:

    kernelgen export dsv4_indexer --variants dsv4_indexer_bf16_p64 --arch sm_90a -o /tmp/kg_export
    kernelgen export dsv4_mainkv --variants dsv4_mainkv_fp8mla_p64 --arch sm_90a -o /tmp/kg_export_mainkv
    python examples/kv_store.py /tmp/kg_export /tmp/kg_export_mainkv

It checks every byte it wrote against the PyTorch reference and prints a summary."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch

import kernelgen
from kernelgen.measure.inputs import rope_table
from kernelgen.measure.verify import expected

PAGE = 64


@dataclass
class Pool:
    """One paged pool: uint8 [num_pages, page_bytes] from the op's layout, plus free-page bookkeeping."""

    op: kernelgen.Op
    num_pages: int
    cache: torch.Tensor = field(init=False)
    free: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.cache = self.op.layout.allocate(self.num_pages, device="cuda")
        self.free = list(range(self.num_pages - 1, -1, -1))


@dataclass
class Sequence:
    pages: list[int] = field(default_factory=list)
    length: int = 0

    def slots(self, count: int, pool: Pool) -> list[int]:
        """Slots for the next `count` tokens, taking pages from the pool as needed."""
        out = []
        for pos in range(self.length, self.length + count):
            if pos // PAGE >= len(self.pages):
                self.pages.append(pool.free.pop())
            out.append(self.pages[pos // PAGE] * PAGE + pos % PAGE)
        self.length += count
        return out


def run(index_dir: str, mainkv_dir: str) -> int:
    index_op = kernelgen.load_exported(index_dir, "dsv4_indexer_bf16_p64")
    mainkv_op = kernelgen.load_exported(mainkv_dir, "dsv4_mainkv_fp8mla_p64")
    pools = {"index": Pool(index_op, 256), "mainkv": Pool(mainkv_op, 256)}
    freqs = rope_table(64, 8192).cuda()  # (cos, sin) pairs, as kernelgen's tests build them
    weights = {"index": torch.rand(128, device="cuda") + 0.5, "mainkv": torch.rand(512, device="cuda") + 0.5}
    dims = {"index": 128, "mainkv": 512}
    sequences = {kind: [Sequence() for _ in range(4)] for kind in pools}  # each pool has its own page table
    checked = 0

    # Prefill: each sequence appends its prompt to both pools.
    lengths = [300, 17, 1024, 65]
    for kind, pool in pools.items():
        slots, positions = [], []
        for seq, n in zip(sequences[kind], lengths):
            slots += seq.slots(n, pool)
            positions += list(range(n))
        x = torch.randn(len(slots), dims[kind], device="cuda").bfloat16()
        pos, loc = torch.tensor(positions, device="cuda"), torch.tensor(slots, device="cuda")
        # the reference replays the reduction order of the configuration the tuned dispatch runs for this count
        want = expected(pool.op.variant_for(len(slots)), {"x": x, "weight": weights[kind], "bias": None, "freqs": freqs,
                                          "positions": pos, "out_loc": loc, "kvcache": pool.cache})
        pool.op(x, weights[kind], freqs, pos, loc, pool.cache)
        torch.cuda.synchronize()
        assert torch.equal(pool.cache, want), f"prefill {kind}: bytes differ from the reference"
        checked += len(slots)

    # Decode: one token per sequence into both pools, captured once in a CUDA graph, replayed with new
    # positions and slots written into the graph's static input tensors.
    static = {kind: {"x": torch.zeros(4, dims[kind], device="cuda", dtype=torch.bfloat16),
                     "positions": torch.zeros(4, dtype=torch.long, device="cuda"),
                     "out_loc": torch.full((4,), -1, dtype=torch.long, device="cuda")} for kind in pools}

    def step() -> None:
        for kind, s in static.items():
            pools[kind].op(s["x"], weights[kind], freqs, s["positions"], s["out_loc"], pools[kind].cache)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up: every out_loc is -1, so nothing is written
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        wants = {}
        for kind, s in static.items():
            positions = torch.tensor([seq.length for seq in sequences[kind]], device="cuda")
            slots = torch.tensor([seq.slots(1, pools[kind])[0] for seq in sequences[kind]], device="cuda")
            s["x"].copy_(torch.randn(4, dims[kind], device="cuda").bfloat16())
            s["positions"].copy_(positions)
            s["out_loc"].copy_(slots)
            wants[kind] = expected(pools[kind].op.variant_for(4), {  # the configuration the dispatch runs
                "x": s["x"], "weight": weights[kind], "bias": None, "freqs": freqs, "positions": positions,
                "out_loc": slots, "kvcache": pools[kind].cache})
        graph.replay()
        torch.cuda.synchronize()
        for kind in pools:
            assert torch.equal(pools[kind].cache, wants[kind]), f"decode {kind}: bytes differ from the reference"
            checked += 4
    print(f"kv_store: {checked} token writes checked against the reference (prefill + graph-replayed decode)")
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2]))
