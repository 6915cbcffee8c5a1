/* Device decoders of the ggml block formats, bit-identical to lib/quant.c:
 * every product and sum is rounded where the C reference rounds it
 * (__fmul_rn etc. keep nvcc from fusing them into FMAs).
 *
 * The unit of work is a "sub-block" of 32 consecutive elements: a whole
 * block of the 32-element formats, one eighth of a K-quant/IQ4_XS
 * super-block, and for the float types a pseudo-block of 32 elements. */
#ifndef MEMRA_CUDA_QUANT_CUH
#define MEMRA_CUDA_QUANT_CUH

#include <cuda_fp16.h>
#include <stdint.h>

extern "C" {
#include "memra/gguf.h"
}

template <int T> struct mq_traits;
#define MQ_TRAITS(T, QK, BYTES)                                                                    \
    template <> struct mq_traits<T> {                                                              \
        static constexpr int qk = QK;       /* elements per block */                              \
        static constexpr int bytes = BYTES; /* bytes per block */                                  \
        static constexpr int subs = QK / 32;                                                       \
    }
MQ_TRAITS(MEMRA_TYPE_F32, 32, 128);
MQ_TRAITS(MEMRA_TYPE_F16, 32, 64);
MQ_TRAITS(MEMRA_TYPE_BF16, 32, 64);
MQ_TRAITS(MEMRA_TYPE_Q4_0, 32, 18);
MQ_TRAITS(MEMRA_TYPE_Q4_1, 32, 20);
MQ_TRAITS(MEMRA_TYPE_Q5_0, 32, 22);
MQ_TRAITS(MEMRA_TYPE_Q5_1, 32, 24);
MQ_TRAITS(MEMRA_TYPE_Q8_0, 32, 34);
MQ_TRAITS(MEMRA_TYPE_MXFP4, 32, 17);
MQ_TRAITS(MEMRA_TYPE_IQ4_NL, 32, 18);
MQ_TRAITS(MEMRA_TYPE_Q2_K, 256, 84);
MQ_TRAITS(MEMRA_TYPE_Q3_K, 256, 110);
MQ_TRAITS(MEMRA_TYPE_Q4_K, 256, 144);
MQ_TRAITS(MEMRA_TYPE_Q5_K, 256, 176);
MQ_TRAITS(MEMRA_TYPE_Q6_K, 256, 210);
MQ_TRAITS(MEMRA_TYPE_IQ4_XS, 256, 136);
#undef MQ_TRAITS

/* Calls MACRO(T) for the type T of a runtime value (all computable types). */
#define MQ_DISPATCH(type, MACRO)                                                                   \
    switch (type) {                                                                                \
    case MEMRA_TYPE_F32: MACRO(MEMRA_TYPE_F32); break;                                             \
    case MEMRA_TYPE_F16: MACRO(MEMRA_TYPE_F16); break;                                             \
    case MEMRA_TYPE_BF16: MACRO(MEMRA_TYPE_BF16); break;                                           \
    case MEMRA_TYPE_Q4_0: MACRO(MEMRA_TYPE_Q4_0); break;                                           \
    case MEMRA_TYPE_Q4_1: MACRO(MEMRA_TYPE_Q4_1); break;                                           \
    case MEMRA_TYPE_Q5_0: MACRO(MEMRA_TYPE_Q5_0); break;                                           \
    case MEMRA_TYPE_Q5_1: MACRO(MEMRA_TYPE_Q5_1); break;                                           \
    case MEMRA_TYPE_Q8_0: MACRO(MEMRA_TYPE_Q8_0); break;                                           \
    case MEMRA_TYPE_MXFP4: MACRO(MEMRA_TYPE_MXFP4); break;                                         \
    case MEMRA_TYPE_IQ4_NL: MACRO(MEMRA_TYPE_IQ4_NL); break;                                       \
    case MEMRA_TYPE_Q2_K: MACRO(MEMRA_TYPE_Q2_K); break;                                           \
    case MEMRA_TYPE_Q3_K: MACRO(MEMRA_TYPE_Q3_K); break;                                           \
    case MEMRA_TYPE_Q4_K: MACRO(MEMRA_TYPE_Q4_K); break;                                           \
    case MEMRA_TYPE_Q5_K: MACRO(MEMRA_TYPE_Q5_K); break;                                           \
    case MEMRA_TYPE_Q6_K: MACRO(MEMRA_TYPE_Q6_K); break;                                           \
    case MEMRA_TYPE_IQ4_XS: MACRO(MEMRA_TYPE_IQ4_XS); break;                                       \
    default: break;                                                                                \
    }

