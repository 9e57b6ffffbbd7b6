"""Launch geometry: default thread mapping for a variant, and the numbers derived from it."""
from __future__ import annotations

from dataclasses import dataclass

from .variant import Launch, Variant

DEFAULT_BLOCK_THREADS = 128
MAX_THREADS_PER_TOKEN = 32  # a token's threads must share one warp (shuffles)


def _largest_pow2_divisor(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


def resolve(v: Variant) -> Variant:
    """Fill launch fields left at 0: 16-byte loads, as many threads per token as divide the
    row (up to a warp), 128-thread blocks. Explicit settings are kept as given."""
    given = v.launch
    vec = given.vec or 16 // v.elem_bytes
    threads = given.threads_per_token or _largest_pow2_divisor(max(v.head_dim // vec, 1), MAX_THREADS_PER_TOKEN)
    tokens = given.tokens_per_block or max(DEFAULT_BLOCK_THREADS // threads, 1)
    return v.with_launch(Launch(threads, tokens, vec))


@dataclass(frozen=True)
class Geometry:
    threads_per_token: int
    tokens_per_block: int
    vec: int
    chunks: int  # vector loads per thread
    per_thread: int  # elements each thread holds

    @property
    def block_threads(self) -> int:
        return self.threads_per_token * self.tokens_per_block

    def grid(self, num_tokens: int) -> int:
        return -(-num_tokens // self.tokens_per_block)


def geometry(v: Variant) -> Geometry:
    launch = resolve(v).launch
    t, vec = launch.threads_per_token, launch.vec
    return Geometry(t, launch.tokens_per_block, vec, v.head_dim // (t * vec), v.head_dim // t)
