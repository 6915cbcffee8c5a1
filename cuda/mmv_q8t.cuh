/* The Q8_0 fast path for rows whose last segment is short (cuda/mmv.cuh,
 * mmv_q8d_kernel): Gemma 4's 2560- and 2816-wide rows and the 27B's 5120
 * end in 16, 24 and 32 blocks after whole 64-block segments, so one pass of
 * a warp in two or three holds 8 to 16 of its 32 lane pairs, and these
 * launches are bound by the instructions they issue (E4B's gate/up at
 * ~1.9 TB/s). Here a warp takes its rows in groups of R and their U = R np
 * units (row, part): each unit's whole segments one pass each, then the
 * group's U short segments in one pass, unit j on lanes [j L, j L + L)
 * (one ring slot, U bulk copies on its barrier). Lane l's pair of a short
 * segment is the same pair dot as in the one-item pass (lane index l within
 * its unit's lanes), handed to lane l of the row by a shuffle and added to
 * its sum where the one-item pass adds it, then the same warp sum: the same
 * bits as mmv_q8d_kernel's default mode (and the generic kernel). */
#ifndef MEMRA_CUDA_MMV_Q8T_CUH
#define MEMRA_CUDA_MMV_Q8T_CUH

#include "mmv.cuh"

#define MMV_Q8T_UNITS 4 /* units a group, at most (one pass of 8-lane units) */

/* Lanes a unit of a short segment of TB blocks takes (0: not this path):
 * the least power of two from 8 that holds its pairs, when U units' copies
 * (16-byte rounded) fit one slot. */
static inline int mmv_q8t_lanes(int64_t ne0)
{
    const int64_t nbr = ne0 / 32, tb = nbr % 64;
    if (ne0 % 32 || nbr < 64 || tb == 0 || tb > 32)
        return 0;
    int L = 8;
    while (2 * L < tb)
        L *= 2;
    const int64_t bytes = (tb * 34 + 15) / 16 * 16;
    return (32 / L) * bytes <= MMV_Q8D_SEG ? L : 0;
}