static __device__ __constant__ int8_t mq_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                      1,    13,   25,  38,  53,  69,  89,  113};
static __device__ __constant__ int8_t mq_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static __device__ __forceinline__ uint32_t mq_rd16(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
}

static __device__ __forceinline__ uint32_t mq_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static __device__ __forceinline__ float mq_fp16(const uint8_t *p)
{
    return __half2float(__ushort_as_half((unsigned short)mq_rd16(p)));
}

static __device__ __forceinline__ float mq_bf16(uint32_t h)
{
    return __uint_as_float(h << 16);
}

static __device__ __forceinline__ float mq_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return __uint_as_float(bits);
}

static __device__ __forceinline__ void mq_scale_min_k4(int j, const uint8_t *s, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Two Q8_0 quants (the low and high byte of Q2) times the block's scale D:
 * the values of mq_deq32<MEMRA_TYPE_Q8_0>, for loaders that read the quants
 * as halfwords. */
static __device__ __forceinline__ float2 mq_q8_pair(uint32_t q2, float d)
{
    return make_float2(__fmul_rn((float)(int8_t)(q2 & 0xFF), d), __fmul_rn((float)(int8_t)(q2 >> 8), d));
}

/* Decodes sub-block SUB (0 .. subs-1) of the block at B into Y[32]. */
template <int T> __device__ __forceinline__ void mq_deq32(const uint8_t *b, int sub, float *y);

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_F32>(const uint8_t *b, int, float *y)
{
#pragma unroll
    for (int i = 0; i < 32; i++)
        y[i] = __uint_as_float(mq_rd32(b + 4 * i));
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_F16>(const uint8_t *b, int, float *y)
{
#pragma unroll
    for (int i = 0; i < 32; i++)
        y[i] = mq_fp16(b + 2 * i);
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_BF16>(const uint8_t *b, int, float *y)
{
#pragma unroll
    for (int i = 0; i < 32; i++)
        y[i] = mq_bf16(mq_rd16(b + 2 * i));
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_Q4_0>(const uint8_t *b, int, float *y)
{
    const float d = mq_fp16(b);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const uint8_t q = b[2 + j];
        y[j] = __fmul_rn((float)((q & 0xF) - 8), d);
        y[j + 16] = __fmul_rn((float)((q >> 4) - 8), d);
    }
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_Q4_1>(const uint8_t *b, int, float *y)
{
    const float d = mq_fp16(b), m = mq_fp16(b + 2);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const uint8_t q = b[4 + j];
        y[j] = __fadd_rn(__fmul_rn((float)(q & 0xF), d), m);
        y[j + 16] = __fadd_rn(__fmul_rn((float)(q >> 4), d), m);
    }
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_Q5_0>(const uint8_t *b, int, float *y)
{
    const float d = mq_fp16(b);
    const uint32_t qh = mq_rd32(b + 2);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const uint8_t q = b[6 + j];
        const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = __fmul_rn((float)(((q & 0xF) | h0) - 16), d);
        y[j + 16] = __fmul_rn((float)(((q >> 4) | h1) - 16), d);
    }
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_Q5_1>(const uint8_t *b, int, float *y)
{
    const float d = mq_fp16(b), m = mq_fp16(b + 2);
    const uint32_t qh = mq_rd32(b + 4);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const uint8_t q = b[8 + j];
        const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = __fadd_rn(__fmul_rn((float)((q & 0xF) | h0), d), m);
        y[j + 16] = __fadd_rn(__fmul_rn((float)((q >> 4) | h1), d), m);
    }
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_Q8_0>(const uint8_t *b, int, float *y)
{
    const float d = mq_fp16(b);
#pragma unroll
    for (int j = 0; j < 32; j++)
        y[j] = __fmul_rn((float)(int8_t)b[2 + j], d);
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_MXFP4>(const uint8_t *b, int, float *y)
{
    const float d = mq_e8m0_half(b[0]);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const uint8_t q = b[1 + j];
        y[j] = __fmul_rn((float)mq_mxfp4[q & 0xF], d);
        y[j + 16] = __fmul_rn((float)mq_mxfp4[q >> 4], d);
    }
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_IQ4_NL>(const uint8_t *b, int, float *y)
{
    const float d = mq_fp16(b);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const uint8_t q = b[2 + j];
        y[j] = __fmul_rn(d, (float)mq_iq4nl[q & 0xF]);
        y[j + 16] = __fmul_rn(d, (float)mq_iq4nl[q >> 4]);
    }
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_Q2_K>(const uint8_t *b, int s, float *y)
{
    const float d = mq_fp16(b + 80), dmin = mq_fp16(b + 82);
    const uint8_t *q = b + 16 + 32 * (s >> 2);
    const int shift = 2 * (s & 3);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const uint8_t sc = b[2 * s + half];
        const float dl = __fmul_rn(d, (float)(sc & 0xF)), ml = __fmul_rn(dmin, (float)(sc >> 4));
#pragma unroll
        for (int l = 0; l < 16; l++)
            y[16 * half + l] = __fsub_rn(__fmul_rn(dl, (float)((q[16 * half + l] >> shift) & 3)), ml);
    }
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_Q3_K>(const uint8_t *b, int s, float *y)
{
    const uint8_t *hm = b, *q = b + 32 + 32 * (s >> 2), *sb = b + 96;
    const float d_all = mq_fp16(b + 108);
    const int shift = 2 * (s & 3);
    const unsigned m = 1u << s;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int k = 2 * s + half;
        const int lo = k < 8 ? (sb[k] & 0xF) : (sb[k - 8] >> 4);
        const int hi = (sb[8 + k % 4] >> (2 * (k / 4))) & 3;
        const float dl = __fmul_rn(d_all, (float)((lo | (hi << 4)) - 32));
#pragma unroll
        for (int l = 0; l < 16; l++) {
            const int v = ((q[16 * half + l] >> shift) & 3) - ((hm[16 * half + l] & m) ? 0 : 4);
            y[16 * half + l] = __fmul_rn(dl, (float)v);
        }
    }
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_Q4_K>(const uint8_t *b, int s, float *y)
{
    const float d = mq_fp16(b), dmin = mq_fp16(b + 2);
    int sc, m;
    mq_scale_min_k4(s, b + 4, &sc, &m);
    const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)m);
    const uint8_t *q = b + 16 + 32 * (s >> 1);
    const int sh = (s & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; l++)
        y[l] = __fsub_rn(__fmul_rn(d1, (float)((q[l] >> sh) & 0xF)), m1);
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_Q5_K>(const uint8_t *b, int s, float *y)
{
    const float d = mq_fp16(b), dmin = mq_fp16(b + 2);
    int sc, m;
    mq_scale_min_k4(s, b + 4, &sc, &m);
    const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)m);
    const uint8_t *qh = b + 16, *ql = b + 48 + 32 * (s >> 1);
    const int sh = (s & 1) * 4;
    const unsigned u = 1u << s;
#pragma unroll
    for (int l = 0; l < 32; l++)
        y[l] = __fsub_rn(__fmul_rn(d1, (float)(((ql[l] >> sh) & 0xF) + ((qh[l] & u) ? 16 : 0))), m1);
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_Q6_K>(const uint8_t *b, int s, float *y)
{
    const int h = s >> 2, j = s & 3;
    const uint8_t *ql = b + 64 * h + 32 * (j & 1), *qh = b + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * h + 2 * j;
    const float d = mq_fp16(b + 208);
    const int nsh = j >= 2 ? 4 : 0, hsh = 2 * j;
    const float d0 = __fmul_rn(d, (float)sc[0]), d1 = __fmul_rn(d, (float)sc[1]);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const int q = (((ql[l] >> nsh) & 0xF) | (((qh[l] >> hsh) & 3) << 4)) - 32;
        y[l] = __fmul_rn(l < 16 ? d0 : d1, (float)q);
    }
}

template <> __device__ __forceinline__ void mq_deq32<MEMRA_TYPE_IQ4_XS>(const uint8_t *b, int s, float *y)
{
    const float d = mq_fp16(b);
    const uint32_t sh = mq_rd16(b + 2);
    const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) | (((sh >> (2 * s)) & 3) << 4);
    const float dl = __fmul_rn(d, (float)(ls - 32));
    const uint8_t *qs = b + 8 + 16 * s;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        y[j] = __fmul_rn(dl, (float)mq_iq4nl[qs[j] & 0xF]);
        y[j + 16] = __fmul_rn(dl, (float)mq_iq4nl[qs[j] >> 4]);
    }
}

