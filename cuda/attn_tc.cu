/* Fast-mode prefill attention on tensor cores (flash attention, tiled).
 *
 * A block owns 64 queries of one head and DV of its output columns; each
 * of its four warps owns 16 of the queries. The key loop walks BK keys at
 * a time (64, or 32 for head_dim 256 and 512: shared memory): K (every
 * head_dim column) and V (the block's DV columns) are read from the cache
 * (float32, f16, bf16 or Q8_0 rows, K and V of one type) into shared
 * memory as f16, S = Q·Kᵀ and O += P·V run on
 * mma.sync m16n8k16 with float32 accumulation, and the online softmax
 * (max, rescale, exp2) stays in float32 registers. q and k are kept as two
 * f16 parts (hi + lo) and the scores summed from hi·hi + hi·lo + lo·hi:
 * gemma4 does not scale its scores, and f16 q and k alone moved its
 * fixtures' fast-prefill logits by 5.6e-3 (and flipped a g4-moe routing).
 * P and V are single f16. The scores are recomputed by each DV slice of a
 * wide head (256 and 512 run in 128-column slices): the O accumulators of
 * a whole 512-wide head would not fit in registers.
 *
 * Invariance: key tiles start at multiples of BK of the absolute key index
 * and a tile a query cannot see changes nothing of its row (its scores are
 * -inf: the row max, the rescale factor 1 and the sums stay as they were),
 * so a query's output depends only on its position and the cache, never on
 * the chunking or on the other queries of its block (kernel-check
 * attention.fast.chunkinv compares chunkings bit for bit).
 *
 * Key splits (256-wide heads, fa_tc_pair_kernel): a query tile's keys are
 * cut at multiples of MEMRA_FA_TC_SPLIT keys (default 4096) of the
 * absolute key index, one block a split, and tc_merge_kernel combines the
 * splits' partials in split order. At depth 16384 a 512-token chunk of the
 * Qwen3.5-9B is 640 blocks instead of 128, two an SM on an f16 cache
 * (pp512 there 8045 -> 9172 tok/s, the 27B's 2847 -> 2974; H200,
 * 2026-12-04). A query's splits depend on its tile's key range only, and
 * a tile whose keys lie in one split is written as before (the same
 * bits), so the invariance below holds (attention.fast.chunkinv.split).
 *
 * Exactness: the fast tier only (f16 operands, the tensor core's sums).
 * Exact mode and decode-sized calls keep the float32 flash-decoding kernel
 * (cuda/ops_attn.cu). MEMRA_FA_TC=0 turns this path off. */
#include <math.h>
#include <stdint.h>

#include "cuda_common.cuh"
#include "gemm_q.cuh" /* gq_mma, gq_ldmatrix_x4, gq_pack */
#include "kv_types.cuh"
#include "math.cuh"

#define TC_BQ 64      /* queries per block */
#define TC_THREADS 128

struct tc_args {
    memra_attn_args_t a;
    size_t k_rs, v_rs; /* bytes between cached K rows, V rows */
    int64_t n_qt;     /* query tiles */
    float scale_log2; /* scale · log2(e): the softmax in base 2 */
    /* key splits (fa_tc_pair_kernel): split_keys > 0 cuts each query
     * tile's keys at multiples of split_keys (absolute key indices); a
     * tile with keys in several splits writes one partial a split into
     * part ([token - qt0 * TC_BQ][head][split - the tile's first][hd + 2]:
     * o unnormalized, the row max in base 2, the row sum) and tc_merge_kernel
     * writes its output. Tiles qt0 .. qt0 + n_qt - 1 of the call. */
    int64_t split_keys, qt0, max_splits;
    float *part;
    /* fa_tc_pair_kernel: tiles every row of a row block sees skip the
     * per-key mask (MEMRA_FA_TC_FULL; the same bits) */
    int full_tiles;
};

static __device__ __forceinline__ void tc_ldmatrix_x4_trans(uint32_t *r, const __half *p)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* ROWS x W elements from SRC (rows at or past
 * N_ROWS read as zero; elements of cache type T, rows SRC_BYTES apart) into f16 shared rows LD halves apart; with LO, the
 * remainder x - f16(x) rounded to f16 as well (hi + lo carries about 22
 * bits of x). */
template <int ROWS, int W, int LD, bool SPLIT, int T, int NTH = TC_THREADS>
static __device__ __forceinline__ void tc_load_rows(__half *dst, __half *lo, const char *src, size_t src_bytes,
                                                    int n_rows)
{
    constexpr int C4 = W / 4, N = ROWS * C4 / NTH, U = N < 8 ? N : 8;
    static_assert(N * NTH == ROWS * C4 && N % U == 0, "tile shape");
    float4 v[U];
    for (int i0 = 0; i0 < N; i0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = (i0 + u) * NTH + threadIdx.x, r = i / C4, c = i % C4;
            if (T == KV_F16) { /* already f16: the bytes as they are (an f16 k has no remainder) */
                const uint2 h = r < n_rows ? __ldg((const uint2 *)(src + r * src_bytes) + c) : make_uint2(0u, 0u);
                v[u] = make_float4(__uint_as_float(h.x), __uint_as_float(h.y), 0.f, 0.f);
            } else {
                v[u] = r < n_rows ? kv_load4<T>(src + r * src_bytes, c) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = (i0 + u) * NTH + threadIdx.x, r = i / C4, c = i % C4;
            if (T == KV_F16) {
                *(uint2 *)(dst + r * LD + c * 4) = make_uint2(__float_as_uint(v[u].x), __float_as_uint(v[u].y));
                continue;
            }
            const __half2 h0 = __floats2half2_rn(v[u].x, v[u].y), h1 = __floats2half2_rn(v[u].z, v[u].w);
            uint2 h;
            h.x = *reinterpret_cast<const uint32_t *>(&h0);
            h.y = *reinterpret_cast<const uint32_t *>(&h1);
            *(uint2 *)(dst + r * LD + c * 4) = h;
            if (SPLIT) {
                const float2 f0 = __half22float2(h0), f1 = __half22float2(h1);
                uint2 l;
                l.x = gq_pack(v[u].x - f0.x, v[u].y - f0.y);
                l.y = gq_pack(v[u].z - f1.x, v[u].w - f1.y);
                *(uint2 *)(lo + r * LD + c * 4) = l;
            }
        }
    }
}

/* ROWS x W f16 elements (rows SRC_BYTES apart, 16-byte aligned) into shared
 * rows LD halves apart by 16-byte cp.async copies, rows at or past N_ROWS
 * zero-filled; the caller commits and waits. */
