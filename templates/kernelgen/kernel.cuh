// kernelgen/kernel.cuh: the kernels: one token's path (fetch, norm, RoPE, Hadamard, store), a variant's kernel and a launch group's.
#pragma once

#include "kernelgen/store.cuh"

namespace kernelgen {

// ---- the kernel ----------------------------------------------------------------------------

// Programmatic dependent launch: wait until the kernels this launch depends on have finished
// and their writes are visible (a no-op when launched without the PDL attribute), then let the
// next PDL launch start its own preamble. Every input is read after the wait, except in an early_reads
// instance (kEarlyReads): its indices and cos/sin rows before it (fetch_early).
__device__ __forceinline__ void pdl_wait_then_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// What a token needs from memory before any arithmetic: its indices and its row of x, kept as the
// loaded words (converted to float in process()), so a loop can hold the next token's loads in flight
// while it computes the current one without twice the registers of a float row.
template <class Cfg>
struct Fetched {
  static constexpr int kBytes = Cfg::kVec * Cfg::kInBytes;  // one chunk's vector of x
  static constexpr int kPieceBytes = kBytes > 16 ? 16 : kBytes;
  static constexpr int kPieces = kBytes / kPieceBytes;
  using W = typename Word<kPieceBytes>::type;
  W x[Geometry<Cfg>::kChunks][kPieces];
  int64_t token;  // the row read (padding lanes past the last token read the last one)
  int64_t loc;
  int64_t pos;
  int64_t pos_h, pos_w;  // M-RoPE's height and width positions (kStreams == 3)
  bool in_range;
};

// The token's slot and position(s), and (token, head) its row of x. Lanes past the last token redo the last token
// and write nothing: every lane of a warp stays on the path, so shuffles can name the whole warp (see kWarp).
template <class Cfg>
__device__ __forceinline__ void fetch_indices(Fetched<Cfg>& f, const Params& p, int64_t slot_token, int64_t& token,
                                              int& head) {
  f.in_range = slot_token < p.num_tokens;
  f.token = f.in_range ? slot_token : p.num_tokens - 1;
  // Row r is head r % kHeads of token r / kHeads; its slot is the token's slot x kHeads + head (NHD).
  token = f.token / Cfg::kHeads;
  head = static_cast<int>(f.token % Cfg::kHeads);
  f.loc = Cfg::kTokenSlots ? token : load_index(p.out_loc, p.out_loc_i64, token);
  if constexpr (Cfg::kHeads > 1) f.loc = f.loc >= 0 ? f.loc * Cfg::kHeads + head : -1;
  f.pos = Cfg::kRopeDim > 0 || Cfg::kTemperature ? load_index(p.positions, p.positions_i64, token) : 0;
  if constexpr (Cfg::kStreams > 1 && Cfg::kRopeDim > 0) {  // M-RoPE: positions [3, N], a row per stream
    const int64_t n = p.num_tokens / Cfg::kHeads;
    f.pos_h = load_index(p.positions, p.positions_i64, n + token);
    f.pos_w = load_index(p.positions, p.positions_i64, 2 * n + token);
  }
}

// Head `head` of token `token`'s row of x.
template <class Cfg>
__device__ __forceinline__ void fetch_row(Fetched<Cfg>& f, const Params& p, int64_t token, int head, int lane) {
  using G = Geometry<Cfg>;
  using F = Fetched<Cfg>;
  const auto* row = reinterpret_cast<const uint8_t*>(static_cast<const typename Cfg::In*>(p.x) + token * p.x_row_stride +
                                                     head * Cfg::kXHeadStride);
#pragma unroll
  for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
    for (int i = 0; i < F::kPieces; ++i)
      f.x[c][i] = __ldg(reinterpret_cast<const typename F::W*>(row + ((c * G::kT + lane) * G::kVec) * Cfg::kInBytes +
                                                                i * F::kPieceBytes));
}

// The index loads and the row load issued together, before any test: one memory latency per token instead of three.
template <class Cfg>
__device__ __forceinline__ void fetch(Fetched<Cfg>& f, const Params& p, int64_t slot_token, int lane) {
  int64_t token;
  int head;
  fetch_indices(f, p, slot_token, token, head);
  fetch_row(f, p, token, head, lane);
}

template <class Cfg>
__device__ __forceinline__ void unpack_row(Row<Cfg>& r, const Fetched<Cfg>& f) {
  using F = Fetched<Cfg>;
  constexpr int kPer = Cfg::kVec / F::kPieces;  // elements per piece
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
    for (int i = 0; i < F::kPieces; ++i) {
      const auto* elems = reinterpret_cast<const typename Cfg::In*>(&f.x[c][i]);
#pragma unroll
      for (int k = 0; k < kPer; ++k) r.v[c][i * kPer + k] = to_float(elems[k]);
    }
}

// Llama-4's query temperature: t = log(floor((pos + 1) / kTempFloorScale) + 1) * kTempAttnScale + 1 in float64 with
// separately rounded operations (no contraction; spec/ropes.py Temperature.factor), rounded to float32 once.
template <class Cfg>
__device__ __forceinline__ void temper(Row<Cfg>& r, int64_t pos) {
  const double k = floor(__ddiv_rn(static_cast<double>(pos) + 1.0, Cfg::kTempFloorScale));
  const float t = __double2float_rn(__dadd_rn(__dmul_rn(log(__dadd_rn(k, 1.0)), Cfg::kTempAttnScale), 1.0));
#pragma unroll
  for (int c = 0; c < Geometry<Cfg>::kChunks; ++c)
#pragma unroll
    for (int k2 = 0; k2 < Cfg::kVec; ++k2) r.v[c][k2] = __fmul_rn(r.v[c][k2], t);
}

template <class Cfg>
__device__ __forceinline__ void start_row(Row<Cfg>& r, int parity) {
  using G = Geometry<Cfg>;
  r.lane = threadIdx.x % G::kT;
  r.group = G::kT >= 32 ? kWarp : ((1u << G::kT) - 1u) << ((threadIdx.x & 31) & ~(G::kT - 1));
  r.token = threadIdx.x / G::kT;
  r.parity = parity;
}

// Whether the token's positions lie in the cos/sin table (a row outside it is never read, and nothing is written).
template <class Cfg>
__device__ __forceinline__ bool positions_ok(const Fetched<Cfg>& f, const Params& p) {
  bool pos_ok = Cfg::kRopeDim == 0 || (f.pos >= 0 && f.pos < p.max_pos);
  if constexpr (Cfg::kTemperature) pos_ok = pos_ok && f.pos >= 0;  // its log needs pos + 1 >= 1
  if constexpr (Cfg::kStreams > 1 && Cfg::kRopeDim > 0)
    pos_ok = pos_ok && f.pos_h >= 0 && f.pos_h < p.max_pos && f.pos_w >= 0 && f.pos_w < p.max_pos;
  return pos_ok;
}

// The cos/sin rows the token's rotation reads (row 0 stands in where the positions are not ok).
template <class Cfg>
__device__ __forceinline__ FreqRows freq_rows(const Fetched<Cfg>& f, const Params& p, bool pos_ok) {
  FreqRows rows;
  rows.t = p.freqs + (pos_ok ? f.pos : 0) * Cfg::kRopeDim;  // never read out of bounds
  if constexpr (Cfg::kStreams > 1 && Cfg::kRopeDim > 0) {
    rows.h = p.freqs + (pos_ok ? f.pos_h : 0) * Cfg::kRopeDim;
    rows.w = p.freqs + (pos_ok ? f.pos_w : 0) * Cfg::kRopeDim;
  }
  return rows;
}

// launch.early_reads (a PDL launch's prologue): the token's slot, position(s) and cos/sin are read before
// griddepcontrol.wait, overlapping the previous kernel, and only x after it, so the wait is followed by one round
// of memory latency instead of two (position, then its cos/sin). The spec that offers it promises that the kernel
// launched before never writes the slot mapping, the positions or the cos/sin table (docs/tuning.md).
template <class Cfg>
__device__ __forceinline__ void read_early(Fetched<Cfg>& f, Operands<Cfg>& o, const Params& p, int64_t slot_token,
                                           int64_t& token, int& head) {
  fetch_indices(f, p, slot_token, token, head);
  Row<Cfg> r;
  start_row(r, 0);  // load_freqs reads the lane alone
  const bool pos_ok = positions_ok(f, p);
  if (pos_ok) load_freqs<Cfg, true>(o, r, freq_rows(f, p, pos_ok));  // ordinary loads: they stay before the wait
}

template <class Cfg>
__device__ __forceinline__ void fetch_early(Fetched<Cfg>& f, Operands<Cfg>& o, const Params& p, int64_t slot_token,
                                            int lane) {
  int64_t token;
  int head;
  read_early(f, o, p, slot_token, token, head);
  pdl_wait_then_release();
  fetch_row(f, p, token, head, lane);
}

// Everything after the loads for one token: operands, norm, RoPE, Hadamard, quantize and store. `o` holds the
// cos/sin already where fetch_early read them. A dry run (launch.warm_pass's first pass) goes the whole way and writes
// nothing (f.in_range is false).
template <class Cfg>
__device__ __forceinline__ void process(const Fetched<Cfg>& f, const Params& p, int parity, Operands<Cfg>& o,
                                        bool dry = false) {
  Row<Cfg> r;
  start_row(r, parity);
  float global_scale = 1.f;
  // warm_pass: the dry pass reads neither the scale nor the weights (the kernel before may write them), and the second
  // reads them by ordinary loads, which stay after the wait in the loop (a read-only load would be hoisted above it)
  if constexpr (Cfg::kGlobal != GlobalScale::kNone)
    if (!dry) global_scale = Cfg::kWarmPass ? *p.global_scale : __ldg(p.global_scale);
  if constexpr (Cfg::kGlobal == GlobalScale::kTimesReciprocal) global_scale = __frcp_rn(global_scale);
  unpack_row(r, f);
  // positions_ok and freq_rows written out: through the functions nvcc schedules the launch groups differently,
  // and their tuning records hold the machine code they timed
  bool pos_ok = Cfg::kRopeDim == 0 || (f.pos >= 0 && f.pos < p.max_pos);
  if constexpr (Cfg::kTemperature) pos_ok = pos_ok && f.pos >= 0;
  if constexpr (Cfg::kStreams > 1 && Cfg::kRopeDim > 0)
    pos_ok = pos_ok && f.pos_h >= 0 && f.pos_h < p.max_pos && f.pos_w >= 0 && f.pos_w < p.max_pos;
  FreqRows freqs_row;
  freqs_row.t = p.freqs + (pos_ok ? f.pos : 0) * Cfg::kRopeDim;  // never read out of bounds
  if constexpr (Cfg::kStreams > 1 && Cfg::kRopeDim > 0) {
    freqs_row.h = p.freqs + (pos_ok ? f.pos_h : 0) * Cfg::kRopeDim;
    freqs_row.w = p.freqs + (pos_ok ? f.pos_w : 0) * Cfg::kRopeDim;
  }
  if constexpr (Cfg::kPrefetch || Cfg::kWarmPass) {
    if (!dry) load_weights(o, r, p);
    if (!Cfg::kEarlyReads && pos_ok) load_freqs(o, r, freqs_row);
  }
  // Padding rows, slots outside the pool and positions outside freqs are computed but not written.
  const bool write = f.in_range && f.loc >= 0 && f.loc < p.num_slots && pos_ok;
  // The norm runs before the early exit: it needs only x (and the weights), so it overlaps the freqs
  // load, and x's loads stay at entry (with the exit first, nvcc sinks them below it: one more
  // round of memory latency per call, seen in the SASS).
  if constexpr (Cfg::kRopeFirst) {  // norm_order: rope_then_norm: the norm runs on the rotated row
    if (!__any_sync(kWarp, write || dry)) return;
    rotate(r, o, freqs_row);
    normalize(r, o, p);
    round_bf16_if<Cfg::kRoundNormBf16>(r);
  } else {
    normalize(r, o, p);
    if (!__any_sync(kWarp, write || dry)) return;  // the whole warp skips the token together
    round_bf16_if<Cfg::kRoundNormBf16>(r);  // round_norm_bf16: RoPE rotates the bf16 the norm would output
    rotate(r, o, freqs_row);
  }
  if constexpr (Cfg::kTemperature) temper(r, f.pos);
  hadamard(r);
  const int64_t safe_loc = write ? f.loc : 0;
  constexpr int kRowsPerPage = Cfg::kPageSize * Cfg::kHeads;
  const int64_t page_bytes = Cfg::kTokenSlots ? p.page_stride : Cfg::kPageStride;
  if constexpr (Cfg::kHnd) {  // record s * heads + h of slot s at h * page_size + s % page_size (HND)
    const int64_t slot = safe_loc / Cfg::kHeads;
    store(r, global_scale, p.cache + (slot / Cfg::kPageSize) * page_bytes,
          static_cast<int>(safe_loc % Cfg::kHeads) * Cfg::kPageSize + static_cast<int>(slot % Cfg::kPageSize), write);
  } else {
    store(r, global_scale, p.cache + (safe_loc / kRowsPerPage) * page_bytes,
          static_cast<int>(safe_loc % kRowsPerPage), write);
  }
}

template <class Cfg>
__device__ __forceinline__ void process(const Fetched<Cfg>& f, const Params& p, int parity) {
  Operands<Cfg> o;
  process(f, p, parity, o);
}

// An early_reads launch's token (the variant's kernel and a group member's block): its indices and cos/sin read before
// the wait. launch.warm_pass (kWarmPass): the path runs twice from one copy of its code (a loop not unrolled), first
// before the wait on a zero row that writes nothing, then on the token's row after it, so the instructions after the
// wait are in the SM's instruction caches already (a small launch's blocks land on SMs that have not run the kernel).
// The dry pass reads no input that the kernel before may write (only the early reads, x a zero row, the weights and
// scales not at all: zeros and 1); the second reads x, the weights and the scales after the wait. The passes use the
// two sets of the exchange slots and Hadamard buffers, as a looping kernel's tokens do: a warp that runs ahead into
// the second pass never overwrites a value another warp of the token has yet to read in the first.
template <class Cfg>
__device__ __forceinline__ void early_token(const Params& p, int64_t slot_token, int lane, int parity) {
  Fetched<Cfg> f;
  Operands<Cfg> o;
  if constexpr (!Cfg::kWarmPass) {
    fetch_early(f, o, p, slot_token, lane);
    process(f, p, parity, o);
  } else {
    int64_t token;
    int head;
    o = {};  // the dry pass's weights and biases: zeros (it reads none)
    read_early(f, o, p, slot_token, token, head);
    const bool in_range = f.in_range;
    f.in_range = false;  // the dry pass: a zero row that writes nothing
    for (auto& chunk : f.x)
      for (auto& word : chunk) word = {};
#pragma unroll 1
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) {
        pdl_wait_then_release();
        f.in_range = in_range;
        fetch_row(f, p, token, head, lane);
      }
      process(f, p, parity ^ pass, o, pass == 0);  // the second pass: the other set of exchange slots (warps.cuh)
    }
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Geometry<Cfg>::kBlockThreads, Cfg::kMinBlocks) fused_norm_rope_store_kernel(const Params p) {
  using G = Geometry<Cfg>;
  if constexpr (!Cfg::kEarlyReads) pdl_wait_then_release();  // else after the early reads
  const int lane = threadIdx.x % G::kT;
  const int64_t first = int64_t(blockIdx.x) * Cfg::kTokensPerBlock + threadIdx.x / G::kT;
  Fetched<Cfg> cur;
  if constexpr (Cfg::kEarlyReads) {  // never looping (guard early_reads_one_token)
    early_token<Cfg>(p, first, lane, 0);
    return;
  }
  fetch(cur, p, first, lane);
  if constexpr (!Cfg::kLoop) {
    process(cur, p, 0);
  } else {
    // A grid of a few waves walks the token blocks: the next block's loads are issued before the
    // current token is computed (software pipelining across tokens), and no block is launched per
    // 16 tokens. `more` is the same for the whole block, so the shuffles stay warp-uniform.
    const int64_t num_blocks = (p.num_tokens + Cfg::kTokensPerBlock - 1) / Cfg::kTokensPerBlock;
    int parity = 0;
#pragma unroll 1
    for (int64_t b = blockIdx.x; b < num_blocks; b += gridDim.x, parity ^= 1) {
      Fetched<Cfg> next = cur;  // after the last block: a copy of cur, never read
      const bool more = b + gridDim.x < num_blocks;
      if (more) fetch(next, p, first + (b - blockIdx.x + gridDim.x) * Cfg::kTokensPerBlock, lane);
      process(cur, p, parity);
      cur = next;
    }
  }
}

