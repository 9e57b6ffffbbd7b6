"""kernelgen's NVFP4 K/V groups beside FlashInfer 0.7.2's own NVFP4 append (built from its wheel by
tools/peer_flashinfer.py), in one process on the same inputs: bytes compared value by value, and the time of each
by CUDA-graph replay (inputs rotated past the L2 from 4096 tokens), with the copy roofline and the empty-kernel
floor measured in the same run.

    python tools/side_by_side_flashinfer.py [--lib .peers/flashinfer/lib] [--tokens 1,32,...] [--json out.json]

Llama-3-8B (8 KV heads of 128, page_size 16, NHD): FlashInfer's nvfp4_quantize_append_paged_kv_cache_with_slot_mapping
writes K and V rows that are already rotated (the engine ran RoPE before it), into the data and scale tensors that
Pages.field_view gives of kernelgen's pools. kernelgen runs llama3_8b_nvfp4 (Q RoPE, K RoPE and both NVFP4 appends
in one launch) and the same model without the Q output (`q_store: none`: K RoPE and the appends, the work
FlashInfer's kernel does plus the RoPE). V has no norm and no RoPE, so both sides quantize the same bf16 rows: its
bytes are compared value by value. K is compared given kernelgen's reference rows rounded to bf16 (what an
unfused RoPE kernel hands FlashInfer), so its codes may differ where kernelgen quantizes the unrounded float32.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_flashinfer  # noqa: E402
from side_by_side_sglang import compare  # noqa: E402  (one comparison of code steps for both peers)

import kernelgen  # noqa: E402
from kernelgen.bench import copy_roofline_gbs, empty_kernel_floor_us  # noqa: E402
from kernelgen.layout.pages import head_slots  # noqa: E402
from kernelgen.measure import reference  # noqa: E402
from kernelgen.measure.inputs import group_inputs, member_inputs  # noqa: E402
from kernelgen.measure.timing import rotated_graph_us, rotation_sets  # noqa: E402

MODEL = "llama3_8b_nvfp4"
KV_ONLY = ("family: fused_norm_rope_store\nname: fi_side\nmodels:\n  - {name: llama3_8b_nvfp4_kv, num_q_heads: 32, "
           "num_kv_heads: 8, head_dim: 128, kv_store: nvfp4_kv, q_store: none}\n")
TOKENS = (1, 32, 256, 4096, 16384, 65536, 262144)
L2 = 60 << 20


def field_steps(layout, ours: torch.Tensor, theirs: torch.Tensor, loc: torch.Tensor) -> dict[str, object]:
    """side_by_side_sglang.compare over the records written at token slots loc (each token's heads): per field,
    values, values that differ, the largest step between them, records that differ."""
    return compare(layout, ours, theirs, head_slots(loc, layout.heads))


def flashinfer_views(op, role: str, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pages = op.layouts[role]
    return pages.field_view(cache, "values"), pages.field_view(cache, "scales").view(torch.float8_e4m3fn)


def fi_rows(op, inputs: dict, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The K rows an unfused engine hands FlashInfer (kernelgen's reference RoPE, rounded to bf16) and the V rows."""
    g = op.group
    k = g.member("k")
    mine = member_inputs(g, "k", inputs)
    rows = reference.rows(k.row_variant, mine["x"].reshape(n * k.heads, k.head_dim), mine["weight"], mine["freqs"],
                          mine["positions"].repeat_interleave(k.heads), 1e-6)
    return rows.reshape(n, k.heads, k.head_dim).bfloat16(), inputs["v"].reshape(n, k.heads, k.head_dim).contiguous()


def engine_inputs(op, n: int, pages: int, seed: int) -> dict:
    """The group's inputs with calibrated scales (amax x 1.5 maps near the largest code), and padding (-1) for every
    slot past the pool (FlashInfer skips negative slots but does not bounds-check the others) and every token whose
    position is past the cos/sin table (kernelgen skips it; an engine never has one)."""
    i = group_inputs(op.group, n, pages, "cuda", seed=seed)
    for role in ("k", "v"):
        i[op.group.names(role)["scale"]].fill_(float(i[role].float().abs().max()) * 1.5 / (448 * 6))
    loc, slots = i["out_loc"], i["k_cache"].shape[0] * op.layouts["k"].page_size
    i["out_loc"] = torch.where((loc < slots) & (i["positions"] < i["freqs"].shape[0]), loc, -1)
    return i


def call_args(inputs: dict) -> dict:
    return {k: t for k, t in inputs.items() if k != "qkv"}


def run(peer, tokens: tuple[int, ...], roofline: float) -> list[dict[str, object]]:
    full = kernelgen.load("attention_prep", MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "fi_side.yaml").write_text(KV_ONLY)
        kv_only = kernelgen.load(Path(tmp) / "fi_side.yaml", "llama3_8b_nvfp4_kv")
    rows: list[dict[str, object]] = []
    # bytes: one batch of 4096 tokens in random slots
    n = 4096
    inputs = engine_inputs(full, n, n // 16 + 4, seed=7)
    theirs = {role: inputs[f"{role}_cache"].clone() for role in ("k", "v")}  # the same poison in the unwritten bytes
    full(**call_args(inputs))
    k_rows, v_rows = fi_rows(full, inputs, n)
    (kd, ksf), (vd, vsf) = flashinfer_views(full, "k", theirs["k"]), flashinfer_views(full, "v", theirs["v"])
    peer.nvfp4_append(k_rows, v_rows, inputs["out_loc"], kd, vd, ksf, vsf, inputs["k_scale"], inputs["v_scale"])
    torch.cuda.synchronize()
    loc = inputs["out_loc"]
    valid = loc[loc >= 0]
    byte_rows = {role: field_steps(full.layouts[role], inputs[f"{role}_cache"], theirs[role], valid)
                 for role in ("k", "v")}
    rows.append({"bytes": byte_rows, "tokens": n})
    print(f"bytes over {n} tokens: V {byte_rows['v']}\n                      K {byte_rows['k']}", flush=True)
    del inputs, theirs
    for n in tokens:
        pages = n // 16 + 4
        q_bytes = n * 32 * 128 * 2 * 2
        kv_bytes = n * 8 * 2 * (128 * 2 + 72)
        sets: dict[int, dict] = {}

        def inputs_for(s: int, n: int = n, pages: int = pages) -> dict:
            """One input set: the group's arguments, the K+V group's, and FlashInfer's (rows and tensor views)."""
            if s not in sets:
                i = engine_inputs(full, n, pages, seed=100 + s)
                (kd, ksf), (vd, vsf) = flashinfer_views(full, "k", i["k_cache"]), flashinfer_views(full, "v", i["v_cache"])
                fi = (i["k"].reshape(n, 8, 128).contiguous(), i["v"].reshape(n, 8, 128).contiguous(), i["out_loc"],
                      kd, vd, ksf, vsf, i["k_scale"], i["v_scale"])
                kv = {k: t for k, t in call_args(i).items() if k not in ("q", "q_out")}
                sets[s] = {"group": call_args(i), "kv": kv, "flashinfer": fi}
            return sets[s]

        def timed(make) -> float:
            count = rotation_sets(q_bytes + kv_bytes, n, L2)
            return rotated_graph_us([make(inputs_for(s)) for s in range(count)])

        us_full = timed(lambda i: (lambda: full(**i["group"])))
        us_kv = timed(lambda i: (lambda: kv_only(**i["kv"])))
        us_fi = timed(lambda i: (lambda: peer.nvfp4_append(*i["flashinfer"])))
        sets.clear()
        pct = lambda b, us: 100 * b / (us * 1e-6) / 1e9 / roofline  # noqa: E731
        rows.append({"tokens": n, "kernelgen_group_us": us_full, "kernelgen_kv_us": us_kv, "flashinfer_us": us_fi,
                     "speedup_kv": us_fi / us_kv, "kernelgen_group_pct": pct(q_bytes + kv_bytes, us_full),
                     "kernelgen_kv_pct": pct(kv_bytes, us_kv), "flashinfer_pct": pct(kv_bytes, us_fi)})
        print(f"N={n:7d}  kernelgen Q+K+V {us_full:9.2f} us ({rows[-1]['kernelgen_group_pct']:5.1f}%)  "
              f"kernelgen K+V {us_kv:9.2f} us ({rows[-1]['kernelgen_kv_pct']:5.1f}%)  FlashInfer K+V {us_fi:9.2f} us "
              f"({rows[-1]['flashinfer_pct']:5.1f}%)  x{us_fi / us_kv:5.2f}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", default=".peers/flashinfer/lib")
    p.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    peer = peer_flashinfer.load(args.lib)
    roofline, floor = copy_roofline_gbs(), empty_kernel_floor_us()
    print(f"{torch.cuda.get_device_name()}: copy roofline {roofline:.0f} GB/s, empty-kernel floor {floor:.2f} us",
          flush=True)
    out = {"roofline_gbs": roofline, "floor_us": floor, "gpu": torch.cuda.get_device_name(),
           "rows": run(peer, tuple(int(t) for t in args.tokens.split(",")), roofline)}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
