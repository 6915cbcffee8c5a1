/* The K-quant matvec's lane arithmetic (cuda/mmv_kq.cuh): one lane's share
 * of an item, for Q4_K, Q5_K, Q6_K and Q4_0. Host and device code: it reads
 * weights and x through small reader types (shared memory on the device,
 * plain memory on the host), so test/test_mmv_kq.cu runs the kernel's own
 * decoding and sums on the CPU against the float64 reference.
 *
 * Layout. An item is one segment (KQ_SBS = 8 super-blocks, 2048 elements)
 * of KQ_M = 2 weight rows. Lane l takes super-block b = l / 4 of the
 * segment and in it the 64 weights of its quarter q = l % 4:
 *   Q4_K/Q5_K: chunk q (32 quant bytes): sub-block 2q from the low
 *     nibbles, 2q+1 from the high nibbles, elements [64 l, 64 l + 64) of
 *     the segment;
 *   Q6_K: half h = q / 2, pair a = q % 2: sub-blocks j = a (low nibbles of
 *     32 ql bytes) and j = a + 2 (their high nibbles), elements
 *     128 h + 32 a + [0, 32) and 128 h + 64 + 32 a + [0, 32) of b;
 *   Q4_0 (eight 18-byte blocks a "super-block" of 144 bytes): blocks 2q
 *     and 2q + 1, elements [64 l, 64 l + 64) of the segment.
 * x is staged as the Q8_0 path stages it (mmv.cuh: times 2^64, 4 floats of
 * padding after every 64, sums of 32 elements times 2^-78), so a lane's
 * 16-byte x loads fall on distinct banks in each quarter warp (Q6_K: lanes
 * of odd a take their high sub-block first, which only moves their loads:
 * every sub-block has its own sums).
 *
 * Arithmetic. A quant byte becomes a float by one byte permutation that
 * puts it in the mantissa of a zero exponent: the float u 2^-149 (a
 * subnormal, exact; the GPU build keeps subnormals), whose product with
 * x 2^64 is u x 2^-85, so a weight costs PRMT + FFMA and its scales leave
 * the inner loop:
 *   Q4_K/Q5_K: y += d sc_j 2^85 S_j - dmin m_j 2^78 X_j per sub-block j,
 *     S_j = sum(u x 2^-85) (high nibbles masked in place: 16 u, 2^81),
 *     X_j = the staged 2^-78 sum(x) (Q5_K: the fifth bit merged into the
 *     low byte, or into the next byte of a two-word permutation);
 *   Q6_K: q = ql | qh << 4 as 16 q in two bytes of one permutation,
 *     y += d sc_h 2^81 (S_h - 4 X16_h) per 16-element half h (q - 32: the
 *     bias as 32 sum(x) over the half, X16 = 2^-78 sums of 16);
 *   Q4_0: y += d_j 2^85 S_j - d_j 2^81 X_j per block j (q - 8: the bias
 *     as 8 sum(x), Q4_K's min term with m = 8).
 * Each product of a sum and its scale is rounded explicitly
 * (kq_mul/kq_fma/kq_add), so no launch shape changes a row's bits. The
 * bounds are the Q8_0 path's: x below 2^63 in magnitude, and sums below
 * 2^-41 in magnitude lose relative precision (2^-64 absolute). */
#ifndef MEMRA_CUDA_MMV_KQ_LANE_CUH
#define MEMRA_CUDA_MMV_KQ_LANE_CUH

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "memra/gguf.h"
}

#define KQ_M 2   /* weight rows per item (they share each x load) */
#define KQ_SBS 8 /* super-blocks per segment: one 64-weight share per lane */

/* Segments (items) of a row of NSB super-blocks: KQ_SBS each, the last
 * one short when NSB is not a multiple of KQ_SBS. */
static __host__ __device__ __forceinline__ int kq_nseg(int nsb)
{
    return (nsb + KQ_SBS - 1) / KQ_SBS;
}

/* unrolled in device code (the host compiler does not know the pragma) */
#ifdef __CUDA_ARCH__
#define KQ_UNROLL _Pragma("unroll")
#else
#define KQ_UNROLL
#endif

/* ---- primitives, host and device ------------------------------------------ */

