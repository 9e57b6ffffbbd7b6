// kernelgen/host.cuh: the host side: the pieces of the generated argument checks and the launches of both kernels.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <type_traits>
#include <vector>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/extra/cuda/device_guard.h>
#include <tvm/ffi/function.h>

#include "kernelgen/kernel.cuh"

namespace kernelgen {

// ---- host entry --------------------------------------------------------------------------
//
// The argument checks are generated per variant from one table (kernelgen/codegen/checks.py),
// which the Python op also interprets: both refuse the same tensors with the same words. These
// are the pieces the generated checks use; the descriptions use torch's names for dtypes and devices.

inline bool has_dtype(const tvm::ffi::TensorView& t, int code, int bits) {
  return t.dtype().code == code && t.dtype().bits == bits && t.dtype().lanes == 1;
}

inline bool same_device(const tvm::ffi::TensorView& t, const tvm::ffi::TensorView& x) {
  return t.device().device_type == x.device().device_type && t.device().device_id == x.device().device_id;
}

// The DLTensor a view holds (TensorView's only member): its strides may be null, which DLPack allows
// for compact row-major tensors and TensorView::strides() refuses.
inline const DLTensor& raw(const tvm::ffi::TensorView& t) {
  static_assert(std::is_standard_layout_v<tvm::ffi::TensorView> && sizeof(tvm::ffi::TensorView) == sizeof(DLTensor),
                "tvm::ffi::TensorView is expected to hold exactly one DLTensor");
  return *reinterpret_cast<const DLTensor*>(&t);
}

// Element stride of dim i (null strides: compact row-major).
inline int64_t stride_of(const tvm::ffi::TensorView& t, int i) {
  const DLTensor& d = raw(t);
  if (d.strides != nullptr) return d.strides[i];
  int64_t s = 1;
  for (int k = d.ndim - 1; k > i; --k) s *= d.shape[k];
  return s;
}

// The first element's address: data plus byte_offset, as DLPack defines it.
inline const uint8_t* address(const tvm::ffi::TensorView& t) {
  return static_cast<const uint8_t*>(t.data_ptr()) + t.byte_offset();
}

inline int64_t address_offset(const tvm::ffi::TensorView& t, int bytes) {
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(address(t)) % bytes);
}

// Rows of a 2-D tensor are contiguous and each starts `align`-byte aligned (given an aligned start).
// One half of a joint K/V pool [num_pages, 2, page]: each page contiguous, pages page_stride bytes apart.
inline bool pool_half(const tvm::ffi::TensorView& t, int64_t page_stride) {
  return stride_of(t, 1) == 1 && (t.size(0) <= 1 || stride_of(t, 0) == page_stride);
}

inline bool rows_aligned(const tvm::ffi::TensorView& t, int elem_bytes, int align) {
  return stride_of(t, 1) == 1 && (t.size(0) <= 1 || stride_of(t, 0) * elem_bytes % align == 0);
}

std::string dtype_name(DLDataType t);  // generated from kernelgen's dtype name table, beside the checks

