/* The Q8_0 matvec of a batched decode step (several x rows, R of them per
 * block column): each weight byte is read once per R rows instead of once
 * per row, with every row's arithmetic that of the one-row kernels, so a
 * batched row is bit-identical to the same row decoded alone.
 *
 * Why a kernel of its own: the generic kernel at R = 8 (mmv_q_kernel) ran
 * a 9B decode step of 8 rows in ~32 ms against ~2.9 ms for one row (H200,
 * MEMRA_CUDA_PROFILE: ffn_down 475 us per call at n8 against 22 us at n1):
 * one warp per row re-reads x from shared memory for every weight row, x
 * of 8 rows of 12288 did not fit shared memory at all, and one block per
 * SM left HBM idle.
 *
 * Layout. The block's 8 warps form 4 pairs; a pair owns a group of
 * Q8B_M = 4 weight rows (GLU: 2 virtual rows x their gate and up rows) and
 * walks its segments (64 Q8_0 blocks, 2176 bytes per row) through a ring
 * of Q8B_D items, each item the segment of all 4 rows, filled by bulk
 * copies (sm_90 TMA) on one mbarrier. The pair's two warps read the same
 * weight bytes and split the x rows (warp half h takes rows [h RH,
 * (h+1) RH)): each x load from shared memory serves 4 weight rows, which
 * is what keeps the shared-memory traffic of 8 rows near the HBM rate.
 *
 * Rows that start off a 16-byte boundary (4-byte aligned) or widths that
 * are not whole 256-element multiples (OFF: the 26B-A4B's 2112-wide
 * ffn_down, 2244-byte rows) copy each row's segment from the boundary
 * below to the one above (mmv_locate's copy, that of the one-row kernels)
 * into a slot of MMV_Q8D_SLOT_OFF bytes and read it from the row's offset;
 * the generic kernel they ran on before re-reads x for every weight row
 * (above). The arithmetic is the same either way.
 *
 * Bits. Lane l takes the block pair (2l, 2l+1) of each segment and does
 * mmv_q8_pair's operations in its order (its 8 partial sums, the block
 * sums, the explicit roundings); a row's lane sums add the segments' parts
 * in segment order from +0 and meet in warp_sum's tree; x is staged by
 * mmv_stage_x (the same per-row staging and norm). kernel-check's
 * matmul.rowinv.* and matmul_ex.rowinv.* cases compare it with the one-row
 * kernel bit for bit. */
#ifndef MEMRA_CUDA_MMV_Q8B_CUH
#define MEMRA_CUDA_MMV_Q8B_CUH

#include "mmv.cuh"

#define Q8B_M 4                          /* weight rows per item */
#define Q8B_PAIRS (MMV_WARPS / 2)        /* warp pairs per block */
#define Q8B_D 2                          /* items per pair in shared memory */
#define Q8B_SMEM_MAX (226 * 1024)        /* dynamic shared memory: sm_90 opts in to 227 KiB with the static part */
#define Q8B_ROWS_MAX 8                   /* x rows per block column */

/* A row's slot in an item (OFF: rows off 16 bytes or of part segments), an
 * item (a segment of Q8B_M rows) and the block's ring. */
template <bool OFF> static __host__ __device__ constexpr uint32_t q8b_row_slot()
{
    return OFF ? MMV_Q8D_SLOT_OFF : MMV_Q8D_SEG;
}
template <bool OFF> static __host__ __device__ constexpr uint32_t q8b_item()
{
    return Q8B_M * q8b_row_slot<OFF>();
}
template <bool OFF> static __host__ __device__ constexpr size_t q8b_ring()
{
    return (size_t)Q8B_PAIRS * Q8B_D * q8b_item<OFF>();
}

/* The x rows (with their block sums) and ring of a launch of NR rows. */
static inline size_t q8b_smem(int64_t ne0, int nr, bool off)
{
    return (off ? q8b_ring<true>() : q8b_ring<false>()) + mmv_x_bytes<MEMRA_TYPE_Q8_0>(ne0, nr);
}

/* One x row against the Q8B_M weight rows W (17 words each: lane's block
 * pair) of a segment: mmv_q8_pair's arithmetic per weight row, the x
 * loads shared. XA: the pair's first x element; SA: its block sums. */