static __host__ __device__ __forceinline__ float kq_f(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* prmt.b32 (default mode): byte n of the result is byte s_n & 7 of b:a, or
 * with s_n & 8 that byte's sign bit replicated (a zero byte from a source
 * byte below 0x80). */
static __host__ __device__ __forceinline__ uint32_t kq_prmt(uint32_t a, uint32_t b, uint32_t s)
{
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
    return d;
#else
    const uint64_t v = (uint64_t)b << 32 | a;
    uint32_t d = 0;
    for (int n = 0; n < 4; n++) {
        const uint32_t sel = (s >> 4 * n) & 0xF;
        uint32_t byte = (uint32_t)(v >> 8 * (sel & 7)) & 0xFF;
        if (sel & 8)
            byte = byte & 0x80 ? 0xFF : 0;
        d |= byte << 8 * n;
    }
    return d;
#endif
}

/* (hi:lo) >> sh, sh < 32 */
static __host__ __device__ __forceinline__ uint32_t kq_funnel(uint32_t lo, uint32_t hi, uint32_t sh)
{
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, sh);
#else
    return (uint32_t)(((uint64_t)hi << 32 | lo) >> sh);
#endif
}

static __host__ __device__ __forceinline__ float kq_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

static __host__ __device__ __forceinline__ float kq_add(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

static __host__ __device__ __forceinline__ float kq_fma(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

static __host__ __device__ __forceinline__ float kq_half(uint32_t h)
{
    return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFFu)));
}

/* Byte P of W: the float 2^23 + byte by one permutation, less 2^23 (exact;
 * I2F runs at a quarter of the FADD rate). */
static __host__ __device__ __forceinline__ float kq_byte(uint32_t w, uint32_t p)
{
    return kq_f(kq_prmt(w, 0x4B000000u, 0x7440u + p)) - 8388608.0f;
}

/* Byte P of W ^ 0x80808080 read back as an int8: 2^23 + (s + 128) less 2^23 + 128. */
static __host__ __device__ __forceinline__ float kq_sbyte(uint32_t w, uint32_t p)
{
    return kq_f(kq_prmt(w, 0x4B000000u, 0x7440u + p)) - 8388736.0f;
}

/* ---- readers ---------------------------------------------------------------- */

/* Shared memory at a 32-bit address (device only). Offsets in bytes. */
struct kq_smem {
    uint32_t base;
    __host__ __device__ uint32_t u32(uint32_t o) const
    {
#ifdef __CUDA_ARCH__
        uint32_t v;
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(base + o));
        return v;
#else
        return o * 0u;
#endif
    }
    __host__ __device__ uint4 u128(uint32_t o) const
    {
#ifdef __CUDA_ARCH__
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(base + o));
        return v;
#else
        return make_uint4(o * 0u, 0u, 0u, 0u);
#endif
    }
    __host__ __device__ float4 f128(uint32_t o) const
    {
#ifdef __CUDA_ARCH__
        float4 v;
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "r"(base + o));
        return v;
#else
        return make_float4((float)(o * 0u), 0.0f, 0.0f, 0.0f);
#endif
    }
    __host__ __device__ float2 f64(uint32_t o) const
    {
#ifdef __CUDA_ARCH__
        float2 v;
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(base + o));
        return v;
#else
        return make_float2((float)(o * 0u), 0.0f);
#endif
    }
};

/* Plain memory (the host test). */
struct kq_mem {
    const uint8_t *p;
    __host__ __device__ uint32_t u32(uint32_t o) const
    {
        uint32_t v;
        memcpy(&v, p + o, sizeof v);
        return v;
    }
    __host__ __device__ uint4 u128(uint32_t o) const
    {
        uint4 v;
        memcpy(&v, p + o, sizeof v);
        return v;
    }
    __host__ __device__ float4 f128(uint32_t o) const
    {
        float4 v;
        memcpy(&v, p + o, sizeof v);
        return v;
    }
    __host__ __device__ float2 f64(uint32_t o) const
    {
        float2 v;
        memcpy(&v, p + o, sizeof v);
        return v;
    }
};

/* ---- per type ----------------------------------------------------------------- */

