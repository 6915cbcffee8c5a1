/* gsw_kernel's K-quant form: the fast tier's Q4_K / Q5_K / Q6_K GEMM of batched
 * decode steps (cuda/gemm_s.cu picks it with MEMRA_BATCH_GSWK=1; gs_kernel
 * otherwise).
 *
 * Why: on gs_kernel (a shared ring per block, each sub-block decoded to
 * f16 in a warp's buffer) the 9B Q4_K's steps of 3 and 4 rows ran slower
 * than its two-row steps (291 / 388 against 436 tok/s, H200, 2026-12-07):
 * its GLU 4096 x 2 x 12288 at 4 rows took 107 us for 57 MB.
 *
 * The layout is gsw_kernel's (cuda/gemm_sw.cu, gemm_sw.cuh): a warp owns 8
 * virtual rows and one slice of K, its own ring of bulk copies, an item
 * being one super-block (256 elements: 144 bytes of Q4_K, 176 of Q5_K,
 * both multiples of 16, so every row's tiles are 16-byte aligned) of each
 * row; x is the mma's A operand, the weights its B operand. Lane (g, t)
 * reads the quant bytes 4t..4t+3 and 16+4t..16+4t+3 of each 64-element
 * group of row g (one word each: their low nibbles are sub-block 2j's
 * elements, their high nibbles sub-block 2j+1's; Q5_K ORs the fifth bit
 * from qh), the same permuted k order as x, and makes exact f16 integers
 * of them (one byte permute and one half subtraction a pair), times the
 * sub-block's 6-bit scale (q·sc <= 31 · 63: still an exact f16). The
 * tensor cores sum the super-block's Σ sc Σ q·x in float32, which d
 * multiplies once; the mins enter as −dmin · Σ m Σ x through one more mma
 * on each x row's sub-block sums (of the staged f16 x, once per block in
 * element order, as f16 high and low parts) (gswk_fold_item). gs_kernel
 * rounds each dequantized weight to f16 instead.
 *
 * Q6_K (210-byte super-blocks) has its own ring (gswk_ring6): in 16-byte
 * aligned rows (K a multiple of 2048) tile j of every row lies 2j mod 16
 * bytes off 16, in other rows each row's tiles have offsets of their own
 * (the RO instance); each tile is copied from the 16 bytes at or below it
 * into a 240-byte slot row, and the lanes read words 2 bytes off a word
 * (two loads and a byte permute) in tiles 2 bytes off a word. Its
 * quants (6 bits: nibbles from ql, two bits from qh) become exact f16 of
 * q - 32, and each 16 elements' int8 scale times d multiplies its mma's
 * float32 sum: no min, no x sums.
 *
 * Split-K and the row invariance are gsw_kernel's: the slicing is a
 * function of the weight's shape and the device, an output row reads its
 * own x row (and its own Σ x) only. Exactness: fast tier only. */
#include <type_traits>

#include "gemm_sw.cuh"

/* Where a super-block's parts lie: scales at 4 (12 bytes, after d and
 * dmin), the fifth bits (Q5_K) at QH, the nibbles at QS. */
template <int T> struct gswk_fmt;
template <> struct gswk_fmt<MEMRA_TYPE_Q4_K> {
    static constexpr int TB = 144, RB = TB, QS = 16, QH = -1;
};
template <> struct gswk_fmt<MEMRA_TYPE_Q5_K> {
    static constexpr int TB = 176, RB = TB, QS = 48, QH = 16;
};
/* Q6_K: ql at 0, qh at 128, int8 scales at 192, d at 208; RB the slot
 * row (rows g in distinct banks: 60 words apart) */
template <> struct gswk_fmt<MEMRA_TYPE_Q6_K> {
    static constexpr int TB = 210, RB = 240, QS = 0, QH = 128;
};

/* Q6_K's ring: gsw_ring's rows and items, each row's tile copied from the
 * 16 bytes at or below it (whole 16 bytes) into a slot row of RB bytes.
 * RO false: the rows are 16-byte aligned, so every row's tile lies the
 * same 2j mod 16 bytes off 16 (off()). RO true (rows of any even length:
 * the E4B's 2560-wide head, 2100 bytes a row; the 26B-A4B's 2816, 2310):
 * row r's tile j lies (b_r + 2j) mod 16 off 16, b_r its slice's first
 * tile's offset, which lane r keeps (bo[p], part p) and the lanes that
 * read row r fetch once (gswk_q6_offs). */
