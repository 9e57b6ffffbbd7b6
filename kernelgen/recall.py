"""Recall study: how the index-key store dtype (bf16, fp8, fp4) changes the indexer's top-k and needle retrieval."""
from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import KernelgenError, SpecError, argument
from .spec.formats import FORMATS
from .spec.parse import load_spec
from .spec.variant import Variant

if TYPE_CHECKING:
    import torch

DEFAULT_SPEC = "dsv4_indexer"
DEFAULT_PAGE_SIZE = 64  # the layout's page size does not change the values; p64 is the serving one
DEFAULT_CONTEXTS = (1024, 4096, 16384, 65536, 131072)
DEFAULT_TOPK = (512, 1024, 2048)
DEFAULT_STORES = ("bf16", "fp8_e4m3", "fp4_e2m1")
DEFAULT_MARGINS = (0.01, 0.03, 0.1, 0.3, 1.0)  # needle score above the k-th fp32 score, in fp32-score std units
DEFAULT_HEADS = 64
DEFAULT_QUERIES = 16
DEFAULT_NEEDLES = 8  # per (query, k, margin)
FP32 = "fp32"  # the control store: keys used as computed (no encode/decode)
STORE_SHORT = {**{name: fmt.short for name, fmt in FORMATS.items()}, FP32: "fp32"}
KEY_BLOCK = 4096  # keys are generated in blocks with their own seeds: a context is a prefix of a longer one
SCORE_CHUNK = 16384  # keys per score matmul (bounds the [chunk, queries x heads] intermediate)
BISECT_STEPS = 32  # halvings of the blend factor: 2^-32 resolution


@dataclass(frozen=True)
class KeyModel:
    """What the synthetic pre-norm keys x[t] (and the queries) are made of; see docs/recall.md.

    x[t] = mean + B @ (s * (sqrt(topic_share) * topic[t // segment] + sqrt(1 - topic_share) * own[t]))
           + noise * n[t] + outliers[t], with B an orthonormal [D, rank] basis, s_i = rank_scale / sqrt(i + 1),
    topic, own, n standard normal, and `outlier_channels` fixed channels holding
    sign_c * outlier_scale * (1 + outlier_jitter * N(0, 1)). x is rounded to bf16 (the kernel's input dtype),
    then norm -> RoPE (position t) -> Hadamard gives the fp32 keys."""

    rank: int = 8
    rank_scale: float = 6.0
    topic_share: float = 0.5
    segment: int = 256
    mean_norm: float = 4.0
    noise: float = 1.0
    outlier_channels: int = 4
    outlier_scale: float = 10.0
    outlier_jitter: float = 0.2
    norm_weight_std: float = 0.25
    query_noise: float = 0.5  # per-head isotropic noise of a query, relative to its low-rank part's scale
    head_share: float = 0.5  # variance share of a query's low-rank coefficients common to all its heads
    rope_base: float = 10000.0


@dataclass(frozen=True)
class Row:
    """One result. metric: 'topk' (recall of the fp32 top-k), 'needle' (fraction of planted needles in the
    store's top-k; margin set) or 'score_error' (rms(score_store - score_fp32) / std(score_fp32); k = 0)."""

    store: str
    context: int
    k: int
    metric: str
    margin: float | None
    value: float
    stderr: float
    samples: int


@dataclass(frozen=True)
class World:
    """The random but fixed parts of one study: basis, mean, outliers, norm weight, RoPE table."""

    basis: torch.Tensor  # [D, rank] orthonormal
    scales: torch.Tensor  # [rank]
    mean: torch.Tensor  # [D]
    outlier_idx: torch.Tensor  # [outlier_channels]
    outlier_sign: torch.Tensor  # [outlier_channels]
    weight: torch.Tensor  # [D] RMSNorm weight
    freqs: torch.Tensor  # [max_pos, rope_dim] interleaved cos, sin


def _gen(*parts: int) -> torch.Generator:
    import torch

    seed = 0
    for p in parts:
        seed = (seed * 1_000_003 + int(p) + 1) % (1 << 62)
    return torch.Generator().manual_seed(seed)


