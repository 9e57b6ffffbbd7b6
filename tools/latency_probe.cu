// tools/latency_probe.cu: the latencies a small-batch call is made of, measured on the GPU at hand
// (docs/perf.md change 11). Two parts:
//   1. dependent-chain latency in cycles (clock64 around 256 steps of one warp, eight steps per loop
//      iteration): a shuffle-and-add or shuffle-and-max stage, an integer redux.sync (one group; two and
//      four groups on masked values), a ballot, an L2-hit load chain (a scattered ring of 256 KB, read
//      once before it is timed); the "net" column subtracts the loop's own share per step (an FADD-only
//      chain, less the FADD's 4 cycles);
//   2. CUDA-graph replay per call (20 calls per graph, median of 30 replays): an empty kernel without
//      and with programmatic dependent launch, a 1 KB copy, and an index load followed by the copy;
//   3. the same per grid size (1 to 256 blocks of 128 threads, PDL on, each block its own 1 KB row):
//      what a launch of one block per token costs as the token count grows, with nothing else in it.
//   nvcc -O3 -arch=sm_90a -std=c++17 tools/latency_probe.cu -o /tmp/latency_probe && /tmp/latency_probe
// (tools/device_run.sh latency). Not part of the package: a measuring tool beside tools/chain_probe.py.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); return 1; } } while (0)

constexpr int kIters = 256;
constexpr int kUnroll = 8;  // steps per loop iteration: the loop's branch is spread over eight steps

// One step of a dependent chain on a 32-bit state (floats travel as their bits), i the step number.
struct FaddStep {  // the baseline: the loop's own cost plus one 4-cycle FADD
  __device__ unsigned operator()(unsigned v, int, float seed) const { return __float_as_uint(__fadd_rn(__uint_as_float(v), seed)); }
};
struct ShflAddStep {
  __device__ unsigned operator()(unsigned v, int i, float) const {
    const float f = __uint_as_float(v);
    return __float_as_uint(__fadd_rn(f, __shfl_xor_sync(0xffffffffu, f, 1 << (i & 4))));
  }
};
struct ShflMaxStep {
  __device__ unsigned operator()(unsigned v, int i, float) const {
    const float f = __uint_as_float(v);
    return __float_as_uint(fmaxf(f, __shfl_xor_sync(0xffffffffu, f, 1 << (i & 4))));
  }
};
struct ReduxStep {  // one group: the whole warp
  __device__ unsigned operator()(unsigned v, int i, float) const {
    return __reduce_max_sync(0xffffffffu, v ^ (threadIdx.x & i & 1));
  }
};
struct Redux2Step {  // two groups of 16 lanes, one full-warp redux each on masked values (group_max_nonneg<16>)
  __device__ unsigned operator()(unsigned v, int i, float) const {
    const bool upper = (threadIdx.x & 16) != 0;
    const unsigned lo = __reduce_max_sync(0xffffffffu, upper ? 0u : v);
    const unsigned hi = __reduce_max_sync(0xffffffffu, upper ? v : 0u);
    return (upper ? hi : lo) ^ (i & 1);
  }
};
struct Redux4Step {  // four groups of 8 lanes, one full-warp redux each on masked values
  __device__ unsigned operator()(unsigned v, int i, float) const {
    const int g = threadIdx.x >> 3;
    const unsigned a = __reduce_max_sync(0xffffffffu, g == 0 ? v : 0u);
    const unsigned b = __reduce_max_sync(0xffffffffu, g == 1 ? v : 0u);
    const unsigned c = __reduce_max_sync(0xffffffffu, g == 2 ? v : 0u);
    const unsigned d = __reduce_max_sync(0xffffffffu, g == 3 ? v : 0u);
    return (g == 0 ? a : g == 1 ? b : g == 2 ? c : d) ^ (i & 1);
  }
};
struct BallotStep {
  __device__ unsigned operator()(unsigned v, int i, float) const {
    return __ballot_sync(0xffffffffu, (v >> (threadIdx.x & 7)) & 1) + i;
  }
};