/* Each type gives: sc (a row's scales, decoded once per item), wd (its
 * quant words, loaded as the word loop reaches them: the kernel keeps
 * three blocks per SM in 80 registers), ch (the sums, four per sub-block or
 * two per 16-element half, interleaved for latency), and
 *   scales(sc, rd, sb, q): the row's scales for lane quarter Q of the
 *     super-block at byte SB of reader RD;
 *   begin(wd, rd, sb, q), word(wd, rd, i, lc, x0, x1, ch): quant word I
 *     (elements 4I .. 4I+3 of each of the share's two sub-blocks) against
 *     X0 and X1, the x of the lane's two 32-runs in load order;
 *   finish(sc, ch, lc, s0, s1): the share's term, S0/S1 the sums of x
 *     that go with X0/X1's runs (Q4_K/Q5_K: both sub-blocks' in S0, one
 *     8-byte load);
 *   xi(i): which 4 elements of each run step I takes (4 xi(i) ..): I for
 *     all but Q4_0, whose steps take a word's low nibbles, then its high
 *     ones. */
template <int T> struct kq;

/* Lane constants (Q6_K: which sub-block a load step takes). */
struct kq_lc {
    uint32_t a;      /* Q6_K: the pair (lane & 1) */
    uint32_t sa[2];  /* Q6_K, step t: shift of ql that puts the nibble at bits 4-7 */
    uint32_t sb[2];  /* ... and of qh that puts its two bits at bits 0-1 */
};

/* Q4_K and Q5_K share the header (d, dmin, 12 bytes of 6-bit scales and
 * mins) and the sums. The scales and mins of chunk C's sub-blocks (2C,
 * 2C+1) are bytes 2(C&1), +1 of SC and MN: ggml's get_scale_min_k4 for
 * all four chunks without branches (chunks 0-1 take the low 6 bits of
 * bytes 0-3 / 4-7, chunks 2-3 the nibbles of bytes 8-11 with the top two
 * bits of bytes 0-3 / 4-7 above them). */
struct kq_k45 {
    static __host__ __device__ constexpr int xi(int i) { return i; }
    struct sc {
        float dl, dh, ml, mh; /* d sc 2^85, d sc 2^81, dmin m 2^78 (low, high sub-block) */
    };
    struct ch {
        float l[4], h[4];
    };
    template <class RD> static __host__ __device__ __forceinline__ void scales(sc &o, const RD &rd, uint32_t sb, int c)
    {
        const uint4 h = rd.u128(sb);
        const bool up = c >= 2;
        const uint32_t ma = up ? 0x0F0F0F0Fu : 0x3F3F3F3Fu, mb = up ? 0x30303030u : 0u;
        const uint32_t s = ((up ? h.w : h.y) & ma) | ((h.y >> 2) & mb);
        const uint32_t mn = ((up ? h.w >> 4 : h.z) & ma) | ((h.z >> 2) & mb);
        const uint32_t p = 2 * (uint32_t)(c & 1);
        const float d = kq_half(h.x), dmin = kq_half(h.x >> 16);
        const float d85 = kq_mul(d, 0x1p85f), d81 = kq_mul(d, 0x1p81f), m78 = kq_mul(dmin, 0x1p78f);
        o.dl = kq_mul(d85, kq_byte(s, p)); /* exact: 11 x 6 bits */
        o.dh = kq_mul(d81, kq_byte(s, p + 1));
        o.ml = kq_mul(m78, kq_byte(mn, p));
        o.mh = kq_mul(m78, kq_byte(mn, p + 1));
    }
    /* S0: the staged sums of the low (x) and the high (y) sub-block */
    static __host__ __device__ __forceinline__ float finish(const sc &o, const ch &c, const kq_lc &, float2 s0, float2)
    {
        const float sl = kq_add(kq_add(c.l[0], c.l[1]), kq_add(c.l[2], c.l[3]));
        const float sh = kq_add(kq_add(c.h[0], c.h[1]), kq_add(c.h[2], c.h[3]));
        float v = kq_mul(o.dl, sl);
        v = kq_fma(o.dh, sh, v);
        v = kq_fma(-o.ml, s0.x, v);
        return kq_fma(-o.mh, s0.y, v);
    }
};

