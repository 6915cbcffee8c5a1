/* The MoE decode launches (cuda/mmv_moe.cuh) on Q4_K, Q5_K and Q6_K
 * experts: the same two launches and problems, each dot the K-quant
 * matvec's (mmv_kq_kernel<T, 1>, cuda/mmv_kq.cuh) for one x row, as the
 * sequence's grouped expert matvecs take it (mmv_kq_takes: the host picks
 * this kernel for a launch exactly when the sequence's matvecs of all its
 * weights take the K-quant kernel, memra__cuda_grouped_kq).
 *
 * Work. A warp walks the K-quant kernel's items (KQ_M = 2 weight rows by
 * a segment of 8 super-blocks, one bulk copy per row into a slot of its
 * ring): GLU pairs an ff row's gate and up rows (one group per ff row);
 * DOWN pairs two consecutive output rows of one part (a slot's expert or
 * the shared expert) against the part's staged h row, the parts of a row
 * pair in slot order, so the float64 slot sum runs in the sequence's
 * order for both rows at once.
 *
 * Bits. A row's result in mmv_kq_kernel depends on the weight row and x
 * alone (lane l's 64 weights of each segment, kq_lane's arithmetic,
 * segments added in order from +0, warp_sum's tree), not on the row it is
 * paired with; x is staged as there (mmv_stage_x<true>: times 2^64, padded,
 * 32-sums; Q6_K's 16-sums by kq_sums16), each row's bits independent of
 * how many rows are staged. So each dot here is the sequence's, and the
 * act, the slot sum and the shared expert's term are the generic fused
 * kernel's (d_moe_glu, mmv_moe_down_term). An expert id out of range
 * poisons the problem's row (mmv_moe_poison), as there. kernel-check:
 * moe.fused.*_q4k.*, moe.fused.kq.* fused == sequence bit for bit. */
#ifndef MEMRA_CUDA_MMV_MOE_KQ_CUH
#define MEMRA_CUDA_MMV_MOE_KQ_CUH

#include "mmv_kq.cuh"
#include "mmv_moe.cuh"

/* Whether NR x rows of NE0 fit next to the smallest ring (DOWN stages the
 * token's k (+1) h rows, GLU one x row). */
static inline bool mmv_moe_kq_fits(int t, int64_t ne0, int nr)
{
    return nr >= 1 && nr <= MMV_MOE_PARTS && mmv_kq_x_fits(t, ne0, nr);
}

/* Row M of item group G, part P: GLU the ff row G of gate (M = 0) or up
 * (M = 1); DOWN the output row KQ_M G + M of part P (NULL past the last
 * row: an odd row count's last group). */
template <bool DOWN>
static __device__ __forceinline__ const uint8_t *mmv_moe_kq_row(const uint8_t *const *s_w, const size_t *s_nb1,
                                                                int64_t nv, int64_t g, int p, int m)
{
    if (!DOWN)
        return s_w[m] + (size_t)g * s_nb1[m];
    const int64_t v = KQ_M * g + m;
    return v < nv ? s_w[p] + (size_t)v * s_nb1[p] : NULL;
}

/* DOWN: the dots YV of the item's rows (row 1 when V1) of part CQ.p into
 * their sums, and the rows' outputs (lane 0) once the part is the last. */
static __device__ __forceinline__ void mmv_moe_kq_down(const mmv_moe_args &a, const mmv_pos &cq, int np, bool v1,
                                                       int64_t yrow, const double *s_ws, const float (&yv)[KQ_M],
                                                       double (&dacc)[KQ_M], float (&routed)[KQ_M], int lane)
{
#pragma unroll
    for (int m = 0; m < KQ_M; m++) {
        if (m > 0 && !v1)
            continue;
        const float out = mmv_moe_down_term(cq.p, a.k, s_ws, yv[m], dacc[m], routed[m]);
        if (cq.p == np - 1) {
            if (lane == 0)
                mmv_moe_down_store(a, yrow, KQ_M * cq.v + m, out);
            dacc[m] = 0.0;
        }
    }
}