template <int ROWS, int W, int LD, int NTH>
static __device__ __forceinline__ void tc_async_rows(__half *dst, const char *src, size_t src_bytes, int n_rows)
{
    constexpr int C16 = W * 2 / 16, N = ROWS * C16 / NTH;
    static_assert(N * NTH == ROWS * C16, "tile shape");
#pragma unroll
    for (int u = 0; u < N; u++) {
        const int i = u * NTH + threadIdx.x, r = i / C16, c = i % C16;
        const unsigned d = (unsigned)__cvta_generic_to_shared(dst + r * LD + c * 8);
        const char *g = src + (r < n_rows ? r : 0) * src_bytes + c * 16; /* read nothing past the rows */
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(g), "r"(r < n_rows ? 16 : 0)
                     : "memory");
    }
}

/* A block's keys and one thread's two query rows: keys [k_lo, k_end)
 * (k_lo a multiple of BK), rows r0 and r0 + 8 of the 16 from row `base`,
 * and those 16 rows' positions [wp_lo, wp_hi], to skip tiles they cannot
 * see (the same for every warp that holds them). */
struct tc_rows {
    int64_t k_lo, k_end, p0, p1, wp_lo, wp_hi;
    int r0;
    bool v0, v1, any;
    __device__ __forceinline__ tc_rows(const memra_attn_args_t &a, int64_t t0, int nq, int bk, int base, int g)
    {
        const int64_t p_first = a.pos0 + t0;
        tile_keys(a, t0, nq, bk, &k_lo, &k_end);
        r0 = base + g;
        p0 = p_first + r0;
        p1 = p0 + 8;
        v0 = r0 < nq;
        v1 = r0 + 8 < nq;
        any = base < nq;
        wp_lo = p_first + base;
        wp_hi = p_first + min(base + 15, nq - 1);
    }
    /* the tile's key range (every row of it) */
    static __device__ __forceinline__ void tile_keys(const memra_attn_args_t &a, int64_t t0, int nq, int bk,
                                                     int64_t *lo, int64_t *end)
    {
        const int64_t p_first = a.pos0 + t0;
        *end = p_first + nq;
        *lo = a.n_swa > 0 && p_first - a.n_swa + 1 > 0 ? p_first - a.n_swa + 1 : 0;
        *lo -= *lo % bk;
    }
    /* whether the 16 rows see any key of [k0, k0 + bk) */
    __device__ __forceinline__ bool seen(const memra_attn_args_t &a, int64_t k0, int bk) const
    {
        return any && k0 <= wp_hi && (a.n_swa <= 0 || k0 + bk - 1 > wp_lo - a.n_swa);
    }
    /* whether all 16 rows see every key of [k0, k0 + bk) (each key at or
     * before the first row, the last row's window reaching k0) */
    __device__ __forceinline__ bool sees_all(const memra_attn_args_t &a, int64_t k0, int bk) const
    {
        return any && wp_hi - wp_lo == 15 && k0 + bk - 1 <= wp_lo && (a.n_swa <= 0 || wp_hi - k0 < a.n_swa);
    }
    /* whether row e < 2 ? r0 : r0 + 8 sees KEY */
    __device__ __forceinline__ bool sees(const memra_attn_args_t &a, int e, int64_t key) const
    {
        const int64_t p = e < 2 ? p0 : p1;
        return (e < 2 ? v0 : v1) && key <= p && (a.n_swa <= 0 || p - key < a.n_swa);
    }
};

/* In a kernel with s[][4], q's fragments qa (f16) and ql (its remainder,
 * with QLO) and k's kf and kl (its remainder, not on an f16 cache): the
 * scores of key chunk JJ's two 8-key halves, as hi·hi + hi·lo + lo·hi:
 * about float32's precision (gemma4's unscaled scores reach tens: f16 q and
 * k alone moved its fixtures' logits by 5e-3; an f16 cache's k is exact in
 * f16). A macro, as TC_MASK_MAX below. */
#define TC_QK_MMA(JJ)                                                                                                  \
    {                                                                                                                  \
        if (QLO)                                                                                                       \
            gq_mma(s[2 * (JJ)], ql, kf);                                                                               \
        if (T != KV_F16)                                                                                               \
            gq_mma(s[2 * (JJ)], qa, kl);                                                                               \
        gq_mma(s[2 * (JJ)], qa, kf);                                                                                   \
        if (QLO)                                                                                                       \
            gq_mma(s[2 * (JJ) + 1], ql, kf + 2);                                                                       \
        if (T != KV_F16)                                                                                               \
            gq_mma(s[2 * (JJ) + 1], qa, kl + 2);                                                                       \
        gq_mma(s[2 * (JJ) + 1], qa, kf + 2);                                                                           \
    }

/* S = Q·Kᵀ of one warp: its 16 MT q rows ROW0.. (Qs, and with QLO the f16
 * remainders Ql; row block mt's scores in s[mt]) against NK keys KEY0..
 * (Ks, and off an f16 cache Kl), the fragments by ldmatrix, the mmas in
 * TC_QK_MMA's order; s starts at zero. Both kernels' score loop; with MT
 * row blocks each k fragment feeds MT of them (each row block's mmas the
 * one-block loop's, in its order). */
template <int HD, int NK, int LQ, int T, bool QLO, int MT = 1>
static __device__ __forceinline__ void tc_qk_scores(float (&sm)[MT][NK / 8][4], const __half *Qs, const __half *Ql,
                                                    const __half *Ks, const __half *Kl, int row0, int key0,
                                                    int lane)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < NK / 8; j++)
            sm[mt][j][0] = sm[mt][j][1] = sm[mt][j][2] = sm[mt][j][3] = 0.0f;
    const int mi = lane >> 3, r = lane & 7;
#pragma unroll 4
    for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t qm[MT][4], qlm[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int qo = (row0 + mt * 16 + (mi & 1) * 8 + r) * LQ + kk * 16 + (mi >> 1) * 8;
            gq_ldmatrix_x4(qm[mt], Qs + qo);
            if (QLO)
                gq_ldmatrix_x4(qlm[mt], Ql + qo);
        }
#pragma unroll
        for (int jj = 0; jj < NK / 16; jj++) {
            uint32_t kf[4], kl[4];
            const int ko = (key0 + jj * 16 + (mi >> 1) * 8 + r) * LQ + kk * 16 + (mi & 1) * 8;
            gq_ldmatrix_x4(kf, Ks + ko);
            if (T != KV_F16)
                gq_ldmatrix_x4(kl, Kl + ko);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                float(&s)[NK / 8][4] = sm[mt];
                const uint32_t *qa = qm[mt], *ql = qlm[mt];
                TC_QK_MMA(jj)
            }
        }
    }
}

