/* Scalar reference for the ggml block formats. Each decoder repeats ggml's
 * float expression order (same operands, same association) so that results
 * are bit-identical to dequantize_row_*; anything faster is checked against
 * this file, never the other way round. Blocks are read byte by byte so the
 * code does not depend on struct packing or host endianness. */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "quant.h"

/* Bit-exactness needs every product rounded before the following add, as
 * ggml's reference build does; clang would otherwise fuse them into FMAs.
 * GCC does not contract in ISO C mode (-std=c11), which the build uses. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK 32    /* elements per block of the legacy and IQ4_NL/MXFP4 formats */
#define QK_K 256 /* elements per super-block of the K-quants and IQ4_XS */

/* Non-linear 4-bit codebook shared by IQ4_NL and IQ4_XS. */
static const int8_t k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

/* E2M1 values doubled, so that they are integers; the E8M0 scale is halved
 * to compensate (see e8m0_half). */
static const int8_t k_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static inline uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline float fp16(const uint8_t *p)
{
    return memra__fp16_to_f32(rd16(p));
}

/* 2^(e-128) built from bits: for e < 2 the result is an f32 subnormal, so
 * ldexpf-style arithmetic through a normal float would be wrong there. */
static inline float e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ggml's get_scale_min_k4: eight 6-bit (scale, min) pairs packed in 12 bytes. */
static inline void scale_min_k4(int j, const uint8_t *s, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q4_K/Q5_K chunk C (64 values): scale and min of its low-nibble half in
 * DM[0..1], of its high-nibble half in DM[2..3]. */
static inline void chunk_scales_k4(int c, const uint8_t *s, float d, float dmin, float dm[4])
{
    uint8_t sc, m;
    scale_min_k4(2 * c, s, &sc, &m);
    dm[0] = d * sc;
    dm[1] = dmin * m;
    scale_min_k4(2 * c + 1, s, &sc, &m);
    dm[2] = d * sc;
    dm[3] = dmin * m;
}

/* ---- decoders: NB blocks from SRC to Y ------------------------------------ */

static void deq_f32(const uint8_t *src, float *y, int64_t nb)
{
    memcpy(y, src, (size_t)nb * sizeof(float));
}

static void deq_f16(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        y[i] = fp16(src + 2 * i);
}

static void deq_bf16(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        y[i] = memra__bf16_to_f32(rd16(src + 2 * i));
}

/* Q4_0: d, qs[16]. Low nibbles are the first half of the block. */
static void deq_q4_0(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 18, y += QK) {
        const float d = fp16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < QK / 2; j++) {
            const int x0 = (qs[j] & 0xF) - 8;
            const int x1 = (qs[j] >> 4) - 8;
            y[j] = x0 * d;
            y[j + QK / 2] = x1 * d;
        }
    }
}

/* Q4_1: d, m, qs[16]. */
static void deq_q4_1(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 20, y += QK) {
        const float d = fp16(b);
        const float m = fp16(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < QK / 2; j++) {
            const int x0 = qs[j] & 0xF;
            const int x1 = qs[j] >> 4;
            y[j] = x0 * d + m;
            y[j + QK / 2] = x1 * d + m;
        }
    }
}

/* Q5_0: d, qh (32 fifth bits, one per element), qs[16]. */
static void deq_q5_0(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 22, y += QK) {
        const float d = fp16(b);
        const uint32_t qh = rd32(b + 2);
        const uint8_t *qs = b + 6;
        for (int j = 0; j < QK / 2; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
            const int x0 = ((qs[j] & 0xF) | h0) - 16;
            const int x1 = ((qs[j] >> 4) | h1) - 16;
            y[j] = x0 * d;
            y[j + QK / 2] = x1 * d;
        }
    }
}

/* Q5_1: d, m, qh, qs[16]. */
static void deq_q5_1(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 24, y += QK) {
        const float d = fp16(b);
        const float m = fp16(b + 2);
        const uint32_t qh = rd32(b + 4);
        const uint8_t *qs = b + 8;
        for (int j = 0; j < QK / 2; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
            const int x0 = (qs[j] & 0xF) | h0;
            const int x1 = (qs[j] >> 4) | h1;
            y[j] = x0 * d + m;
            y[j + QK / 2] = x1 * d + m;
        }
    }
}

/* Q8_0: d, qs int8[32]. */
static void deq_q8_0(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 34, y += QK) {
        const float d = fp16(b);
        for (int j = 0; j < QK; j++)
            y[j] = (int8_t)b[2 + j] * d;
    }
}