static __device__ __forceinline__ void q8b_dot(const uint32_t (&w)[Q8B_M][17], const float (&da)[Q8B_M],
                                               const float (&db)[Q8B_M], bool two, uint32_t xa, uint32_t sa,
                                               float (&acc)[Q8B_M])
{
    float s[Q8B_M][2][4];
#pragma unroll
    for (int m = 0; m < Q8B_M; m++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                s[m][h][c] = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float4 xv = mmv_lds128(xa + 16 * j);
        const float xx[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int i = 4 * j + c;
            const int byte = i < 32 ? 2 + i : 36 + (i - 32);
#pragma unroll
            for (int m = 0; m < Q8B_M; m++) {
                const uint32_t u = w[m][byte >> 2] ^ 0x80808080u;
                s[m][i >> 5][c] = fmaf(__int_as_float(__byte_perm(u, 0u, 0x4440 + (byte & 3))), xx[c], s[m][i >> 5][c]);
            }
        }
    }
    const float suma = mmv_ldsf(sa), sumb = two ? mmv_ldsf(sa + 4) : 0.0f;
#pragma unroll
    for (int m = 0; m < Q8B_M; m++) {
        const float ta = (s[m][0][0] + s[m][0][1]) + (s[m][0][2] + s[m][0][3]);
        const float tb = (s[m][1][0] + s[m][1][1]) + (s[m][1][2] + s[m][1][3]);
        float v = __fmul_rn(__fsub_rn(ta, suma), da[m]);
        if (two)
            v = __fmaf_rn(__fsub_rn(tb, sumb), db[m], v);
        acc[m] += __fadd_rn(0.0f, v); /* the one-row kernels' part = 0 + v, then acc += part */
    }
}

/* Weight row M of group G: its weight, local row and virtual row (GLU:
 * rows 2G and 2G+1, each a gate (W0) and an up (W1) row). False past the
 * last virtual row. */
static __device__ __forceinline__ bool q8b_row(const mmv_args &a, int64_t g, int m, int64_t nv, int *wi,
                                               int64_t *lrow)
{
    const int64_t v = a.glu ? 2 * g + (m >> 1) : Q8B_M * g + m;
    if (v >= nv)
        return false;
    if (a.glu) {
        *wi = m & 1;
        *lrow = v;
    } else {
        const mmv_pos q = {v, 0, 0};
        *wi = mmv_weight(a, q, lrow);
    }
    return true;
}

/* mmv_stage_x for NR <= RMAX rows at once: the same per-row arithmetic
 * (chunk c = t + 256 j of thread t, row_sumsq_part's order of squares,
 * row_scale_reduce's warp and block sums, mmv_scaled4 and mmv_stage_put),
 * with every row's loads in flight together and one barrier for all the
 * rows' norms: staged one row after another, 8 normalized rows took ~8
 * round trips to L2 and 16 barriers before a block's first dot. NE0 is a
 * multiple of 32 (mmv_q8b_rows_for): a Q8_0 block's 8 chunks are all in
 * the row or all past it, and the chunk loops run while any lane of the
 * warp has a chunk, so every lane takes part in mmv_stage_put's sums. */
template <int RMAX>
static __device__ __forceinline__ const float *q8b_stage_x(const mmv_args &a, const float *x, int nr, float *xs,
                                                           int64_t *xl)
{
    __shared__ float red[RMAX][MEMRA_NORM_BLOCK / 32];
    const int64_t ne0 = a.ne0, nc = ne0 >> 2, ld = mmv_xld<true>(ne0), nbr = ne0 / 32;
    const float *nw = a.norm ? a.norm_w : NULL;
    const bool vec = ((uintptr_t)x & 15) == 0 && (a.ldx & 3) == 0 && ((uintptr_t)nw & 15) == 0;
    float *sums = xs + (int64_t)nr * ld;
    const int t = threadIdx.x;
    if (!a.norm) {
        for (int64_t c = t; c - (t & 31) < nc; c += MMV_THREADS) {
            float4 v[RMAX];
#pragma unroll
            for (int r = 0; r < RMAX; r++)
                v[r] = r < nr && c < nc ? mmv_ld4(x + r * a.ldx, 4 * c, ne0, vec) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int r = 0; r < RMAX; r++) {
                if (r < nr) {
                    float u[4] = {v[r].x, v[r].y, v[r].z, v[r].w};
                    mmv_stage_put<true>(u, c, nc, ne0, true, xs + r * ld, sums + r * nbr);
                }
            }
        }
    } else {
        float sq[RMAX];
#pragma unroll
        for (int r = 0; r < RMAX; r++)
            sq[r] = 0.0f;
        for (int64_t c = t; c < nc; c += MMV_THREADS) { /* raw rows in place, and their squares */
            float4 v[RMAX];
#pragma unroll
            for (int r = 0; r < RMAX; r++)
                v[r] = r < nr ? mmv_ld4(x + r * a.ldx, 4 * c, ne0, vec) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int r = 0; r < RMAX; r++) {
                if (r < nr) {
                    const float vj[4] = {v[r].x, v[r].y, v[r].z, v[r].w};
#pragma unroll
                    for (int q = 0; q < 4; q++)
                        sq[r] = row_sq_add(vj[q], sq[r]);
                    *(float4 *)(xs + r * ld + mmv_xp<true>(4 * c)) = v[r];
                }
            }
        }
