"""The helpers every generated CUDA file starts with: the scalar helpers the C-family
renderer names (``tl_min_f32``, ``tl_bf16_to_f32``...), the status that run-time index
checks report to (device and host sides), warp reductions, 16-byte copies, and the PTX
of ``cp.async``, ``ldmatrix`` and ``mma.sync`` (sm_80 and newer) as small inline functions;
and, for a build by NVRTC, the loader of the embedded cubin's kernels."""

CUDA_PRELUDE = r"""// One file for three compilers: nvcc builds all of it; NVRTC (__CUDACC_RTC__) the device
// code alone, into a cubin; the host's C++ compiler beside it (no __CUDACC__) the host code,
// which launches the kernels from that cubin, embedded in the library.
#if defined(__CUDACC_RTC__)  // NVRTC has no standard headers
typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t; typedef long long int64_t; typedef unsigned long long uint64_t;
#else
#include <cstdint>
#include <cuda_runtime.h>
#endif
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#else  // beside NVRTC the host passes 16-bit floats by address and by value alone: their storage
struct __half { unsigned short bits; };
struct __nv_bfloat16 { unsigned short bits; };
#endif

// A TMA descriptor (CUtensorMap's 128 bytes), passed to a kernel by value
struct alignas(128) tl_tensor_map { unsigned long long opaque[16]; };

// Run-time index checks report to a status in device memory that the launcher passes each
// kernel with checks: the first failed check's number (in taskloom_checks, from 1), the value
// and the valid range [low, high].
typedef struct { long long check, value, low, high; } tl_status;

#if defined(__CUDACC__)  // device code
#define TL_DEVICE static __device__ __forceinline__
#define TL_MINMAX(T, S) \
  TL_DEVICE T tl_min_##S(T a, T b) { return a < b ? a : b; } \
  TL_DEVICE T tl_max_##S(T a, T b) { return a > b ? a : b; }
TL_MINMAX(int32_t, i32)
TL_MINMAX(int64_t, i64)
// float min and max propagate NaN, as the CPU target and numpy do (fminf would drop it)
#define TL_MINMAX_NAN(T, S) \
  TL_DEVICE T tl_min_##S(T a, T b) { return (a < b || a != a) ? a : b; } \
  TL_DEVICE T tl_max_##S(T a, T b) { return (a > b || a != a) ? a : b; }
TL_MINMAX_NAN(float, f32)
TL_MINMAX_NAN(double, f64)
TL_DEVICE __half tl_min_f16(__half a, __half b) { return __hmin_nan(a, b); }
TL_DEVICE __half tl_max_f16(__half a, __half b) { return __hmax_nan(a, b); }
// 2^x by the hardware's approximation (2 ulp; results below 2^-126 flush to 0): one MUFU.EX2
TL_DEVICE float tl_exp2_f32(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
TL_DEVICE int32_t tl_abs_i32(int32_t a) { return a < 0 ? -a : a; }
TL_DEVICE int64_t tl_abs_i64(int64_t a) { return a < 0 ? -a : a; }
TL_DEVICE float tl_sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
TL_DEVICE double tl_sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
// The thread whose compare-and-swap claims the status fills it in; a bad index reads
// position 0, so no load leaves its tensor.
static __device__ __noinline__ void tl_check_failed(tl_status* st, long long check, long long value,
                                                    long long low, long long high) {
  if (atomicCAS((unsigned long long*)&st->check, 0ull, ~0ull) == 0ull) {
    st->value = value; st->low = low; st->high = high;
    __threadfence();
    atomicExch((unsigned long long*)&st->check, (unsigned long long)check);
  }
}
TL_DEVICE int64_t tl_index(int64_t i, int64_t n, tl_status* st, long long check) {
  if ((uint64_t)i >= (uint64_t)n) { tl_check_failed(st, check, i, 0, n - 1); return 0; }
  return i;
}
TL_DEVICE int64_t tl_index_wrap(int64_t i, int64_t n, tl_status* st, long long check) {
  int64_t w = i < 0 ? i + n : i;
  if ((uint64_t)w >= (uint64_t)n) { tl_check_failed(st, check, i, -n, n - 1); return 0; }
  return w;
}
TL_DEVICE float tl_bf16_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
TL_DEVICE __nv_bfloat16 tl_f32_to_bf16(float x) { return __float2bfloat16(x); }

// reductions over the 32 lanes of a warp, by butterfly shuffles: every lane gets the result
template <typename T> TL_DEVICE T tl_warp_sum(T v) {
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
template <typename T> TL_DEVICE T tl_warp_max(T v) {
  for (int m = 16; m > 0; m >>= 1) { T o = __shfl_xor_sync(0xffffffffu, v, m); v = o > v ? o : v; }
  return v;
}

// N bytes from src to dst as one access (one LDG.128 / STG.128 for 16); both aligned to N
template <int N> TL_DEVICE void tl_copy(void* dst, const void* src) {
  if (N == 16) *(uint4*)dst = *(const uint4*)src;
  else if (N == 8) *(uint2*)dst = *(const uint2*)src;
  else *(unsigned*)dst = *(const unsigned*)src;
}

// cp.async of N bytes from global to shared; bytes past src_bytes are filled with zeros
template <int N> TL_DEVICE void tl_cp_async(void* dst, const void* src, int src_bytes) {
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  if (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(src), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(s), "l"(src), "n"(N), "r"(src_bytes));
  }
}
TL_DEVICE void tl_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> TL_DEVICE void tl_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// ldmatrix: the warp loads 1, 2 or 4 8x8 matrices of 16-bit elements from shared memory
template <int NUM, bool TRANS> TL_DEVICE void tl_ldmatrix(void* dst, const void* src) {
  uint32_t* r = (uint32_t*)dst;
  unsigned s = (unsigned)__cvta_generic_to_shared(src);
  if (NUM == 4 && !TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
  else if (NUM == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
  else if (NUM == 2 && !TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
  else if (NUM == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
  else if (!TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(s));
}

// mma.sync m16n8k16 with fp32 accumulation: D = A B + C on the warp's fragments
#define TL_MMA_M16N8K16(NAME, T, PTX_T) \
  TL_DEVICE void NAME(float* d, const T* a, const T* b, const float* c) { \
    const uint32_t* A = (const uint32_t*)a; const uint32_t* B = (const uint32_t*)b; \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX_T "." PTX_T ".f32 " \
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n" \
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]) \
                 : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]), \
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3])); \
  }
TL_MMA_M16N8K16(tl_mma_m16n8k16_f16, __half, "f16")
TL_MMA_M16N8K16(tl_mma_m16n8k16_bf16, __nv_bfloat16, "bf16")
// float32 rounded to nearest tf32 (ties away from zero), as cuBLAS feeds the tensor cores
TL_DEVICE float tl_tf32_round(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}
// mma.sync m16n8k8 on tf32: float32 registers, of which the tensor cores read 10 bits of mantissa
TL_DEVICE void tl_mma_m16n8k8_tf32(float* d, const float* a, const float* b, const float* c) {
  const uint32_t* A = (const uint32_t*)a; const uint32_t* B = (const uint32_t*)b;
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]),
                 "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// Hopper (sm_90a): the descriptor of a wgmma operand in 128-byte-swizzled shared memory (its
// start, and the leading and stride byte offsets, in 16-byte units), and the fences of wgmma
TL_DEVICE uint64_t tl_gmma_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  uint64_t start = ((uint32_t)__cvta_generic_to_shared(smem) & 0x3FFFF) >> 4;
  return start | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 | (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | 1ull << 62;
}
// the compiler may not move the accumulators' reads and writes across a wgmma fence or wait
template <int N> TL_DEVICE void tl_fence_operands(float* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// mbarriers (one 64-bit word of shared memory) and TMA copies of a box into shared memory
TL_DEVICE unsigned tl_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
TL_DEVICE void tl_mbarrier_init(void* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(tl_smem(bar)), "r"(count) : "memory");
}
TL_DEVICE void tl_fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
TL_DEVICE void tl_mbarrier_expect_tx(void* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(tl_smem(bar)), "r"(bytes) : "memory");
}
TL_DEVICE void tl_mbarrier_arrive(void* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(tl_smem(bar)) : "memory");
}
// until the phase of parity `phase` has completed
TL_DEVICE void tl_mbarrier_wait(void* bar, unsigned phase) {
  asm volatile("{\n.reg .pred done;\nTL_WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra TL_WAIT;\n}\n" :: "r"(tl_smem(bar)), "r"(phase) : "memory");
}
TL_DEVICE void tl_tma_load_2d(void* dst, const tl_tensor_map* map, int c0, int c1, void* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               :: "r"(tl_smem(dst)), "l"(map), "r"(c0), "r"(c1), "r"(tl_smem(bar)) : "memory");
}
TL_DEVICE void tl_tma_load_3d(void* dst, const tl_tensor_map* map, int c0, int c1, int c2, void* bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
               :: "r"(tl_smem(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(tl_smem(bar)) : "memory");
}
#endif  // device code

#if !defined(__CUDACC_RTC__)  // host code
// A tensor map of 16-bit elements (CUtensorMapDataType 6 float16, 9 bfloat16) swizzled by 128
// bytes, its outside read as zeros; the driver's encoder is found once through the runtime,
// so that no launcher links the driver. The CUDA error, or 0.
typedef int (*tl_encode_fn)(tl_tensor_map*, int, unsigned, void*, const unsigned long long*,
                            const unsigned long long*, const unsigned*, const unsigned*, int, int, int, int);
static int tl_encode_tensor_map(tl_tensor_map* map, int dtype, unsigned rank, void* ptr,
                                const unsigned long long* dims, const unsigned long long* strides, const unsigned* box) {
  static tl_encode_fn encode = nullptr;
  if (encode == nullptr) {
    cudaDriverEntryPointQueryResult found;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&encode, 12000,
                                                     cudaEnableDefault, &found);
    if (e != cudaSuccess) return (int)e;
    if (found != cudaDriverEntryPointSuccess || encode == nullptr) return (int)cudaErrorNotSupported;
  }
  const unsigned ones[5] = {1, 1, 1, 1, 1};
  // interleave none (0), swizzle 128 bytes (3), L2 promotion of 128 bytes (2), zeros outside (0)
  int r = encode(map, dtype, rank, ptr, dims, strides, box, ones, 0, 3, 2, 0);
  return r == 0 ? 0 : (int)cudaErrorInvalidValue;  // the driver refused the map's shape
}
#define TL_DEVICES 64  // the GPUs a launcher remembers its kernel's shared-memory opt-in for
// The host side of a status: a zeroed one in device memory, and reading it back after the
// launches on a stream (zeroing it again when a check failed). Both return the CUDA error.
extern "C" int taskloom_status_new(void** status) {
  cudaError_t e = cudaMalloc(status, sizeof(tl_status));
  return (int)(e != cudaSuccess ? e : cudaMemset(*status, 0, sizeof(tl_status)));
}
extern "C" int taskloom_status_take(void* status, tl_status* host, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  cudaMemcpyAsync(host, status, sizeof(tl_status), cudaMemcpyDeviceToHost, s);
  cudaError_t e = cudaStreamSynchronize(s);
  if (e == cudaSuccess && host->check) e = cudaMemsetAsync(status, 0, sizeof(tl_status), s);
  return (int)e;
}
#endif

#if !defined(__CUDACC__)  // host code beside NVRTC: the kernels of the cubin TL_CUBIN names
#include <mutex>
extern "C" const unsigned char tl_cubin[];
__asm__(".section .rodata\n.balign 16\n.hidden tl_cubin\n.global tl_cubin\ntl_cubin:\n"
        ".incbin \"" TL_CUBIN "\"\n.previous\n");
// kernel `name` of the cubin, which the first call loads (the CUDA error, or 0)
static int tl_kernel(const char* name, cudaKernel_t* kernel) {
  static std::once_flag once;
  static cudaLibrary_t library;
  static cudaError_t loaded;
  std::call_once(once, [] { loaded = cudaLibraryLoadData(&library, tl_cubin, nullptr, nullptr, 0, nullptr, nullptr, 0); });
  return loaded != cudaSuccess ? (int)loaded : (int)cudaLibraryGetKernel(kernel, library, name);
}
#endif
"""


def wgmma_wrapper(n: int, ptx_type: str, ctype: str) -> str:
    """The device function that issues ``wgmma.mma_async`` m64n{n}k16 with float32 sums on
    ``ptx_type`` (``f16``, ``bf16``) operands: the accumulators ``d[0 .. n/2)`` are read and
    written in place; the template arguments say which operands are M/N-major."""
    regs = n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    lines = [f"template <int TA, int TB> TL_DEVICE void tl_wgmma_m64n{n}k16_{ptx_type}(float* d, uint64_t a, uint64_t b) {{",
             '  asm volatile("{\\n.reg .pred p;\\n"',
             f'               "setp.ne.b32 p, %{regs + 2}, 0;\\n"  // scale-d: add to the accumulators',
             f'               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type} "',
             '               "{' + ",".join(f"%{i}" for i in range(regs)) + '}, "',
             f'               "%{regs}, %{regs + 1}, p, 1, 1, %{regs + 3}, %{regs + 4};\\n}}\\n"',
             f"               : {outs}",
             '               : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB) : "memory");',
             f"}}  // {ctype} operands"]
    return "#if defined(__CUDACC__)\n" + "\n".join(lines) + "\n#endif"
