"""Launch geometry: default thread mapping for a variant, and the numbers derived from it."""
from __future__ import annotations

from dataclasses import dataclass

from ..layout.layout import FLASHMLA_GROUP, FP4_GROUP
from ..spec.variant import Launch, Variant

# Defaults from a launch sweep on the H200 (tools/results/h200_sweep_launch.log): 16 values
# per thread and 64-thread blocks were within ~10% of the best at 262144 tokens and the best
# or near it at 2048 tokens, for the DeepSeek-V4 indexer (fp8/bf16/fp4) and main-KV layouts.
DEFAULT_BLOCK_THREADS = 64
DEFAULT_VALUES_PER_THREAD = 16
MAX_THREADS_PER_TOKEN = 32  # a token's threads must share one warp (shuffles)
_SCALE_GROUP = {"fp4_e2m1": FP4_GROUP, "fp8_flashmla": FLASHMLA_GROUP}  # must lie within one load step


def _largest_pow2_divisor(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


def default_threads(v: Variant, vec: int) -> int:
    """Enough threads for 16 values each, more where a scale group must span one load step."""
    loads = max(v.head_dim // vec, 1)
    wanted = max(v.head_dim // DEFAULT_VALUES_PER_THREAD, _SCALE_GROUP.get(v.store, 1) // vec, 1)
    return _largest_pow2_divisor(loads, min(wanted, MAX_THREADS_PER_TOKEN))


def resolve(v: Variant) -> Variant:
    """Fill launch fields left at 0 with defaults; explicit settings are kept as given."""
    given = v.launch
    vec = given.vec or 16 // v.elem_bytes
    threads = given.threads_per_token or default_threads(v, vec)
    tokens = given.tokens_per_block or max(DEFAULT_BLOCK_THREADS // threads, 1)
    return v.with_launch(Launch(threads, tokens, vec))


@dataclass(frozen=True)
class Geometry:
    threads_per_token: int
    tokens_per_block: int
    vec: int
    chunks: int  # vector loads per thread
    per_thread: int  # elements each thread holds


def geometry(v: Variant) -> Geometry:
    launch = resolve(v).launch
    t, vec = launch.threads_per_token, launch.vec
    return Geometry(t, launch.tokens_per_block, vec, v.head_dim // (t * vec), v.head_dim // t)