/* Q4_K: d, dmin, scales[12], qs[128] (chunk c: qs[32c, 32c+32)). */
template <> struct kq<MEMRA_TYPE_Q4_K> : kq_k45 {
    static constexpr int bb = 144, s16 = 0;
    struct wd {
        uint32_t at, q[4];
    };
    template <class RD> static __host__ __device__ __forceinline__ void begin(wd &o, const RD &, uint32_t sb, int c)
    {
        o.at = sb + 16 + 32 * (uint32_t)c;
    }
    /* the low sub-block's quant (u), the high one's in place (16 u, 2^81) */
    template <class RD>
    static __host__ __device__ __forceinline__ void word(wd &o, const RD &rd, int i, const kq_lc &, float4 x0,
                                                         float4 x1, ch &c)
    {
        if ((i & 3) == 0) {
            const uint4 v = rd.u128(o.at + 4 * i);
            o.q[0] = v.x, o.q[1] = v.y, o.q[2] = v.z, o.q[3] = v.w;
        }
        const uint32_t lo = o.q[i & 3] & 0x0F0F0F0Fu, hi = o.q[i & 3] & 0xF0F0F0F0u;
        const float xa[4] = {x0.x, x0.y, x0.z, x0.w}, xb[4] = {x1.x, x1.y, x1.z, x1.w};
        KQ_UNROLL
        for (int k = 0; k < 4; k++) {
            c.l[k] = fmaf(kq_f(kq_prmt(lo, 0u, 0x4440u + k)), xa[k], c.l[k]);
            c.h[k] = fmaf(kq_f(kq_prmt(hi, 0u, 0x4440u + k)), xb[k], c.h[k]);
        }
    }
};

/* Q5_K: d, dmin, scales[12], qh[32], qs[128]; bit 2c / 2c+1 of qh byte l is
 * the fifth bit of element l of chunk c's low / high sub-block. */
template <> struct kq<MEMRA_TYPE_Q5_K> : kq_k45 {
    static constexpr int bb = 176, s16 = 0;
    struct wd {
        uint32_t aq, ah, sh, q[4], h[4]; /* qs and qh addresses, sh = 2c */
    };
    template <class RD> static __host__ __device__ __forceinline__ void begin(wd &o, const RD &, uint32_t sb, int c)
    {
        o.aq = sb + 48 + 32 * (uint32_t)c;
        o.ah = sb + 16;
        o.sh = 2 * (uint32_t)c;
    }
    /* low: the fifth bit ORed in at bit 4 (u = q); high: the masked nibble
     * (16 n) in byte 0 and the bit in byte 1 (16 q) */
    template <class RD>
    static __host__ __device__ __forceinline__ void word(wd &o, const RD &rd, int i, const kq_lc &, float4 x0,
                                                         float4 x1, ch &c)
    {
        if ((i & 3) == 0) {
            const uint4 v = rd.u128(o.aq + 4 * i), u = rd.u128(o.ah + 4 * i);
            o.q[0] = v.x, o.q[1] = v.y, o.q[2] = v.z, o.q[3] = v.w;
            o.h[0] = u.x, o.h[1] = u.y, o.h[2] = u.z, o.h[3] = u.w;
        }
        const uint32_t t = o.h[i & 3] >> o.sh;
        const uint32_t lo = (o.q[i & 3] & 0x0F0F0F0Fu) | ((t << 4) & 0x10101010u);
        const uint32_t hi = o.q[i & 3] & 0xF0F0F0F0u, hb = (t >> 1) & 0x01010101u;
        const float xa[4] = {x0.x, x0.y, x0.z, x0.w}, xb[4] = {x1.x, x1.y, x1.z, x1.w};
        KQ_UNROLL
        for (int k = 0; k < 4; k++) {
            c.l[k] = fmaf(kq_f(kq_prmt(lo, 0u, 0x4440u + k)), xa[k], c.l[k]);
            c.h[k] = fmaf(kq_f(kq_prmt(hi, hb, 0xCC40u + 0x1111u * k)), xb[k], c.h[k]);
        }
    }
};

/* Q6_K: ql[128], qh[64], int8 scales[16], d. Super-blocks are 210 bytes:
 * in the ring every other one is 2 bytes off a word, so the lane reads the
 * aligned words around its bytes and funnel-shifts them into place. */
