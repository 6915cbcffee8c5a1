/* Rows written into a KV cache (memra_kv_store_args_t): float rows
 * converted to the cache's type with the CPU reference's bits
 * (cuda/kv_types.cuh for F16/BF16; Q8_0 and Q4_0 below as lib/quant.c's
 * quant_q8_0 and quant_legacy). Shared by the kv_store kernels
 * (cuda/ops_kv.cu) and qk_norm_rope's fused stores (cuda/ops_norm.cu). */
#ifndef MEMRA_CUDA_KV_STORE_CUH
#define MEMRA_CUDA_KV_STORE_CUH

#include <math.h>

#include "cuda_common.cuh"
#include "kv_types.cuh"

#define KV_THREADS 256

/* Q8_0 of one 32-element block per warp, lane j element j: amax over the
 * warp (fmaxf from 0 skips NaN as the reference's strict compare does; a
 * max's value does not depend on the order), d = amax/127 in float (IEEE
 * division: no fast math in this build) stored as F16, q = roundf(x·(1/d))
 * with the float d, as ggml. */
static __device__ __forceinline__ void kv_q8_0_block(const float *x, char *b, int lane)
{
    const float v = x[lane];
    float amax = fabsf(v);
    amax = fmaxf(0.0f, amax);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (lane == 0)
        *(unsigned short *)b = kv_to_f16(d);
    b[2 + lane] = (char)(signed char)roundf(v * id);
}

/* Q4_0 of one 32-element block per warp, lane j element j, as
 * quant_legacy(4 bits, no min): the signed element of the largest |x|,
 * the first in index order on ties (the reference's strict compare from
 * 0, which also skips NaN and zeros: none found leaves +0), d = max/-8,
 * q = (int8)(x·(1/d) + 8.5) capped at 15 (no contraction into an FMA:
 * the reference rounds the product), byte j = q_j | q_{j+16} << 4. */
static __device__ __forceinline__ void kv_q4_0_block(const float *x, char *b, int lane)
{
    const float v = x[lane];
    float ab = fabsf(v) > 0.0f ? fabsf(v) : -1.0f;
    int at = lane;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, ab, o);
        const int oat = __shfl_xor_sync(0xffffffffu, at, o);
        if (ob > ab || (ob == ab && oat < at)) {
            ab = ob;
            at = oat;
        }
    }
    const float vmax = __shfl_sync(0xffffffffu, v, at);
    const float max = ab > 0.0f ? vmax : 0.0f;
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q = (int)(signed char)__float2int_rz(__fadd_rn(__fmul_rn(v, id), 8.5f));
    q = q < 15 ? q : 15;
    const int q_hi = __shfl_down_sync(0xffffffffu, q, 16);
    if (lane == 0)
        *(unsigned short *)b = kv_to_f16(d);
    if (lane < 16)
        b[2 + lane] = (char)((q & 0xF) | ((q_hi & 0xF) << 4));
}

/* Columns [C0, C0 + N) of row R of A converted by a block of KV_THREADS
 * (C0 and N multiples of 32 for the block types): each element, or each
 * 32-element block, converted on its own, so the one-item and the batched
 * kernel (and qk_norm_rope's stores, a head's span each) give a row the
 * same bits whichever launch holds it. */
static __device__ __forceinline__ void kv_store_span(const memra_kv_store_args_t &a, int code, int64_t r, int64_t c0,
                                                     int64_t n)
{
    const float *x = a.src + r * a.src_stride;
    /* a replay's rows go where its step's position says (memra_kv_store_args_t) */
    const int64_t at = a.pos_dev ? r + ((int64_t)*a.pos_dev - a.pos) : r;
    char *y = (char *)a.dst + at * (int64_t)a.dst_row_bytes;
    if (code == KV_Q8_0 || code == KV_Q4_0) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        for (int64_t blk = c0 / 32 + warp; blk < (c0 + n) / 32; blk += KV_THREADS / 32) {
            if (code == KV_Q8_0)
                kv_q8_0_block(x + blk * 32, y + blk * 34, lane);
            else
                kv_q4_0_block(x + blk * 32, y + blk * 18, lane);
        }
        return;
    }
    for (int64_t i = c0 + threadIdx.x; i < c0 + n; i += KV_THREADS) {
        if (code == KV_F16)
            ((unsigned short *)y)[i] = kv_to_f16(x[i]);
        else if (code == KV_BF16)
            ((unsigned short *)y)[i] = kv_to_bf16(x[i]);
        else
            ((float *)y)[i] = x[i];
    }
}

static __device__ __forceinline__ void kv_store_row(const memra_kv_store_args_t &a, int code, int64_t r)
{
    kv_store_span(a, code, r, 0, a.cols);
}

/* Why the kernels cannot store A's rows (NULL: they can): the one-item
 * op's checks beyond memra__check_kv_store. */
static inline const char *kv_misaligned(const memra_kv_store_args_t *a)
{
    const int code = kv_code(a->type);
    const bool blocks = code == KV_Q8_0 || code == KV_Q4_0;
    if (!blocks && (uintptr_t)a->dst % (code == KV_F32 ? 4 : 2) != 0)
        return "dst is not aligned to its elements";
    if (blocks && ((uintptr_t)a->dst % 2 || a->dst_row_bytes % 2))
        return "q8_0 and q4_0 rows must start at even addresses";
    return NULL;
}

#endif