/* In a kernel with s[NJ][4] (a thread's scores of two rows), rw, a, f and
 * tig: the scores (keys KEY0 + j * 8 + tig * 2 + (e & 1)) scaled to base 2,
 * -inf where the row cannot see the key, and each row's maximum over its
 * four threads declared as mx0 and mx1. FULL (warp-uniform): every row of
 * the 16 sees every key of the tile, so the per-key test is skipped (the
 * same products and maxima). A macro: as a function it changed both
 * kernels' PTX, which is what the kernel check verified. */
#define TC_MASK_MAX(NJ, KEY0) TC_MASK_MAX_IF(NJ, KEY0, false)
/* s[j][e] = V, then into its row's maximum (e < 2: the first row) */
#define TC_SCORE_MAX(V)                                                                            \
    {                                                                                              \
        s[j][e] = (V);                                                                             \
        if (e < 2)                                                                                 \
            mx0 = fmaxf(mx0, s[j][e]);                                                             \
        else                                                                                       \
            mx1 = fmaxf(mx1, s[j][e]);                                                             \
    }
#define TC_MASK_MAX_IF(NJ, KEY0, FULL)                                                             \
    float mx0 = -INFINITY, mx1 = -INFINITY;                                                        \
    if (FULL) {                                                                                    \
        _Pragma("unroll") for (int j = 0; j < (NJ); j++) _Pragma("unroll") for (int e = 0; e < 4; e++) \
            TC_SCORE_MAX(s[j][e] * f.scale_log2)                                                   \
    } else {                                                                                       \
        _Pragma("unroll") for (int j = 0; j < (NJ); j++) _Pragma("unroll") for (int e = 0; e < 4; e++) \
        {                                                                                          \
            const int64_t key = (KEY0) + j * 8 + tig * 2 + (e & 1);                                \
            TC_SCORE_MAX(rw.sees(a, e, key) ? s[j][e] * f.scale_log2 : -INFINITY)                  \
        }                                                                                          \
    }                                                                                              \
    _Pragma("unroll") for (int x = 1; x <= 2; x <<= 1)                                             \
    {                                                                                              \
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));                                   \
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));                                   \
    }

/* The online softmax's step (base 2) for a thread's two rows, given the
 * tile's row maxima mx0, mx1: the new maxima, s[][] replaced by exp2(s -
 * max), the sums (this thread's columns) and o rescaled. A row that has
 * seen no key yet keeps -inf: its reference is 0. emit(j) runs once s[j]
 * is final (the pair kernel writes its part of P there). */
template <int NJ, int NO, class Emit>
static __device__ __forceinline__ void tc_softmax_step(float (&s)[NJ][4], float (&o)[NO][4], float mx0, float mx1,
                                                       float &m0, float &m1, float &l0, float &l1, Emit emit)
{
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float ref0 = mn0 == -INFINITY ? 0.0f : mn0, ref1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float al0 = exp2f(m0 - ref0), al1 = exp2f(m1 - ref1);
    m0 = mn0;
    m1 = mn1;
    float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        s[j][0] = exp2f(s[j][0] - ref0);
        s[j][1] = exp2f(s[j][1] - ref0);
        s[j][2] = exp2f(s[j][2] - ref1);
        s[j][3] = exp2f(s[j][3] - ref1);
        ps0 += s[j][0] + s[j][1];
        ps1 += s[j][2] + s[j][3];
        emit(j);
    }
    l0 = l0 * al0 + ps0;
    l1 = l1 * al1 + ps1;
#pragma unroll
    for (int j = 0; j < NO; j++) {
        o[j][0] *= al0;
        o[j][1] *= al0;
        o[j][2] *= al1;
        o[j][3] *= al1;
    }
}

/* A thread's two rows of output columns COL0 .. COL0 + DV - 1 of head H:
 * o times each row's 1 / sum, times sigmoid(gate) where the layer gates
 * (elementwise MUL_SIGMOID's arithmetic, cuda/ops_norm.cu). */
template <int DV>
static __device__ __forceinline__ void tc_store_out(const memra_attn_args_t &a, const tc_rows &rw, int64_t t0, int64_t h,
                                                    int64_t col0, int hd, int tig, const float (&o)[DV / 8][4],
                                                    float inv0, float inv1)
{
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        if (!(hf ? rw.v1 : rw.v0))
            continue;
        const int64_t t = t0 + rw.r0 + hf * 8;
        float *out = a.out + t * a.n_head * hd + h * hd + col0;
        const float inv = hf ? inv1 : inv0;
#pragma unroll
        for (int j = 0; j < DV / 8; j++) {
            const int d = j * 8 + tig * 2;
            float x0 = o[j][2 * hf] * inv, x1 = o[j][2 * hf + 1] * inv;
            if (a.gate) {
                const float *gp = a.gate + t * a.gate_stride + h * a.gate_head_stride + col0 + d;
                x0 = (float)((double)x0 * d_sigmoid((double)gp[0]));
                x1 = (float)((double)x1 * d_sigmoid((double)gp[1]));
            }
            *(float2 *)(out + d) = make_float2(x0, x1);
        }
    }
}