/* MXFP4: e (E8M0), qs[16] of E2M1 nibbles. */
static void deq_mxfp4(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 17, y += QK) {
        const float d = e8m0_half(b[0]);
        const uint8_t *qs = b + 1;
        for (int j = 0; j < QK / 2; j++) {
            y[j] = k_mxfp4[qs[j] & 0xF] * d;
            y[j + QK / 2] = k_mxfp4[qs[j] >> 4] * d;
        }
    }
}

/* IQ4_NL: d, qs[16] indexing the codebook. */
static void deq_iq4_nl(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 18, y += QK) {
        const float d = fp16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < QK / 2; j++) {
            y[j] = d * k_iq4nl[qs[j] & 0xF];
            y[j + QK / 2] = d * k_iq4nl[qs[j] >> 4];
        }
    }
}

/* Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin.
 * Each qs byte holds four 2-bit values that belong to four different
 * 32-element groups (the shift selects the group). */
static void deq_q2_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 84) {
        const uint8_t *scales = b;
        const uint8_t *q = b + 16;
        const float d = fp16(b + 80);
        const float dmin = fp16(b + 82);
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = scales[is++];
                    const float dl = d * (sc & 0xF);
                    const float ml = dmin * (sc >> 4);
                    const uint8_t *qq = q + 16 * half;
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * ((qq[l] >> shift) & 3) - ml;
                }
            }
            q += 32;
        }
    }
}

/* Q3_K: hmask[32], qs[64], scales[12] (sixteen 6-bit scales), d.
 * The high bit is stored inverted: a clear hmask bit subtracts 4. */
static void deq_q3_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 110) {
        const uint8_t *hm = b;
        const uint8_t *q = b + 32;
        const uint8_t *s = b + 96;
        const float d_all = fp16(b + 108);
        int8_t scales[16];
        for (int k = 0; k < 16; k++) {
            const int lo = k < 8 ? (s[k] & 0xF) : (s[k - 8] >> 4);
            const int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
            scales[k] = (int8_t)((lo | (hi << 4)) - 32);
        }
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * scales[is++];
                    const uint8_t *qq = q + 16 * half;
                    const uint8_t *hh = hm + 16 * half;
                    for (int l = 0; l < 16; l++) {
                        const int v = ((qq[l] >> shift) & 3) - ((hh[l] & m) ? 0 : 4);
                        *y++ = dl * v;
                    }
                }
            }
            q += 32;
        }
    }
}

/* Q4_K: d, dmin, scales[12], qs[128]; 4 chunks of 64 values. */
static void deq_q4_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 144) {
        const float d = fp16(b);
        const float dmin = fp16(b + 2);
        const uint8_t *s = b + 4;
        const uint8_t *q = b + 16;
        for (int c = 0; c < 4; c++, q += 32) {
            float dm[4];
            chunk_scales_k4(c, s, d, dmin, dm);
            for (int l = 0; l < 32; l++)
                *y++ = dm[0] * (q[l] & 0xF) - dm[1];
            for (int l = 0; l < 32; l++)
                *y++ = dm[2] * (q[l] >> 4) - dm[3];
        }
    }
}

/* Q5_K: d, dmin, scales[12], qh[32], qs[128]; qh bit 2c / 2c+1 of byte l
 * is the fifth bit of element l of chunk c's low / high half. */
static void deq_q5_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 176) {
        const float d = fp16(b);
        const float dmin = fp16(b + 2);
        const uint8_t *s = b + 4;
        const uint8_t *qh = b + 16;
        const uint8_t *ql = b + 48;
        unsigned u1 = 1, u2 = 2;
        for (int c = 0; c < 4; c++, ql += 32, u1 <<= 2, u2 <<= 2) {
            float dm[4];
            chunk_scales_k4(c, s, d, dmin, dm);
            for (int l = 0; l < 32; l++)
                *y++ = dm[0] * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - dm[1];
            for (int l = 0; l < 32; l++)
                *y++ = dm[2] * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - dm[3];
        }
    }
}