template <bool RO> struct gswk_ring6 : gsw_ring<GSW_ROWS, false, 210> {
    static constexpr int RB = 240, SLOT = GSW_ROWS * RB;
    int64_t kt0;
    uint32_t bo[2];

    /* tile KT's bytes below it to 16, in a 16-byte aligned row */
    static __device__ __forceinline__ uint32_t off(int64_t kt) { return (uint32_t)(2 * kt) & 15u; }
    /* RO: tile J's bytes below it to 16 in a row whose slice starts B off 16 */
    static __device__ __forceinline__ uint32_t tile_off(uint32_t b, int j) { return (b + 2u * (uint32_t)j) & 15u; }
    __device__ __forceinline__ void init(const gs_args &a, uint64_t *bars, uint8_t *ring, int64_t grp, int64_t nv,
                                         int64_t kt0_, int nt_, int lane_)
    {
        gsw_ring::init(a, bars, ring, grp, nv, kt0_, nt_, lane_);
        kt0 = kt0_;
        if constexpr (RO) {
            bo[0] = (uint32_t)((uintptr_t)src0 & 15);
            bo[1] = (uint32_t)((uintptr_t)src1 & 15);
        }
    }
    __device__ __forceinline__ void issue_next()
    {
        if (issued >= nti || !nvalid)
            return;
        const int slot = issued % D, j = issued < nt ? issued : issued - nt;
        const uint32_t bar = bar0 + 8 * slot;
        uint32_t o, n;
        if constexpr (!RO) {
            o = off(kt0 + j);
            n = (o + 210 + 15) & ~15u;
            if (lane == 0)
                mmv_bar_arm(bar, (uint32_t)nvalid * n);
        } else {
            o = tile_off(issued < nt ? bo[0] : bo[1], j);
            n = lane < nvalid ? (o + 210 + 15) & ~15u : 0u;
            const uint32_t total = gsw_group_bytes(n);
            if (lane == 0)
                mmv_bar_arm(bar, total);
        }
        __syncwarp(); /* the bytes are expected before any copy completes */
        if (lane < nvalid) {
            const uint8_t *s = (issued < nt ? src0 : src1) + (size_t)j * 210 - o;
            mmv_bulk_copy_f(ring0 + slot * SLOT + lane * RB, s, n, bar, policy);
        }
        issued++;
    }
    __device__ __forceinline__ void start() { gsw_ring_start(*this); }
};

/* The first tile's offsets (RO) of the rows lane (g, t) reads in each part:
 * its quants' row g, its scales' rows 2t and 2t + 1 (lane r holds row r's) */
struct gswk_q6_offs {
    uint32_t g[2], r0[2], r1[2];
    __device__ __forceinline__ void load(const uint32_t (&bo)[2], int g_, int t)
    {
#pragma unroll
        for (int p = 0; p < 2; p++) {
            g[p] = __shfl_sync(0xffffffffu, bo[p], g_);
            r0[p] = __shfl_sync(0xffffffffu, bo[p], 2 * t);
            r1[p] = __shfl_sync(0xffffffffu, bo[p], 2 * t + 1);
        }
    }
};

static __device__ __forceinline__ uint32_t gswk_lds32(uint32_t a)
{
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}

/* The word at shared address A, which is 2 bytes off a word where HALF */
static __device__ __forceinline__ uint32_t gswk_ldu(uint32_t a, bool half)
{
    if (!half)
        return gswk_lds32(a);
    return __byte_perm(gswk_lds32(a - 2), gswk_lds32(a + 2), 0x5432);
}

/* Q6_K's int8 scale I of a row's four scale words, as float */
static __device__ __forceinline__ float gswk_sc8(const uint32_t (&w)[4], int i)
{
    return (float)((int32_t)(w[i >> 2] << (24 - 8 * (i & 3))) >> 24);
}

/* Four bytes of 0..31 as two f16 pairs, exact: 1024 + b under the
 * exponent of 1024, minus 1024. */