template <int HD, int DV, int BK, int T, bool QLO = true>
__global__ void __launch_bounds__(TC_THREADS) fa_tc_kernel(const tc_args f)
{
    constexpr int LQ = HD + 8, LV = DV + 8; /* padded rows: ldmatrix rows land in distinct banks */
    extern __shared__ __align__(16) unsigned char tc_smem[];
    __half *Qs = (__half *)tc_smem;   /* [TC_BQ][LQ] */
    __half *Ql = Qs + TC_BQ * LQ;     /* [TC_BQ][LQ]: q - f16(q) */
    __half *Ks = Ql + TC_BQ * LQ;     /* [BK][LQ] */
    __half *Kl = Ks + BK * LQ;        /* [BK][LQ]: k - f16(k) */
    __half *Vs = Kl + BK * LQ;        /* [BK][LV] */
    const memra_attn_args_t &a = f.a;
    const int64_t qt = f.n_qt - 1 - blockIdx.x; /* the longest key ranges first */
    const int64_t h = blockIdx.y, dv0 = (int64_t)blockIdx.z * DV;
    const int64_t t0 = qt * TC_BQ;
    const int nq = (int)min((int64_t)TC_BQ, a.n_tokens - t0);
    const int64_t kvh = h / (a.n_head / a.n_kv_head);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    MEMRA_PDL_ENTER();

    tc_load_rows<TC_BQ, HD, LQ, QLO, KV_F32>(Qs, Ql, (const char *)(a.q + t0 * a.q_stride + h * HD),
                                            (size_t)a.q_stride * sizeof(float), nq);

    const tc_rows rw(a, t0, nq, BK, warp * 16, g); /* this warp's 16 rows */

    float o[DV / 8][4];
#pragma unroll
    for (int j = 0; j < DV / 8; j++)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    const char *kb = (const char *)a.k_cache + (int64_t)kv_head_bytes(T, kvh * HD);
    const char *vb = (const char *)a.v_cache + (int64_t)kv_head_bytes(T, kvh * HD + dv0);
    for (int64_t k0 = rw.k_lo; k0 < rw.k_end; k0 += BK) {
        const int nk = (int)min((int64_t)BK, rw.k_end - k0);
        __syncthreads(); /* the previous tile's K and V are read */
        tc_load_rows<BK, HD, LQ, T != KV_F16, T>(Ks, Kl, kb + k0 * f.k_rs, f.k_rs, nk);
        tc_load_rows<BK, DV, LV, false, T>(Vs, NULL, vb + k0 * f.v_rs, f.v_rs, nk);
        __syncthreads();
        if (!rw.seen(a, k0, BK))
            continue;
        /* S = Q·Kᵀ: 16 rows x 64 keys per warp */
        float sm[1][BK / 8][4];
        float(&s)[BK / 8][4] = sm[0];
        tc_qk_scores<HD, BK, LQ, T, QLO>(sm, Qs, Ql, Ks, Kl, warp * 16, 0, lane);
        /* mask, scale, online softmax (base 2), per row */
        TC_MASK_MAX(BK / 8, k0)
        /* the row's four threads' sums are added at the end */
        tc_softmax_step(s, o, mx0, mx1, m0, m1, l0, l1, [](int) {});
        /* O += P·V: the score fragments are the A fragments of P */
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint32_t pa[4]; /* P in f16: weights in [0, 1], their rounding averages out in the sums */
            pa[0] = gq_pack(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = gq_pack(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = gq_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = gq_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int jj = 0; jj < DV / 16; jj++) {
                uint32_t vf[4];
                const int mi = lane >> 3, r = lane & 7;
                tc_ldmatrix_x4_trans(vf, Vs + (kk * 16 + (mi & 1) * 8 + r) * LV + jj * 16 + (mi >> 1) * 8);
                gq_mma(o[2 * jj], pa, vf);
                gq_mma(o[2 * jj + 1], pa, vf + 2);
            }
        }
    }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, x);
        l1 += __shfl_xor_sync(0xffffffffu, l1, x);
    }
    tc_store_out<DV>(a, rw, t0, h, dv0, HD, tig, o, 1.0f / l0, 1.0f / l1);
}

template <int HD, int DV, int BK, int T, bool QLO>
static memra_status_t tc_launch_t(memra__backend_t *be, const tc_args &f)
{
    const size_t smem = ((size_t)2 * (TC_BQ + BK) * (HD + 8) + (size_t)BK * (DV + 8)) * sizeof(__half);
    /* per device (pipeline stages run on several) */
    MEMRA_CUDA_TRY(be, cudaFuncSetAttribute(fa_tc_kernel<HD, DV, BK, T, QLO>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)f.n_qt, (unsigned)f.a.n_head, (unsigned)(HD / DV));
    memra__launch(fa_tc_kernel<HD, DV, BK, T, QLO>, grid, TC_THREADS, smem, memra__cuda_ctx(be)->stream, f);
    MEMRA_CUDA_LAUNCHED(be);
    memra__cuda_ctx(be)->after_step = true;
    return MEMRA_OK;
}

template <int HD, int DV, int BK, bool QLO = true>
static memra_status_t tc_launch(memra__backend_t *be, const tc_args &f, int t)
{
    switch (t) {
    case KV_F16: return tc_launch_t<HD, DV, BK, KV_F16, QLO>(be, f);
    case KV_BF16: return tc_launch_t<HD, DV, BK, KV_BF16, QLO>(be, f);
    case KV_Q8_0: return tc_launch_t<HD, DV, BK, KV_Q8_0, QLO>(be, f);
    default: return tc_launch_t<HD, DV, BK, KV_F32, QLO>(be, f);
    }
}

/* ---- wide heads: the scores shared by the output slices ---------------------- */

/* fa_tc_kernel recomputes a wide head's scores for each 128-column output
 * slice (256: twice, two q·k products each on an f16 cache, three on the
 * others). Here a block of 4 x NSL warps owns 64 queries and the whole
 * head: warps w and w + 4, w + 8, ... share the same 16 query rows; each
 * computes the scores of its own part of a key tile (BK / NSL keys), the
 * parts' row maxima are exchanged through shared memory (a barrier per
 * pair of warps, named 1 + w), each writes its part of P (f16) and then
 * multiplies the whole tile's P by V for its 128 output columns. The row
 * sums are kept per part and added in part order at the end. The same
 * tiles and masks as fa_tc_kernel (key tiles at multiples of BK), so a
 * query's output still depends only on its position and the cache; its
 * sums are not fa_tc_kernel's (fast tier: kernel-check attention.fast.*).
 * MEMRA_FA_TC_PAIRS=0 keeps fa_tc_kernel. */
static __device__ __forceinline__ void tc_rows_sync(int id)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(64) : "memory");
}

template <int HD, int BK, int T, bool QLO, int MT = 1> struct tc_pair_shape {
    static constexpr int NSL = HD / 128, DV = 128, NTH = 128 * NSL, KH = BK / NSL, BQ = TC_BQ * MT;
    static constexpr int LQ = HD + 8, LV = HD + 8, LP = BK + 8;
    static constexpr size_t smem = ((size_t)(QLO ? 2 : 1) * BQ * LQ + (size_t)(T != KV_F16 ? 2 : 1) * BK * LQ +
                                    (size_t)BK * LV + (size_t)BQ * LP) * sizeof(__half) +
                                   (size_t)2 * NSL * BQ * sizeof(float);
    /* two blocks an SM where their shared memory fits (an f16 cache
     * without q's remainder: 109 KB each), so that one block's loads
     * overlap the other's tensor-core work; 128 registers then. MT = 2
     * (152 KB, the o accumulators of two row blocks): one */
    static constexpr int MINB = 2 * (smem + 1024) <= 228 * 1024 ? 2 : 1;
};