inline std::string int_list(const int64_t* v, int n) {
  std::string out = "[";
  for (int i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// "float32 [4, 128] on cuda:0", as Python prints a torch tensor's dtype, shape and device.
inline std::string describe(const tvm::ffi::TensorView& t) {
  const DLDevice d = t.device();
  const std::string device = d.device_type == kDLCUDA ? "cuda:" + std::to_string(d.device_id)
                             : d.device_type == kDLCPU ? std::string("cpu")
                                                       : "dlpack device " + std::to_string(d.device_type) + ":" +
                                                             std::to_string(d.device_id);
  return dtype_name(t.dtype()) + " " + int_list(t.shape().data(), t.ndim()) + " on " + device;
}

inline std::string describe_strides(const tvm::ffi::TensorView& t) {
  std::vector<int64_t> strides(t.ndim());
  for (int i = 0; i < t.ndim(); ++i) strides[i] = stride_of(t, i);
  return "strides " + int_list(strides.data(), t.ndim());
}

inline std::string describe_address(const tvm::ffi::TensorView& t, int bytes) {
  return "an address " + std::to_string(address_offset(t, bytes)) + " bytes past a " + std::to_string(bytes) +
         "-byte boundary";
}

// ---- the launches ------------------------------------------------------------------------

// How many blocks of a kernel the device holds at once (one wave): the grid of a looping configuration.
// Asked once per device and kernel (Key names it; the answer depends on registers and SMs); callers on
// several host threads may ask at once: they compute the same answer, stored atomically.
template <class Key, class Kernel>
int64_t resident_blocks_of(Kernel kernel, int threads, int device) {
  constexpr int kDevices = 64;  // beyond that (not a machine that exists), asked on every call
  static std::atomic<int64_t> cached[kDevices];  // static storage: zero until first asked
  int64_t blocks = (device >= 0 && device < kDevices) ? cached[device].load(std::memory_order_relaxed) : 0;
  if (blocks == 0) {
    int per_sm = 0, sms = 0;
    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    TVM_FFI_CHECK(err == cudaSuccess, RuntimeError) << Key::kName << ": occupancy query failed: " << cudaGetErrorString(err);
    blocks = std::max<int64_t>(1, int64_t(per_sm) * sms);
    if (device >= 0 && device < kDevices) cached[device].store(blocks, std::memory_order_relaxed);
  }
  return blocks;
}

// The kernel's parameters for one variant's (or one group member's) tensors, arguments already checked.
template <class Cfg>
Params make_params(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias,
                   tvm::ffi::TensorView freqs, tvm::ffi::TensorView positions, tvm::ffi::TensorView out_loc,
                   tvm::ffi::TensorView cache, tvm::ffi::TensorView scale, double eps) {
  Params p{};
  p.x = address(x);
  p.x_row_stride = stride_of(x, 0);
  p.weight = address(weight);
  p.bias = address(bias);
  p.freqs = reinterpret_cast<const float*>(address(freqs));
  p.max_pos = Cfg::kRopeDim > 0 ? freqs.size(0) : 0;
  p.positions = address(positions);
  p.positions_i64 = positions.dtype().bits == 64;
  p.out_loc = address(out_loc);
  p.out_loc_i64 = out_loc.dtype().bits == 64;
  p.cache = const_cast<uint8_t*>(address(cache));
  p.num_slots = cache.size(0) * Cfg::kPageSize * Cfg::kHeads;
  p.num_tokens = x.size(0) * Cfg::kHeads;
  p.eps = static_cast<float>(eps);
  p.global_scale = reinterpret_cast<const float*>(address(scale));
  p.page_stride = stride_of(cache, 0);
  return p;
}

template <class Kernel, class Arg>
void launch_kernel(const char* name, Kernel kernel, const Arg& arg, int64_t blocks, int threads, int device, bool pdl) {
  tvm::ffi::CUDADeviceGuard guard(device);
  cudaLaunchConfig_t launch = {};
  launch.gridDim = dim3(static_cast<unsigned>(blocks));
  launch.blockDim = dim3(threads);
  launch.stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, device));
  cudaLaunchAttribute attrs[1];
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  launch.attrs = attrs;
  launch.numAttrs = pdl ? 1 : 0;
  cudaError_t err = cudaLaunchKernelEx(&launch, kernel, arg);
  if (err == cudaSuccess) err = cudaGetLastError();
  TVM_FFI_CHECK(err == cudaSuccess, RuntimeError) << name << ": launch failed: " << cudaGetErrorString(err);
}

// One launch of a kernel's members over the same tokens (arguments already checked; x0 is the first member's
// input). One member runs the variant's kernel, a block per kTokensPerBlock tokens or (kLoop) one wave of
// resident blocks whose loop issues the next token block's loads before the current one's math; several run
// the launch group's kernel, whose token blocks are the members' blocks one after another (First's
// configuration decides the loop).
template <class First, class... Rest>
void run(const char* name, tvm::ffi::TensorView x0, bool pdl, const Params (&parts)[1 + sizeof...(Rest)]) {
  const int device = x0.device().device_id;
  constexpr int kThreads = Geometry<First>::kBlockThreads;
  if constexpr (sizeof...(Rest) == 0) {
    const Params& p = parts[0];
    if (p.num_tokens == 0) return;
    int64_t blocks = (p.num_tokens + First::kTokensPerBlock - 1) / First::kTokensPerBlock;
    if constexpr (First::kLoop)
      blocks = std::min(blocks, resident_blocks_of<First>(fused_norm_rope_store_kernel<First>, kThreads, device));
    launch_kernel(name, fused_norm_rope_store_kernel<First>, p, blocks, kThreads, device, pdl);
  } else {
    GroupParams g{};
    constexpr int kTokens[] = {First::kTokensPerBlock, Rest::kTokensPerBlock...};
    for (int i = 0; i < 1 + int(sizeof...(Rest)); ++i) {
      g.part[i] = parts[i];
      g.blocks[i] = (parts[i].num_tokens + kTokens[i] - 1) / kTokens[i];
      g.total += g.blocks[i];
    }
    if (g.total == 0) return;
    int64_t blocks = g.total;
    if constexpr (First::kLoop)
      blocks = std::min(blocks, resident_blocks_of<First>(fused_group_kernel<First, Rest...>, kThreads, device));
    launch_kernel(name, fused_group_kernel<First, Rest...>, g, blocks, kThreads, device, pdl);
  }
}

}  // namespace kernelgen