static __device__ __forceinline__ void gswk_u8_h2(uint32_t u, uint32_t *lo, uint32_t *hi)
{
    const __half2 off = __halves2half2(__ushort_as_half(0x6400), __ushort_as_half(0x6400)); /* 1024 */
    uint32_t l = __byte_perm(u, 0x64646464u, 0x5140), h = __byte_perm(u, 0x64646464u, 0x5342);
    const __half2 lh = __hsub2(*reinterpret_cast<const __half2 *>(&l), off);
    const __half2 hh = __hsub2(*reinterpret_cast<const __half2 *>(&h), off);
    *lo = *reinterpret_cast<const uint32_t *>(&lh);
    *hi = *reinterpret_cast<const uint32_t *>(&hh);
}

/* Four bytes of 0..63 as two f16 pairs of b - 32, exact */
static __device__ __forceinline__ void gswk_s6_h2(uint32_t u, uint32_t *lo, uint32_t *hi)
{
    const __half2 off = __halves2half2(__ushort_as_half(0x6420), __ushort_as_half(0x6420)); /* 1056 */
    uint32_t l = __byte_perm(u, 0x64646464u, 0x5140), h = __byte_perm(u, 0x64646464u, 0x5342);
    const __half2 lh = __hsub2(*reinterpret_cast<const __half2 *>(&l), off);
    const __half2 hh = __hsub2(*reinterpret_cast<const __half2 *>(&h), off);
    *lo = *reinterpret_cast<const uint32_t *>(&lh);
    *hi = *reinterpret_cast<const uint32_t *>(&hh);
}

/* Lane t's quant words of 64-element group JJ of a Q4_K / Q5_K row at WG
 * (bytes 4t..4t+3 and 16+4t..16+4t+3 of the nibbles, and of qh), and
 * sub-block 2 JJ + HI's quants 4t..4t+3 (NA) and 16+4t..16+4t+3 (NB) of
 * them, 0..31. */
template <class F> struct gswk_group {
    uint32_t qa, qb, ha = 0u, hb = 0u;
    __device__ __forceinline__ gswk_group(const uint8_t *wg, int jj, int t)
    {
        const uint32_t *qp = reinterpret_cast<const uint32_t *>(wg + F::QS + 32 * jj + 4 * t);
        qa = qp[0];
        qb = qp[4];
        if constexpr (F::QH >= 0) {
            const uint32_t *hp = reinterpret_cast<const uint32_t *>(wg + F::QH + 4 * t);
            ha = hp[0];
            hb = hp[4];
        }
    }
    __device__ __forceinline__ void quants(int s, int hi, uint32_t &na, uint32_t &nb) const
    {
        na = hi ? (qa >> 4) & 0x0f0f0f0fu : qa & 0x0f0f0f0fu;
        nb = hi ? (qb >> 4) & 0x0f0f0f0fu : qb & 0x0f0f0f0fu;
        if constexpr (F::QH >= 0) {
            na |= ((ha >> s) & 0x01010101u) << 4;
            nb |= ((hb >> s) & 0x01010101u) << 4;
        }
    }
};

/* A row's 8 scales and mins as bytes (sc[0..3], sc[4..7], m[0..3],
 * m[4..7]): the 6-bit fields of ggml's 12 scale bytes; a super-block's d
 * and dmin. */
struct gswk_scales {
    uint32_t sc_lo, sc_hi, m_lo, m_hi;
    /* a super-block's d and dmin (its first word) */
    static __device__ __forceinline__ void dmins(const uint8_t *sb, float &d, float &dmin)
    {
        const uint32_t dd = *reinterpret_cast<const uint32_t *>(sb);
        d = __half2float(__ushort_as_half((unsigned short)(dd & 0xffffu)));
        dmin = __half2float(__ushort_as_half((unsigned short)(dd >> 16)));
    }
    __device__ __forceinline__ void load(const uint8_t *sb)
    {
        const uint32_t *w = reinterpret_cast<const uint32_t *>(sb);
        const uint32_t w0 = w[1], w1 = w[2], w2 = w[3];
        sc_lo = w0 & 0x3f3f3f3fu;
        m_lo = w1 & 0x3f3f3f3fu;
        sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
        m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    }
};