/* ---- fused dot products for the matvec kernels ----------------------------
 * mq_dot32<T>(b, sub, x, tab) = sum of the 32 decoded elements times x[0..32),
 * with the block scales factored out of the sum (one multiply per scale
 * instead of one per element) and small integers turned into floats with
 * the 2^23 trick (LOP + FADD, no I2F). Rounding differs from decoding
 * first, well inside the matmul bound. TAB: the IQ4_NL codebook (16 floats)
 * then the doubled MXFP4 values (16 floats), in shared memory. */

/* exact float of an integer 0 <= v < 2^23 */
static __device__ __forceinline__ float mq_u2f(uint32_t v)
{
    return __int_as_float(0x4B000000 | v) - 8388608.0f;
}

/* 32 floats from a 16-byte aligned P (shared or global memory). */
static __device__ __forceinline__ void mq_load32_aligned(const float *p, float *v)
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float4 f = ((const float4 *)p)[i];
        v[4 * i] = f.x;
        v[4 * i + 1] = f.y;
        v[4 * i + 2] = f.z;
        v[4 * i + 3] = f.w;
    }
}

/* P may be shared or global memory (plain loads, not __ldg). */
static __device__ __forceinline__ void mq_load32(const float *p, float *v)
{
    if (((uintptr_t)p & 15) == 0) {
        mq_load32_aligned(p, v);
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++)
            v[i] = p[i];
    }
}

