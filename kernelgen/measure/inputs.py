"""Test inputs shared by verification, timing, bench and tuning: random, never zero, on any device."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codegen.checks import used_args
from ..codegen.launch import resolve
from ..codegen.render import Member, members
from ..layout.layout import layout_of
from ..layout.pages import pages_of
from ..spec.formats import format_of
from ..spec.group import Group
from ..spec.pages import POOL_SHARES, SLOT_SOURCES
from ..spec.ropes import ROPE_TABLES
from ..spec.variant import TORCH_DTYPES, Variant

if TYPE_CHECKING:
    import torch


def rope_table(rope_dim: int, max_pos: int, layout: str = "pairs", base: float = 10000.0) -> torch.Tensor:
    """[max_pos, rope_dim] float32 RoPE table, on the CPU: (cos, sin) of position p and pair j at columns
    2j, 2j + 1 (layout "pairs"), or at j and rope_dim / 2 + j ("halves": vLLM's and FlashInfer's
    cos_sin_cache), with frequency base^(-j / (rope_dim / 2)), computed in float64."""
    import torch

    half = max(rope_dim // 2, 1)
    inv_freq = base ** (-torch.arange(half, dtype=torch.float64) / half)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    if ROPE_TABLES[layout].halves:
        return torch.cat([angles.cos(), angles.sin()], dim=-1)[:, :rope_dim].float()
    return torch.stack([angles.cos(), angles.sin()], dim=-1).reshape(max_pos, -1)[:, :rope_dim].float()


def make_inputs(v: Variant, num_tokens: int, num_pages: int, device: str, seed: int,
                max_pos: int = 4096) -> dict[str, Any]:
    """Random, never-zero inputs for verification. About 1 row in 8 is padding (out_loc = -1), 1 in 32
    points past the pool and (with RoPE) 1 in 32 has a position past freqs: the kernel must skip all
    of those."""
    import torch

    v = resolve(v)
    g = torch.Generator(device="cpu").manual_seed(seed)
    dtype = getattr(torch, TORCH_DTYPES[v.input_dtype])
    wdtype = getattr(torch, TORCH_DTYPES[v.weight_dtype])
    x = (torch.randn(num_tokens, v.x_width, generator=g) * 3 + 0.5).to(dtype)
    weight = (1 + 0.25 * torch.randn(v.norm_width, generator=g)).to(wdtype)
    bias = (0.1 * torch.randn(v.norm_width, generator=g)).to(wdtype)
    freqs = rope_table(v.rope_dim, max_pos, v.rope_table)
    streams = v.position_streams  # M-RoPE: positions [3, N] (temporal, height, width)
    positions = torch.randint(0, max_pos, (streams, num_tokens) if streams > 1 else (num_tokens,), generator=g)
    num_pages = max(num_pages, -(-num_tokens * 3 // (2 * v.page_size)) + 1)  # room to spare: unwritten slots
    slots = num_pages * v.page_size
    out_loc = torch.randperm(slots, generator=g)[:num_tokens]
    draw = torch.rand(num_tokens, generator=g)
    out_loc = torch.where(draw < 0.125, -1, out_loc)
    out_loc = torch.where((draw >= 0.125) & (draw < 0.15625), slots + torch.arange(num_tokens), out_loc)
    if SLOT_SOURCES[v.slots].dense:  # a dense output: row t is token t's (the symbol takes no out_loc)
        num_pages, out_loc = num_tokens, token_slots(num_tokens, "cpu")
    if v.rope_dim:
        far = torch.rand(num_tokens, generator=g) < 0.03125
        if streams > 1:  # one stream's position out of the table (a different stream for different tokens)
            far = far & (torch.arange(streams)[:, None] == torch.arange(num_tokens) % streams)
        positions = torch.where(far, max_pos + torch.arange(num_tokens), positions)
    elif v.reads_positions:  # a temperature alone: long contexts (t grows every 8192 positions), a few negative
        positions = torch.randint(0, 1 << 22, (num_tokens,), generator=g)
        positions = torch.where(torch.rand(num_tokens, generator=g) < 0.03125, -1 - positions, positions)
    cache = random_cache(v, num_pages, g)
    tensors = dict(x=x, weight=weight, bias=bias if v.norm_bias else None, freqs=freqs if v.rope_dim else None,
                   positions=positions if v.reads_positions else None, out_loc=out_loc, kvcache=cache,
                   scale=global_scale(v, g))
    return _on(device, v, tensors)


def random_cache(v: Variant, num_pages: int, g: torch.Generator, device: object = "cpu") -> torch.Tensor:
    """Random bytes (what a kernel must not touch stays visible) for v's cache: uint8 [num_pages, page_bytes], or
    for kv_pool: joint a whole pool [num_pages, 2, page_bytes] (the caller passes its half, _on)."""
    import torch

    layout = layout_of(v)
    shape = POOL_SHARES[layout.pool].pool_shape(num_pages, layout.page_bytes, layout.page_stride)
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8, device=device)


def _on(device: str, v: Variant, tensors: dict[str, Any]) -> dict[str, Any]:
    """tensors moved to device; a shared pool (random_cache) then viewed as its V half (moving a view would copy)."""
    out = {k: (t.to(device) if t is not None else None) for k, t in tensors.items()}
    if layout_of(v).joint:
        out["kvcache"] = pages_of(v).halves(out["kvcache"])[1]
    return out


def token_slots(num_tokens: int, device: object) -> torch.Tensor:
    """The slots a slots: token variant writes: token t to row t (what its reference and decode read)."""
    import torch

    return torch.arange(num_tokens, device=device)


def global_scale(v: Variant, g: torch.Generator) -> torch.Tensor | None:
    """A random g in [0.5, 64) for a format with a global scale (the caller's per-tensor scale, e.g.
    448 * 6 / amax), else None: drawn at random, so (all but surely) not a power of two, which would move only
    the scales' exponents."""
    import torch

    if not format_of(v).global_scale:
        return None
    scale = (torch.rand(1, generator=g) * 63.5 + 0.5).float()
    # a dequantization scale (k_scale) in (1/64, 2]: rows of up to ~15 then reach 448 and saturate
    dequant = format_of(v).scale_reciprocal or format_of(v).scale_divides  # a dequantization scale s: codes of v / s
    return (1.0 / scale.double()).float() if dequant else scale


