"""kernelgen's attention-prep launch groups beside FlashInfer 0.7.2's fused kernels, one process, same inputs (H200).

FlashInfer's `cake_fused_qk_rmsnorm_rope_append_paged_kv_cache` (bf16) and
`cake_fused_qk_rmsnorm_rope_quantize_fp8_append_paged_kv_cache` (fp8) on their own shapes, (Hq, Hkv) = (8, 1) and
(64, 8), head_dim 128, against kernelgen's groups cake_8_1, cake_64_8, cake_8_1_fp8, cake_64_8_fp8 (specs/
attention_prep.yaml) and the torch.compile reference of the same groups. Both kernels read one packed qkv, one
cos_sin table (cos half | sin half) and the norm weights; FlashInfer places rows by its page table (seq_lens,
q_indptr, page_indices), kernelgen by positions and out_loc computed from the same page table, so both write
the same slots of caches of the same shape. Each request has pages of its own (FlashInfer's fp8 kernel zeroes the
unused rows of every request's last page: a shared page would race).

Per shape and token count: bytes (both kernels' outputs from the same inputs, compared value by value), then
times by CUDA-graph replay (>= 20 calls per graph, median of 15 replays; from 4096 tokens the calls rotate over
input sets covering 3x the L2, so every call reads DRAM), the kernels interleaved, the copy roofline and the
empty-kernel floor measured in the same run. Decode: N requests of one new token each (random lengths up to
4096); prefill: requests of 1024 new tokens.

    python tools/flashinfer_build.py --extract WHEEL --compile-only     # CPU machine: .fi/ from the wheel, and it builds
    python tools/attention_prep_side_by_side.py --out tools/results/h200_side_by_side_flashinfer.json   # on the GPU
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))

from flashinfer_build import load as load_flashinfer  # noqa: E402

from kernelgen import bench  # noqa: E402
from kernelgen.measure.inputs import rope_table  # noqa: E402
from kernelgen.measure.timing import rotated_graph_us, rotation_sets  # noqa: E402
from kernelgen.runtime.group_op import load_group  # noqa: E402

D = 128
MAX_POS = 4096
PAGE = 16
DECODE = (1, 8, 32, 64, 128, 256)
PREFILL = (1024, 4096, 16384, 65536, 262144)
SHAPES = ((8, 1), (64, 8))


def problem(hq: int, hkv: int, n: int, workload: str, seed: int, fp8: bool) -> dict[str, Any]:
    """One call's inputs for both kernels, and separate outputs for each."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    qkv = (torch.randn(n, (hq + 2 * hkv) * D, generator=g, device=dev) * 3 + 0.5).to(torch.bfloat16)
    if workload == "decode":
        b = n
        seq_lens = torch.randint(1, MAX_POS + 1, (b,), generator=g, device=dev, dtype=torch.int32)
        q_indptr = torch.arange(b + 1, device=dev, dtype=torch.int32)
    else:
        per = min(n, 1024)
        b = n // per
        seq_lens = torch.full((b,), per, device=dev, dtype=torch.int32)
        q_indptr = torch.arange(b + 1, device=dev, dtype=torch.int32) * per
    max_pages = -(-int(seq_lens.max()) // PAGE)
    num_pages = b * max_pages
    page_indices = torch.randperm(num_pages, generator=g, device=dev).to(torch.int32).reshape(b, max_pages)
    # kernelgen's per-token view of the same placement: FlashInfer's rule, row r of request b at
    # position r + seq_lens[b] - q_indptr[b + 1], page page_indices[b, pos // P], row pos % P
    rows = torch.arange(n, device=dev)
    req = torch.searchsorted(q_indptr[1:].long(), rows, right=True)
    pos = rows + seq_lens.long()[req] - q_indptr.long()[1:][req]
    out_loc = page_indices.long()[req, pos // PAGE] * PAGE + pos % PAGE
    cache_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    caches = {side: [torch.zeros(num_pages, PAGE, hkv, D, dtype=cache_dtype, device=dev) for _ in range(2)]
              for side in ("fi", "kg")}
    out = dict(qkv=qkv, seq_lens=seq_lens, q_indptr=q_indptr, page_indices=page_indices, positions=pos,
               out_loc=out_loc, caches=caches, b=b,
               cos_sin=rope_table(D, MAX_POS, "halves").to(dev),
               wq=(1 + 0.25 * torch.randn(D, generator=g, device=dev)).float(),
               wk=(1 + 0.25 * torch.randn(D, generator=g, device=dev)).float())
    if fp8:
        out["k_scale"] = torch.tensor([0.05], device=dev)
        out["v_scale"] = torch.tensor([0.04], device=dev)
        out["q_fi"] = torch.zeros(n, hq, D, dtype=torch.float8_e4m3fn, device=dev)
        out["q_scale_fi"] = torch.zeros(n, hq, dtype=torch.float32, device=dev)
    else:
        out["q_fi"] = torch.zeros(n, hq, D, dtype=torch.bfloat16, device=dev)
    return out


def flashinfer_call(fi: Any, p: dict[str, Any], hq: int, hkv: int, fp8: bool) -> Any:
    kc, vc = p["caches"]["fi"]
    if fp8:
        return fi.plan_fp8(p["qkv"], p["cos_sin"], p["seq_lens"], p["q_indptr"], p["page_indices"], (kc, vc), False,
                           p["k_scale"], p["v_scale"], 1, q_norm_weight=p["wq"], k_norm_weight=p["wk"],
                           qk_norm_policy=2, out_q=p["q_fi"], q_scale=p["q_scale_fi"])
    return fi.plan_bf16(p["qkv"], p["cos_sin"], p["seq_lens"], p["q_indptr"], p["page_indices"], kc, vc,
                        num_q_heads=hq, num_kv_heads=hkv, qk_norm_policy=2, q_norm_weight=p["wq"],
                        k_norm_weight=p["wk"], eps=1e-6, out_q=p["q_fi"], clear_unused_last_page_rows=False)


def kernelgen_inputs(op: Any, p: dict[str, Any], fp8: bool) -> dict[str, Any]:
    """The group's tensors by name (what op.tensors and the reference take)."""
    kc, vc = p["caches"]["kg"]
    q_layout = op.layouts["q"]
    if "q_kg" not in p:
        p["q_kg"] = torch.zeros(p["qkv"].shape[0], q_layout.page_bytes, dtype=torch.uint8, device="cuda")
    hq = op.group.member("q").heads
    out = {"qkv": p["qkv"], "q": p["qkv"][:, :hq * D], "k": p["qkv"][:, hq * D:(hq + op.group.member("k").heads) * D],
           "v": p["qkv"][:, (hq + op.group.member("k").heads) * D:], "q_weight": p["wq"], "k_weight": p["wk"],
           "freqs": p["cos_sin"], "positions": p["positions"], "out_loc": p["out_loc"], "q_out": p["q_kg"],
           "k_cache": kc.view(kc.shape[0], -1).view(torch.uint8), "v_cache": vc.view(vc.shape[0], -1).view(torch.uint8)}
    if fp8:
        out.update(k_scale=p["k_scale"], v_scale=p["v_scale"])
    return out


def bf16_ulps(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    """Values that differ, and the largest distance in bf16 steps (sign-magnitude order)."""
    ia, ib = a.contiguous().view(torch.int16).int(), b.contiguous().view(torch.int16).int()
    ra = torch.where(ia < 0, -(ia & 0x7FFF), ia)
    rb = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    diff = (ra - rb).abs()
    return {"values": a.numel(), "differ": int((diff > 0).sum()), "max_steps": int(diff.max()) if a.numel() else 0}


def e4m3_steps(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    ia, ib = a.contiguous().view(torch.uint8).int(), b.contiguous().view(torch.uint8).int()
    ra = torch.where(ia >= 128, -(ia & 0x7F), ia)
    rb = torch.where(ib >= 128, -(ib & 0x7F), ib)
    diff = (ra - rb).abs()
    return {"values": a.numel(), "differ": int((diff > 0).sum()), "max_steps": int(diff.max()) if a.numel() else 0}


def compare(p: dict[str, Any], hq: int, hkv: int, fp8: bool) -> dict[str, Any]:
    """Both kernels' outputs for the same inputs, value by value (written slots only)."""
    n = p["qkv"].shape[0]
    loc = p["out_loc"]
    page, row = loc // PAGE, loc % PAGE
    out: dict[str, Any] = {}
    (kf, vf), (kk, vk) = p["caches"]["fi"], p["caches"]["kg"]
    if fp8:
        q_kg = p["q_kg"][:, :hq * D].view(torch.float8_e4m3fn).reshape(n, hq, D)
        scales_kg = p["q_kg"][:, hq * D:].contiguous().view(torch.float32)
        out["q"] = e4m3_steps(p["q_fi"], q_kg)
        rel = ((p["q_scale_fi"] - scales_kg).abs() / p["q_scale_fi"].abs().clamp_min(1e-30))
        out["q_scale"] = {"values": scales_kg.numel(), "differ": int((p["q_scale_fi"] != scales_kg).sum()),
                          "max_rel": float(rel.max())}
        out["k"] = e4m3_steps(kf[page, row], kk[page, row])
        out["v"] = e4m3_steps(vf[page, row], vk[page, row])
    else:
        out["q"] = bf16_ulps(p["q_fi"], p["q_kg"].view(torch.bfloat16).reshape(n, hq, D))
        out["k"] = bf16_ulps(kf[page, row], kk[page, row])
        out["v"] = bf16_ulps(vf[page, row], vk[page, row])
    return out


def timed(calls: list[Any]) -> float:
    return rotated_graph_us(calls)


def run_shape(fi: Any, hq: int, hkv: int, fp8: bool, workload: str, tokens: tuple[int, ...], l2: int,
              compiled: bool, say: Any) -> list[dict[str, Any]]:
    name = f"cake_{hq}_{hkv}" + ("_fp8" if fp8 else "")
    op = load_group("attention_prep", name)
    say(f"{name}: kernelgen dispatch from {op.tuned_from}: {op.plan.describe()}")
    rows = []
    for n in tokens:
        first = problem(hq, hkv, n, workload, seed=n, fp8=fp8)
        fi_first = flashinfer_call(fi, first, hq, hkv, fp8)
        kg_first = op.tensors({k: v for k, v in kernelgen_inputs(op, first, fp8).items() if k != "qkv"})
        fi_first()
        op.launch(kg_first, 1e-6)
        torch.cuda.synchronize()
        agree = compare(first, hq, hkv, fp8)
        moved = bench.group_compulsory_bytes(op.group, kernelgen_inputs(op, first, fp8), l2)
        sets = [first] + [problem(hq, hkv, n, workload, seed=n + 1000 * s, fp8=fp8)
                          for s in range(1, rotation_sets(moved, n, l2))]
        fi_calls = [flashinfer_call(fi, s, hq, hkv, fp8) for s in sets]
        kg_args = [op.tensors({k: v for k, v in kernelgen_inputs(op, s, fp8).items() if k != "qkv"}) for s in sets]
        kg_calls = [lambda a=a: op.launch(a, 1e-6) for a in kg_args]
        fi_us, kg_us = [], []
        for _ in range(3):  # interleaved: clock drift hits both alike
            fi_us.append(timed(fi_calls))
            kg_us.append(timed(kg_calls))
        floor = bench.empty_kernel_floor_us()
        row = {"shape": name, "workload": workload, "tokens": n, "requests": first["b"],
               "kernelgen_us": round(statistics.median(kg_us), 3), "flashinfer_us": round(statistics.median(fi_us), 3),
               "flashinfer_stage": fi_first.stage, "kernelgen_launch": op.plan.launch_for(n).id,
               "compulsory_bytes": moved, "floor_us": round(floor, 3), "bytes_agree": agree}
        row["speedup"] = round(row["flashinfer_us"] / row["kernelgen_us"], 3)
        row["kernelgen_tbps"] = round(moved / (row["kernelgen_us"] * 1e-6) / 1e12, 3)
        if compiled:
            try:
                call = bench.group_reference_call(op.group, kernelgen_inputs(op, first, fp8), compiled=True)
                row["compiled_us"] = round(bench._event_us(call, reps=5), 3)
                row["compiled_extra_mb"] = round(bench._extra_memory_mb(call), 1)
            except Exception as exc:  # reported, not fatal
                row["compiled_error"] = str(exc).splitlines()[0][:160]
        rows.append(row)
        say(json.dumps(row))
        del sets, fi_calls, kg_calls, kg_args, first
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the rows as JSON here")
    ap.add_argument("--decode", default=",".join(map(str, DECODE)))
    ap.add_argument("--prefill", default=",".join(map(str, PREFILL)))
    ap.add_argument("--shapes", default="8x1,64x8")
    ap.add_argument("--fp8", action="store_true", help="also the fp8 twins")
    ap.add_argument("--compiled", action="store_true", help="also the torch.compile reference of kernelgen's groups")
    args = ap.parse_args(argv)
    start = time.monotonic()
    fi = load_flashinfer()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    roofline = bench.copy_roofline_gbs()
    floor = bench.empty_kernel_floor_us()
    say = lambda s: print(s, flush=True)  # noqa: E731
    say(f"copy roofline {roofline:.0f} GB/s, empty kernel {floor:.2f} us")
    rows = []
    for shape in args.shapes.split(","):
        hq, hkv = (int(x) for x in shape.split("x"))
        for fp8 in (False, True) if args.fp8 else (False,):
            for workload, tokens in (("decode", args.decode), ("prefill", args.prefill)):
                ns = tuple(int(x) for x in tokens.split(",") if x)
                rows += run_shape(fi, hq, hkv, fp8, workload, ns, l2, args.compiled, say)
    meta = {"gpu": torch.cuda.get_device_name(0), "roofline_gbs": round(roofline, 1), "floor_us": round(floor, 3),
            "method": "CUDA-graph replay, >=20 calls per graph, median of 15 replays, median of 3 interleaved rounds; "
                      "inputs rotated over >=3x L2 from 4096 tokens", "page_size": PAGE, "max_pos": MAX_POS,
            "flashinfer": "0.7.2 (wheel sources, built with its JIT's sm_90a flags)", "seconds": round(time.monotonic() - start)}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