template <int T>
__device__ __forceinline__ float mq_dot32(const uint8_t *b, int sub, const float *xp, const float *tab)
{
    float v[32], x[32];
    mq_deq32<T>(b, sub, v);
    mq_load32(xp, x);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++)
        s = fmaf(v[i], x[i], s);
    return s;
}

/* The 32 quants of the Q8_0 block at B (shared memory, 2-byte aligned:
 * blocks are 34 bytes) as eight words of u = q + 128 (xor 0x80): nine
 * aligned 32-bit loads funnel-shifted into place instead of 32 byte loads. */
static __device__ __forceinline__ void mq_q8_words(const uint8_t *b, uint32_t *u)
{
    const uint8_t *q = b + 2;
    const uint32_t *w = (const uint32_t *)((uintptr_t)q & ~(uintptr_t)3);
    const uint32_t sh = 8 * (uint32_t)((uintptr_t)q & 3);
    uint32_t wv[9];
#pragma unroll
    for (int i = 0; i < 9; i++)
        wv[i] = w[i];
#pragma unroll
    for (int i = 0; i < 8; i++)
        u[i] = __funnelshift_r(wv[i], wv[i + 1], sh) ^ 0x80808080u;
}

/* The 32 quants in U (u = q + 128) against X in four interleaved sums (a
 * single 32-long FMA chain left the matvec waiting on its own latency).
 * SUB false: byte k becomes 0x4B0000xx = 2^23 + u by byte permutation, less
 * 2^23 + 128: q exactly, so the sum is of q·x. SUB true: byte k becomes
 * 0x000000xx = u·2^-149, a subnormal, and the sum is of u·2^-149·x. */
