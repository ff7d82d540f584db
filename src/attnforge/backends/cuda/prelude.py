"""The device helpers every generated CUDA file starts with: thin inline-PTX wrappers for the
instructions the translation table names (mma.sync, ldmatrix, cp.async), so the kernel body
reads as the TL program it came from.

One file compiles for every target: ``AF_SM75`` selects the Turing path (m16n8k8 MMAs, plain
16-byte loads instead of cp.async) on sm_75, or anywhere when the build defines
``AF_TURING_PATH`` (how the Turing code is verified on an sm_80+ GPU).
"""

PRELUDE = r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math_constants.h>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 800 || defined(AF_TURING_PATH))
#define AF_SM75 1  // Turing path: mma.sync m16n8k8, no cp.async
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 750
#error "attnforge CUDA kernels need sm_75 or newer (ldmatrix, mma.sync)"
#endif
#if defined(AF_BF16) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "bf16 tensor-core MMAs need sm_80 or newer: generate an fp16 kernel for sm_75"
#endif

#ifdef AF_BF16
typedef __nv_bfloat16 af_elem;
#define AF_MMA_TYPE "bf16"
#else
typedef __half af_elem;
#define AF_MMA_TYPE "f16"
#endif

// Two floats rounded to the MMA operand format, packed as one 32-bit register (low half first).
__device__ __forceinline__ uint32_t af_pack(float lo, float hi) {
#ifdef AF_BF16
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
#else
    __half2 v = __floats2half2_rn(lo, hi);
#endif
    return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float af_round(float x) {  // x rounded to the operand format and back
#ifdef AF_BF16
    return __bfloat162float(__float2bfloat16_rn(x));
#else
    return __half2float(__float2half_rn(x));
#endif
}

// Two floats stored to global memory in the format of the destination.
__device__ __forceinline__ void af_store2(__half* p, float a, float b) { *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b); }
__device__ __forceinline__ void af_store2(__nv_bfloat16* p, float a, float b) { *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b); }
__device__ __forceinline__ void af_store2(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
// Two adjacent elements read from global memory as floats (a fragment pair; 2-element aligned).
__device__ __forceinline__ float2 af_load2(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 af_load2(const __half* p) { return __half22float2(*reinterpret_cast<const __half2*>(p)); }
__device__ __forceinline__ float2 af_load2(const __nv_bfloat16* p) { return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p)); }

// D += A(16x16, row) * B(16x8, col), fp32 accumulators: one m16n8k16 MMA (sm_80+), or two
// m16n8k8 MMAs on Turing (k 0..7 from a0/a1/b0, k 8..15 from a2/a3/b1: the same registers).
__device__ __forceinline__ void af_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef AF_SM75
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32." AF_MMA_TYPE "." AF_MMA_TYPE ".f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(b0));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32." AF_MMA_TYPE "." AF_MMA_TYPE ".f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[2]), "r"(a[3]), "r"(b1));
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." AF_MMA_TYPE "." AF_MMA_TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// ldmatrix: four 8x8 b16 matrices from shared memory; lane i gives the address of row i % 8 of matrix i / 8.
__device__ __forceinline__ void af_ldsm_x4(uint32_t (&r)[4], const void* smem) {
    uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void af_ldsm_x4_trans(uint32_t (&r)[4], const void* smem) {
    uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// 16 bytes global -> shared, zero-filled when !pred: cp.async (sm_80+) or a plain vector load.
__device__ __forceinline__ void af_copy16(void* smem, const void* gmem, bool pred) {
#ifndef AF_SM75
    uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(pred ? 16 : 0));
#else
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (pred) v = __ldg(reinterpret_cast<const uint4*>(gmem));
    *reinterpret_cast<uint4*>(smem) = v;
#endif
}
// The same for a piece the loop's bound keeps inside the view: no predicate on sm_80+; the Turing path keeps it (without
// it, nvcc keeps the loaded pieces live across the loop and spills: the D = 64 causal tile, 8 bytes on sm_75).
__device__ __forceinline__ void af_copy16_inside(void* smem, const void* gmem, bool pred) {
#ifndef AF_SM75
    af_copy16(smem, gmem, true);
#else
    af_copy16(smem, gmem, pred);
#endif
}
__device__ __forceinline__ void af_cp_commit() {
#ifndef AF_SM75
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void af_cp_wait() {  // at most N groups still in flight
#ifndef AF_SM75
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

// The four lanes of a quad hold one fragment row between them.
__device__ __forceinline__ float af_quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float af_quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float af_exp2(float x) {  // 2^x in one MUFU.EX2 (exp2f adds a denormal rescue per call; weights under 2^-126 are 0 here)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float af_exp(float x) { return af_exp2(x * 1.4426950408889634f); }

// TL's integer // and % round toward minus infinity (Python); C++'s toward zero.
__device__ __forceinline__ long long af_floordiv(long long a, long long b) { long long q = a / b, r = a - q * b; return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q; }
__device__ __forceinline__ long long af_floormod(long long a, long long b) { return a - af_floordiv(a, b) * b; }
template <class A, class B> __device__ __forceinline__ auto af_min(A a, B b) -> decltype(a + b) { return a < b ? a : b; }
template <class A, class B> __device__ __forceinline__ auto af_max(A a, B b) -> decltype(a + b) { return a < b ? b : a; }
template <class A> __device__ __forceinline__ A af_abs(A a) { return a < 0 ? -a : a; }
__device__ __forceinline__ float af_tanh(float x) { return 1.0f - 2.0f / (expf(2.0f * x) + 1.0f); }
__device__ __forceinline__ float af_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
'''