template <class Step>
__global__ void chain(float* out, long long* cyc, float seed) {
  unsigned v = __float_as_uint(seed + threadIdx.x);
  const long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < kIters; i += kUnroll) {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) v = Step()(v, i + j, seed);
  }
  const long long t1 = clock64();
  out[threadIdx.x] = __uint_as_float(v);  // the chain's result is stored: nothing is optimized away
  if (threadIdx.x == 0) cyc[0] = t1 - t0;
}

// A dependent L2-hit chain: p = p[...]
__global__ void lat_load(const unsigned* ring, unsigned* out, long long* cyc) {
  unsigned p = 0;
  long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < kIters; i += kUnroll) {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) p = __ldcg(ring + p);
  }
  long long t1 = clock64();
  out[0] = p;
  if (threadIdx.x == 0) cyc[0] = t1 - t0;
}

// ---- floors ----
__global__ void k_empty() {}
__global__ void k_empty_pdl() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
}
__global__ void k_copy_pdl(const uint4* __restrict__ in, uint4* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
  out[threadIdx.x] = __ldg(in + threadIdx.x);
}
__global__ void k_copy2_pdl(const unsigned* __restrict__ idx, const uint4* __restrict__ in, uint4* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
  unsigned j = __ldg(idx);
  out[threadIdx.x] = __ldg(in + j * 64 + threadIdx.x);
}
__global__ void k_copy(const uint4* __restrict__ in, uint4* out) { out[threadIdx.x] = __ldg(in + threadIdx.x); }
// One 1 KB row per block of 128 threads (8 B per thread, as a t128.v4 bf16 row), the row picked by an index load.
__global__ void k_rows_pdl(const unsigned* __restrict__ idx, const uint2* __restrict__ in, uint2* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
  const unsigned j = __ldg(idx + blockIdx.x);
  out[blockIdx.x * 128 + threadIdx.x] = __ldg(in + j * 128 + threadIdx.x);
}

template <class F>
float graph_us(F launch, cudaStream_t s, int calls = 20, int reps = 30) {
  cudaGraph_t g;
  cudaGraphExec_t e;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < calls; ++i) launch();
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&e, g, 0);
  for (int i = 0; i < 3; ++i) cudaGraphLaunch(e, s);
  cudaStreamSynchronize(s);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  float best[64];
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a, s);
    cudaGraphLaunch(e, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&best[r], a, b);
  }
  // median
  for (int i = 0; i < reps; ++i)
    for (int j = i + 1; j < reps; ++j)
      if (best[j] < best[i]) { float t = best[i]; best[i] = best[j]; best[j] = t; }
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
  return best[reps / 2] * 1000.f / calls;
}

template <class K, class... A>
void launch_grid(K k, cudaStream_t s, bool pdl, int blocks, int threads, A... args) {
  cudaLaunchConfig_t c = {};
  c.gridDim = dim3(blocks);
  c.blockDim = dim3(threads);
  c.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  c.attrs = at;
  c.numAttrs = pdl ? 1 : 0;
  cudaLaunchKernelEx(&c, k, args...);
}