/* PIPE (an f16 cache, 16-byte aligned rows): K and V tiles by cp.async,
 * the next tile's K issued once this tile's scores are done and its V once
 * its P·V is, so the loads run under the softmax and the next scores; the
 * same arithmetic in the same order (the default; MEMRA_FA_TC_PIPE=0 loads
 * through registers). The 9B's pp512 at depth 16384 +3 % (2026-12-04).
 *
 * MT = 2 (PIPE's default; MEMRA_FA_TC_M32=0 keeps one row block): a block
 * owns two query tiles (128 queries) and each warp two 16-row blocks of
 * one of them, so that each K fragment feeds two rows' mmas and each V
 * fragment two. With one row block a warp, a 64-key tile costs 84
 * ldmatrix.x4 (43 KB of shared-memory reads) for its 128 mmas; two row
 * blocks read 52 KB for 256 mmas, in one block an SM (255 registers). The
 * 9B's pp512 at depth 16384 +1.6 %, not the ~1.6x that a kernel bound by
 * shared-memory reads would take (H100, 2026-12-06): the reads were not
 * the bound. The block's keys are the union of its tiles' ranges; a tile
 * of keys that a row block cannot see leaves its rows as they were (as for
 * partly seen tiles with one row block), and each query tile keeps its own
 * splits (its partials, or its output where its keys lie in one split), so
 * each row's arithmetic is the one-tile block's: the same bits (kernel
 * check attention.kv.f16.fast*.vs_f32: the f16 cache's path against the
 * f32 rows', which keep one row block). */
