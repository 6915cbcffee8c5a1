/* KV cache element types on the device: loads that convert a cache row's
 * elements to float (exact: every F16, BF16, Q8_0 and Q4_0 element is a float;
 * the values of lib/quant.c's dequantize_row), and the stores of
 * cuda/ops_kv.cu that round floats into them with the bits of
 * lib/fp16.c and lib/quant.c (the CPU reference). */
#ifndef MEMRA_CUDA_KV_TYPES_CUH
#define MEMRA_CUDA_KV_TYPES_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "memra/gguf.h"

/* Template codes of the cache types (Q4_0: V rows only, lib/op_check.c). */
enum { KV_F32 = 0, KV_F16 = 1, KV_BF16 = 2, KV_Q8_0 = 3, KV_Q4_0 = 4 };

static inline int kv_code(memra_type_t t)
{
    return t == MEMRA_TYPE_F16    ? KV_F16
           : t == MEMRA_TYPE_BF16 ? KV_BF16
           : t == MEMRA_TYPE_Q8_0 ? KV_Q8_0
           : t == MEMRA_TYPE_Q4_0 ? KV_Q4_0
                                  : KV_F32;
}

/* Bytes of HD elements (one head: a Q8_0 head is whole blocks); host and
 * device (the tensor-core attention finds a head slice with it). */
static __host__ __device__ __forceinline__ size_t kv_head_bytes(int code, int64_t hd)
{
    switch (code) {
    case KV_F16:
    case KV_BF16: return (size_t)hd * 2;
    case KV_Q8_0: return (size_t)hd / 32 * 34;
    case KV_Q4_0: return (size_t)hd / 32 * 18;
    default: return (size_t)hd * 4;
    }
}

/* Whether rows at BASE, ROW_BYTES apart, take kv_load4's vector loads
 * (head_dim % 4 == 0 checked by the caller): 16-byte float4 for F32,
 * 8-byte for F16/BF16, 2-byte halves for Q8_0's and Q4_0's blocks. */
static inline bool kv_vec_ok(int code, const void *base, size_t row_bytes)
{
    const size_t al = code == KV_F32 ? 16 : code == KV_Q8_0 || code == KV_Q4_0 ? 2 : 8;
    return (uintptr_t)base % al == 0 && row_bytes % al == 0;
}

static __device__ __forceinline__ float kv_bf16(unsigned short h)
{
    return __uint_as_float((unsigned)h << 16);
}

/* The four elements 4*C .. 4*C+3 of the head row at ROW. */
template <int T> static __device__ __forceinline__ float4 kv_load4(const char *row, int c)
{
    if (T == KV_F32)
        return __ldg((const float4 *)row + c);
    if (T == KV_F16 || T == KV_BF16) {
        const uint2 u = __ldg((const uint2 *)row + c);
        const unsigned short h[4] = {(unsigned short)(u.x & 0xFFFF), (unsigned short)(u.x >> 16),
                                     (unsigned short)(u.y & 0xFFFF), (unsigned short)(u.y >> 16)};
        if (T == KV_F16)
            return make_float4(__half2float(__ushort_as_half(h[0])), __half2float(__ushort_as_half(h[1])),
                               __half2float(__ushort_as_half(h[2])), __half2float(__ushort_as_half(h[3])));
        return make_float4(kv_bf16(h[0]), kv_bf16(h[1]), kv_bf16(h[2]), kv_bf16(h[3]));
    }
    if (T == KV_Q4_0) {
        /* block 4c/32 of 18 bytes (f16 d, 16 bytes: element j's nibble low
         * in byte j, element j+16's high); (q - 8)·d as lib/quant.c's
         * deq_q4_0. The four nibbles' bytes at an even offset: two 16-bit
         * loads */
        const int e = 4 * c, j = e & 31;
        const char *b = row + (e >> 5) * 18;
        const float d = __half2float(__ushort_as_half(__ldg((const unsigned short *)b)));
        const unsigned lo = __ldg((const unsigned short *)(b + 2 + (j & 15)));
        const unsigned hi = __ldg((const unsigned short *)(b + 4 + (j & 15)));
        const unsigned w = (lo | hi << 16) >> (j & 16 ? 4 : 0); /* nibble k of byte k in bits 8k..8k+3 */
        return make_float4((float)((int)(w & 0xF) - 8) * d, (float)((int)((w >> 8) & 0xF) - 8) * d,
                           (float)((int)((w >> 16) & 0xF) - 8) * d, (float)((int)((w >> 24) & 0xF) - 8) * d);
    }
    /* Q8_0: block 4c/32 of 34 bytes (f16 d, 32 int8), the four quants at
     * an even offset: two 16-bit loads */
    const int e = 4 * c;
    const char *b = row + (e >> 5) * 34;
    const float d = __half2float(__ushort_as_half(__ldg((const unsigned short *)b)));
    const unsigned short lo = __ldg((const unsigned short *)(b + 2 + (e & 31)));
    const unsigned short hi = __ldg((const unsigned short *)(b + 4 + (e & 31)));
    return make_float4((float)(int8_t)(lo & 0xFF) * d, (float)(int8_t)(lo >> 8) * d, (float)(int8_t)(hi & 0xFF) * d,
                       (float)(int8_t)(hi >> 8) * d);
}

/* Element E of the head row at ROW. */
template <int T> static __device__ __forceinline__ float kv_load1(const char *row, int e)
{
    if (T == KV_F32)
        return __ldg((const float *)row + e);
    if (T == KV_F16)
        return __half2float(__ushort_as_half(__ldg((const unsigned short *)row + e)));
    if (T == KV_BF16)
        return kv_bf16(__ldg((const unsigned short *)row + e));
    if (T == KV_Q4_0) {
        const char *b = row + (e >> 5) * 18;
        const float d = __half2float(__ushort_as_half(__ldg((const unsigned short *)b)));
        const unsigned q = (unsigned char)__ldg((const signed char *)b + 2 + (e & 15));
        return (float)((int)((e & 16 ? q >> 4 : q) & 0xF) - 8) * d;
    }
    const char *b = row + (e >> 5) * 34;
    const float d = __half2float(__ushort_as_half(__ldg((const unsigned short *)b)));
    return (float)(int8_t)__ldg((const signed char *)b + 2 + (e & 31)) * d;
}

/* lib/fp16.c's memra__f32_to_fp16, bit for bit (NaN payloads included). */
static __device__ __forceinline__ unsigned short kv_to_f16(float f)
{
    const uint32_t x = __float_as_uint(f);
    const uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u)
        return (unsigned short)(sign | 0x7E00 | ((ax >> 13) & 0x3FF));
    if (ax >= 0x477FF000u)
        return (unsigned short)(sign | 0x7C00);
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u)
            return (unsigned short)sign;
        const uint32_t e = ax >> 23, m = (ax & 0x7FFFFF) | 0x800000, shift = 126 - e;
        uint32_t half = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (unsigned short)(sign | half);
    }
    const uint32_t base = ax - 0x38000000u, rem = base & 0x1FFF;
    uint32_t half = base >> 13;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++;
    return (unsigned short)(sign | half);
}

/* lib/fp16.c's memra__f32_to_bf16. */
static __device__ __forceinline__ unsigned short kv_to_bf16(float f)
{
    const uint32_t x = __float_as_uint(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u)
        return (unsigned short)((x >> 16) | 64);
    return (unsigned short)((x + (0x7FFF + ((x >> 16) & 1))) >> 16);
}

#endif