template <bool SUB> static __device__ __forceinline__ float mq_q8_sum(const uint32_t *u, const float *x)
{
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            s[k] = SUB ? fmaf(__int_as_float(__byte_perm(u[i], 0u, 0x4440 + k)), x[4 * i + k], s[k])
                       : fmaf(__int_as_float(__byte_perm(u[i], 0x4B000000u, 0x7540 + k)) - 8388736.0f, x[4 * i + k],
                              s[k]);
    return (s[0] + s[1]) + (s[2] + s[3]);
}

template <>
__device__ __forceinline__ float mq_dot32<MEMRA_TYPE_Q8_0>(const uint8_t *b, int, const float *xp, const float *)
{
    float x[32];
    uint32_t u[8];
    mq_load32(xp, x);
    mq_q8_words(b, u);
    return mq_q8_sum<false>(u, x) * mq_fp16(b);
}

/* The Q8_0 block at B against x * 2^64 (XP, shared memory, 16-byte
 * aligned) whose block sum times 2^-78 is SX: see mmv.cuh's MMV_Q8X notes. */
__device__ __forceinline__ float mq_dot32_q8x(const uint8_t *b, const float *xp, float sx)
{
    float x[32];
    uint32_t u[8];
    mq_load32_aligned(xp, x);
    mq_q8_words(b, u);
    return (mq_q8_sum<true>(u, x) - sx) * (mq_fp16(b) * 0x1p85f);
}

template <>
__device__ __forceinline__ float mq_dot32<MEMRA_TYPE_Q4_0>(const uint8_t *b, int, const float *xp, const float *)
{
    float x[32];
    mq_load32(xp, x);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const uint32_t q = b[2 + j];
        s = fmaf(__int_as_float(0x4B000000 | (q & 0xF)) - 8388616.0f, x[j], s);
        s = fmaf(__int_as_float(0x4B000000 | (q >> 4)) - 8388616.0f, x[j + 16], s);
    }
    return s * mq_fp16(b);
}

template <>
__device__ __forceinline__ float mq_dot32<MEMRA_TYPE_Q4_K>(const uint8_t *b, int s, const float *xp, const float *)
{
    float x[32];
    mq_load32(xp, x);
    int sc, m;
    mq_scale_min_k4(s, b + 4, &sc, &m);
    const uint8_t *q = b + 16 + 32 * (s >> 1);
    const int sh = (s & 1) * 4;
    float sq = 0.0f, sx = 0.0f;
#pragma unroll
    for (int l = 0; l < 32; l++) {
        sq = fmaf(mq_u2f((q[l] >> sh) & 0xF), x[l], sq);
        sx += x[l];
    }
    return mq_fp16(b) * (float)sc * sq - mq_fp16(b + 2) * (float)m * sx;
}

