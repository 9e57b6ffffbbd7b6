// kernelgen/fused_norm_rope_store.cuh: the device code of the fused_norm_rope_store family.
//
// One token is handled by kThreadsPerToken consecutive threads: lanes of one warp, or (64 or 128
// threads, rows of at least 64 x kVec dims) two or four whole warps. Thread `l` of a token holds kChunks vectors of
// kVec elements: element k of chunk c is dim (c * kThreadsPerToken + l) * kVec + k. So the bits of a dim
// index are, from the lowest: in-vector bits, lane bits (then warp bits), chunk bits. Reductions, the
// neox partner exchange and the Hadamard butterflies follow those bits; the warp bits are crossed through
// shared memory by the sums, the fp8 amax, the NaN vote (see "tokens of several warps") and the Hadamard's
// warp stages (warp_butterflies).
//
// A generated translation unit defines `Cfg` structs (constants only) and instantiates run<Cfg...> (one
// configuration struct per member: a variant has one, a launch group up to three).
// The code lives in one header per concern, each including what it builds on:
//   params.cuh    Params, the thread geometry, a thread's slice of a row
//   warps.cuh     a token's reductions across two or four warps
//   norm.cuh      the norms and the operands' slices
//   rope.cuh      rotary embedding
//   hadamard.cuh  the Walsh-Hadamard transform
//   store.cuh     quantize and store, per format
//   kernel.cuh    a token's path, the variant kernel and the launch-group kernel
//   host.cuh      argument-check pieces and the host launches (host pass only)
#pragma once

#include "kernelgen/kernel.cuh"
// The host side (tvm-ffi's headers, the checks, the launches) only in the host pass: the device passes (one per
// arch) parse the device code alone, about half of each one's front-end time; a generated unit instantiates its
// kernels explicitly there (fused_norm_rope_store.cu.j2).
#ifndef __CUDA_ARCH__
#include "kernelgen/host.cuh"
#endif
