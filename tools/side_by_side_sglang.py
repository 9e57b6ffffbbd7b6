"""kernelgen beside SGLang 0.5.23's own cache writers (built from its wheel by tools/peer_sglang.py), in one process
on the same inputs: the bytes compared value by value, and the time of each by CUDA-graph replay (inputs rotated
past the L2 from 4096 tokens), with the copy roofline and the empty-kernel floor measured in the same run.

    python tools/side_by_side_sglang.py [--lib .peers/sglang/lib] [--tokens 1,32,...] [--json out.json]

DeepSeek-V4 main KV: each SGLang layout (fused_k_norm_rope_flashmla, KVLayout V4 .. V41_FP4_NEW, UNIFORM_FP8 with
kernelgen's k_scale 1) beside the dsv4_mainkv variant that writes it. Bytes are compared twice: on random rows
(where SGLang's rsqrt.approx normalizer and its fused multiply-adds in the RoPE move a float32 value by an ulp,
which now and then moves a bf16 rounding and so a code by one step), and on rows where the norm and the RoPE are
exact in float32 on both sides (|x| = 1 and eps 0, so the normalizer is exactly 1; cos and sin in {-1, 0, 1}),
which must agree in every byte. DeepSeek-V3 MLA: kernelgen's fused kv_a_layernorm + RoPE + write
(mla deepseek_v3_kv_bf16_p1) beside SGLang's set_mla_kv_buffer, a plain copy of rows already normed and rotated
into the same [slots, 576] bf16 pool: the peer writes the same bytes (given kernelgen's reference rows) with
neither the norm nor the RoPE.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_sglang  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.bench import copy_roofline_gbs, empty_kernel_floor_us  # noqa: E402
from kernelgen.layout.layout import layout_of  # noqa: E402
from kernelgen.layout.pages import read_fields  # noqa: E402
from kernelgen.measure import reference  # noqa: E402
from kernelgen.measure.timing import rotated_graph_us, rotation_sets  # noqa: E402

MAINKV = {"v4": "dsv4_mainkv_fp8mla_p64", "v41": "dsv4_mainkv_v41_p64", "v41_new": "dsv4_mainkv_v41_new_p64",
          "v41_fp4": "dsv4_mainkv_v41_fp4_p64", "v41_fp4_new": "dsv4_mainkv_v41_fp4_new_p64",
          "uniform_fp8": "dsv4_mainkv_uniform_fp8_p64"}
TOKENS = (1, 4, 16, 32, 64, 256, 1024, 4096, 16384, 65536, 262144)
MAX_POS = 4096
L2 = 60 << 20


def mainkv_inputs(n: int, seed: int, exact: bool = False) -> dict[str, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    if exact:  # every |x| = 1 (mean square 1, normalizer exactly 1 with eps 0), weights and cos/sin exact
        x = torch.where(torch.rand(n, 512, generator=g, device="cuda") < 0.5, -1.0, 1.0)
        w = torch.tensor([0.5, 1.0, 1.5, 2.0, 0.75], device="cuda")[torch.randint(0, 5, (512,), generator=g, device="cuda")]
        quarter = torch.randint(0, 4, (MAX_POS, 32), generator=g, device="cuda").float() * (math.pi / 2)
        freqs = torch.stack([torch.cos(quarter).round(), torch.sin(quarter).round()], -1).reshape(MAX_POS, 64)
    else:
        x = torch.randn(n, 512, generator=g, device="cuda") * 2 + 0.25
        w = 1 + 0.25 * torch.randn(512, generator=g, device="cuda")
        angle = torch.rand(MAX_POS, 32, generator=g, device="cuda") * 6.283
        freqs = torch.stack([torch.cos(angle), torch.sin(angle)], -1).reshape(MAX_POS, 64)
    pages = n // 64 + 2
    loc = torch.randperm(pages * 64, generator=g, device="cuda")[:n]
    return dict(x=x.bfloat16(), w=w.bfloat16(), freqs=freqs.float().contiguous(),
                pos=torch.randint(0, MAX_POS, (n,), generator=g, device="cuda"), loc=loc, loc32=loc.int(),
                pages=torch.tensor(pages))


def _rank(codes: torch.Tensor, encoding: str) -> torch.Tensor:
    """Sign-magnitude codes as integers in value order (adjacent representable values differ by 1)."""
    c = codes.long()
    bits = {"e4m3": 7, "ue8m0": 8, "e2m1x2": 3, "bf16": 15}[encoding]
    if encoding == "ue8m0":
        return c
    mag, neg = c & ((1 << bits) - 1), (c >> bits) & 1
    return torch.where(neg == 1, -mag, mag)


def _codes(field: torch.Tensor, encoding: str) -> torch.Tensor:
    if encoding == "e2m1x2":
        return torch.stack([field & 0xF, field >> 4], -1).flatten(-2)
    if encoding == "bf16":
        return field.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    return field


def compare(layout, ours: torch.Tensor, theirs: torch.Tensor, loc: torch.Tensor) -> dict[str, object]:
    """Per field of the written rows: values compared, values that differ, the largest step between them."""
    a, b = read_fields(layout, ours, loc), read_fields(layout, theirs, loc)
    out: dict[str, object] = {"bytes_differ": int((ours != theirs).sum())}
    for f in layout.fields:
        enc = "e4m3" if f.encoding == "e4m3" else f.encoding
        if enc == "fp32":
            x, y = a[f.name].contiguous().view(torch.float32), b[f.name].contiguous().view(torch.float32)
            out[f.name] = {"values": x.numel(), "differ": int((x != y).sum())}
            continue
        x, y = _codes(a[f.name], enc), _codes(b[f.name], enc)
        steps = (_rank(x, enc) - _rank(y, enc)).abs()
        out[f.name] = {"values": x.numel(), "differ": int((x != y).sum()),
                       "max_steps": int(steps.max()) if steps.numel() else 0,
                       "rows_differ": int((x != y).reshape(x.shape[0], -1).any(-1).sum())}
    return out


def _time(make_call, n: int, bytes_per_call: int) -> float:
    sets = rotation_sets(bytes_per_call, n, L2)
    return rotated_graph_us([make_call(s) for s in range(sets)])


def mainkv(peer, tokens: tuple[int, ...], roofline: float, layouts: tuple[str, ...] = tuple(MAINKV)
           ) -> list[dict[str, object]]:
    rows = []
    for layout, name in MAINKV.items():
        if layout not in layouts:
            continue
        op = kernelgen.load("dsv4_mainkv", name)
        lay = layout_of(op.variant)
        scale = torch.ones(1, device="cuda")
        eps = 1e-6

        def run_both(inp, eps_: float):
            ours = torch.zeros(int(inp["pages"]), lay.page_bytes, dtype=torch.uint8, device="cuda")
            theirs = peer.new_cache(layout, int(inp["pages"]))
            op.launch(inp["x"], inp["w"].float(), None, inp["freqs"], inp["pos"], inp["loc"], ours, scale, eps_)
            peer.mainkv_write(layout, inp["x"], inp["w"], inp["freqs"], inp["pos"], inp["loc32"], theirs, eps_)
            torch.cuda.synchronize()
            return compare(lay, ours, theirs, inp["loc"])

        assert lay.page_bytes == peer_sglang.page_bytes(layout, 64), (layout, lay.page_bytes)
        random_rows = run_both(mainkv_inputs(4096, 1), eps)
        exact_rows = run_both(mainkv_inputs(4096, 2, exact=True), 0.0)
        for n in tokens:
            per_call = n * (1024 + lay.bytes_per_token + 12)
            sets: dict[int, dict[str, torch.Tensor]] = {}

            def inputs(s: int, n: int = n) -> dict[str, torch.Tensor]:
                if s not in sets:
                    sets[s] = mainkv_inputs(n, 100 + s)
                    sets[s]["ours"] = torch.zeros(int(sets[s]["pages"]), lay.page_bytes, dtype=torch.uint8, device="cuda")
                    sets[s]["theirs"] = peer.new_cache(layout, int(sets[s]["pages"]))
                    sets[s]["w32"] = sets[s]["w"].float()
                return sets[s]

            def ours_call(s: int):
                i = inputs(s)
                return lambda: op.launch(i["x"], i["w32"], None, i["freqs"], i["pos"], i["loc"], i["ours"], scale, eps)

            def theirs_call(s: int):
                i = inputs(s)
                return lambda: peer.mainkv_write(layout, i["x"], i["w"], i["freqs"], i["pos"], i["loc32"], i["theirs"], eps)

            us_k, us_s = _time(ours_call, n, per_call), _time(theirs_call, n, per_call)
            sets.clear()
            rows.append({"layout": layout, "variant": name, "tokens": n, "kernelgen_us": us_k, "sglang_us": us_s,
                         "speedup": us_s / us_k, "kernelgen_pct_roofline": 100 * per_call / (us_k * 1e-6) / 1e9 / roofline,
                         "sglang_pct_roofline": 100 * per_call / (us_s * 1e-6) / 1e9 / roofline})
            print(f"{layout:12s} N={n:7d}  kernelgen {us_k:8.2f} us  sglang {us_s:8.2f} us  x{us_s / us_k:5.2f}  "
                  f"{rows[-1]['kernelgen_pct_roofline']:5.1f}% / {rows[-1]['sglang_pct_roofline']:5.1f}% of roofline",
                  flush=True)
        rows.append({"layout": layout, "variant": name, "bytes_random": random_rows, "bytes_exact": exact_rows})
        print(f"{layout:12s} bytes, random rows: {random_rows}\n{layout:12s} bytes, exact rows:  {exact_rows}", flush=True)
    return rows


def mla(peer, tokens: tuple[int, ...], roofline: float) -> list[dict[str, object]]:
    """Fused norm + RoPE + write (kernelgen) beside SGLang's copy of the already-normed rows (the last kernel of
    the unfused sequence), into the same [slots, 576] bf16 pool; bytes given kernelgen's reference rows."""
    op = kernelgen.load("mla", "deepseek_v3_kv_bf16_p1")
    v = op.variant
    rows = []
    for n in tokens:
        g = torch.Generator(device="cuda").manual_seed(n)
        x = (torch.randn(n, 576, generator=g, device="cuda") * 2).bfloat16()
        w = (1 + 0.2 * torch.randn(512, generator=g, device="cuda")).bfloat16()
        angle = torch.rand(MAX_POS, 32, generator=g, device="cuda") * 6.283
        cos_sin = torch.cat([torch.cos(angle), torch.sin(angle)], -1).contiguous()
        pos = torch.randint(0, MAX_POS, (n,), generator=g, device="cuda")
        loc = torch.randperm(n + 8, generator=g, device="cuda")[:n] + 1
        ours = torch.zeros(n + 9, 576, dtype=torch.bfloat16, device="cuda")
        theirs = torch.zeros_like(ours)
        op.launch(x, w, None, cos_sin, pos, loc, ours.view(torch.uint8), None, 1e-6)
        y = reference.rows(v, x, w, cos_sin, pos).bfloat16()
        peer.mla_write(theirs, loc, y[:, :512], y[:, 512:], reserved_skip_index=-1)
        torch.cuda.synchronize()
        differ = int((ours.view(torch.int16) != theirs.view(torch.int16)).sum())
        per_call = n * (1152 * 2 + 8)
        us_k = _time(lambda s: (lambda: op.launch(x, w, None, cos_sin, pos, loc, ours.view(torch.uint8), None, 1e-6)),
                     n, per_call) if n < 4096 else None
        nope, rope = y[:, :512].contiguous(), y[:, 512:].contiguous()
        us_s = _time(lambda s: (lambda: peer.mla_write(theirs, loc, nope, rope, -1)), n, per_call) if n < 4096 else None
        if n >= 4096:  # rotated sets: each call's inputs and pool from DRAM
            sets = rotation_sets(per_call, n, L2)
            ins = [(x.clone(), ours.clone(), nope.clone(), rope.clone(), theirs.clone()) for _ in range(sets)]
            us_k = rotated_graph_us([(lambda i=i: op.launch(i[0], w, None, cos_sin, pos, loc, i[1].view(torch.uint8),
                                                            None, 1e-6)) for i in ins])
            us_s = rotated_graph_us([(lambda i=i: peer.mla_write(i[4], loc, i[2], i[3], -1)) for i in ins])
            del ins
        rows.append({"variant": v.name, "tokens": n, "kernelgen_us": us_k, "sglang_copy_us": us_s,
                     "values_differ": differ, "kernelgen_pct_roofline": 100 * per_call / (us_k * 1e-6) / 1e9 / roofline})
        print(f"mla N={n:7d}  kernelgen fused {us_k:8.2f} us  sglang copy {us_s:8.2f} us  "
              f"{rows[-1]['kernelgen_pct_roofline']:5.1f}% of roofline  values differ {differ}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", default=".peers/sglang/lib")
    p.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    p.add_argument("--json", default="")
    p.add_argument("--skip", default="", help="comma-separated sections to skip: mainkv, mla")
    p.add_argument("--layouts", default=",".join(MAINKV), help="comma-separated main-KV layouts to run")
    args = p.parse_args(argv)
    tokens = tuple(int(t) for t in args.tokens.split(","))
    layouts = tuple(args.layouts.split(","))
    if not set(layouts) <= set(MAINKV):
        p.error(f"--layouts: unknown {', '.join(sorted(set(layouts) - set(MAINKV)))}; known: {', '.join(MAINKV)}")
    peer = peer_sglang.load(args.lib)
    roofline, floor = copy_roofline_gbs(), empty_kernel_floor_us()
    print(f"copy roofline {roofline:.0f} GB/s, empty-kernel floor {floor:.2f} us", flush=True)
    out: dict[str, object] = {"roofline_gbs": roofline, "floor_us": floor, "gpu": torch.cuda.get_device_name()}
    skip = set(args.skip.split(","))
    if "mainkv" not in skip:
        out["mainkv"] = mainkv(peer, tokens, roofline, layouts)
    if "mla" not in skip:
        out["mla"] = mla(peer, tokens, roofline)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