/* ---- packed items --------------------------------------------------------------
 *
 * A row of at most 4 super-blocks (the experts' down rows of 256 to 1024,
 * a small model's gate/up rows) is one segment whose item gives work to
 * 4 nsb of the warp's 32 lanes, and the kernel is bound by the
 * instructions it issues, not by HBM (docs/CUDA.md). Packed, a ring slot
 * holds G consecutive items of the walk, each row's bytes in a sub-slot
 * of kq_pack_sub bytes (cuda/mmv_kq_lane.cuh; the same 16-byte-aligned
 * copy as kq_issue's), and
 * item g runs on lanes [g L, g L + L), L = 4 nsb rounded up to a power of
 * two, lane g L + l doing what lane l does in the one-item walk: the same
 * bytes at the same offsets, the same x and sums, the same kq_lane
 * arithmetic. The group's butterfly is warp_sum's restricted to it: in
 * the one-item walk the lanes past 4 nsb hold +0, so warp_sum's steps
 * beyond L add +0 to every value (0.0f + part reproduces them) and its
 * steps below L are the group's. The items' outputs are then applied in
 * item order, as the walk applies them. So every output has the one-item
 * kernel's bits (kernel-check: moe.fused.kq.* fused == sequence, and the
 * same lines under MEMRA_MOE_KQ_PACK=0; test_mmv_kq: the slots and lanes
 * on the CPU). */

/* Three blocks per SM for GLU (mmv_kq_kernel<T, 1>'s bound); DOWN keeps
 * two rows' float64 sums besides the lane state: two. PACK: packed items
 * (below; a.pack lanes an item, rows of one segment). */