def study_variants(stores: Sequence[str], spec: str = DEFAULT_SPEC,
                   page_size: int = DEFAULT_PAGE_SIZE, flags: bool = False) -> dict[str, Variant]:
    """The spec's variant of each store ('fp32' borrows the first one's math: it is never encoded); errors name
    the stores argument as the CLI's flag where `flags`, else as the keyword."""
    variants = load_spec(spec).variants
    out: dict[str, Variant] = {}
    for store in stores:
        want = variants[0].store if store == FP32 else store
        match = [v for v in variants if v.store == want and v.page_size == page_size] or \
                [v for v in variants if v.store == want]
        if not match:
            have = sorted({v.store for v in variants})
            raise SpecError(f"{argument('stores', flags)}: spec {spec} has no {want} variant; it has {', '.join(have)} (or use {FP32})")
        out[store] = match[0]
    # the roundings through bf16 belong to the store (what its writer quantizes), not to the keys' math
    maths = {replace(v, name="", store="bf16", page_size=1, spec_name="", origin="", round_through_bf16=False,
                     round_norm_bf16=False) for v in out.values()}
    if len(maths) > 1:
        raise SpecError(f"{argument('stores', flags)}: the {spec} variants of {', '.join(stores)} differ in more than the store")
    return out


def make_world(v: Variant, model: KeyModel, max_pos: int, seed: int) -> World:
    import torch

    from .measure.inputs import rope_table  # the study's stages load when it runs: the CLI parser imports this module

    g = _gen(seed, 0)
    d = v.head_dim
    basis, _ = torch.linalg.qr(torch.randn(d, model.rank, generator=g, dtype=torch.float64))
    scales = model.rank_scale / torch.sqrt(torch.arange(1, model.rank + 1, dtype=torch.float32))
    mean = torch.randn(d, generator=g)
    mean = mean / mean.norm() * model.mean_norm
    outlier_idx = torch.randperm(d, generator=g)[:model.outlier_channels]
    outlier_sign = torch.where(torch.rand(model.outlier_channels, generator=g) < 0.5, -1.0, 1.0)
    weight = 1 + model.norm_weight_std * torch.randn(d, generator=g)
    return World(basis.float(), scales, mean, outlier_idx, outlier_sign, weight,
                 rope_table(v.rope_dim, max_pos, v.rope_table, model.rope_base))