template <>
__device__ __forceinline__ float mq_dot32<MEMRA_TYPE_Q5_K>(const uint8_t *b, int s, const float *xp, const float *)
{
    float x[32];
    mq_load32(xp, x);
    int sc, m;
    mq_scale_min_k4(s, b + 4, &sc, &m);
    const uint8_t *qh = b + 16, *ql = b + 48 + 32 * (s >> 1);
    const int sh = (s & 1) * 4;
    float sq = 0.0f, sx = 0.0f;
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const uint32_t q = ((ql[l] >> sh) & 0xF) | (((qh[l] >> s) & 1) << 4);
        sq = fmaf(mq_u2f(q), x[l], sq);
        sx += x[l];
    }
    return mq_fp16(b) * (float)sc * sq - mq_fp16(b + 2) * (float)m * sx;
}

template <>
__device__ __forceinline__ float mq_dot32<MEMRA_TYPE_Q6_K>(const uint8_t *b, int s, const float *xp, const float *)
{
    float x[32];
    mq_load32(xp, x);
    const int h = s >> 2, j = s & 3;
    const uint8_t *ql = b + 64 * h + 32 * (j & 1), *qh = b + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * h + 2 * j;
    const int nsh = j >= 2 ? 4 : 0, hsh = 2 * j;
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int l = 0; l < 32; l++) {
        const uint32_t q = ((ql[l] >> nsh) & 0xF) | (((qh[l] >> hsh) & 3) << 4);
        const float f = __int_as_float(0x4B000000 | q) - 8388640.0f; /* q - 32 */
        if (l < 16)
            s0 = fmaf(f, x[l], s0);
        else
            s1 = fmaf(f, x[l], s1);
    }
    return mq_fp16(b + 208) * ((float)sc[0] * s0 + (float)sc[1] * s1);
}

template <>
__device__ __forceinline__ float mq_dot32<MEMRA_TYPE_IQ4_XS>(const uint8_t *b, int s, const float *xp, const float *tab)
{
    float x[32];
    mq_load32(xp, x);
    const uint32_t sh = mq_rd16(b + 2);
    const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) | (((sh >> (2 * s)) & 3) << 4);
    const uint8_t *qs = b + 8 + 16 * s;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        acc = fmaf(tab[qs[j] & 0xF], x[j], acc);
        acc = fmaf(tab[qs[j] >> 4], x[j + 16], acc);
    }
    return mq_fp16(b) * (float)(ls - 32) * acc;
}

template <>
__device__ __forceinline__ float mq_dot32<MEMRA_TYPE_IQ4_NL>(const uint8_t *b, int, const float *xp, const float *tab)
{
    float x[32];
    mq_load32(xp, x);
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        acc = fmaf(tab[b[2 + j] & 0xF], x[j], acc);
        acc = fmaf(tab[b[2 + j] >> 4], x[j + 16], acc);
    }
    return mq_fp16(b) * acc;
}

template <>
__device__ __forceinline__ float mq_dot32<MEMRA_TYPE_MXFP4>(const uint8_t *b, int, const float *xp, const float *tab)
{
    float x[32];
    mq_load32(xp, x);
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        acc = fmaf(tab[16 + (b[1 + j] & 0xF)], x[j], acc);
        acc = fmaf(tab[16 + (b[1 + j] >> 4)], x[j + 16], acc);
    }
    return mq_e8m0_half(b[0]) * acc;
}

/* The float types of weights (direct loads instead of sub-blocks). */
template <int T> struct mq_is_float { static constexpr bool value = false; };
template <> struct mq_is_float<MEMRA_TYPE_F32> { static constexpr bool value = true; };
template <> struct mq_is_float<MEMRA_TYPE_F16> { static constexpr bool value = true; };
template <> struct mq_is_float<MEMRA_TYPE_BF16> { static constexpr bool value = true; };

/* Element I of a float-type row. */
template <int T> __device__ __forceinline__ float mq_float_at(const uint8_t *row, int64_t i)
{
    if (T == MEMRA_TYPE_F32)
        return ((const float *)row)[i];
    const uint16_t h = ((const uint16_t *)row)[i];
    return T == MEMRA_TYPE_F16 ? __half2float(__ushort_as_half(h)) : mq_bf16(h);
}

#endif
