/* The fused MoE decode launches (cuda/mmv_moe.cuh) on Q8_0 rows of one
 * short segment, packed a ring slot at a time: the packed passes of
 * mmv_moe_kernel (G items at once, item g on lanes [g L, g L + L)) with
 * the K-quant kernel's slot form (cuda/mmv_moe_kq.cuh; mmv_issue_sub): a
 * slot holds a pass's G items, each row's bytes in a sub-slot of its own,
 * filled by G lanes' bulk copies on the slot's one barrier.
 *
 * Why: mmv_moe_kernel's packed pass waits on G barriers, and its lane 0
 * issues the next pass's G copies one after another, every lane walking
 * each item's position and address (64-bit arithmetic) to keep the issue
 * uniform; Nsight Compute counted ~600 warp instructions an item on the
 * 26B-A4B's down (5517c0c, 2026-12-03: 13.4 M for 22.5 k items) where an
 * item's dot is ~250 a pass of G items. Here a pass waits once, each of G
 * lanes locates and copies its own item, and the walk advances by G.
 * The default (H200, 2026-12-05: the 35B-A3B's batched decode at 2, 4
 * and 8 rows 461 / 664 / 889 tok/s against 444 / 634 / 829, tg128
 * unchanged; MEMRA_MOE_SLOT=0 runs mmv_moe_kernel's packed passes).
 *
 * Bits: each item's lanes run mmv_moe_kernel's packed arithmetic on the
 * same bytes (the row from its 16-byte boundary, read at its offset), the
 * same staged x and sums (mmv_moe_stage_rows), the same butterfly over L
 * lanes from 0.0f + part, and the items' sums are applied in the walk's
 * order with the same epilogues (d_moe_glu, mmv_moe_down_part). So the
 * outputs are the sequence's (kernel-check: moe.fused.* fused == sequence
 * bit for bit, and the same lines with MEMRA_MOE_SLOT=0). */
#ifndef MEMRA_CUDA_MMV_MOE_SLOT_CUH
#define MEMRA_CUDA_MMV_MOE_SLOT_CUH

#include "mmv_moe.cuh"

/* A sub-slot: an item of NE0 (a row of at most 32 blocks) from the 16-byte
 * boundary at or below it, and the word reads of an odd last block's lane
 * past it (mmv_item_nch's chunks). */
static __host__ __device__ __forceinline__ uint32_t mmv_moe_slot_sub(int64_t ne0)
{
    const int64_t nb = ne0 / 32 < 64 ? ne0 / 32 : 64;
    return 16u * (uint32_t)((nb * 34 + 15) / 16 + 2); /* as mmv_item_nch<MEMRA_TYPE_Q8_0> */
}

/* Item Q's weight row (one segment: Q.s is 0). */
static __device__ __forceinline__ const uint8_t *mmv_moe_slot_row(const uint8_t *const *s_w, const size_t *s_nb1,
                                                                  const mmv_pos &q)
{
    return s_w[q.p] + (size_t)q.v * s_nb1[q.p];
}

/* A slot of the rows form: G rows of NE0 from the 16-byte boundary at or
 * below the first, and an odd last block's word reads past the last. */
static __host__ __device__ __forceinline__ uint32_t mmv_moe_rows_slot(int64_t ne0, int g)
{
    return 16u * (uint32_t)(((int64_t)g * (ne0 / 32) * 34 + 15) / 16 + 3);
}

/* DOWN's rows form (a.rows_g = G): warp w takes the row groups w, w + nwt,
 * ... of G adjacent output rows, and a pass is one part p of a group: its
 * G rows of part p's weight, adjacent in memory, in one bulk copy (the
 * parts' form copies G rows of G parts, one copy each). Each lane group
 * keeps its own row's slot sums (dacc, routed: registers), and a group's
 * parts come in slot order, so each output gets the parts' form's
 * arithmetic: the same dot on the same bytes, the same butterfly over L
 * lanes, mmv_moe_down_part in slot order. A pass then costs one lane's
 * copy (not G lanes' reduction, arm and copies), a walk without the lanes'
 * per-item steps, and one staged h row for its G items. Not the bytes a
 * copy: tools/tma-rate.cu streamed 544-byte copies at 2.9 TB/s on an H100
 * (2026-12-07). The launcher takes it where its grid is large enough
 * (mmv_moe_slot_launch). */