template <> struct kq<MEMRA_TYPE_Q6_K> {
    static constexpr int bb = 210, s16 = 1;
    static __host__ __device__ constexpr int xi(int i) { return i; }
    struct sc {
        float d[4]; /* d sc 2^81: sub-block a (halves 0, 1), sub-block a + 2 (halves 0, 1) */
    };
    struct ch {
        float c[2][2][2]; /* [step][half][k & 1] */
    };
    struct wd {
        uint32_t al, ah, sh, ul, uh; /* aligned addresses of ql / qh, the shift, the last words */
    };
    template <class RD> static __host__ __device__ __forceinline__ void scales(sc &o, const RD &rd, uint32_t sb, int q)
    {
        const uint32_t h = (uint32_t)q >> 1, a = (uint32_t)q & 1;
        const uint32_t ps = sb + 192 + 8 * h + 2 * a, ss = 8 * (ps & 3);
        const uint32_t s0 = (rd.u32(ps & ~3u) >> ss) ^ 0x8080u, s1 = (rd.u32((ps & ~3u) + 4) >> ss) ^ 0x8080u;
        const uint32_t pd = sb + 208;
        const float d81 = kq_mul(kq_half(rd.u32(pd & ~3u) >> 8 * (pd & 3)), 0x1p81f);
        o.d[0] = kq_mul(d81, kq_sbyte(s0, 0)); /* exact: 11 x 8 bits */
        o.d[1] = kq_mul(d81, kq_sbyte(s0, 1));
        o.d[2] = kq_mul(d81, kq_sbyte(s1, 0));
        o.d[3] = kq_mul(d81, kq_sbyte(s1, 1));
    }
    template <class RD> static __host__ __device__ __forceinline__ void begin(wd &o, const RD &rd, uint32_t sb, int q)
    {
        const uint32_t h = (uint32_t)q >> 1, a = (uint32_t)q & 1, pl = sb + 64 * h + 32 * a;
        o.al = pl & ~3u;
        o.ah = (sb + 128 + 32 * h) & ~3u;
        o.sh = 8 * (sb & 3); /* pl and the qh start share SB's alignment */
        o.ul = rd.u32(o.al);
        o.uh = rd.u32(o.ah);
    }
    /* Step t takes sub-block type t ^ a (0: low nibbles with qh bits 2a,
     * 2a+1; 1: high nibbles with bits 2a+4, 2a+5) as 16 q: the nibble in
     * bits 4-7 of byte 0, the two high bits in byte 1. */
    template <class RD>
    static __host__ __device__ __forceinline__ void word(wd &o, const RD &rd, int i, const kq_lc &lc, float4 x0,
                                                         float4 x1, ch &c)
    {
        const uint32_t nl = rd.u32(o.al + 4 * (i + 1)), nh = rd.u32(o.ah + 4 * (i + 1));
        const uint32_t l = kq_funnel(o.ul, nl, o.sh), h = kq_funnel(o.uh, nh, o.sh);
        o.ul = nl;
        o.uh = nh;
        const float xs[2][4] = {{x0.x, x0.y, x0.z, x0.w}, {x1.x, x1.y, x1.z, x1.w}};
        KQ_UNROLL
        for (int t = 0; t < 2; t++) {
            const uint32_t lq = (l << lc.sa[t]) & 0xF0F0F0F0u, hq = (h >> lc.sb[t]) & 0x03030303u;
            KQ_UNROLL
            for (int k = 0; k < 4; k++)
                c.c[t][i >> 2][k & 1] =
                    fmaf(kq_f(kq_prmt(lq, hq, 0xCC40u + 0x1111u * k)), xs[t][k], c.c[t][i >> 2][k & 1]);
        }
    }
    /* S0/S1: the 16-sums of step 0's / 1's sub-block (halves in x, y) */
    static __host__ __device__ __forceinline__ float finish(const sc &o, const ch &c, const kq_lc &lc, float2 s0,
                                                            float2 s1)
    {
        float u[2][2]; /* [step][half]: S - 4 X16 = 2^-81 (sum(q x) - 32 sum(x)) */
        const float2 s[2] = {s0, s1};
        KQ_UNROLL
        for (int t = 0; t < 2; t++) {
            u[t][0] = kq_fma(-4.0f, s[t].x, kq_add(c.c[t][0][0], c.c[t][0][1]));
            u[t][1] = kq_fma(-4.0f, s[t].y, kq_add(c.c[t][1][0], c.c[t][1][1]));
        }
        const bool sw = lc.a != 0; /* step 1 took the low sub-block */
        float v = kq_mul(o.d[0], sw ? u[1][0] : u[0][0]);
        v = kq_fma(o.d[1], sw ? u[1][1] : u[0][1], v);
        v = kq_fma(o.d[2], sw ? u[0][0] : u[1][0], v);
        return kq_fma(o.d[3], sw ? u[0][1] : u[1][1], v);
    }
};