template <int HD, int BK, int T, bool QLO = true, bool PIPE = false, int MT = 1>
__global__ void __launch_bounds__(tc_pair_shape<HD, BK, T, QLO, MT>::NTH, tc_pair_shape<HD, BK, T, QLO, MT>::MINB)
    fa_tc_pair_kernel(const tc_args f)
{
    using S = tc_pair_shape<HD, BK, T, QLO, MT>;
    static_assert(!PIPE || T == KV_F16, "cp.async copies the cache's f16 bytes as they are");
    static_assert(MT == 1 || (MT == 2 && PIPE), "two row blocks a warp: the cp.async path only");
    constexpr int NSL = S::NSL, DV = S::DV, NTH = S::NTH, KH = S::KH, LQ = S::LQ, LV = S::LV, LP = S::LP, BQ = S::BQ;
    static_assert(NSL == 2, "pairs of warps: a named barrier of 64 threads");
    static_assert(KH % 16 == 0, "a warp's part of a key tile: whole k16 chunks");
    extern __shared__ __align__(16) unsigned char tc_smem[];
    __half *Qs = (__half *)tc_smem;                     /* [BQ][LQ] */
    __half *Ql = Qs + BQ * LQ;                          /* [BQ][LQ]: q - f16(q) (with QLO) */
    __half *Ks = Ql + (QLO ? BQ * LQ : 0);              /* [BK][LQ] */
    __half *Kl = Ks + BK * LQ;                          /* [BK][LQ]: k - f16(k) (not on an f16 cache) */
    __half *Vs = Kl + (T != KV_F16 ? BK * LQ : 0);      /* [BK][LV]: every column */
    __half *Ps = Vs + BK * LV;                          /* [BQ][LP]: the tile's P */
    float *xm = (float *)(Ps + BQ * LP);                /* [NSL][BQ]: each part's row maxima */
    float *xl = xm + NSL * BQ;                          /* [NSL][BQ]: each part's row sums */
    const memra_attn_args_t &a = f.a;
    /* the block's first query tile: the longest key ranges first */
    const int64_t nb = (f.n_qt + MT - 1) / MT, qt = f.qt0 + (nb - 1 - blockIdx.x) * MT;
    const int64_t h = blockIdx.y;
    const int64_t t0 = qt * TC_BQ;
    const int nq = (int)min((int64_t)BQ, a.n_tokens - t0);
    const int64_t kvh = h / (a.n_head / a.n_kv_head);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const int rg = warp & 3, cs = warp >> 2; /* rows rg*16*MT .. +16*MT-1; key part and output slice cs */
    /* this warp's query tile (both row blocks lie in it) and its keys */
    const int tt = rg * MT / 4;
    const int64_t tq0 = t0 + (int64_t)tt * TC_BQ;
    int64_t tk_lo, tk_end;
    tc_rows::tile_keys(a, tq0, (int)max((int64_t)1, min((int64_t)TC_BQ, a.n_tokens - tq0)), BK, &tk_lo, &tk_end);
    /* this block's keys: its tiles', or one split of them (blockIdx.z) */
    int64_t ks_lo, ks_end, sp = 0;
    tc_rows::tile_keys(a, t0, nq, BK, &ks_lo, &ks_end);
    if (f.split_keys > 0) {
        sp = ks_lo / f.split_keys + blockIdx.z;
        if (sp * f.split_keys >= ks_end)
            return; /* past the tiles' keys */
        ks_lo = max(ks_lo, sp * f.split_keys);
        ks_end = min(ks_end, (sp + 1) * f.split_keys);
    } else if (blockIdx.z > 0) {
        return; /* one split: block 0 writes the output */
    }
    /* the warp's tile: keys in several splits (partials, this split's at
     * sp - its first), and whether this split holds any of its keys */
    const int64_t ts_lo = f.split_keys > 0 ? tk_lo / f.split_keys : 0;
    const bool split = f.split_keys > 0 && (tk_end - 1) / f.split_keys > ts_lo;
    const bool mine = f.split_keys == 0 || (sp >= ts_lo && sp <= (tk_end - 1) / f.split_keys);
    MEMRA_PDL_ENTER();

    tc_load_rows<BQ, HD, LQ, QLO, KV_F32, NTH>(Qs, Ql, (const char *)(a.q + t0 * a.q_stride + h * HD),
                                              (size_t)a.q_stride * sizeof(float), nq);

    /* this warp pair's row blocks (the first MT) */
    const tc_rows rws[2] = {tc_rows(a, t0, nq, BK, rg * 16 * MT, g), tc_rows(a, t0, nq, BK, rg * 16 * MT + 16, g)};

    float o[MT][DV / 8][4];
    float m0[MT], m1[MT], l0[MT], l1[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int j = 0; j < DV / 8; j++)
            o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;
        m0[mt] = m1[mt] = -INFINITY;
        l0[mt] = l1[mt] = 0.0f;
    }

    const char *kb = (const char *)a.k_cache + (int64_t)kv_head_bytes(T, kvh * HD);
    const char *vb = (const char *)a.v_cache + (int64_t)kv_head_bytes(T, kvh * HD);
    const int mi = lane >> 3, r = lane & 7;
    const int64_t k_end = rws[0].k_end; /* the block's last key + 1 */
    if constexpr (PIPE) { /* the first tile's K, then its V: two groups */
        tc_async_rows<BK, HD, LQ, NTH>(Ks, kb + ks_lo * f.k_rs, f.k_rs, (int)min((int64_t)BK, k_end - ks_lo));
        cp_async_commit();
        tc_async_rows<BK, HD, LV, NTH>(Vs, vb + ks_lo * f.v_rs, f.v_rs, (int)min((int64_t)BK, k_end - ks_lo));
        cp_async_commit();
    }
    for (int64_t k0 = ks_lo; k0 < ks_end; k0 += BK) {
        const int nk = (int)min((int64_t)BK, k_end - k0);
        const bool more = k0 + BK < ks_end; /* a next tile (PIPE) */
        if constexpr (PIPE) {
            cp_async_wait<1>(); /* this tile's K (its V may still be in flight) */
            __syncthreads();
        } else {
            __syncthreads(); /* the previous tile's K, V, P and maxima are read */
            tc_load_rows<BK, HD, LQ, T != KV_F16, T, NTH>(Ks, Kl, kb + k0 * f.k_rs, f.k_rs, nk);
            tc_load_rows<BK, HD, LV, false, T, NTH>(Vs, NULL, vb + k0 * f.v_rs, f.v_rs, nk);
            __syncthreads();
        }
        /* the same for both warps of a pair (their rows) */
        bool seen = false;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            seen = seen || rws[mt].seen(a, k0, BK);
        if (!PIPE && !seen)
            continue;
        /* S = Q·Kᵀ for this warp's part: 16 MT rows x KH keys */
        float sm[MT][KH / 8][4];
        if (PIPE ? seen : true)
            tc_qk_scores<HD, KH, LQ, T, QLO, MT>(sm, Qs, Ql, Ks, Kl, rg * 16 * MT, cs * KH, lane);
        if constexpr (PIPE) { /* every warp's scores are done with K: the next tile's K */
            __syncthreads();
            if (more)
                tc_async_rows<BK, HD, LQ, NTH>(Ks, kb + (k0 + BK) * f.k_rs, f.k_rs,
                                               (int)min((int64_t)BK, k_end - k0 - BK));
            cp_async_commit();
        }
        if (PIPE ? seen : true) {
            float mx0m[MT], mx1m[MT];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                float(&s)[KH / 8][4] = sm[mt];
                const tc_rows &rw = rws[mt];
                TC_MASK_MAX_IF(KH / 8, k0 + cs * KH, f.full_tiles && rw.sees_all(a, k0, BK))
                /* the tile's row maxima over both parts (the max does not depend on the order) */
                if (tig == 0) {
                    xm[cs * BQ + rw.r0] = mx0;
                    xm[cs * BQ + rw.r0 + 8] = mx1;
                }
                mx0m[mt] = mx0;
                mx1m[mt] = mx1;
            }
            tc_rows_sync(1 + rg);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                float(&s)[KH / 8][4] = sm[mt];
                const int r0 = rws[mt].r0;
                float mx0 = mx0m[mt], mx1 = mx1m[mt];
#pragma unroll
                for (int q = 0; q < NSL; q++) {
                    mx0 = fmaxf(mx0, xm[q * BQ + r0]);
                    mx1 = fmaxf(mx1, xm[q * BQ + r0 + 8]);
                }
                /* this part's sums (the parts are added at the end); this part
                 * of P, f16, for both warps' P·V */
                tc_softmax_step(s, o[mt], mx0, mx1, m0[mt], m1[mt], l0[mt], l1[mt], [&](int j) {
                    *(uint32_t *)(Ps + r0 * LP + cs * KH + j * 8 + tig * 2) = gq_pack(s[j][0], s[j][1]);
                    *(uint32_t *)(Ps + (r0 + 8) * LP + cs * KH + j * 8 + tig * 2) = gq_pack(s[j][2], s[j][3]);
                });
            }
            tc_rows_sync(1 + rg); /* both parts of P written */
        }
        if constexpr (PIPE) { /* this tile's V */
            cp_async_wait<1>();
            __syncthreads();
        }
        if (PIPE ? seen : true) {
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                uint32_t pa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    gq_ldmatrix_x4(pa[mt],
                                   Ps + (rg * 16 * MT + mt * 16 + (mi & 1) * 8 + r) * LP + kk * 16 + (mi >> 1) * 8);
#pragma unroll
                for (int jj = 0; jj < DV / 16; jj++) {
                    uint32_t vf[4];
                    tc_ldmatrix_x4_trans(vf,
                                         Vs + (kk * 16 + (mi & 1) * 8 + r) * LV + cs * DV + jj * 16 + (mi >> 1) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        gq_mma(o[mt][2 * jj], pa[mt], vf);
                        gq_mma(o[mt][2 * jj + 1], pa[mt], vf + 2);
                    }
                }
            }
        }
        if constexpr (PIPE) { /* every warp is done with V, P and the maxima: the next tile's V */
            __syncthreads();
            if (more)
                tc_async_rows<BK, HD, LV, NTH>(Vs, vb + (k0 + BK) * f.v_rs, f.v_rs,
                                               (int)min((int64_t)BK, k_end - k0 - BK));
            cp_async_commit();
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int x = 1; x <= 2; x <<= 1) {
            l0[mt] += __shfl_xor_sync(0xffffffffu, l0[mt], x);
            l1[mt] += __shfl_xor_sync(0xffffffffu, l1[mt], x);
        }
        if (tig == 0) {
            xl[cs * BQ + rws[mt].r0] = l0[mt];
            xl[cs * BQ + rws[mt].r0 + 8] = l1[mt];
        }
    }
    tc_rows_sync(1 + rg);
    if (!mine)
        return; /* none of the warp's tile's keys in this split */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const tc_rows &rw = rws[mt];
        const int r0 = rw.r0;
        float L0 = 0.0f, L1 = 0.0f; /* the parts in order */
#pragma unroll
        for (int q = 0; q < NSL; q++) {
            L0 += xl[q * BQ + r0];
            L1 += xl[q * BQ + r0 + 8];
        }
        if (split) { /* this split's partial: o as it is, the max and the sum */
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                if (!(hf ? rw.v1 : rw.v0))
                    continue;
                const int64_t t = t0 + r0 + hf * 8 - f.qt0 * TC_BQ;
                float *pp = f.part + ((t * a.n_head + h) * f.max_splits + (sp - ts_lo)) * (int64_t)(HD + 2);
#pragma unroll
                for (int j = 0; j < DV / 8; j++)
                    *(float2 *)(pp + cs * DV + j * 8 + tig * 2) = make_float2(o[mt][j][2 * hf], o[mt][j][2 * hf + 1]);
                if (cs == 0 && tig == 0)
                    *(float2 *)(pp + HD) = make_float2(hf ? m1[mt] : m0[mt], hf ? L1 : L0);
            }
            continue;
        }
        tc_store_out<DV>(a, rw, t0, h, (int64_t)cs * DV, HD, tig, o[mt], 1.0f / L0, 1.0f / L1);
    }
}