#pragma unroll
        for (int r = 0; r < RMAX; r++) {
            const float w = warp_sum(sq[r]);
            if ((t & 31) == 0)
                red[r][t >> 5] = w;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < RMAX; r++) {
            if (r < nr) {
                float tot = 0.0f;
#pragma unroll
                for (int i = 0; i < MEMRA_NORM_BLOCK / 32; i++)
                    tot += red[r][i];
                const float sc = (float)row_scale_of(true, (double)tot, ne0, a.eps);
                for (int64_t c = t; c - (t & 31) < nc; c += MMV_THREADS) {
                    float u[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    if (c < nc) {
                        const float4 v = *(const float4 *)(xs + r * ld + mmv_xp<true>(4 * c));
                        u[0] = v.x, u[1] = v.y, u[2] = v.z, u[3] = v.w;
                        mmv_scaled4(u, nw ? mmv_ld4(nw, 4 * c, ne0, vec) : make_float4(1.0f, 1.0f, 1.0f, 1.0f), sc);
                    }
                    mmv_stage_put<true>(u, c, nc, ne0, true, xs + r * ld, sums + r * nbr);
                }
            }
        }
    }
    __syncthreads();
    *xl = ld;
    return xs;
}

/* RH: x rows per warp (the block column's rows are 2 RH at most); OFF:
 * rows copied from the 16-byte boundary below (the header). */