/* Q4_0: blocks of d (f16) and qs[16], element j < 16 of a block the low
 * nibble of qs[j], 16 + j its high nibble. Quarter C of a super-block
 * (blocks 2C, 2C+1) is the 36 bytes at 36C: d0, qs0 (2 bytes off a word),
 * d1, qs1 (on a word). Steps 2k and 2k+1 take word k of both blocks' qs,
 * low nibbles then high ones shifted down (u, as Q4_K's low sub-block),
 * against elements 4k.. and 16 + 4k.. of each block (xi); qs0's word is one
 * permutation of the two words around it, the second kept for the next
 * word. The scales are Q4_K's with sc = 1 and the min 8 d: d 2^85 and
 * 8 d 2^78 = d 2^81 (exact), so kq_k45's finish is the block's
 * d (sum(q x) - 8 sum(x)). */
template <> struct kq<MEMRA_TYPE_Q4_0> : kq_k45 {
    static constexpr int bb = 144, s16 = 0;
    static __host__ __device__ constexpr int xi(int i) { return (i & 1) * 4 + (i >> 1); }
    struct wd {
        uint32_t at, ul, q0, q1; /* quarter address, qs0's last raw word, the two blocks' word */
    };
    template <class RD> static __host__ __device__ __forceinline__ void scales(sc &o, const RD &rd, uint32_t sb, int c)
    {
        const uint32_t a = sb + 36 * (uint32_t)c;
        const float d0 = kq_half(rd.u32(a)), d1 = kq_half(rd.u32(a + 16) >> 16);
        o.dl = kq_mul(d0, 0x1p85f);
        o.dh = kq_mul(d1, 0x1p85f);
        o.ml = kq_mul(d0, 0x1p81f);
        o.mh = kq_mul(d1, 0x1p81f);
    }
    template <class RD> static __host__ __device__ __forceinline__ void begin(wd &o, const RD &rd, uint32_t sb, int c)
    {
        o.at = sb + 36 * (uint32_t)c;
        o.ul = rd.u32(o.at);
        o.q0 = o.q1 = 0; /* set by step 0 (the host compiler cannot see it) */
    }
    template <class RD>
    static __host__ __device__ __forceinline__ void word(wd &o, const RD &rd, int i, const kq_lc &, float4 x0,
                                                         float4 x1, ch &c)
    {
        const uint32_t k = (uint32_t)i >> 1;
        if ((i & 1) == 0) {
            const uint32_t nl = rd.u32(o.at + 4 * (k + 1));
            o.q0 = kq_prmt(o.ul, nl, 0x5432u); /* bytes 2..5: qs0[4k, 4k + 4) */
            o.ul = nl;
            o.q1 = rd.u32(o.at + 20 + 4 * k);
        }
        const uint32_t sh = 4 * ((uint32_t)i & 1);
        const uint32_t a = (o.q0 >> sh) & 0x0F0F0F0Fu, b = (o.q1 >> sh) & 0x0F0F0F0Fu;
        const float xa[4] = {x0.x, x0.y, x0.z, x0.w}, xb[4] = {x1.x, x1.y, x1.z, x1.w};
        KQ_UNROLL
        for (int n = 0; n < 4; n++) {
            c.l[n] = fmaf(kq_f(kq_prmt(a, 0u, 0x4440u + n)), xa[n], c.l[n]);
            c.h[n] = fmaf(kq_f(kq_prmt(b, 0u, 0x4440u + n)), xb[n], c.h[n]);
        }
    }
};

/* ---- ring slots ------------------------------------------------------------------ */

/* Per type: a row's segment in a ring slot. Q4_K and Q5_K segments are
 * whole 16-byte multiples at 16-byte aligned rows; a Q6_K segment starts
 * anywhere even, so its slot takes the copy from the 16-byte boundary
 * below and 16 bytes more. */