/* The output of the tokens of tiles qt0 .. qt0 + n_qt - 1 whose tile has
 * keys in several splits (one block a token and head, a thread two
 * columns): the splits' maxima, then each split's sum and o weighted by
 * exp2(its max - the max), in split order. A split a row sees no key of
 * has max -inf, sum 0 and o 0: its weight is 0 and it adds nothing, so a
 * row whose keys lie in one split gets the bits the unsplit kernel writes
 * (weight 1). A query's splits depend only on its tile's key range, and
 * adding empty ones changes nothing: its output still depends only on its
 * position and the cache. */
template <int HD> __global__ void __launch_bounds__(HD / 2) tc_merge_kernel(const tc_args f)
{
    const memra_attn_args_t &a = f.a;
    const int64_t tw = blockIdx.x, h = blockIdx.y, t = f.qt0 * TC_BQ + tw;
    MEMRA_PDL_ENTER();
    if (t >= a.n_tokens)
        return;
    const int64_t t0 = t - t % TC_BQ;
    int64_t lo, end;
    tc_rows::tile_keys(a, t0, (int)min((int64_t)TC_BQ, a.n_tokens - t0), 1, &lo, &end);
    const int64_t s_lo = lo / f.split_keys, ns = (end - 1) / f.split_keys - s_lo + 1;
    if (ns < 2)
        return; /* written by the attention kernel */
    const float *p = f.part + (tw * a.n_head + h) * f.max_splits * (int64_t)(HD + 2);
    float mx = -INFINITY;
    for (int64_t s = 0; s < ns; s++)
        mx = fmaxf(mx, p[s * (HD + 2) + HD]);
    const int d = threadIdx.x * 2;
    float l = 0.0f, o0 = 0.0f, o1 = 0.0f;
    for (int64_t s = 0; s < ns; s++) {
        const float *q = p + s * (HD + 2);
        const float w = exp2f(q[HD] - mx);
        const float2 v = *(const float2 *)(q + d);
        l = fmaf(w, q[HD + 1], l);
        o0 = fmaf(w, v.x, o0);
        o1 = fmaf(w, v.y, o1);
    }
    const float inv = 1.0f / l;
    float x0 = o0 * inv, x1 = o1 * inv;
    if (a.gate) { /* elementwise MUL_SIGMOID's arithmetic (cuda/ops_norm.cu) */
        const float *gp = a.gate + t * a.gate_stride + h * a.gate_head_stride + d;
        x0 = (float)((double)x0 * d_sigmoid((double)gp[0]));
        x1 = (float)((double)x1 * d_sigmoid((double)gp[1]));
    }
    *(float2 *)(a.out + t * a.n_head * HD + h * HD + d) = make_float2(x0, x1);
}

/* bytes of partials a launch may take (its tiles in waves below that) */
#define TC_PART_BYTES ((size_t)64 << 20)

template <int HD, int BK, int T, bool QLO, bool PIPE = false, int MT = 1>
static memra_status_t tc_pair_launch_t(memra__backend_t *be, const tc_args &f0)
{
    using S = tc_pair_shape<HD, BK, T, QLO, MT>;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    MEMRA_CUDA_TRY(be, cudaFuncSetAttribute(fa_tc_pair_kernel<HD, BK, T, QLO, PIPE, MT>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::smem));
    tc_args f = f0;
    /* the splits the keys of tokens [t, t + n) fall in (the kernel's ranges) */
    auto splits = [&](int64_t t, int64_t n) {
        const int64_t p_first = f.a.pos0 + t;
        const int64_t lo = f.a.n_swa > 0 && p_first - f.a.n_swa + 1 > 0 ? p_first - f.a.n_swa + 1 : 0;
        return (p_first + n - 1) / f.split_keys - lo / f.split_keys + 1;
    };
    /* the most splits a tile's keys fall in (its partials' stride), and a
     * block's (its MT tiles' keys: the grid's depth) */
    f.max_splits = 1;
    int64_t gz = 1;
    if (f.split_keys > 0) {
        for (int64_t qt = 0; qt < f.n_qt; qt++) {
            const int64_t ns = splits(qt * TC_BQ, min((int64_t)TC_BQ, f.a.n_tokens - qt * TC_BQ));
            f.max_splits = ns > f.max_splits ? ns : f.max_splits;
        }
        for (int64_t qt = 0; qt < f.n_qt; qt += MT) {
            const int64_t ns = splits(qt * TC_BQ, min((int64_t)S::BQ, f.a.n_tokens - qt * TC_BQ));
            gz = ns > gz ? ns : gz;
        }
    }
    if (gz > 65535)
        return memra__fail(be->err, MEMRA_E_INVALID, "attention: %lld key splits", (long long)gz);
    if (f.max_splits == 1) { /* every tile's keys in one split: the tiles' whole ranges */
        f.split_keys = 0;
        gz = 1;
    }
    const size_t tile_bytes = (size_t)TC_BQ * (size_t)f.a.n_head * (size_t)f.max_splits * (HD + 2) * sizeof(float);
    int64_t wave = f.n_qt;
    if (f.split_keys > 0) { /* waves of whole blocks */
        wave = (int64_t)(TC_PART_BYTES / tile_bytes);
        wave -= wave % MT;
        wave = wave < MT ? MT : wave > f.n_qt ? f.n_qt : wave;
        f.part = (float *)memra__cuda_ws(be, (size_t)wave * tile_bytes);
        if (!f.part)
            return be->err ? be->err->status : MEMRA_E_NOMEM;
    }
    const int64_t n_qt = f.n_qt;
    for (int64_t qt0 = 0; qt0 < n_qt; qt0 += wave) {
        f.qt0 = qt0;
        f.n_qt = n_qt - qt0 < wave ? n_qt - qt0 : wave;
        const dim3 grid((unsigned)((f.n_qt + MT - 1) / MT), (unsigned)f.a.n_head, (unsigned)gz);
        memra__launch(fa_tc_pair_kernel<HD, BK, T, QLO, PIPE, MT>, grid, S::NTH, S::smem, c->stream, f);
        MEMRA_CUDA_LAUNCHED(be);
        if (f.split_keys > 0) {
            memra__launch(tc_merge_kernel<HD>, dim3((unsigned)(f.n_qt * TC_BQ), (unsigned)f.a.n_head, 1), HD / 2, 0,
                          c->stream, f);
            MEMRA_CUDA_LAUNCHED(be);
        }
    }
    c->after_step = true;
    return MEMRA_OK;
}