// ---- launch groups ---------------------------------------------------------------------------
//
// A launch group runs up to three variants (its members: an attention layer's Q output and K and V appends)
// over the same tokens in one launch. The grid's token blocks are the members' blocks one after another; a
// block runs the member its index falls in, with that member's configuration (every member shares the
// launch's block shape). Each member's path is the single variant's (fetch, process): same bytes.
constexpr int kMaxMembers = 3;

struct GroupParams {
  Params part[kMaxMembers];
  int64_t blocks[kMaxMembers];  // token blocks of each member
  int64_t total;  // their sum
};

template <class Cfg>
__device__ __forceinline__ void member_block(const Params& p, int64_t block, int parity) {
  using G = Geometry<Cfg>;
  if constexpr (Cfg::kEarlyReads) {
    early_token<Cfg>(p, block * Cfg::kTokensPerBlock + threadIdx.x / G::kT, static_cast<int>(threadIdx.x % G::kT),
                     parity);
  } else {
    Fetched<Cfg> f;
    fetch(f, p, block * Cfg::kTokensPerBlock + threadIdx.x / G::kT, static_cast<int>(threadIdx.x % G::kT));
    process(f, p, parity);
  }
}

template <int I, class Cfg, class... Rest>
__device__ __forceinline__ void group_block(const GroupParams& g, int64_t block, int parity) {
  if (block < g.blocks[I]) {
    member_block<Cfg>(g.part[I], block, parity);
  } else if constexpr (sizeof...(Rest) > 0) {
    group_block<I + 1, Rest...>(g, block - g.blocks[I], parity);
  }
}

template <class First, class... Rest>
__global__ void __launch_bounds__(Geometry<First>::kBlockThreads, First::kMinBlocks) fused_group_kernel(const GroupParams g) {
  static_assert(sizeof...(Rest) < kMaxMembers, "a launch group has at most three members");
  static_assert(((Geometry<Rest>::kBlockThreads == Geometry<First>::kBlockThreads) && ...),
                "the members of a launch group share one block shape");
  if constexpr (!First::kEarlyReads) pdl_wait_then_release();  // else each member's block waits after its early reads
  if constexpr (!First::kLoop) {
    group_block<0, First, Rest...>(g, blockIdx.x, 0);
  } else {  // a wave of blocks walks the members' blocks (no cross-token prefetch: members differ)
    int parity = 0;
#pragma unroll 1
    for (int64_t b = blockIdx.x; b < g.total; b += gridDim.x, parity ^= 1) group_block<0, First, Rest...>(g, b, parity);
  }
}

}  // namespace kernelgen