template <int T> struct kq_seg {
    static constexpr int bytes = KQ_SBS * kq<T>::bb;
    static constexpr int slot = kq<T>::s16 ? bytes + 16 : bytes; /* one row's share of a slot */
    static constexpr int item = KQ_M * slot;
};

/* Packed items (cuda/mmv_moe_kq.cuh, mmv_moe_kq_kernel<T, DOWN, true>): a slot of
 * kq_seg<T>::item bytes holds several items of short rows, each row in a
 * sub-slot of these bytes for rows of NSB super-blocks: the row's bytes
 * rounded to 16, and (Q6_K) 16 more for a start anywhere even. */
template <int T> static __host__ __device__ __forceinline__ constexpr uint32_t kq_pack_sub(int nsb)
{
    return (((uint32_t)nsb * kq<T>::bb + 15u) & ~15u) + (kq<T>::s16 ? 16u : 0u);
}

/* Lanes an item of rows of NSB (1 to 4) super-blocks: the fewest (a power
 * of two) that give each of its super-blocks its 4 lanes. */
static __host__ __device__ __forceinline__ constexpr int kq_pack_lanes(int nsb)
{
    return nsb <= 1 ? 4 : nsb == 2 ? 8 : 16;
}

/* Items a slot for L lanes an item: as many as the lanes and the slot's
 * bytes hold. */
template <int T> static __host__ __device__ __forceinline__ constexpr int kq_pack_items(int nsb, int L)
{
    const int by_bytes = (int)(kq_seg<T>::item / (KQ_M * kq_pack_sub<T>(nsb)));
    return 32 / L < by_bytes ? 32 / L : by_bytes;
}

/* Short segments packed (cuda/mmv_kq_pack.cuh): rows of NSB super-blocks
 * end in NSB % KQ_SBS of them; 1-4 take kq_pack_lanes of those lanes an
 * item (0: whole segments, or 5-7 short super-blocks, no room for two), and
 * a slot holds kq_short_groups row pairs' short segments. */
static __host__ __device__ __forceinline__ constexpr int kq_short_lanes(int nsb)
{
    return nsb % KQ_SBS == 0 || nsb % KQ_SBS > 4 ? 0 : kq_pack_lanes(nsb % KQ_SBS);
}

template <int T> static __host__ __device__ __forceinline__ constexpr int kq_short_groups(int nsb)
{
    return kq_short_lanes(nsb) ? kq_pack_items<T>(nsb % KQ_SBS, kq_short_lanes(nsb)) : 0;
}

/* The packed walk of a warp's NWG row pairs of NF full segments each, in
 * bundles of G: a bundle's packed item (J = -1: the short segments of its
 * row pairs), then each row pair's full segments in order. Item K is
 * segment S of row pair B + J of the warp (B: the bundle's first). */
struct kq_short_pos {
    int b, j, s;
};

static __host__ __device__ __forceinline__ int kq_short_items(int nwg, int G, int nf)
{
    return nwg / G * (1 + G * nf) + (nwg % G ? 1 + nwg % G * nf : 0);
}

static __host__ __device__ __forceinline__ kq_short_pos kq_short_at(int k, int G, int nf)
{
    const int per = 1 + G * nf, r = k % per;
    kq_short_pos p = {k / per * G, -1, 0};
    if (r > 0)
        p.j = (r - 1) / nf, p.s = (r - 1) % nf;
    return p;
}

/* ---- one lane's share of an item ---------------------------------------------- */

/* The item: segment CS of the weight rows in WR[m] (readers at the row's
 * ring slot; its segment starts OFF[m] bytes in), row 1 present when V1 is
 * KQ_ROW1_YES, or KQ_ROW1_RUN and v1 (one loop for both cases: in the
 * batched kernels two copies of the unrolled loop spilled registers).
 * X: the staged x rows (XL floats apart), S: their sums (32-element sums
 * for Q4_K/Q5_K, NBR per row; 16-element sums for Q6_K, 2 NBR per row).
 * Adds the lane's term of (x row r, weight row m) to PART[r][m] for r < NR. */
enum { KQ_ROW1_NO, KQ_ROW1_YES, KQ_ROW1_RUN };