template <int HD, int BK, bool QLO = true>
static memra_status_t tc_pair_launch(memra__backend_t *be, const tc_args &f, int t)
{
    switch (t) {
    case KV_F16: return tc_pair_launch_t<HD, BK, KV_F16, QLO>(be, f);
    case KV_BF16: return tc_pair_launch_t<HD, BK, KV_BF16, QLO>(be, f);
    case KV_Q8_0: return tc_pair_launch_t<HD, BK, KV_Q8_0, QLO>(be, f);
    default: return tc_pair_launch_t<HD, BK, KV_F32, QLO>(be, f);
    }
}

memra_status_t memra__cuda_attention_tc(memra__backend_t *be, const memra_attn_args_t *a, bool *done)
{
    *done = false;
    static long on = -1, pairs = -1, pair_bk = -1, qlo = -1, split_keys = -1, pipe = -1, m32 = -1, full = -1;
    if (on < 0) {
        on = memra__cuda_env_long("MEMRA_FA_TC", 1);
        pairs = memra__cuda_env_long("MEMRA_FA_TC_PAIRS", 1);
        /* keys a tile of the paired kernel: 64 (one block an SM, half the
         * tile barriers; 9B pp512 at depth 16384 8270 tok/s against 7580
         * with 32 and 7830 unpaired, H200 2026-12-04) or 32 (two blocks
         * an SM on an f16 cache) */
        pair_bk = memra__cuda_env_long("MEMRA_FA_TC_PAIR_BK", 64);
        /* scores from f16 q alone (hi·hi, and hi·lo of a non-f16 cache's
         * k) where the scale is at most 1/8 (it divides q's rounding error
         * by 8-16), in the 128-wide kernel and the 256-wide pairs of 64-key
         * tiles: one mma of two on an f16 cache, and no q remainder in
         * shared memory (two pair blocks an SM). MEMRA_FA_TC_QLO=1 keeps
         * q's remainder everywhere (H200 2026-12-04, 9B pp512 at depth
         * 16384: 8361 tok/s with it, 8809 without; kernel check's errors
         * within 1.3x) */
        qlo = memra__cuda_env_long("MEMRA_FA_TC_QLO", 0);
        /* keys a split of the paired kernel (a multiple of 64; 0: none) */
        split_keys = memra__cuda_env_long("MEMRA_FA_TC_SPLIT", 4096);
        split_keys = split_keys > 0 ? (split_keys + 63) / 64 * 64 : 0;
        /* the paired f16 kernel's K and V tiles by cp.async under the
         * softmax and the scores (fa_tc_pair_kernel's PIPE; 0: through
         * registers, for A/B runs) */
        pipe = memra__cuda_env_long("MEMRA_FA_TC_PIPE", 1);
        /* the cp.async kernel with two row blocks a warp, 128 queries a
         * block (fa_tc_pair_kernel's MT = 2; the same bits): the 9B's
         * pp512 at depth 16384 +1.6 %, at depth 0 level (H100,
         * 2026-12-06); MEMRA_FA_TC_M32=0 one row block a warp (A/B) */
        m32 = memra__cuda_env_long("MEMRA_FA_TC_M32", 1);
        /* the paired kernel's tiles that all of a row block's rows see
         * whole (at depth, all but the last few) without the per-key mask
         * test: the same products and maxima; the 9B's pp512 at depth
         * 16384 +1.7 % (H100, 2026-12-06). MEMRA_FA_TC_FULL=0 tests every
         * key (A/B) */
        full = memra__cuda_env_long("MEMRA_FA_TC_FULL", 1);
    }
    const int64_t hd = a->head_dim;
    /* K and V of one cache type (mixed pairs keep the flash-decoding kernel) */
    const int t = kv_code(a->k_type);
    const size_t k_rs = memra__attn_k_row_bytes(a), v_rs = memra__attn_v_row_bytes(a);
    const bool aligned = a->q_stride % 4 == 0 && (uintptr_t)a->q % 16 == 0 && kv_vec_ok(t, a->k_cache, k_rs) &&
                         kv_vec_ok(t, a->v_cache, v_rs) && (uintptr_t)a->out % 8 == 0;
    /* a launch recorded for replays (keys_max) reads its position on the
     * device: the flash-decoding kernel's */
    if (!on || !be->fast || a->n_tokens <= memra__cuda_mmv_max_rows() || kv_code(a->v_type) != t || !aligned ||
        a->n_head > 65535 || a->keys_max > 0)
        return MEMRA_OK;
    tc_args f;
    f.a = *a;
    f.k_rs = k_rs;
    f.v_rs = v_rs;
    f.n_qt = (a->n_tokens + TC_BQ - 1) / TC_BQ;
    f.scale_log2 = a->scale * 1.4426950408889634f;
    f.split_keys = pair_bk == 64 ? split_keys : 0; /* the splits are multiples of the tile */
    f.qt0 = 0;
    f.max_splits = 1;
    f.part = NULL;
    f.full_tiles = full != 0;
    if (f.n_qt > INT32_MAX)
        return MEMRA_OK;
    const bool no_qlo = !qlo && fabsf(a->scale) <= 0.125f;
    const bool al16 = (uintptr_t)a->k_cache % 16 == 0 && (uintptr_t)a->v_cache % 16 == 0 && k_rs % 16 == 0 &&
                      v_rs % 16 == 0;
    memra_status_t st;
    switch (hd) {
    /* shared memory: q and k in two f16 parts; 256 takes 110 KB (two
     * blocks an SM), 512 208 KB */
    case 64: st = tc_launch<64, 64, 64>(be, f, t); break;
    case 128: st = no_qlo ? tc_launch<128, 128, 64, false>(be, f, t) : tc_launch<128, 128, 64>(be, f, t); break;
    case 256:
        st = !pairs ? tc_launch<256, 128, 32>(be, f, t)
             : pair_bk == 32 ? tc_pair_launch<256, 32>(be, f, t)
             : no_qlo && pipe && t == KV_F16 && al16
                 ? (m32 ? tc_pair_launch_t<256, 64, KV_F16, false, true, 2>(be, f)
                        : tc_pair_launch_t<256, 64, KV_F16, false, true>(be, f))
             : no_qlo                                ? tc_pair_launch<256, 64, false>(be, f, t)
                                                     : tc_pair_launch<256, 64>(be, f, t);
        break;
    case 512: st = tc_launch<512, 128, 32>(be, f, t); break;
    default: return MEMRA_OK;
    }
    *done = st == MEMRA_OK;
    return st;
}