template <int T> __global__ void __launch_bounds__(MMV_THREADS, 3) mmv_q8t_kernel(const mmv_args a)
{
    static_assert(T == MEMRA_TYPE_Q8_0, "the fast path is Q8_0's");
    constexpr int SEG = MMV_Q8D_SEG;
    const int D = a.ring;
    extern __shared__ __align__(128) uint8_t mmv_q8d_dyn[];
    __shared__ __align__(8) uint64_t bars[MMV_WARPS][MMV_Q8D_RING_MAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t nbr = a.ne0 / 32;
    const int nseg = (int)((nbr + 63) / 64), np = a.glu ? 2 : 1;
    const int tnb = (int)(nbr - (int64_t)(nseg - 1) * 64);             /* the short segment's blocks */
    const int L = a.q8_tail, U = 32 / L, R = U / np;                    /* lanes a unit, units, rows a group */
    const uint32_t TB = (uint32_t)(tnb * 34 + 15) / 16 * 16;            /* a unit's bytes in the slot */
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t nwt = (int64_t)gridDim.x * MMV_WARPS, v0 = (int64_t)blockIdx.x * MMV_WARPS + warp;
    const int64_t nrw = v0 < nv ? (nv - v0 + nwt - 1) / nwt : 0;        /* the warp's rows */
    /* items: per group, each unit's nseg - 1 whole segments, then one */
    const int64_t ng = (nrw + R - 1) / R;
    const int64_t n_items = nrw * np * (nseg - 1) + ng;
    uint8_t *ring = mmv_q8d_dyn + (size_t)warp * D * SEG;
    mmv_bars_init(bars[warp], D, lane);
    const uint32_t bar0 = mmv_saddr(bars[warp]), ring0 = mmv_saddr(ring);
    const uint64_t policy = mmv_evict_first();

    /* a position: group row i (of the warp's rows), unit u, segment s (s == nseg - 1: the group's short pass) */
    struct pos {
        int64_t i;
        int u, s;
    };
    auto units = [&](int64_t i) { return (int)((nrw - i < R ? nrw - i : R) * np); };
    auto next = [&](pos &q) {
        if (q.s < nseg - 1) {
            if (q.s + 1 < nseg - 1)
                q.s++;
            else if (q.u + 1 < units(q.i))
                q.u++, q.s = 0;
            else
                q.s = nseg - 1;
        } else {
            q.i += R;
            q.u = 0;
            q.s = 0;
        }
    };
    auto unit_row = [&](int64_t i, int u, int64_t *lrow, int *wi) {
        const mmv_pos q = {v0 + (i + u / np) * nwt, u % np, 0};
        *wi = mmv_weight(a, q, lrow);
        return a.W[*wi] + (size_t)*lrow * a.nb1[*wi];
    };
    pos iq = {0, 0, 0};
    int64_t issued = 0;
    auto issue = [&](int slot) {
        if (issued == n_items)
            return;
        if (lane == 0) {
            const uint32_t dst = ring0 + slot * SEG, bar = bar0 + 8 * slot;
            int64_t lrow;
            int wi;
            if (iq.s < nseg - 1) {
                const mmv_item<T> it = mmv_locate<T>(unit_row(iq.i, iq.u, &lrow, &wi), iq.s, nbr);
                mmv_bulk_load(dst, it.a0, (uint32_t)it.nchunk * 16u, bar, policy);
            } else {
                const int nu = units(iq.i);
                uint32_t total = 0;
                for (int j = 0; j < nu; j++)
                    total += (uint32_t)mmv_locate<T>(unit_row(iq.i, j, &lrow, &wi), nseg - 1, nbr).nchunk * 16u;
                mmv_bar_expect(bar, total);
                for (int j = 0; j < nu; j++) {
                    const mmv_item<T> it = mmv_locate<T>(unit_row(iq.i, j, &lrow, &wi), nseg - 1, nbr);
                    mmv_bulk_copy(dst + j * TB, it.a0, (uint32_t)it.nchunk * 16u, bar, policy);
                }
            }
        }
        issued++;
        next(iq);
    };
    const int pre = a.lean ? 1 : D - 1;
    for (int d = 0; d < pre; d++)
        issue(d);
    MEMRA_PDL_ENTER(); /* x is the previous kernel's output */
    int64_t xl;
    float *xs = (float *)(mmv_q8d_dyn + (size_t)MMV_WARPS * D * SEG);
    const float *x = mmv_stage_x<true>(a, a.x, 1, xs, &xl);
    for (int d = pre; d < D - 1; d++)
        issue(d);
    const uint32_t xa = mmv_saddr(x), sa = mmv_saddr(x + xl);
    float acc[MMV_Q8T_UNITS] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint32_t phase = 0;
    int slot = 0;
    pos cq = {0, 0, 0};
    const int gi = lane / L, gl = lane % L;
    for (int64_t k = 0; k < n_items; k++) {
        while (!mmv_bar_try_wait(bar0 + 8 * slot, (phase >> slot) & 1u)) {
        }
        phase ^= 1u << slot;
        issue(slot == 0 ? D - 1 : slot - 1);
        float part = 0.0f;
        if (cq.s < nseg - 1) {
            mmv_q8_pair<1>(ring0 + slot * SEG, 64, lane, xa, xl, sa, nbr, (int64_t)cq.s * 64, 1, &part);
#pragma unroll
            for (int j = 0; j < MMV_Q8T_UNITS; j++)
                if (j == cq.u)
                    acc[j] += part;
            __syncwarp(); /* the slot is refilled by the next item's issue */
        } else {
            const int nu = units(cq.i);
            if (gi < nu)
                mmv_q8_pair<1>(ring0 + slot * SEG + gi * TB, tnb, gl, xa, xl, sa, nbr, (int64_t)(nseg - 1) * 64, 1,
                               &part);
            __syncwarp();
            /* unit j's pair of lane l (l < L) from lane j L + l; lanes from L on hold no pair (+0) */
#pragma unroll
            for (int j = 0; j < MMV_Q8T_UNITS; j++) {
                const float t = __shfl_sync(0xffffffffu, part, (j * L + lane % L) & 31);
                if (j < nu)
                    acc[j] += lane < L ? t : 0.0f;
            }
            /* the group's rows: the warp sums and stores of the one-item pass
             * (constant indices keep acc in registers) */
            auto store = [&](int u0, float g, float u) {
                if (lane == 0) {
                    int64_t lrow;
                    int wi;
                    unit_row(cq.i, u0, &lrow, &wi);
                    mmv_store<false>(a, wi, lrow, 0, 0, g, u);
                }
            };
            if (np == 2) {
#pragma unroll
                for (int r = 0; r < MMV_Q8T_UNITS / 2; r++)
                    if (2 * r < nu)
                        store(2 * r, warp_sum(acc[2 * r]), warp_sum(acc[2 * r + 1]));
            } else {
#pragma unroll
                for (int r = 0; r < MMV_Q8T_UNITS; r++)
                    if (r < nu)
                        store(r, warp_sum(acc[r]), 0.0f);
            }
#pragma unroll
            for (int j = 0; j < MMV_Q8T_UNITS; j++)
                acc[j] = 0.0f;
        }
        next(cq);
        slot = slot == D - 1 ? 0 : slot + 1;
    }
}

#endif