/* One Q6_K ring item (the slot at shared address W; row g's tile OG bytes
 * into its slot row, rows 2t and 2t + 1's O0 and O1) into lane (g, t)'s
 * sums C: x rows from XA (+ XOFF,
 * the tile's place in the staged slice), weight row g's quants, rows 2t
 * and 2t + 1's scales. Sub-block s = 4n + k: ql bytes 64n + 32(k & 1) + l
 * (the high nibbles from k = 2), qh bytes 32n + l, bits 2k and 2k + 1;
 * its two 16-element halves take scales 2s and 2s + 1. */
template <int MT, int NX, bool RO>
static __device__ __forceinline__ void gswk_q6_item(float (&c)[4 * MT], uint32_t w, uint32_t og, uint32_t o0,
                                                    uint32_t o1, int g, int t, const uint32_t (&xa)[NX],
                                                    uint32_t xoff)
{
    constexpr int RB = gswk_ring6<false>::RB;
    const bool half = og & 2u, half0 = RO ? (o0 & 2u) != 0 : half, half1 = RO ? (o1 & 2u) != 0 : half;
    const uint32_t wg = w + g * RB + og + 4 * t, r0 = w + 2 * t * RB + (RO ? o0 : og),
                   r1 = RO ? w + (2 * t + 1) * RB + o1 : r0 + RB;
    uint32_t sw0[4], sw1[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        sw0[i] = gswk_ldu(r0 + 192 + 4 * i, half0);
        sw1[i] = gswk_ldu(r1 + 192 + 4 * i, half1);
    }
    unsigned short dh0, dh1;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(dh0) : "r"(r0 + 208));
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(dh1) : "r"(r1 + 208));
    const float d0 = __half2float(__ushort_as_half(dh0)), d1 = __half2float(__ushort_as_half(dh1));
#pragma unroll
    for (int n = 0; n < 2; n++) {
        const uint32_t ql = wg + 64 * n, qh = wg + 128 + 32 * n;
        const uint32_t A0 = gswk_ldu(ql, half), A1 = gswk_ldu(ql + 16, half), B0 = gswk_ldu(ql + 32, half),
                       B1 = gswk_ldu(ql + 48, half), H0 = gswk_ldu(qh, half), H1 = gswk_ldu(qh + 16, half);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int s = 4 * n + k, sq = k >= 2 ? 4 : 0;
            const uint32_t la = (k & 1) ? B0 : A0, lb = (k & 1) ? B1 : A1;
            const uint32_t qa = ((la >> sq) & 0x0f0f0f0fu) | (((H0 >> (2 * k)) & 0x03030303u) << 4);
            const uint32_t qb = ((lb >> sq) & 0x0f0f0f0fu) | (((H1 >> (2 * k)) & 0x03030303u) << 4);
            uint32_t bf0[2], bf1[2];
            gswk_s6_h2(qa, &bf0[0], &bf0[1]);
            gswk_s6_h2(qb, &bf1[0], &bf1[1]);
            const float a0 = d0 * gswk_sc8(sw0, 2 * s), b0 = d0 * gswk_sc8(sw0, 2 * s + 1);
            const float a1 = d1 * gswk_sc8(sw1, 2 * s), b1 = d1 * gswk_sc8(sw1, 2 * s + 1);
#pragma unroll
            for (int m = 0; m < MT; m++) {
                uint32_t af0[4], af1[4];
                gsw_xfrag<NX>(xa, m, xoff + 64 * s, af0, af1);
                float ta[4] = {0.0f, 0.0f, 0.0f, 0.0f}, tb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                gq_mma(ta, af0, bf0);
                gq_mma(tb, af1, bf1);
                c[4 * m] = __fmaf_rn(tb[0], b0, __fmaf_rn(ta[0], a0, c[4 * m]));
                c[4 * m + 1] = __fmaf_rn(tb[1], b1, __fmaf_rn(ta[1], a1, c[4 * m + 1]));
                if (2 * m + 1 < NX) {
                    c[4 * m + 2] = __fmaf_rn(tb[2], b0, __fmaf_rn(ta[2], a0, c[4 * m + 2]));
                    c[4 * m + 3] = __fmaf_rn(tb[3], b1, __fmaf_rn(ta[3], a1, c[4 * m + 3]));
                }
            }
        }
    }
}

/* Halves per x row of the folded form's sub-block sums (gswk_fold_item):
 * at least KT_PER * 8, and 4 (2 m + 1) words so that rows g's four words
 * 2t..2t+1 fall in distinct banks. */