template <int RH, bool OFF> __global__ void __launch_bounds__(MMV_THREADS, 1) mmv_q8b_kernel(const mmv_args a)
{
    constexpr uint32_t SL = q8b_row_slot<OFF>(), IS = q8b_item<OFF>();
    extern __shared__ __align__(128) uint8_t q8b_dyn[];
    __shared__ __align__(8) uint64_t bars[Q8B_PAIRS][Q8B_D];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, pair = warp % Q8B_PAIRS, half = warp / Q8B_PAIRS;
    const int64_t nblk = a.ne0 / 32, nseg = (nblk + 63) >> 6;
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t ngrp = (nv + (a.glu ? 2 : Q8B_M) - 1) / (a.glu ? 2 : Q8B_M);
    const int64_t gstride = (int64_t)gridDim.x * Q8B_PAIRS, g0 = (int64_t)blockIdx.x * Q8B_PAIRS + pair;
    const int64_t n_items = g0 < ngrp ? ((ngrp - 1 - g0) / gstride + 1) * nseg : 0;
    const int64_t r0 = (int64_t)blockIdx.y * a.rows_pb; /* rows_pb <= 2 RH */
    const int nr = (int)min((int64_t)a.rows_pb, a.n_rows - r0);

    const uint32_t ring0 = mmv_saddr(q8b_dyn + (size_t)pair * Q8B_D * IS), bar0 = mmv_saddr(bars[pair]);
    if (half == 0 && lane == 0) {
        namespace ptx = cuda::ptx;
        for (int d = 0; d < Q8B_D; d++)
            ptx::mbarrier_init(&bars[pair][d], 1);
        ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    }
    __syncthreads();
    const uint64_t policy = mmv_evict_first();
    /* item k: segment k % nseg of group g0 + (k / nseg) gstride, issued by
     * lane 0 of the pair's first warp: one expect_tx for the item's bytes,
     * then a bulk copy per row */
    auto issue = [&](int64_t k) {
        if (k >= n_items || half != 0 || lane != 0)
            return;
        const int64_t g = g0 + k / nseg * gstride, s = k % nseg;
        const uint32_t nbytes = (uint32_t)min((int64_t)64, nblk - s * 64) * 34u;
        const uint32_t slot = ring0 + (uint32_t)(k % Q8B_D) * IS, bar = bar0 + 8u * (uint32_t)(k % Q8B_D);
        const void *src[Q8B_M];
        uint32_t n[Q8B_M], total = 0;
#pragma unroll
        for (int m = 0; m < Q8B_M; m++) {
            int wi;
            int64_t lrow;
            src[m] = q8b_row(a, g, m, nv, &wi, &lrow) ? a.W[wi] + (size_t)lrow * a.nb1[wi] + (size_t)s * MMV_Q8D_SEG
                                                      : NULL;
            n[m] = nbytes;
            if (OFF && src[m]) { /* the segment from the boundary below to the one above */
                const uint32_t o = (uint32_t)((uintptr_t)src[m] & 15);
                src[m] = (const uint8_t *)src[m] - o;
                n[m] = (o + nbytes + 15) & ~15u;
            }
            total += src[m] ? n[m] : 0u;
        }
        mmv_bar_expect(bar, total);
#pragma unroll
        for (int m = 0; m < Q8B_M; m++)
            if (src[m])
                mmv_bulk_copy(slot + m * SL, src[m], n[m], bar, policy);
    };
    /* the weights (which no kernel writes) start before the wait for x */
    for (int d = 0; d < Q8B_D - 1; d++)
        issue(d);
    MEMRA_PDL_ENTER();
    int64_t xl;
    const float *x = q8b_stage_x<2 * RH>(a, a.x + r0 * a.ldx, nr, (float *)(q8b_dyn + q8b_ring<OFF>()), &xl);
    const uint32_t xa0 = mmv_saddr(x), sa0 = mmv_saddr(x + (int64_t)nr * xl);
    /* OFF: the group's rows' starts modulo 16, where their bytes begin in
     * their slots (a row's segments are 2176 bytes apart: the same for all) */
    uint32_t coff[Q8B_M] = {};
    auto set_off = [&](int64_t gg) {
#pragma unroll
        for (int m = 0; m < Q8B_M; m++) {
            int wi;
            int64_t lrow;
            coff[m] = OFF && q8b_row(a, gg, m, nv, &wi, &lrow)
                          ? (uint32_t)((uintptr_t)(a.W[wi] + (size_t)lrow * a.nb1[wi]) & 15)
                          : 0u;
        }
    };
    if (OFF && n_items)
        set_off(g0);

    float acc[RH][Q8B_M];
#pragma unroll
    for (int r = 0; r < RH; r++)
#pragma unroll
        for (int m = 0; m < Q8B_M; m++)
            acc[r][m] = 0.0f;
    int64_t s = 0, g = g0;
    for (int64_t k = 0; k < n_items; k++) {
        const int d = (int)(k % Q8B_D);
        while (!mmv_bar_try_wait(bar0 + 8u * d, (uint32_t)(k / Q8B_D) & 1u)) {
        }
        issue(k + Q8B_D - 1); /* into the slot the pair finished with item k - 1 */
        const int nb = (int)min((int64_t)64, nblk - s * 64), pb = 2 * lane;
        if (pb < nb) {
            const bool two = pb + 1 < nb;
            const uint32_t slot = ring0 + (uint32_t)d * IS + 68u * lane;
            uint32_t w[Q8B_M][17];
            float da[Q8B_M], db[Q8B_M];
#pragma unroll
            for (int m = 0; m < Q8B_M; m++) {
#pragma unroll
                for (int i = 0; i < 17; i++)
                    w[m][i] = mmv_lds32(slot + m * SL + (OFF ? coff[m] : 0u) + 4 * i);
                da[m] = __half2float(__ushort_as_half((unsigned short)(w[m][0] & 0xFFFFu))) * 0x1p85f;
                db[m] = __half2float(__ushort_as_half((unsigned short)(w[m][8] >> 16))) * 0x1p85f;
            }
#pragma unroll
            for (int rr = 0; rr < RH; rr++) {
                const int r = half * RH + rr;
                if (r < nr)
                    q8b_dot(w, da, db, two, xa0 + 4 * (uint32_t)(r * xl + mmv_xp<true>((s * 64 + pb) * 32)),
                            sa0 + 4 * (uint32_t)(r * nblk + s * 64 + pb), acc[rr]);
            }
        }
        if (s == nseg - 1) {
            /* a row's sum: warp_sum of its lanes' sums (every lane takes
             * part); GLU pairs gate (m) and up (m + 1) */
            auto put = [&](int r, int m, float gs, float us) {
                int wi;
                int64_t lrow;
                if (lane == 0 && r < nr && q8b_row(a, g, m, nv, &wi, &lrow))
                    mmv_store<false>(a, wi, lrow, r0, r, gs, us);
            };
#pragma unroll
            for (int rr = 0; rr < RH; rr++) {
                if (a.glu) {
#pragma unroll
                    for (int m = 0; m < Q8B_M; m += 2)
                        put(half * RH + rr, m, warp_sum(acc[rr][m]), warp_sum(acc[rr][m + 1]));
                } else {
#pragma unroll
                    for (int m = 0; m < Q8B_M; m++)
                        put(half * RH + rr, m, warp_sum(acc[rr][m]), 0.0f);
                }
#pragma unroll
                for (int m = 0; m < Q8B_M; m++)
                    acc[rr][m] = 0.0f;
            }
            s = 0;
            g += gstride;
            if (OFF && k + 1 < n_items)
                set_off(g);
        } else {
            s++;
        }
        /* both warps are done with slot d before item k + Q8B_D refills it */
        asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory");
    }
}