def timing_inputs(v: Variant, num_tokens: int, seed: int = 1) -> dict[str, Any]:
    """Inputs for timing: random data, every row written (no padding), distinct slots."""
    import torch

    inputs = make_inputs(v, num_tokens, 1, "cuda", seed=seed)
    if SLOT_SOURCES[v.slots].reads_out_loc:
        slots = inputs["kvcache"].shape[0] * v.page_size
        inputs["out_loc"] = torch.randperm(slots, device="cuda")[:num_tokens]
    if v.rope_dim:  # make_inputs plants out-of-range positions; timing wants every row written
        inputs["positions"] = inputs["positions"] % inputs["freqs"].shape[0]
    elif v.reads_positions:
        inputs["positions"] = inputs["positions"].abs()
    return inputs


def workload_inputs(v: Variant, num_tokens: int, workload: str, seed: int = 1, device: str = "cuda",
                    max_pos: int = 4096) -> dict[str, Any]:
    """Inputs for timing a serving workload, every row written.

    prefill: runs of up to 1024 consecutive positions written to consecutive slots (a batch of
    sequences appended to their pages); decode: random positions, each token to a random slot
    of a pool twice the batch (scattered single-token writes)."""
    import torch

    v = resolve(v)
    g = torch.Generator(device=device).manual_seed(seed)  # generated where used: 1M-token batches are large
    dtype = getattr(torch, TORCH_DTYPES[v.input_dtype])
    wdtype = getattr(torch, TORCH_DTYPES[v.weight_dtype])
    x = torch.randn(num_tokens, v.x_width, generator=g, device=device)  # float32 staging (timing.STAGING_BYTES)
    x = x.mul_(3).add_(0.5).to(dtype)  # in place: (x * 3) + 0.5 as before, one float32 copy at the peak, not two
    weight = (1 + 0.25 * torch.randn(v.norm_width, generator=g, device=device)).to(wdtype)
    bias = (0.1 * torch.randn(v.norm_width, generator=g, device=device)).to(wdtype)
    freqs = rope_table(v.rope_dim, max_pos, v.rope_table)
    streams = v.position_streams  # M-RoPE: positions [3, N]
    if workload == "prefill":
        idx = torch.arange(num_tokens, device=device)
        positions = idx % 1024
        if streams > 1:  # an image's patches: time steps, then rows and columns of a 32-wide grid
            positions = torch.stack([idx // 1024 % max_pos, idx // 32 % 32, idx % 32])
        num_pages = -(-num_tokens // v.page_size) + 1
        out_loc = idx + v.page_size  # consecutive slots from the second page on
    elif workload == "decode":
        positions = torch.randint(0, max_pos, (streams, num_tokens) if streams > 1 else (num_tokens,), generator=g,
                                  device=device)
        num_pages = -(-2 * num_tokens // v.page_size) + 1
        out_loc = torch.randperm(num_pages * v.page_size, generator=g, device=device)[:num_tokens]
    else:
        raise ValueError(f"workload must be prefill or decode, got {workload!r}")
    if SLOT_SOURCES[v.slots].dense:
        num_pages, out_loc = num_tokens, token_slots(num_tokens, device)
    cache = random_cache(v, num_pages, g, device)
    tensors = dict(x=x, weight=weight, bias=bias if v.norm_bias else None, freqs=freqs if v.rope_dim else None,
                   positions=positions if v.reads_positions else None, out_loc=out_loc, kvcache=cache,
                   scale=global_scale(v, torch.Generator().manual_seed(seed)))
    return _on(device, v, tensors)


def group_inputs(k: Variant | Group, num_tokens: int, num_pages: int, device: str, seed: int,
                 max_pos: int = 4096) -> dict[str, Any]:
    """make_inputs for a kernel, under its symbol's argument names (a variant is a launch group of one member, under
    the family's names): each member's own tensors (weight, cache, scale), one freqs table, one set of positions
    and one out_loc for all members (the first member's draw: the padding, far-slot and far-position rows of
    make_inputs), and every member's input a column slice of one packed `qkv` [N, sum of heads x head_dim]
    (strided rows, as a projection's output)."""
    ms = members(k)
    per = [make_inputs(m.variant, num_tokens, num_pages, device, seed + i, max_pos) for i, m in enumerate(ms)]
    return _packed(ms, per, device)


def group_workload_inputs(k: Variant | Group, num_tokens: int, workload: str, seed: int = 1,
                          device: str = "cuda") -> dict[str, Any]:
    """workload_inputs for a kernel (every row written), packed as group_inputs packs them."""
    ms = members(k)
    per = [workload_inputs(m.variant, num_tokens, workload, seed + i, device) for i, m in enumerate(ms)]
    return _packed(ms, per, device)


def _packed(ms: list[Member], per: list[dict[str, Any]], device: str) -> dict[str, Any]:
    """Members' inputs (each made on the device: a joint pool's half stays a view of its pool) as one call's:
    shared freqs, positions and out_loc (the first member's that has each), the members' inputs as column slices
    of one packed qkv, the rest under each member's names."""
    import torch

    shared = {arg: next((inp[arg] for inp in per if inp[arg] is not None), None) for arg in ("freqs", "positions")}
    shared["out_loc"] = next((inp["out_loc"] for m, inp in zip(ms, per) if SLOT_SOURCES[m.variant.slots].reads_out_loc), None)
    out: dict[str, Any] = {"qkv": torch.cat([inp["x"] for inp in per], dim=1)}
    for m, inp in zip(ms, per):
        used = used_args(m.variant)
        for arg in ("weight", "bias", "kvcache", "scale"):
            if arg in used:
                out[m.names[arg]] = inp[arg]
        for arg in ("freqs", "positions", "out_loc"):
            if arg in used:
                out[arg] = shared[arg]
    out = {k: (t.to(device) if t is not None else None) for k, t in out.items()}
    joint = [m for m in ms if POOL_SHARES[m.variant.kv_pool].joint]
    if len(joint) == 2 and out[joint[0].names["kvcache"]].shape == out[joint[1].names["kvcache"]].shape:
        k, v = (m.names["kvcache"] for m in joint)  # K and V: the two halves of one pool
        if POOL_SHARES[joint[0].variant.kv_pool].packed:  # each a view of its own random pool: one pool's halves
            out[k], out[v] = pages_of(joint[0].variant).halves(out[k]._base)
        else:
            pool = torch.stack([out[k], out[v]], dim=1)
            out[k], out[v] = pool[:, 0], pool[:, 1]
    col = 0
    for m in ms:  # each member's input: its columns of the packed qkv (no copy)
        width = m.variant.x_width
        out[m.input] = out["qkv"][:, col:col + width]
        col += width
    return out


def call_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    """A kernel's inputs (group_inputs) as its op takes them by name: each member's input is its slice of the
    packed qkv, which is left out."""
    return {k: t for k, t in inputs.items() if k != "qkv"}


def member_inputs(k: Variant | Group, role: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """One member's tensors of a kernel's inputs (group_inputs), under the family's argument names (what
    make_inputs returns for the member alone): the reference and the comparison of that member read these. A
    variant's one member has the role ""."""
    m = next(m for m in members(k) if m.role == role)
    out = {arg: inputs.get(m.names[arg]) for arg in ("x", "weight", "bias", "freqs", "positions", "kvcache", "scale")}
    token = SLOT_SOURCES[m.variant.slots].dense  # a dense output: token t to row t
    out["out_loc"] = token_slots(out["x"].shape[0], out["x"].device) if token else inputs["out_loc"]
    return out