static __device__ __forceinline__ void mmv_moe_slot_rows(const mmv_moe_args &a, const mmv_moe_tab &tb, int64_t t,
                                                         int64_t yrow, uint8_t *dyn, uint64_t *bars_w)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int np = a.k + (a.shW[0] != NULL);
    const int D = a.m.ring, L = a.pack, G = a.rows_g, gi = lane / L, gl = lane % L;
    const int64_t ne0 = a.m.ne0, nbr = ne0 / 32;
    const int nb = (int)nbr;
    const uint32_t rb = (uint32_t)nb * 34u, slot_b = mmv_moe_rows_slot(ne0, G);
    const int64_t nv = a.rows, ngr = (nv + G - 1) / G;
    const int64_t rstride = (int64_t)gridDim.x * MMV_WARPS, u0 = (int64_t)blockIdx.x * MMV_WARPS + warp;
    const int64_t n_pass = u0 < ngr ? (ngr - u0 + rstride - 1) / rstride * np : 0;
    mmv_bars_init(bars_w, D, lane);
    const uint32_t bar0 = mmv_saddr(bars_w), ring0 = mmv_saddr(dyn) + (uint32_t)warp * D * slot_b;
    const uint64_t policy = mmv_evict_first();
    /* a pass (group u, part p): its first row's bytes and its row count */
    auto src_of = [&](int64_t u, int p) { return tb.w[p] + (size_t)(u * G) * tb.nb1[p]; };
    int64_t iu = u0, issued = 0;
    int ip = 0;
    auto issue = [&](int slot) {
        if (issued == n_pass)
            return;
        if (lane == 0) {
            const uintptr_t src = (uintptr_t)src_of(iu, ip);
            const int nr = (int)min((int64_t)G, nv - iu * G);
            const uint32_t n = ((uint32_t)(src & 15) + (uint32_t)nr * rb + 15) & ~15u;
            mmv_bulk_load(ring0 + (uint32_t)slot * slot_b, (const void *)(src & ~(uintptr_t)15), n,
                          bar0 + 8u * (uint32_t)slot, policy);
        }
        issued++;
        if (++ip == np) {
            ip = 0;
            iu += rstride;
        }
    };
    for (int d = 0; d < D - 1; d++)
        issue(d);
    int64_t xl;
    mmv_moe_x_ready<true>();
    const float *x = mmv_moe_stage_rows<true>(a.m, a.flat, a.x + t * np * a.m.ldx, np,
                                              (float *)(dyn + (size_t)MMV_WARPS * D * slot_b), &xl);
    const float *xsum = x + (int64_t)np * xl;
    double dacc = 0.0;
    float routed = 0.0f;
    int64_t cu = u0;
    int cp = 0;
    uint32_t phase = 0;
    int slot = 0;
    for (int64_t k = 0; k < n_pass; k++) {
        mmv_ring_wait(bar0, slot, phase);
        issue(slot == 0 ? D - 1 : slot - 1); /* the slot the last pass read (its __syncwarp below) */
        const int nr = (int)min((int64_t)G, nv - cu * G);
        float part = 0.0f;
        if (gi < nr) {
            const uint32_t off = (uint32_t)((uintptr_t)src_of(cu, cp) & 15) + (uint32_t)gi * rb;
            mmv_q8_pair<1>(ring0 + (uint32_t)slot * slot_b + off, nb, gl, mmv_saddr(x + cp * xl), xl,
                           mmv_saddr(xsum + cp * nbr), nbr, 0, 1, &part);
        }
        float v = 0.0f + part;
        for (int o = L >> 1; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        __syncwarp(); /* the next pass refills this slot */
        if (gi < nr)
            mmv_moe_down_part(a, cp, np, cu * G + gi, yrow, tb.ws, v, dacc, routed, gl);
        if (++cp == np) {
            cp = 0;
            cu += rstride;
        }
        slot = slot == D - 1 ? 0 : slot + 1;
    }
}