def pre_norm_block(world: World, model: KeyModel, start: int, count: int, seed: int) -> torch.Tensor:
    """x for tokens [start, start + count) as bf16 [count, D]; start must be a multiple of KEY_BLOCK."""
    import torch

    g = _gen(seed, 1, start // KEY_BLOCK)
    d, r = world.basis.shape
    seg = -(-count // model.segment)
    topic = torch.randn(seg, r, generator=g).repeat_interleave(model.segment, dim=0)[:count]
    own = torch.randn(count, r, generator=g)
    coef = (math.sqrt(model.topic_share) * topic + math.sqrt(1 - model.topic_share) * own) * world.scales
    x = world.mean + coef @ world.basis.T + model.noise * torch.randn(count, d, generator=g)
    jitter = 1 + model.outlier_jitter * torch.randn(count, len(world.outlier_idx), generator=g)
    x[:, world.outlier_idx] += world.outlier_sign * model.outlier_scale * jitter
    return x.to(torch.bfloat16)


def make_keys(v: Variant, world: World, model: KeyModel, count: int, seed: int) -> torch.Tensor:
    """The fp32 keys of tokens 0..count-1 (position t): reference.rows of the synthetic x, [count, D]."""
    import torch

    from .measure import reference

    parts = []
    for start in range(0, count, KEY_BLOCK):
        x = pre_norm_block(world, model, start, KEY_BLOCK, seed)[:count - start]
        pos = torch.arange(start, start + len(x))
        parts.append(reference.rows(v, x, world.weight, world.freqs, pos))
    return torch.cat(parts)


def make_queries(v: Variant, world: World, model: KeyModel, queries: int, heads: int, position: int,
                 seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries at `position` (roped there, then Hadamard-rotated like the keys): q [Q, H, D] with unit
    rows, and head weights w [Q, H] drawn uniform in [0.25, 1] (positive)."""
    import torch

    from .measure import reference

    g = _gen(seed, 2, position)
    d, r = world.basis.shape
    common = torch.randn(queries, 1, r, generator=g)
    own = torch.randn(queries, heads, r, generator=g)
    coef = (math.sqrt(model.head_share) * common + math.sqrt(1 - model.head_share) * own) * world.scales
    rms = float(world.scales.square().mean().sqrt())
    q = coef @ world.basis.T + model.query_noise * rms * torch.randn(queries, heads, d, generator=g)
    weights = 0.25 + 0.75 * torch.rand(queries, heads, generator=g)
    no_norm = replace(v, norm="none")
    pos = torch.full((queries * heads,), position, dtype=torch.long)
    q = reference.rows(no_norm, q.reshape(-1, d), None, world.freqs, pos).reshape(queries, heads, d)
    return q / q.norm(dim=-1, keepdim=True), weights


def decode_store(v: Variant, store: str, keys: torch.Tensor, global_scale: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 keys -> the store's bytes (codec.encode, as the kernel writes them) -> float32 (codec.decode); a store
    with a per-tensor scale takes it as global_scale."""
    import torch

    from .layout import codec
    from .layout.layout import layout_of

    if store == FP32:
        return keys
    layout = layout_of(v)
    fields = codec.encode(layout, keys, v.round_through_bf16, global_scale)
    return codec.decode(layout, fields, torch.ones(keys.shape[0], dtype=torch.bool), global_scale)


def indexer_scores(keys: torch.Tensor, q: torch.Tensor, w: torch.Tensor, chunk: int = SCORE_CHUNK) -> torch.Tensor:
    """score[j, t] = sum_h w[j, h] * relu(q[j, h] . keys[t]): keys [N, D], q [Q, H, D], w [Q, H] -> [Q, N]."""
    import torch

    nq, nh, d = q.shape
    qm = q.reshape(nq * nh, d).T.contiguous()  # [D, Q*H]
    wm = torch.block_diag(*w[:, :, None])  # [Q*H, Q]: head weights of query j in column j
    out = [torch.relu(keys[s:s + chunk] @ qm) @ wm for s in range(0, keys.shape[0], chunk)]
    return torch.cat(out).T.contiguous()


def needle_scores(needles: torch.Tensor, q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Scores of per-query keys: needles [Q, M, D] against query j's heads -> [Q, M]."""
    import torch

    return (torch.relu(torch.einsum("jmd,jhd->jmh", needles, q)) * w[:, None, :]).sum(-1)


def topk_recall(ref: torch.Tensor, test: torch.Tensor, k: int) -> torch.Tensor:
    """|top-k(test) ∩ top-k(ref)| / k for each row of [Q, N] scores -> [Q]."""
    import torch

    want = torch.zeros_like(ref, dtype=torch.bool)
    want.scatter_(1, ref.topk(k, dim=1).indices, True)
    return want.gather(1, test.topk(k, dim=1).indices).sum(1).to(torch.float64) / k


def plant_needles(context: torch.Tensor, ref: torch.Tensor, q: torch.Tensor, w: torch.Tensor, k: int,
                  margins: Sequence[float], count: int, gen: torch.Generator,
                  flags: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Needle keys [Q, len(margins) * count, D] and their target scores [Q, len(margins) * count].

    For query j the target is kth_j + margin * std_j (kth_j: the k-th largest fp32 score of the context,
    std_j: the std of its fp32 scores). Each needle starts from a random context key k0 outside the fp32
    top-k and is rotated toward u = sum_h w_h q_h, keeping |k0|: normalize((1 - b) k0 + b |k0| u/|u|) |k0|,
    with b bisected (32 halvings) so that its fp32 score is >= target and just above it. A single needle
    outranks all but at most k-1 context keys, so it is in the fp32 top-k of context + needle."""
    import torch

    nq, n = ref.shape
    m = len(margins) * count
    kth = ref.topk(k, dim=1).values[:, -1]
    target = (kth[:, None] + torch.tensor(margins, dtype=torch.float32).repeat_interleave(count)[None, :]
              * ref.std(dim=1, keepdim=True))
    below = ref.argsort(dim=1, descending=True)[:, k:]  # tokens outside the fp32 top-k
    pick = torch.randint(0, n - k, (nq, m), generator=gen)
    k0 = context[below.gather(1, pick)]  # [Q, M, D]
    norm = k0.norm(dim=-1, keepdim=True)
    u = (w[:, :, None] * q).sum(1)
    end = (u / u.norm(dim=-1, keepdim=True))[:, None, :] * norm

    def blend(b: torch.Tensor) -> torch.Tensor:
        y = (1 - b[..., None]) * k0 + b[..., None] * end
        return y / y.norm(dim=-1, keepdim=True) * norm

    if not bool((needle_scores(end, q, w) > target).all()):
        raise KernelgenError("a needle target lies above the score of the query direction; lower the "
                             f"{argument('margins', flags)}")
    lo, hi = torch.zeros(nq, m), torch.ones(nq, m)
    for _ in range(BISECT_STEPS):
        mid = (lo + hi) / 2
        up = needle_scores(blend(mid), q, w) >= target
        hi, lo = torch.where(up, mid, hi), torch.where(up, lo, mid)
    return blend(hi), target


def _retrieved(ascending: torch.Tensor, scores: torch.Tensor, k: int) -> torch.Tensor:
    """Whether each needle (scored alone against the context) is in the top-k: fewer than k context
    scores strictly above it. ascending: the context scores [Q, N] sorted along N (once per context and
    store, for every k); scores [Q, M] -> bool [Q, M]."""
    import torch

    above = ascending.shape[1] - torch.searchsorted(ascending, scores.contiguous(), right=True)
    return above < k


def _stats(values: torch.Tensor) -> tuple[float, float, int]:
    """Mean, standard error of the mean, sample count."""
    import torch

    v = values.to(torch.float64).flatten()
    n = v.numel()
    err = float(v.std() / math.sqrt(n)) if n > 1 else 0.0
    return float(v.mean()), err, n


def run_study(contexts: Sequence[int] = DEFAULT_CONTEXTS, topk: Sequence[int] = DEFAULT_TOPK,
              stores: Sequence[str] = DEFAULT_STORES, heads: int = DEFAULT_HEADS, queries: int = DEFAULT_QUERIES,
              needles: int = DEFAULT_NEEDLES, margins: Sequence[float] = DEFAULT_MARGINS, seed: int = 0,
              model: KeyModel = KeyModel(), spec: str = DEFAULT_SPEC, flags: bool = False) -> list[Row]:
    """Recall of the fp32 top-k and of planted needles for each store, context and k (see Row). An error names
    an argument by its keyword (`topk=`), or by its flag where the CLI calls (`flags`).

    Contexts are prefixes of one synthetic sequence; each context gets its own queries at position
    `context` (the next token). Pairs with k >= context are skipped (every token is selected)."""
    import torch

    if not contexts or not topk or not stores:
        raise KernelgenError(f"{', '.join(argument(a, flags) for a in ('contexts', 'topk', 'stores'))} must be "
                             "non-empty")
    counts = {"contexts": list(contexts), "topk": list(topk), "heads": [heads], "queries": [queries],
              "needles": [needles]}
    for name, values in counts.items():
        if any(int(n) < 1 for n in values):
            raise KernelgenError(f"{argument(name, flags)} must be at least 1, got {','.join(map(str, values))}")
    contexts = sorted({int(c) for c in contexts})
    variants = study_variants(stores, spec, flags=flags)
    v = next(iter(variants.values()))
    world = make_world(v, model, contexts[-1] + 1, seed)
    keys = make_keys(v, world, model, contexts[-1], seed)
    decoded = {s: decode_store(variants[s], s, keys) for s in stores}
    rows: list[Row] = []
    for n in contexts:
        q, w = make_queries(v, world, model, queries, heads, n, seed)
        ref = indexer_scores(keys[:n], q, w)
        scores = {s: ref if s == FP32 else indexer_scores(decoded[s][:n], q, w) for s in stores}
        for s in stores:
            err = (scores[s] - ref).square().mean(1).sqrt() / ref.std(dim=1)
            rows.append(Row(s, n, 0, "score_error", None, *_stats(err)))
        gen = _gen(seed, 3, n)
        ascending = {s: scores[s].sort(dim=1).values for s in stores} if margins and needles > 0 else {}
        for k in sorted({int(k) for k in topk}):
            if k >= n:
                continue
            for s in stores:
                rows.append(Row(s, n, k, "topk", None, *_stats(topk_recall(ref, scores[s], k))))
            if not margins or needles <= 0:
                continue
            planted, _ = plant_needles(keys[:n], ref, q, w, k, margins, needles, gen, flags)
            flat = planted.reshape(-1, planted.shape[-1])
            for s in stores:
                mine = decode_store(variants[s], s, flat).reshape(planted.shape)
                hit = _retrieved(ascending[s], needle_scores(mine, q, w), k).reshape(queries, len(margins), needles)
                for i, margin in enumerate(margins):
                    rows.append(Row(s, n, k, "needle", float(margin), *_stats(hit[:, i].to(torch.float64))))
    return rows


def context_label(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def _fmt(rows: Sequence[Row], store: str, n: int, k: int, metric: str, margin: float | None, digits: int = 3) -> str:
    for r in rows:
        if (r.store, r.context, r.k, r.metric, r.margin) == (store, n, k, metric, margin):
            return f"{r.value:.{digits}f}"
    return "—"


def table_markdown(rows: Sequence[Row]) -> str:
    """Three markdown tables: top-k recall, needle recall (cells per k), relative score error."""
    rows = list(rows)
    stores = list(dict.fromkeys(r.store for r in rows))
    contexts = sorted({r.context for r in rows})
    ks = sorted({r.k for r in rows if r.metric in ("topk", "needle")})
    margins = sorted({r.margin for r in rows if r.metric == "needle" and r.margin is not None})
    head = "| " + " | ".join(context_label(n) for n in contexts) + " |"
    rule = "|---|---|" + "---|" * len(contexts)
    samples = {r.samples for r in rows if r.metric == "topk"}
    needle_n = {r.samples for r in rows if r.metric == "needle"}
    lines = [f"### Top-k recall: \\|top-k(store) ∩ top-k(fp32)\\| / k, mean over {_one(samples)} queries", "",
             f"| store | k {head}", rule]
    for s in stores:
        for k in ks:
            lines.append(f"| {STORE_SHORT.get(s, s)} | {k} | " + " | ".join(_fmt(rows, s, n, k, "topk", None)
                                                                         for n in contexts) + " |")
    if margins:
        lines += ["", f"### Needle recall: fraction of planted needles in the store's top-k "
                      f"({_one(needle_n)} needles per cell; cell = k " + " / ".join(map(str, ks)) + ")", "",
                  "Needle fp32 score = k-th fp32 score + margin x std of the query's fp32 scores.", "",
                  f"| store | margin (std) {head}", rule]
        for s in stores:
            for m in margins:
                cells = [" / ".join(_fmt(rows, s, n, k, "needle", m, 2) for k in ks) for n in contexts]
                lines.append(f"| {STORE_SHORT.get(s, s)} | {m:g} | " + " | ".join(cells) + " |")
    lines += ["", "### Score error: rms(score_store − score_fp32) / std(score_fp32), mean over queries", "",
              "| store " + head, "|---|" + "---|" * len(contexts)]
    for s in stores:
        lines.append(f"| {STORE_SHORT.get(s, s)} | " + " | ".join(_fmt(rows, s, n, 0, "score_error", None, 4)
                                                             for n in contexts) + " |")
    return "\n".join(lines) + "\n"


def _one(values: set[int]) -> str:
    return str(next(iter(values))) if len(values) == 1 else "/".join(map(str, sorted(values)))


def plot(rows: Sequence[Row], path: str | Path) -> None:
    """PNG: top-k recall vs context (store x k), needle recall vs context (store x margin, pooled over k),
    needle recall vs margin at the largest context (store x k)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state

    rows = list(rows)
    stores = list(dict.fromkeys(r.store for r in rows))
    palette = ("tab:green", "tab:blue", "tab:red", "tab:gray", "tab:purple", "tab:orange", "tab:brown", "tab:cyan")
    colors = {s: palette[i % len(palette)] for i, s in enumerate(stores)}  # any number of stores
    ks = sorted({r.k for r in rows if r.metric == "topk"})
    styles = {k: st for k, st in zip(ks, ("-", "--", ":", "-."))}
    margins = sorted({r.margin for r in rows if r.metric == "needle" and r.margin is not None})
    contexts = sorted({r.context for r in rows})
    fig = Figure(figsize=(18, 5.2))
    axes = fig.subplots(1, 3)
    ax = axes[0]
    for s in stores:
        for k in ks:
            pts = sorted((r.context, r.value) for r in rows if r.metric == "topk" and r.store == s and r.k == k)
            if pts:
                ax.plot(*zip(*pts), styles[k], color=colors[s], marker="o", label=f"{STORE_SHORT.get(s, s)} k={k}")
    ax.set(xscale="log", xlabel="context (tokens)", ylabel="recall of the fp32 top-k", title="Top-k recall")
    ax.set_xticks(contexts, [context_label(n) for n in contexts])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=len(stores))
    ax = axes[1]
    shades = {m: a for m, a in zip(margins, (0.35, 0.5, 0.65, 0.8, 1.0, 1.0, 1.0))}
    for s in stores:
        for m in margins:
            pts = []
            for n in contexts:
                hits = [r for r in rows if r.metric == "needle" and r.store == s and r.context == n and r.margin == m]
                if hits:
                    pts.append((n, sum(r.value * r.samples for r in hits) / sum(r.samples for r in hits)))
            if pts:
                ax.plot(*zip(*pts), color=colors[s], alpha=shades[m], marker="o",
                        label=f"{STORE_SHORT.get(s, s)} margin {m:g}")
    ax.set(xscale="log", xlabel="context (tokens)", ylabel="needles retrieved (pooled over k)",
           title="Needle recall vs context", ylim=(-0.02, 1.02))
    ax.set_xticks(contexts, [context_label(n) for n in contexts])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=len(stores))
    ax = axes[2]
    needle_contexts = sorted({r.context for r in rows if r.metric == "needle"})
    if needle_contexts:
        big = needle_contexts[-1]
        for s in stores:
            for k in ks:
                curve = sorted((float(r.margin or 0.0), r.value) for r in rows if r.metric == "needle"
                               and r.store == s and r.k == k and r.context == big)
                if curve:
                    ax.plot(*zip(*curve), styles[k], color=colors[s], marker="o",
                            label=f"{STORE_SHORT.get(s, s)} k={k}")
        ax.set(title=f"Needle recall vs margin at {context_label(big)} tokens")
    ax.set(xscale="log", xlabel="needle margin above the k-th fp32 score (std of fp32 scores)",
           ylabel="needles retrieved", ylim=(-0.02, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=len(stores))
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _ints(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        try:
            out.append(int(part[:-1]) * 1024 if part.endswith("K") else int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"write counts such as 512 or 64K, comma-separated; got {text!r}") \
                from None
    return out


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The study's options, on `kernelgen recall` and on `python -m kernelgen.recall`."""
    p.add_argument("--contexts", type=_ints, default=list(DEFAULT_CONTEXTS),
                   help="context lengths, e.g. 1K,4K,16K,64K,128K (default)")
    p.add_argument("--max-context", type=_ints, default=None,
                   help="drop contexts above this and add it as the largest, e.g. 256K or 32K")
    p.add_argument("--topk", type=_ints, default=list(DEFAULT_TOPK), help="k values (default 512,1024,2048)")
    p.add_argument("--stores", default=",".join(DEFAULT_STORES),
                   help=f"stores to compare against fp32 (default {','.join(DEFAULT_STORES)}; '{FP32}' is a control)")
    p.add_argument("--heads", type=int, default=DEFAULT_HEADS,
                   help=f"indexer heads per query (default {DEFAULT_HEADS})")
    p.add_argument("--queries", type=int, default=DEFAULT_QUERIES,
                   help=f"queries per context (default {DEFAULT_QUERIES})")
    p.add_argument("--needles", type=int, default=DEFAULT_NEEDLES, help="needles per query, k and margin")
    p.add_argument("--margins", type=lambda t: [float(x) for x in t.split(",")], default=list(DEFAULT_MARGINS),
                   help="needle margins above the k-th fp32 score, in std of the fp32 scores "
                        f"(default {','.join(map(str, DEFAULT_MARGINS))})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--spec", default=DEFAULT_SPEC,
                   help=f"spec file or shipped spec name whose variants give the stores' layouts "
                        f"(default {DEFAULT_SPEC})")
    p.add_argument("--outlier-scale", type=float, default=KeyModel.outlier_scale,
                   help="size of the outlier channels before the norm (0: none)")
    p.add_argument("--table", default=None, help="write the markdown here (e.g. docs/recall_table.md)")
    p.add_argument("--plot", default=None, help="write the PNG here (e.g. docs/recall.png; needs matplotlib)")
    return p


def parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog="python -m kernelgen.recall", description=__doc__))


def run(args: argparse.Namespace, command: str) -> int:
    """The study the parsed options ask for, its table on stdout (and in --table), then its plot. The outputs
    and matplotlib are checked before the study starts, and the table is out before the plot is drawn, so
    a plot that fails late never loses the result."""
    import torch

    from . import knobs, resources

    if args.plot:
        resources.require_matplotlib("--plot")
    for option, path in (("--table", args.table), ("--plot", args.plot)):
        if path:
            knobs.check_file(option, Path(path))
    contexts = list(args.contexts)
    if args.max_context:
        top = args.max_context[0]
        contexts = [c for c in contexts if c < top] + [top]
    started = time.perf_counter()
    rows = run_study(contexts, args.topk, [s.strip() for s in args.stores.split(",")], args.heads, args.queries,
                     args.needles, args.margins, args.seed, KeyModel(outlier_scale=args.outlier_scale), args.spec,
                     flags=True)
    seconds = time.perf_counter() - started
    preamble = (f"# Index-key recall by store dtype\n\nGenerated by `{command}` in {seconds:.1f} s on "
                f"{torch.get_num_threads()} CPU threads (torch {torch.__version__}).\n"
                f"Spec {args.spec}, seed {args.seed}, {args.heads} heads, {args.queries} queries per context, "
                f"{args.needles} needles per (query, k, margin). Synthetic keys: see docs/recall.md.\n\n")
    text = preamble + table_markdown(rows)
    sys.stdout.write(text)
    sys.stdout.flush()
    if args.table:
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        Path(args.table).write_text(text)
    if args.plot:
        plot(rows, args.plot)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m kernelgen.recall` (the same study as `kernelgen recall`); an error is one line, exit 1."""
    from .errors import storage_error

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return run(parser().parse_args(argv), " ".join(["python -m kernelgen.recall", *argv]))
    except OSError as exc:  # an output the disk refused: which file and why
        sys.stderr.write(f"error: {storage_error(exc, exc.filename or '(an output file)')}\n")
        return 1
    except KernelgenError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