/* Q6_K: ql[128], qh[64], scales int8[16], d (last). */
static void deq_q6_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 210) {
        const uint8_t *ql = b;
        const uint8_t *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = fp16(b + 208);
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

/* IQ4_XS: d, scales_h (2 high bits per sub-block), scales_l[4] (4 low bits
 * per sub-block), qs[128]; eight sub-blocks of 32 with 6-bit offset scales. */
static void deq_iq4_xs(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 136) {
        const float d = fp16(b);
        const uint16_t sh = rd16(b + 2);
        const uint8_t *sl = b + 4;
        const uint8_t *qs = b + 8;
        for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, y += 32) {
            const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * k_iq4nl[qs[j] & 0xF];
                y[j + 16] = dl * k_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* ---- encoders: N elements (whole blocks) from X into DST ------------------ */

static void quant_f32(const float *x, uint8_t *dst, int64_t n)
{
    memcpy(dst, x, (size_t)n * sizeof(float));
}

static void quant_f16(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        wr16(dst + 2 * i, memra__f32_to_fp16(x[i]));
}

static void quant_bf16(const float *x, uint8_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        wr16(dst + 2 * i, memra__f32_to_bf16(x[i]));
}

/* Largest magnitude of the block and the signed element that has it (the
 * first one on ties, as ggml's strict comparison picks). */
static float block_absmax(const float *x, int n, float *signed_max)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        const float v = x[j];
        if (amax < fabsf(v)) {
            amax = fabsf(v);
            max = v;
        }
    }
    *signed_max = max;
    return amax;
}

static void block_minmax(const float *x, int n, float *min, float *max)
{
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo)
            lo = x[j];
        if (x[j] > hi)
            hi = x[j];
    }
    *min = lo;
    *max = hi;
}

/* The scale is computed and used in f32 but stored as f16, exactly like
 * ggml: the stored d can differ from the one the quants were made with. */