template <bool DOWN, bool ROWS = false>
__global__ void __launch_bounds__(MMV_THREADS, 3) mmv_moe_slot_kernel(const mmv_moe_args a)
{
    extern __shared__ __align__(128) uint8_t ms_dyn[];
    __shared__ __align__(8) uint64_t bars[MMV_WARPS][MMV_MOE_RING_MAX];
    __shared__ mmv_moe_tab tb;
    int64_t t, yrow;
    if (!mmv_moe_enter<DOWN>(a, tb, NULL, &t, &yrow))
        return;
    if constexpr (DOWN && ROWS) {
        mmv_moe_slot_rows(a, tb, t, yrow, ms_dyn, bars[threadIdx.x >> 5]);
        return;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int np = DOWN ? a.k + (a.shW[0] != NULL) : 2;
    const int D = a.m.ring, L = a.pack, G = 32 / L, gi = lane / L, gl = lane % L;
    const int64_t ne0 = a.m.ne0, nbr = ne0 / 32;
    const int nb = (int)nbr; /* one segment: at most 32 blocks */
    const uint32_t sub = mmv_moe_slot_sub(ne0), slot_b = (uint32_t)G * sub;
    const int64_t nv = a.rows, rstride = (int64_t)gridDim.x * MMV_WARPS, v0 = (int64_t)blockIdx.x * MMV_WARPS + warp;
    const int64_t n_items = v0 < nv ? (nv - v0 + rstride - 1) / rstride * np : 0;
    mmv_bars_init(bars[warp], D, lane);
    const uint32_t bar0 = mmv_saddr(bars[warp]), ring0 = mmv_saddr(ms_dyn) + (uint32_t)warp * D * slot_b;

    /* issue side: a pass's G items into one slot, lane g < G copying item g
     * (mmv_issue_sub) */
    mmv_pos iq = {v0, 0, 0};
    int64_t issued = 0;
    auto issue = [&](int slot) {
        if (issued == n_items)
            return;
        const int ng = (int)min((int64_t)G, n_items - issued);
        if (lane < G) {
            mmv_pos q = iq;
            for (int g = 0; g < lane; g++)
                mmv_next(q, np, 1, rstride);
            mmv_issue_sub(lane < ng ? mmv_moe_slot_row(tb.w, tb.nb1, q) : NULL, (uint32_t)nb * 34u,
                          bar0 + 8u * (uint32_t)slot, ring0 + (uint32_t)slot * slot_b + (uint32_t)lane * sub, lane, G);
        }
        for (int g = 0; g < ng; g++)
            mmv_next(iq, np, 1, rstride);
        issued += ng;
    };
    for (int d = 0; d < D - 1; d++)
        issue(d);
    /* DOWN stages the token's k (+1) h rows, GLU its one x row */
    const int nr = DOWN ? np : 1;
    int64_t xl;
    mmv_moe_x_ready<DOWN>();
    const float *x = mmv_moe_stage_rows<true>(a.m, a.flat, a.x + (DOWN ? t * np : t) * a.m.ldx, nr,
                                              (float *)(ms_dyn + (size_t)MMV_WARPS * D * slot_b), &xl);
    const float *xsum = x + (int64_t)nr * xl;
    double dacc = 0.0;
    float routed = 0.0f, gate = 0.0f;
    mmv_pos cq = {v0, 0, 0};
    uint32_t phase = 0;
    int slot = 0;
    for (int64_t k = 0; k < n_items; k += G) {
        const int ng = (int)min((int64_t)G, n_items - k);
        mmv_ring_wait(bar0, slot, phase);
        issue(slot == 0 ? D - 1 : slot - 1); /* the slot the last pass read (its __syncwarp below) */
        float part = 0.0f;
        if (gi < ng) {
            mmv_pos q = cq;
            for (int g = 0; g < gi; g++)
                mmv_next(q, np, 1, rstride);
            const uint32_t off = (uint32_t)((uintptr_t)mmv_moe_slot_row(tb.w, tb.nb1, q) & 15);
            const int xp = DOWN ? q.p : 0;
            mmv_q8_pair<1>(ring0 + (uint32_t)slot * slot_b + (uint32_t)gi * sub + off, nb, gl, mmv_saddr(x + xp * xl),
                           xl, mmv_saddr(xsum + xp * nbr), nbr, 0, 1, &part);
        }
        float v = 0.0f + part;
        for (int o = L >> 1; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        __syncwarp(); /* the next pass refills this slot */
        for (int g = 0; g < ng; g++) {
            const float sum = __shfl_sync(0xffffffffu, v, g * L);
            if (!DOWN) {
                if (cq.p == 0)
                    gate = sum;
                else if (lane == 0)
                    a.y[yrow * a.ldy + cq.v] = d_moe_glu(a.gelu, gate, sum);
            } else {
                mmv_moe_down_part(a, cq.p, np, cq.v, yrow, tb.ws, sum, dacc, routed, lane);
            }
            mmv_next(cq, np, 1, rstride);
        }
        slot = slot == D - 1 ? 0 : slot + 1;
    }
}

#endif