int main() {
  float* out;
  long long* cyc;
  unsigned *ring, *uout;
  CK(cudaMalloc(&out, 4096));
  CK(cudaMalloc(&cyc, 64));
  CK(cudaMalloc(&uout, 64));
  const int kRing = 1 << 16;
  CK(cudaMalloc(&ring, kRing * 4));
  unsigned* h = new unsigned[kRing];
  for (int i = 0; i < kRing; ++i) h[i] = (i * 2654435761u + 977) % kRing;  // a scattered ring
  CK(cudaMemcpy(ring, h, kRing * 4, cudaMemcpyHostToDevice));
  long long c;
  double loop_cost = 0;  // the FADD-only chain's cycles per step, less the FADD's own 4
  bool printing = false;
  auto report = [&](const char* name) {
    cudaDeviceSynchronize();
    cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost);
    const double per = double(c) / kIters;
    if (loop_cost == 0) loop_cost = per - 4;
    if (printing) printf("%-28s %6.1f cycles per step, net %6.1f\n", name, per, per - loop_cost);
  };
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms the code and the ring into L2, unprinted
    printing = pass == 1;
    loop_cost = 0;
    chain<FaddStep><<<1, 32>>>(out, cyc, 1.f); report("fadd");
    chain<ShflAddStep><<<1, 32>>>(out, cyc, 1.f); report("shfl.bfly + fadd");
    chain<ShflMaxStep><<<1, 32>>>(out, cyc, 1.f); report("shfl.bfly + fmax");
    chain<ReduxStep><<<1, 32>>>(out, cyc, 1.f); report("redux.max.u32 (+lop)");
    chain<Redux2Step><<<1, 32>>>(out, cyc, 1.f); report("2 x redux.max masked");
    chain<Redux4Step><<<1, 32>>>(out, cyc, 1.f); report("4 x redux.max masked");
    chain<BallotStep><<<1, 32>>>(out, cyc, 1.f); report("ballot (+shift,iadd)");
    lat_load<<<1, 1>>>(ring, uout, cyc); report("ld.cg L2 hit chain");
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  uint4 *in, *o;
  unsigned* idx;
  CK(cudaMalloc(&in, 1 << 20));
  CK(cudaMalloc(&o, 1 << 20));
  CK(cudaMalloc(&idx, 64));
  CK(cudaMemset(idx, 0, 64));
  for (int rep = 0; rep < 3; ++rep) {
    printf("floor empty            %.3f us\n", graph_us([&] { launch_grid(k_empty, s, false, 1, 32); }, s));
    printf("floor empty + PDL      %.3f us\n", graph_us([&] { launch_grid(k_empty_pdl, s, true, 1, 32); }, s));
    printf("copy 1 KB              %.3f us\n", graph_us([&] { launch_grid(k_copy, s, false, 1, 64, (const uint4*)in, o); }, s));
    printf("copy 1 KB + PDL        %.3f us\n", graph_us([&] { launch_grid(k_copy_pdl, s, true, 1, 64, (const uint4*)in, o); }, s));
    printf("idx->copy 1 KB + PDL   %.3f us\n",
           graph_us([&] { launch_grid(k_copy2_pdl, s, true, 1, 64, (const unsigned*)idx, (const uint4*)in, o); }, s));
  }
  // Part 3: one block of 128 threads per row, grids of 1 to 256 blocks (132 SMs), scattered row indices.
  uint2 *rows_in, *rows_out;
  unsigned* rows_idx;
  const int kRows = 4096;
  CK(cudaMalloc(&rows_in, kRows * 1024));
  CK(cudaMalloc(&rows_out, 256 * 1024));
  CK(cudaMalloc(&rows_idx, 256 * 4));
  unsigned hidx[256];
  for (int i = 0; i < 256; ++i) hidx[i] = (i * 2654435761u + 17) % kRows;
  CK(cudaMemcpy(rows_idx, hidx, sizeof(hidx), cudaMemcpyHostToDevice));
  const int grids[] = {1, 16, 32, 64, 96, 128, 132, 192, 256};
  for (int rep = 0; rep < 2; ++rep)
    for (int g : grids)
      printf("grid %3d x 128: empty + PDL %.3f us, idx->row 1 KB + PDL %.3f us\n", g,
             graph_us([&] { launch_grid(k_empty_pdl, s, true, g, 128); }, s),
             graph_us([&] { launch_grid(k_rows_pdl, s, true, g, 128, (const unsigned*)rows_idx, (const uint2*)rows_in, rows_out); }, s));
  CK(cudaGetLastError());
  return 0;
}