/* Whether A's rows take the kernel's OFF form: a row off a 16-byte
 * boundary, or a width of part 8-block groups (whose last segment is not
 * a whole number of 16-byte chunks). */
static inline bool mmv_q8b_off(const mmv_args &a)
{
    bool off = a.ne0 % 256 != 0;
    for (int i = 0; i < a.nw; i++)
        off = off || a.nb1[i] % 16 || (uintptr_t)a.W[i] % 16;
    return off;
}

/* Rows per block column the batched Q8_0 kernel takes for A (N_ROWS x
 * rows): up to Q8B_ROWS_MAX (MEMRA_MMV_Q8B_ROWS), as many as fit shared memory; 0 when it does
 * not apply (MEMRA_MMV_Q8B=0, one row, expert ids, a conv epilogue, rows
 * of part Q8_0 blocks or not 4-byte aligned, and the OFF form's rows
 * unless MEMRA_MMV_Q8B_OFF=1: they stay on the generic kernel; the form's
 * kernel-check lines equal the default's on the H200, and its one timing
 * there moved the 26B-A4B's batched B = 4 +4 % and B = 8 -2 %, 2026-12-05,
 * not enough to make it the default). */
static inline int mmv_q8b_rows_for(const mmv_args &a, int64_t n_rows)
{
    static long on = -1, cap = Q8B_ROWS_MAX, off_on = 0;
    if (on < 0) {
        /* experiments: fewer rows per pass (less shared memory: more blocks per SM) */
        const long c = memra__cuda_env_long("MEMRA_MMV_Q8B_ROWS", Q8B_ROWS_MAX);
        cap = c < 2 ? 2 : c > Q8B_ROWS_MAX ? Q8B_ROWS_MAX : c;
        off_on = memra__cuda_env_long("MEMRA_MMV_Q8B_OFF", 0);
        /* the kernel's bulk copies are TMA: off with MEMRA_MMV_TMA=0 too */
        on = memra__cuda_env_long("MEMRA_MMV_Q8B", 1) && memra__cuda_env_long("MEMRA_MMV_TMA", 1);
    }
    if (!on || n_rows < 2 || a.ids || mmv_generic_epi(a) || a.ymap || a.ne0 % 32 || a.ne0 > INT32_MAX / 8)
        return 0;
    for (int i = 0; i < a.nw; i++)
        if (a.nb1[i] % 4 || (uintptr_t)a.W[i] % 4)
            return 0;
    const bool off = mmv_q8b_off(a);
    if (off && !off_on)
        return 0;
    int r = n_rows < cap ? (int)n_rows : (int)cap;
    while (r >= 2 && q8b_smem(a.ne0, r, off) > Q8B_SMEM_MAX)
        r--;
    return r >= 2 ? r : 0;
}

#endif