template <int T, bool DOWN, bool PACK>
__global__ void __launch_bounds__(MMV_THREADS, DOWN ? 2 : 3) mmv_moe_kq_kernel(const mmv_moe_args a)
{
    using S = kq_seg<T>;
    extern __shared__ __align__(128) uint8_t kq_dyn[];
    __shared__ __align__(8) uint64_t bars[MMV_WARPS][KQ_RING_MAX];
    __shared__ mmv_moe_tab tb;
    int64_t t, yrow;
    if (!mmv_moe_enter<DOWN>(a, tb, NULL, &t, &yrow))
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int np = DOWN ? a.k + (a.shW[0] != NULL) : 2; /* parts: slots (+ shared), or gate and up */
    const int D = a.m.ring;
    const int64_t ne0 = a.m.ne0;
    const int nsb = (int)(ne0 / 256), nseg = kq_nseg(nsb);
    const int npi = DOWN ? np : 1; /* parts walked per group (GLU: both rows are in every item) */
    const int64_t nv = a.rows, ngrp = DOWN ? (nv + KQ_M - 1) / KQ_M : nv;
    const int64_t gstride = (int64_t)gridDim.x * MMV_WARPS, g0 = (int64_t)blockIdx.x * MMV_WARPS + warp;
    const int64_t n_items = g0 < ngrp ? ((ngrp - 1 - g0) / gstride + 1) * npi * nseg : 0;
    /* PACK: L lanes an item, lane group gi's lane gl; G items a slot in sub-slots of SUB bytes */
    const int L = PACK ? a.pack : 32, gi = lane / L, gl = lane % L;
    const uint32_t sub = PACK ? kq_pack_sub<T>(nsb) : 0u;
    const int G = PACK ? kq_pack_items<T>(nsb, L) : 1;
    mmv_bars_init(bars[warp], D, lane);
    const uint32_t bar0 = mmv_saddr(bars[warp]), ring0 = mmv_saddr(kq_dyn) + (uint32_t)(warp * D * S::item);

    /* issue side: D - 1 slots ahead of the compute side, an item a slot
     * (PACK: G items) in the order (group, part, segment) */
    mmv_pos iq = {g0, 0, 0};
    int64_t issued = 0;
    auto issue = [&](int slot) {
        if (issued == n_items)
            return;
        if constexpr (PACK) {
            const int ng = (int)min((int64_t)G, n_items - issued);
            if (lane < KQ_M * G) {
                mmv_pos q = iq;
                for (int g = 0; g < lane / KQ_M; g++)
                    mmv_next(q, npi, 1, gstride);
                const uint8_t *p = lane / KQ_M < ng ? mmv_moe_kq_row<DOWN>(tb.w, tb.nb1, nv, q.v, q.p, lane % KQ_M) : NULL;
                mmv_issue_sub(p, (uint32_t)nsb * kq<T>::bb, bar0 + 8 * slot,
                              ring0 + (uint32_t)slot * S::item + (uint32_t)lane * sub, lane, KQ_M * G);
            }
            for (int g = 0; g < ng; g++)
                mmv_next(iq, npi, 1, gstride);
            issued += ng;
        } else {
            if (lane < KQ_M)
                kq_issue<T>(mmv_moe_kq_row<DOWN>(tb.w, tb.nb1, nv, iq.v, iq.p, lane), iq.s, nsb, bar0 + 8 * slot,
                            ring0 + (uint32_t)slot * S::item, lane);
            issued++;
            mmv_next(iq, npi, nseg, gstride);
        }
    };
    for (int d = 0; d < D - 1; d++)
        issue(d);
    /* x as mmv_kq_kernel stages it: DOWN the token's k (+1) h rows, GLU its one x row */
    const int nr = DOWN ? np : 1;
    int64_t xl;
    mmv_moe_x_ready<DOWN>();
    const float *x = mmv_moe_stage_rows<true>(a.m, a.flat, a.x + (DOWN ? t * np : t) * a.m.ldx, nr,
                                              (float *)(kq_dyn + (size_t)MMV_WARPS * D * S::item), &xl);
    const int64_t nbr = ne0 / 32;
    const float *sums = x + (int64_t)nr * xl; /* 32-sums; Q6_K: its 16-sums after them */
    if (kq<T>::s16) {
        sums += (int64_t)nr * nbr;
        kq_sums16(x, xl, nr, ne0, (float *)sums);
    }
    const int64_t sl = kq<T>::s16 ? ne0 / 16 : nbr; /* a row's sums */

    if constexpr (PACK) {
        double dacc[KQ_M] = {0.0, 0.0};
        float routed[KQ_M] = {0.0f, 0.0f};
        mmv_pos cq = {g0, 0, 0};
        uint32_t phase = 0;
        int slot = 0;
        for (int64_t k = 0; k < n_items; k += G) {
            const int ng = (int)min((int64_t)G, n_items - k);
            mmv_ring_wait(bar0, slot, phase);
            issue(slot == 0 ? D - 1 : slot - 1);
            float part[1][KQ_M] = {{0.0f, 0.0f}};
            if (gi < ng && (gl >> 2) < nsb) {
                mmv_pos q = cq;
                for (int g = 0; g < gi; g++)
                    mmv_next(q, npi, 1, gstride);
                const bool v1 = !DOWN || KQ_M * q.v + 1 < nv;
                uint32_t off[KQ_M] = {0, 0};
                if (kq<T>::s16) {
#pragma unroll
                    for (int m = 0; m < KQ_M; m++)
                        off[m] = (uint32_t)((uintptr_t)mmv_moe_kq_row<DOWN>(tb.w, tb.nb1, nv, q.v, q.p, m) & 15);
                }
                const uint32_t base = ring0 + (uint32_t)slot * S::item + (uint32_t)(gi * KQ_M) * sub;
                const kq_smem wr[KQ_M] = {{base}, {base + sub}};
                const int xp = DOWN ? q.p : 0;
                const kq_smem xr = {mmv_saddr(x + xp * xl)}, sr = {mmv_saddr(sums + xp * sl)};
                kq_lane<T, 1, KQ_ROW1_RUN>(wr, off, v1, gl, 0u, xr, (uint32_t)xl, sr, (uint32_t)nbr, 1, part);
            }
            float s0 = 0.0f + part[0][0], s1 = 0.0f + part[0][1];
            for (int o = L >> 1; o > 0; o >>= 1) {
                s0 += __shfl_xor_sync(0xffffffffu, s0, o);
                s1 += __shfl_xor_sync(0xffffffffu, s1, o);
            }
            __syncwarp(); /* the slot is refilled by the next iteration's issue */
            for (int g = 0; g < ng; g++) {
                const float yv[KQ_M] = {__shfl_sync(0xffffffffu, s0, g * L), __shfl_sync(0xffffffffu, s1, g * L)};
                if (!DOWN) {
                    if (lane == 0)
                        a.y[yrow * a.ldy + cq.v] = d_moe_glu(a.gelu, yv[0], yv[1]);
                } else {
                    mmv_moe_kq_down(a, cq, np, KQ_M * cq.v + 1 < nv, yrow, tb.ws, yv, dacc, routed, lane);
                }
                mmv_next(cq, npi, 1, gstride);
            }
            slot = slot == D - 1 ? 0 : slot + 1;
        }
    } else {
        float part[1][KQ_M] = {{0.0f, 0.0f}};
        double dacc[KQ_M] = {0.0, 0.0};
        float routed[KQ_M] = {0.0f, 0.0f};
        /* the current (group, part): row 1 present, and (Q6_K) where its rows'
         * segments start in their slots */
        mmv_pos cq = {g0, 0, 0};
        uint32_t off[KQ_M] = {0, 0};
        bool v1 = true;
        auto group = [&] {
            v1 = !DOWN || KQ_M * cq.v + 1 < nv;
            if (kq<T>::s16) {
#pragma unroll
                for (int m = 0; m < KQ_M; m++)
                    off[m] = (uint32_t)((uintptr_t)mmv_moe_kq_row<DOWN>(tb.w, tb.nb1, nv, cq.v, cq.p, m) & 15);
            }
        };
        uint32_t phase = 0;
        int slot = 0;
        for (int64_t k = 0; k < n_items; k++) {
            if (cq.s == 0)
                group();
            mmv_ring_wait(bar0, slot, phase);
            issue(slot == 0 ? D - 1 : slot - 1);
            if ((lane >> 2) < nsb - cq.s * KQ_SBS) { /* the lane's super-block is in the segment */
                const uint32_t base = ring0 + (uint32_t)slot * S::item;
                const kq_smem wr[KQ_M] = {{base}, {base + S::slot}};
                const int xp = DOWN ? cq.p : 0; /* the part's staged row */
                const kq_smem xr = {mmv_saddr(x + xp * xl)}, sr = {mmv_saddr(sums + xp * sl)};
                kq_lane_v1<T, 1>(wr, off, v1, lane, (uint32_t)cq.s, xr, (uint32_t)xl, sr, (uint32_t)nbr, 1, part);
            }
            __syncwarp(); /* the slot is refilled by the next iteration's issue */
            if (cq.s == nseg - 1) {
                if (!DOWN) {
                    const float g = warp_sum(part[0][0]), u = warp_sum(part[0][1]);
                    if (lane == 0)
                        a.y[yrow * a.ldy + cq.v] = d_moe_glu(a.gelu, g, u);
                } else {
                    const float yv[KQ_M] = {warp_sum(part[0][0]), v1 ? warp_sum(part[0][1]) : 0.0f};
                    mmv_moe_kq_down(a, cq, np, v1, yrow, tb.ws, yv, dacc, routed, lane);
                }
                part[0][0] = part[0][1] = 0.0f;
            }
            mmv_next(cq, npi, nseg, gstride);
            slot = slot == D - 1 ? 0 : slot + 1;
        }
    }
}

/* Lanes an item of packed K-quant items (mmv_moe_kq_kernel<T, DOWN, true>) for rows
 * of NE0: 4, 8 or 16 for rows of 1, 2 or 3-4 super-blocks when a slot
 * holds two items or more; 0 (the one-item kernel) otherwise, and under
 * MEMRA_MOE_KQ_PACK=0 (the packed items are the default: the 35B-A3B
 * Q4_K's tg128 320.3 against 295.1 tok/s, H200, 2026-12-05). */
int mmv_moe_kq_pack(int t, int64_t ne0);

/* Launches A's GLU (DOWN false) or DOWN launch on type T's K-quant lanes
 * over GY problems on a resident grid; false when it cannot be configured
 * (the host checks mmv_moe_kq_fits first, so only an occupancy of zero
 * gets here). cuda/mmv_moe_kq.cu. */
bool mmv_moe_kq_launch(int t, mmv_moe_args a, bool down, unsigned gy, int sm_count, cudaStream_t s);

#endif
