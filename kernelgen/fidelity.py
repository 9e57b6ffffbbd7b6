"""KV-cache fidelity study: how each K/V store (bf16, fp8 with a per-tensor scale, vLLM's per-token-head fp8 and
int8, NVFP4, FP4 with UE8M0 scales) changes a GQA model's attention, against K and V used as fp32 (CPU)."""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import KernelgenError, SpecError, argument
from .recall import FP32, KeyModel, _ints, _stats, context_label, decode_store, make_keys, make_queries, make_world
from .spec.formats import E2M1_MAX, E4M3_MAX, FORMATS
from .spec.parse import load_spec
from .spec.variant import Variant

if TYPE_CHECKING:
    import torch

DEFAULT_SPEC = "attention_prep"
DEFAULT_MODEL = "qwen3_8b_bf16"  # its K (QK-norm, NeoX RoPE over 128 dims) and V heads give the rows' math
DEFAULT_CONTEXTS = (1024, 4096, 16384, 65536)
DEFAULT_STORES = (FP32, "bf16", "fp8_scaled", "fp8_per_token_head", "int8_per_token_head", "fp8_e4m3", "nvfp4_kv",
                  "mxfp4", "fp4_e2m1")
DEFAULT_QUERIES = 16
DEFAULT_GROUP = 4  # Q heads sharing the KV head (Qwen3-8B: 32 / 8)
DEFAULT_SHARPNESS = 4.0  # scores = sharpness * (unit query . key): the keys' rms is about 1, so logits of std ~4
METRICS = ("output_error", "attention_tv")
V_SEED = 7919  # V's rows are a second draw of the synthetic rows: the keys' seed plus this


@dataclass(frozen=True)
class Row:
    """One result. metric 'output_error': ||o_store - o_fp32|| / ||o_fp32|| of a head's attention output;
    'attention_tv': the total variation 0.5 * sum |p_store - p_fp32| of its attention weights."""

    store: str
    context: int
    metric: str
    value: float
    stderr: float
    samples: int


def study_members(spec: str, model: str, flags: bool = False) -> tuple[Variant, Variant]:
    """The one-head K and V variants of a launch group of the spec (their rows' norm and RoPE); an error names
    the group as the CLI's --model where `flags`, else as run_study's member_of=."""
    s = load_spec(spec)
    names = [g.name for g in s.groups]
    if model not in names:
        raise SpecError(f"{argument('member_of', flags, flag='model')}: spec {spec} has no launch group {model!r}; "
                        f"it has {', '.join(names)}")
    group = s.group(model)
    return group.member("k").row_variant, group.member("v").row_variant


def per_tensor_scale(store: str, rows: torch.Tensor) -> torch.Tensor | None:
    """The calibrated per-tensor scale a serving engine passes with a global-scale store, as float32 [1]: the
    values' amax maps to the largest code the format reaches (448 for e4m3 codes; 448 x 6 for e2m1 codes under an
    e4m3 block scale). A dequantization scale s = amax / reach (k_scale / v_scale, v = code x s: vLLM's and
    FlashInfer's) where the format takes one, else the encode scale g = reach / amax (v x g is quantized: NVFP4's
    global scale)."""
    import torch

    fmt = FORMATS[store]
    if not fmt.global_scale:
        return None
    reach = E4M3_MAX * (E2M1_MAX if fmt.parts[0].encoding == "e2m1x2" else 1.0)
    amax = rows.abs().amax().clamp_min(1e-12).to(torch.float32).reshape(1)
    return amax / reach if fmt.scale_reciprocal or fmt.scale_divides else reach / amax


def readback(v: Variant, store: str, rows: torch.Tensor) -> torch.Tensor:
    """fp32 rows -> the store's bytes, as the kernel writes them -> float32."""
    if store == FP32:
        return rows
    return decode_store(replace(v, store=store), store, rows, per_tensor_scale(store, rows))


def attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
              sharpness: float = DEFAULT_SHARPNESS) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of unit queries [Q, H, D] over keys and values [T, D] (one KV head): weights [Q, H, T]
    and outputs [Q, H, D], in float64 so the store alone makes the difference. Scores are sharpness * q . k
    (a QK-normed model's keys have rms about 1: the softmax scale and the query norm folded into one number)."""
    import torch

    scores = sharpness * torch.einsum("qhd,td->qht", q.double(), keys.double())
    p = torch.softmax(scores, dim=-1)
    return p, torch.einsum("qht,td->qhd", p, values.double())


def run_study(contexts: Sequence[int] = DEFAULT_CONTEXTS, stores: Sequence[str] = DEFAULT_STORES,
              queries: int = DEFAULT_QUERIES, group: int = DEFAULT_GROUP, seed: int = 0,
              sharpness: float = DEFAULT_SHARPNESS, model: KeyModel = KeyModel(), spec: str = DEFAULT_SPEC,
              member_of: str = DEFAULT_MODEL, flags: bool = False) -> list[Row]:
    """Attention output error and attention-weight distance of each store against fp32 K and V, per context
    (prefixes of one synthetic sequence; queries at position `context`). K and V are stored in the same store,
    each with its own per-tensor scale where the store has one. An error names an argument by its keyword
    (`stores=`), or by its flag where the CLI calls (`flags`)."""
    if not contexts or not stores:
        raise KernelgenError(f"{argument('contexts', flags)} and {argument('stores', flags)} must be non-empty")
    for name, values in (("contexts", list(contexts)), ("queries", [queries]), ("group", [group])):
        if any(int(n) < 1 for n in values):
            raise KernelgenError(f"{argument(name, flags)} must be at least 1, got {','.join(map(str, values))}")
    unknown = [s for s in stores if s != FP32 and s not in FORMATS]
    if unknown:
        raise SpecError(f"{argument('stores', flags)}: {', '.join(unknown)} is not a store; stores: {FP32}, {', '.join(FORMATS)}")
    contexts = sorted({int(c) for c in contexts})
    k, v = study_members(spec, member_of, flags)
    world = make_world(k, model, contexts[-1] + 1, seed)
    keys = make_keys(k, world, model, contexts[-1], seed)
    values = make_keys(v, world, model, contexts[-1], seed + V_SEED)  # V's own draw, through V's math (v_norm)
    rows: list[Row] = []
    for n in contexts:
        q, _ = make_queries(k, world, model, queries, group, n, seed)
        p_ref, o_ref = attention(q, keys[:n], values[:n], sharpness)
        for s in stores:  # the per-tensor scale is calibrated on the context the attention reads
            p, o = attention(q, readback(k, s, keys[:n]), readback(v, s, values[:n]), sharpness)
            err = (o - o_ref).norm(dim=-1) / o_ref.norm(dim=-1)
            tv = 0.5 * (p - p_ref).abs().sum(dim=-1)
            rows.append(Row(s, n, "output_error", *_stats(err)))
            rows.append(Row(s, n, "attention_tv", *_stats(tv)))
    return rows


def table_markdown(rows: Sequence[Row]) -> str:
    contexts = sorted({r.context for r in rows})
    stores = list(dict.fromkeys(r.store for r in rows))
    by = {(r.store, r.context, r.metric): r for r in rows}
    out = []
    for metric, title in (("output_error", "Attention output error ||o - o_fp32|| / ||o_fp32|| (mean over "
                                           "queries and heads)"),
                          ("attention_tv", "Attention-weight distance 0.5 * sum |p - p_fp32|")):
        out.append(f"## {title}\n")
        out.append("| store | " + " | ".join(context_label(n) for n in contexts) + " |")
        out.append("|---|" + "---|" * len(contexts))
        for s in stores:
            cells = [f"{by[s, n, metric].value:.2e}" for n in contexts]
            out.append(f"| {s} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--contexts", type=_ints, default=list(DEFAULT_CONTEXTS),
                   help="context lengths, e.g. 1K,4K,16K,64K (default)")
    p.add_argument("--stores", default=",".join(DEFAULT_STORES),
                   help=f"stores to compare against fp32 K and V (default {','.join(DEFAULT_STORES)})")
    p.add_argument("--queries", type=int, default=DEFAULT_QUERIES, help=f"queries per context "
                   f"(default {DEFAULT_QUERIES})")
    p.add_argument("--group", type=int, default=DEFAULT_GROUP,
                   help=f"query heads per KV head (default {DEFAULT_GROUP})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sharpness", type=float, default=DEFAULT_SHARPNESS,
                   help=f"scores = sharpness x (unit query . key) (default {DEFAULT_SHARPNESS}: logits of std ~4)")
    p.add_argument("--spec", default=DEFAULT_SPEC, help=f"spec whose launch group gives K's and V's math "
                   f"(default {DEFAULT_SPEC})")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"the launch group (default {DEFAULT_MODEL})")
    p.add_argument("--outlier-scale", type=float, default=KeyModel.outlier_scale,
                   help="size of the outlier channels of the rows (0: none)")
    p.add_argument("--table", default=None, help="write the markdown here (e.g. docs/kv_fidelity_table.md)")
    return p


def run(args: argparse.Namespace, command: str) -> int:
    import torch

    from . import knobs

    if args.table:
        knobs.check_file("--table", Path(args.table))
    started = time.perf_counter()
    rows = run_study(args.contexts, [s.strip() for s in args.stores.split(",")], args.queries, args.group,
                     args.seed, args.sharpness, KeyModel(outlier_scale=args.outlier_scale), args.spec, args.model,
                     flags=True)
    seconds = time.perf_counter() - started
    text = (f"# KV-cache fidelity by store\n\nGenerated by `{command}` in {seconds:.1f} s on "
            f"{torch.get_num_threads()} CPU threads (torch {torch.__version__}). Spec {args.spec}, launch group "
            f"{args.model} (K and V: their members' norm and RoPE), seed {args.seed}, {args.queries} queries x "
            f"{args.group} heads per context, sharpness {args.sharpness}; rows as in docs/recall.md, see "
            "docs/kv_fidelity.md.\n\n"
            + table_markdown(rows))
    sys.stdout.write(text)
    sys.stdout.flush()
    if args.table:
        knobs.write_atomic(Path(args.table), text.encode())
    return 0