static void quant_q8_0(const float *x, uint8_t *b, int64_t n)
{
    for (int64_t i = 0; i < n / QK; i++, x += QK, b += 34) {
        float max;
        const float amax = block_absmax(x, QK, &max);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr16(b, memra__f32_to_fp16(d));
        for (int j = 0; j < QK; j++)
            b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

/* Q4_0/Q5_0 (WITH_MIN false) and Q4_1/Q5_1 (true), as ggml's
 * quantize_row_q{4,5}_{0,1}_ref. Block: d, [m], [qh: the 32 fifth bits],
 * qs: low nibbles of elements j and j+16 in byte j.
 * _0 scales by the signed extreme so that it maps to -2^(BITS-1) exactly,
 * which uses the full asymmetric range; _1 spans [min, max]. Adding
 * 2^(BITS-1) + 0.5 (resp. 0.5) then truncating rounds. The clamp only
 * matters for _0: ggml's _1 code has none, as (x-min)*id + 0.5 stays below
 * 2^BITS by construction. */
static void quant_legacy(const float *x, uint8_t *b, int64_t n, int bits, bool with_min)
{
    const int qmax = (1 << bits) - 1, half = 1 << (bits - 1);
    const size_t head = with_min ? 4 : 2, qh_bytes = bits == 5 ? 4 : 0;
    for (int64_t i = 0; i < n / QK; i++, x += QK, b += head + qh_bytes + QK / 2) {
        float min = 0.0f, max, d;
        if (with_min) {
            block_minmax(x, QK, &min, &max);
            d = (max - min) / (float)qmax;
        } else {
            (void)block_absmax(x, QK, &max);
            d = max / -(float)half;
        }
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const float add = with_min ? 0.5f : (float)half + 0.5f;
        wr16(b, memra__f32_to_fp16(d));
        if (with_min)
            wr16(b + 2, memra__f32_to_fp16(min));
        uint8_t *qh = b + head, *qs = qh + qh_bytes;
        uint32_t hbits = 0;
        for (int j = 0; j < QK / 2; j++) {
            /* x - 0.0f is x bit for bit, so the _0 formats need no branch here */
            int q0 = (int)(int8_t)((x[j] - min) * id + add);
            int q1 = (int)(int8_t)((x[j + QK / 2] - min) * id + add);
            q0 = q0 < qmax ? q0 : qmax;
            q1 = q1 < qmax ? q1 : qmax;
            qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            hbits |= (uint32_t)((q0 >> 4) & 1) << j;
            hbits |= (uint32_t)((q1 >> 4) & 1) << (j + QK / 2);
        }
        for (size_t k = 0; k < qh_bytes; k++)
            qh[k] = (uint8_t)(hbits >> (8 * k));
    }
}

static void quant_q4_0(const float *x, uint8_t *b, int64_t n) { quant_legacy(x, b, n, 4, false); }
static void quant_q4_1(const float *x, uint8_t *b, int64_t n) { quant_legacy(x, b, n, 4, true); }
static void quant_q5_0(const float *x, uint8_t *b, int64_t n) { quant_legacy(x, b, n, 5, false); }
static void quant_q5_1(const float *x, uint8_t *b, int64_t n) { quant_legacy(x, b, n, 5, true); }

/* ---- type table ----------------------------------------------------------- */

typedef void (*deq_fn)(const uint8_t *src, float *y, int64_t nblocks);
typedef void (*quant_fn)(const float *x, uint8_t *dst, int64_t n);

typedef struct quant_type {
    int64_t blck;  /* elements per block the decoder assumes */
    size_t bytes;  /* bytes per block the decoder assumes */
    deq_fn deq;    /* NULL: cannot compute */
    quant_fn quant; /* NULL: cannot quantize */
} quant_type;

static const quant_type k_quant[MEMRA_TYPE_COUNT] = {
    [MEMRA_TYPE_F32] = {1, 4, deq_f32, quant_f32},
    [MEMRA_TYPE_F16] = {1, 2, deq_f16, quant_f16},
    [MEMRA_TYPE_BF16] = {1, 2, deq_bf16, quant_bf16},
    [MEMRA_TYPE_Q4_0] = {QK, 18, deq_q4_0, quant_q4_0},
    [MEMRA_TYPE_Q4_1] = {QK, 20, deq_q4_1, quant_q4_1},
    [MEMRA_TYPE_Q5_0] = {QK, 22, deq_q5_0, quant_q5_0},
    [MEMRA_TYPE_Q5_1] = {QK, 24, deq_q5_1, quant_q5_1},
    [MEMRA_TYPE_Q8_0] = {QK, 34, deq_q8_0, quant_q8_0},
    [MEMRA_TYPE_MXFP4] = {QK, 17, deq_mxfp4, NULL},
    [MEMRA_TYPE_IQ4_NL] = {QK, 18, deq_iq4_nl, NULL},
    [MEMRA_TYPE_Q2_K] = {QK_K, 84, deq_q2_k, NULL},
    [MEMRA_TYPE_Q3_K] = {QK_K, 110, deq_q3_k, NULL},
    [MEMRA_TYPE_Q4_K] = {QK_K, 144, deq_q4_k, NULL},
    [MEMRA_TYPE_Q5_K] = {QK_K, 176, deq_q5_k, NULL},
    [MEMRA_TYPE_Q6_K] = {QK_K, 210, deq_q6_k, NULL},
    [MEMRA_TYPE_IQ4_XS] = {QK_K, 136, deq_iq4_xs, NULL},
};

static const quant_type *lookup(memra_type_t type, int64_t n)
{
    if ((unsigned)type >= MEMRA_TYPE_COUNT || n < 0)
        return NULL;
    const quant_type *t = &k_quant[type];
    if (t->blck == 0 || n % t->blck != 0)
        return NULL;
    return t;
}

bool memra__quant_can_compute(memra_type_t type)
{
    return (unsigned)type < MEMRA_TYPE_COUNT && k_quant[type].deq != NULL;
}

bool memra__quant_can_quantize(memra_type_t type)
{
    return (unsigned)type < MEMRA_TYPE_COUNT && k_quant[type].quant != NULL;
}

size_t memra__row_bytes(memra_type_t type, int64_t n)
{
    const int64_t blck = memra_type_block_size(type);
    if (blck <= 0 || n < 0 || n % blck != 0)
        return 0;
    return (size_t)(n / blck) * memra_type_block_bytes(type);
}

bool memra__dequantize_row(memra_type_t type, const void *src, float *dst, int64_t n)
{
    const quant_type *t = lookup(type, n);
    if (!t || !t->deq || (n > 0 && (!src || !dst)))
        return false;
    t->deq(src, dst, n / t->blck);
    return true;
}

/* Every block size divides this, so a chunk always holds whole blocks. */
#define DOT_CHUNK QK_K

double memra__dot_row(memra_type_t type, const void *row, const float *x, int64_t n)
{
    const quant_type *t = lookup(type, n);
    if (!t || !t->deq || (n > 0 && (!row || !x)))
        return NAN;
    const uint8_t *src = row;
    float buf[DOT_CHUNK];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i += DOT_CHUNK) {
        const int64_t len = n - i < DOT_CHUNK ? n - i : DOT_CHUNK;
        const int64_t nb = len / t->blck;
        t->deq(src, buf, nb);
        src += (size_t)nb * t->bytes;
        for (int64_t j = 0; j < len; j++)
            sum += (double)buf[j] * (double)x[i + j];
    }
    return sum;
}

bool memra__quantize_row(memra_type_t type, const float *src, void *dst, int64_t n)
{
    const quant_type *t = lookup(type, n);
    if (!t || !t->quant || (n > 0 && (!src || !dst)))
        return false;
    t->quant(src, dst, n);
    return true;
}