template <int T, int R, int V1, class WR, class XR>
__host__ __device__ __forceinline__ void kq_lane(const WR (&wr)[KQ_M], const uint32_t (&off)[KQ_M], bool v1, int lane,
                                                 uint32_t cs, const XR &xr, uint32_t xl, const XR &sr, uint32_t nbr,
                                                 int nr, float (&part)[R][KQ_M])
{
    using K = kq<T>;
    const bool two = V1 == KQ_ROW1_YES || (V1 == KQ_ROW1_RUN && v1);
    const int q = lane & 3;
    const uint32_t sbo = ((uint32_t)lane >> 2) * K::bb;
    kq_lc lc;
    uint32_t x0, x1, s0, s1; /* byte offsets of the two 32-runs in x row 0 and of their sums */
    if constexpr (K::s16) {
        const uint32_t a = (uint32_t)q & 1, run = 32 * cs + ((uint32_t)lane & ~1u); /* the low sub-block's 64-run */
        lc.a = a;
        KQ_UNROLL
        for (int t = 0; t < 2; t++) { /* lanes of odd a take the high sub-block first: distinct banks */
            const uint32_t hi = (uint32_t)t ^ a;
            lc.sa[t] = hi ? 0u : 4u;
            lc.sb[t] = 2 * a + 4 * hi;
        }
        x0 = 4 * (68 * (run + a) + 32 * a);
        x1 = 4 * (68 * (run + (a ^ 1)) + 32 * a);
        s0 = 4 * (4 * (run + a) + 2 * a);
        s1 = 4 * (4 * (run + (a ^ 1)) + 2 * a);
        nbr *= 2;
    } else {
        const uint32_t run = 32 * cs + (uint32_t)lane; /* the chunk's 64-run */
        lc.a = 0;
        x0 = 4 * 68 * run;
        x1 = x0 + 128;
        s0 = s1 = 4 * 2 * run; /* the two sub-blocks' sums: one 8-byte load */
    }
    typename K::sc sc[KQ_M];
    KQ_UNROLL
    for (int m = 0; m < KQ_M; m++)
        if (m == 0 || two)
            K::scales(sc[m], wr[m], off[m] + sbo, q);
    KQ_UNROLL
    for (int r = 0; r < R; r++) {
        if (r >= nr)
            break;
        typename K::ch c[KQ_M] = {};
        typename K::wd w[KQ_M];
        KQ_UNROLL
        for (int m = 0; m < KQ_M; m++)
            if (m == 0 || two)
                K::begin(w[m], wr[m], off[m] + sbo, q);
        const uint32_t xo = 4 * r * xl;
        KQ_UNROLL
        for (int i = 0; i < 8; i++) {
            const float4 xa = xr.f128(xo + x0 + 16 * K::xi(i)), xb = xr.f128(xo + x1 + 16 * K::xi(i));
            KQ_UNROLL
            for (int m = 0; m < KQ_M; m++)
                if (m == 0 || two)
                    K::word(w[m], wr[m], i, lc, xa, xb, c[m]);
        }
        const uint32_t so = 4 * r * nbr;
        const float2 sa = sr.f64(so + s0), sb = K::s16 ? sr.f64(so + s1) : sa;
        KQ_UNROLL
        for (int m = 0; m < KQ_M; m++)
            if (m == 0 || two)
                part[r][m] = kq_add(part[r][m], K::finish(sc[m], c[m], lc, sa, sb));
    }
}

/* kq_lane with row 1's case picked at run time: one unrolled loop a case
 * for one x row, the one loop of KQ_ROW1_RUN for batched rows. */
template <int T, int R, class WR, class XR>
__host__ __device__ __forceinline__ void kq_lane_v1(const WR (&wr)[KQ_M], const uint32_t (&off)[KQ_M], bool v1,
                                                    int lane, uint32_t cs, const XR &xr, uint32_t xl, const XR &sr,
                                                    uint32_t nbr, int nr, float (&part)[R][KQ_M])
{
    if (R > 1)
        kq_lane<T, R, KQ_ROW1_RUN>(wr, off, v1, lane, cs, xr, xl, sr, nbr, nr, part);
    else if (v1)
        kq_lane<T, R, KQ_ROW1_YES>(wr, off, v1, lane, cs, xr, xl, sr, nbr, nr, part);
    else
        kq_lane<T, R, KQ_ROW1_NO>(wr, off, v1, lane, cs, xr, xl, sr, nbr, nr, part);
}

#endif