static __host__ __device__ __forceinline__ int gswk_fold_stride(int kt_per)
{
    return 8 * (2 * ((kt_per + 1) / 2) + 1);
}

/* One Q4_K / Q5_K ring item with each sub-block's scale folded into the
 * weights: q·sc (at most 31 · 63 = 1953) is an exact
 * f16, so the item's 16 mma steps sum Σ_s sc_s Σ q·x over the whole
 * super-block in one accumulator, which d multiplies once; the mins enter
 * through one more mma pair: A the x rows' eight sub-block sums (in f16 as
 * a high and a low part, XH and XL: the lane's word of sub-blocks 2t,
 * 2t+1 at SOFF), B row g's eight mins (k = s, s < 8). C, W (the slot), XA
 * and XOFF as gswk_q6_item's. */
template <int MT, int NX, class F>
static __device__ __forceinline__ void gswk_fold_item(float (&c)[4 * MT], const uint8_t *w, int g, int t,
                                                      const uint32_t (&xa)[NX], uint32_t xoff,
                                                      const uint32_t (&xh)[NX], const uint32_t (&xl)[NX],
                                                      uint32_t soff)
{
    const uint8_t *wg = w + g * F::TB;
    gswk_scales sg; /* row g's */
    sg.load(wg);
    __half2 scg[8];
#pragma unroll
    for (int s = 0; s < 8; s++)
        scg[s] = __half2half2(__uint2half_rn(((s < 4 ? sg.sc_lo : sg.sc_hi) >> (8 * (s & 3))) & 0xffu));
    /* B of the mins' mma: row g's mins 2t, 2t + 1 (k = 2t, 2t + 1), zero
     * from k = 8 */
    const uint32_t mw = t < 2 ? sg.m_lo : sg.m_hi;
    const __half2 bmh = __halves2half2(__uint2half_rn((mw >> (16 * (t & 1))) & 0xffu),
                                       __uint2half_rn((mw >> (16 * (t & 1) + 8)) & 0xffu));
    const uint32_t bm[2] = {*reinterpret_cast<const uint32_t *>(&bmh), 0u};
    float tq[MT][4], tm[MT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            tq[m][i] = tm[m][i] = 0.0f;
#pragma unroll
    for (int jj = 0; jj < 4; jj++) {
        const gswk_group<F> qg(wg, jj, t);
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            const int s = 2 * jj + hi;
            uint32_t na, nb;
            qg.quants(s, hi, na, nb);
            uint32_t bf0[2], bf1[2];
            gswk_u8_h2(na, &bf0[0], &bf0[1]);
            gswk_u8_h2(nb, &bf1[0], &bf1[1]);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                __half2 v0 = __hmul2(*reinterpret_cast<const __half2 *>(&bf0[i]), scg[s]);
                __half2 v1 = __hmul2(*reinterpret_cast<const __half2 *>(&bf1[i]), scg[s]);
                bf0[i] = *reinterpret_cast<const uint32_t *>(&v0);
                bf1[i] = *reinterpret_cast<const uint32_t *>(&v1);
            }
#pragma unroll
            for (int m = 0; m < MT; m++) {
                uint32_t af0[4], af1[4];
                gsw_xfrag<NX>(xa, m, xoff + 64 * s, af0, af1);
                gq_mma(tq[m], af0, bf0);
                gq_mma(tq[m], af1, bf1);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MT; m++) {
        uint32_t ah[4] = {gswk_lds32(xh[2 * m] + soff), 0u, 0u, 0u}, al[4] = {gswk_lds32(xl[2 * m] + soff), 0u, 0u, 0u};
        if (2 * m + 1 < NX) {
            ah[1] = gswk_lds32(xh[2 * m + 1] + soff);
            al[1] = gswk_lds32(xl[2 * m + 1] + soff);
        }
        gq_mma(tm[m], ah, bm);
        gq_mma(tm[m], al, bm);
    }
    /* d and dmin of group rows 2t, 2t + 1 */
    float d0, m0, d1, m1;
    gswk_scales::dmins(w + 2 * t * F::TB, d0, m0);
    gswk_scales::dmins(w + (2 * t + 1) * F::TB, d1, m1);
    m0 = -m0;
    m1 = -m1;
#pragma unroll
    for (int m = 0; m < MT; m++) {
        c[4 * m] = __fmaf_rn(tq[m][0], d0, __fmaf_rn(tm[m][0], m0, c[4 * m]));
        c[4 * m + 1] = __fmaf_rn(tq[m][1], d1, __fmaf_rn(tm[m][1], m1, c[4 * m + 1]));
        if (2 * m + 1 < NX) {
            c[4 * m + 2] = __fmaf_rn(tq[m][2], d0, __fmaf_rn(tm[m][2], m0, c[4 * m + 2]));
            c[4 * m + 3] = __fmaf_rn(tq[m][3], d1, __fmaf_rn(tm[m][3], m1, c[4 * m + 3]));
        }
    }
}

/* NX as gsw_kernel's: x row sets of 8 (1, 2, 4: up to 8, 16, 32 rows).
 * Up to 8 rows at three blocks an SM (72-80 registers, no spills; 88 at
 * two), more at two (96-128). */
template <int NX, int T, bool RO = false>
__global__ void __launch_bounds__(GSW_WARPS * 32, NX == 1 ? 3 : 2) gswk_kernel(const gs_args a)
{
    using F = gswk_fmt<T>;
    constexpr int MT = (NX + 1) / 2;                 /* m tiles of 16 x rows */
    constexpr bool MINS = T != MEMRA_TYPE_Q6_K;      /* Q4_K / Q5_K: the min's term, x sums */
    static_assert(!MINS || !RO, "Q4_K / Q5_K rows are 16-byte aligned");
    using ring_t = std::conditional_t<MINS, gsw_ring<GSW_ROWS, false, F::TB>, gswk_ring6<RO>>;
    extern __shared__ __align__(128) uint8_t gsw_smem[];
    __shared__ __align__(8) uint64_t bars[GSW_WARPS][GSWK_RING_MAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int D = a.st;
    const gsw_task<false> tk(a);
    const int np = tk.np, slice = tk.slice, nt = tk.nt, nti = tk.nti, ldx = tk.ldx;
    const int64_t nv = tk.nv, ngroups = tk.ngroups, kt0 = tk.kt0;
    const int xst = gswk_fold_stride(a.kt_per); /* halves per row of each part of the sums */
    uint8_t *ring = gsw_smem + (size_t)warp * D * ring_t::SLOT;
    __half *xs = reinterpret_cast<__half *>(gsw_smem + (size_t)GSW_WARPS * D * ring_t::SLOT);
    __half *xsh = xs + (size_t)a.n * ldx, *xsl = xsh + (size_t)a.n * xst; /* high and low parts */
    const int64_t grp = (int64_t)blockIdx.x * GSW_WARPS + warp;
    const bool live = grp < ngroups;
    ring_t rg;
    rg.init(a, bars[warp], ring, grp, nv, kt0, nt, lane);
    const uint32_t bar0 = rg.bar0;
    rg.start();
    gsw_stage_x<false>(a, xs, kt0, nt, ldx);
    /* each x row's sub-block sums of the staged f16, in element order */
    for (int c = threadIdx.x; MINS && c < a.n * nt * 8; c += GSW_WARPS * 32) {
        const int r = c / (nt * 8), sb = c % (nt * 8);
        const __half2 *p = reinterpret_cast<const __half2 *>(xs + (size_t)r * ldx + 32 * sb);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const float2 f = __half22float2(p[i]);
            s += f.x;
            s += f.y;
        }
        const __half h = __float2half_rn(s);
        xsh[r * xst + sb] = h;
        xsl[r * xst + sb] = __float2half_rn(s - __half2float(h));
    }
    __syncthreads();
    if (!live)
        return;
    const int g = lane >> 2, t = lane & 3;
    gswk_q6_offs qo;
    if constexpr (RO)
        qo.load(rg.bo, g, t);
    /* x row g + 8i's staged slice and sums (row 0 past n: its products
     * land in accumulators that are never stored) */
    uint32_t xa[NX];
    uint32_t xha[NX], xla[NX]; /* the lane's word of sub-blocks 2t, 2t + 1 */
#pragma unroll
    for (int i = 0; i < NX; i++) {
        const int r = g + 8 * i < a.n ? g + 8 * i : 0;
        xa[i] = mmv_saddr(xs + (size_t)r * ldx + 4 * t);
        xha[i] = mmv_saddr(xsh + (size_t)r * xst + 2 * t);
        xla[i] = mmv_saddr(xsl + (size_t)r * xst + 2 * t);
    }
    /* acc[p][4m + c]: m tile m, x row g + 16m (c = 0, 1) or g + 16m + 8
     * (c = 2, 3), group rows 2t + (c & 1) */
    float acc[2][4 * MT];
#pragma unroll
    for (int i = 0; i < 4 * MT; i++)
        acc[0][i] = acc[1][i] = 0.0f;
    uint32_t phase = 0;
    for (int it = 0; it < nti; it++) {
        const int slot = it % D;
        mmv_ring_wait(bar0, slot, phase);
        rg.issue_next();
        const int p = it < nt ? 0 : 1, j = it < nt ? it : it - nt;
        const uint8_t *w = ring + slot * ring_t::SLOT;
        const uint32_t xoff = 2u * (uint32_t)(j * GS_KT);
        float c[4 * MT];
        gsw_take(c, acc, p);
        if constexpr (RO)
            gswk_q6_item<MT, NX, true>(c, mmv_saddr(w), ring_t::tile_off(p ? qo.g[1] : qo.g[0], j),
                                       ring_t::tile_off(p ? qo.r0[1] : qo.r0[0], j),
                                       ring_t::tile_off(p ? qo.r1[1] : qo.r1[0], j), g, t, xa, xoff);
        else if constexpr (!MINS)
            gswk_q6_item<MT, NX, false>(c, mmv_saddr(w), ring_t::off(kt0 + j), 0, 0, g, t, xa, xoff);
        else
            gswk_fold_item<MT, NX, F>(c, w, g, t, xa, xoff, xha, xla, 2u * (uint32_t)(j * 8));
        gsw_keep(acc, c, p);
        __syncwarp(); /* the slot is refilled by a later issue */
    }
    gsw_finish<NX>(a, acc, grp, ngroups, slice, np, g, t);
}

template <int NX, int T> static bool gswk_launch_nx(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s)
{
    if constexpr (T == MEMRA_TYPE_Q6_K)
        return gsw_launch_k(a.odd ? gswk_kernel<NX, T, true> : gswk_kernel<NX, T>, a, grid_x, smem, s);
    else
        return gsw_launch_k(gswk_kernel<NX, T>, a, grid_x, smem, s);
}

template <int T> static bool gswk_launch_t(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s)
{
    return a.n <= 8    ? gswk_launch_nx<1, T>(a, grid_x, smem, s)
           : a.n <= 16 ? gswk_launch_nx<2, T>(a, grid_x, smem, s)
                       : gswk_launch_nx<4, T>(a, grid_x, smem, s);
}

int gswk_row_bytes(int type, bool *xsum)
{
    if (xsum)
        *xsum = type != MEMRA_TYPE_Q6_K;
    switch (type) {
    case MEMRA_TYPE_Q4_K: return gswk_fmt<MEMRA_TYPE_Q4_K>::RB;
    case MEMRA_TYPE_Q5_K: return gswk_fmt<MEMRA_TYPE_Q5_K>::RB;
    case MEMRA_TYPE_Q6_K: return gswk_fmt<MEMRA_TYPE_Q6_K>::RB;
    default: return 0;
    }
}

size_t gswk_sums_bytes(int n, int kt_per)
{
    return 2 * (size_t)n * gswk_fold_stride(kt_per) * sizeof(__half);
}

bool gswk_launch(int type, const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s)
{
    if (a.st < 2 || a.st > GSWK_RING_MAX || a.n < 1 || a.n > GSW_MAXN || a.kt_per > GSW_KT_MAX ||
        (a.odd && type != MEMRA_TYPE_Q6_K) || a.K % GS_KT)
        return false;
    switch (type) {
    case MEMRA_TYPE_Q4_K: return gswk_launch_t<MEMRA_TYPE_Q4_K>(a, grid_x, smem, s);
    case MEMRA_TYPE_Q5_K: return gswk_launch_t<MEMRA_TYPE_Q5_K>(a, grid_x, smem, s);
    case MEMRA_TYPE_Q6_K: return gswk_launch_t<MEMRA_TYPE_Q6_K>(a, grid_x, smem, s);
    default: return false;
    }
}
