/* The K-quant matvec of one x row whose rows end in a short segment
 * (cuda/mmv_kq.cuh), with the short segments of G consecutive row pairs of
 * a warp in one pass.
 *
 * Why. A row of NSB super-blocks is NSB / KQ_SBS full segments and a short
 * one of NS = NSB % KQ_SBS super-blocks, which gives work to 4 NS of the
 * warp's 32 lanes but costs a whole pass's instructions: Gemma 4's 2560-
 * and 2816-wide rows (NS = 2, 3) run one such pass for every one or two
 * full ones, and these launches are bound by the instructions they issue,
 * not by HBM (docs/CUDA.md: the 26B-A4B Q4_K's Q6_K head at 66.6 % of the
 * issue slots, 19.8 active lanes a warp).
 *
 * Walk. A warp's row pairs (its groups g0, g0 + gstride, ...) go in
 * bundles of G: first one packed item holding the short segments of the
 * bundle's groups (item j on lanes [j L, j L + L), L = 4 NS rounded up to a
 * power of two, each row's bytes in a sub-slot of kq_pack_sub bytes, as the
 * fused MoE's packed items: cuda/mmv_moe_kq.cuh), then each group's full
 * segments in order. Lane j L + l computes what lane l computes on that
 * group's short segment in mmv_kq_kernel, into a sum from +0, and leaves
 * it in shared memory (TS: registers would spill) until the group's last
 * full segment, after which lane l adds lane j L + l's term, as
 * mmv_kq_kernel's lane l adds its short segment's term last. kq_lane's term goes into a lane's sum by one
 * rounded add, so +0 + t then s + (+0 + t) is s + t (s, starting at +0,
 * is never -0), and the row's warp_sum, store and epilogue are
 * mmv_kq_kernel's: every output has its bits (kernel-check: the matmul.kq
 * and matmul_ex.kq groups print the same lines with and without it;
 * test_mmv_kq: the walk, and the packed slots' sums on the CPU).
 * One x row only (R = 1): the batched kernels keep their R sums a lane. */
#ifndef MEMRA_CUDA_MMV_KQ_PACK_CUH
#define MEMRA_CUDA_MMV_KQ_PACK_CUH

#include "mmv_kq.cuh"

/* NS: the short segment's super-blocks (1-4), so that its lanes, groups
 * and sub-slots are constants (registers: the kernel keeps mmv_kq_kernel's
 * three blocks an SM) */
template <int T, int NS> __global__ void __launch_bounds__(MMV_THREADS, 3) mmv_kq_pack_kernel(const mmv_args a)
{
    using S = kq_seg<T>;
    extern __shared__ __align__(128) uint8_t kq_dyn[];
    __shared__ __align__(8) uint64_t bars[MMV_WARPS][KQ_RING_MAX];
    __shared__ float2 ts[MMV_WARPS][32]; /* the short segments' terms (T): shared, not registers */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (a.ids)
        MEMRA_PDL_ENTER(); /* expert ids come from the previous kernel */
    const float *x;
    int nr;
    int64_t yrow;
    size_t woff;
    if (!mmv_setup<1>(a, x, nr, yrow, woff))
        return;
    const int D = a.ring;
    const int nsb = (int)(a.ne0 / 256), nf = nsb / KQ_SBS, ns = NS;
    constexpr int L = kq_short_lanes(NS), G = kq_short_groups<T>(NS);
    constexpr uint32_t sub = kq_pack_sub<T>(NS);
    static_assert(G >= 2, "a slot holds two short segments or more");
    const int gi = lane / L;
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    /* row pairs in 32 bits: the host takes launches of fewer than 2^30 */
    const int ngrp = (int)(a.glu ? nv : (nv + KQ_M - 1) / KQ_M);
    const int gstride = (int)gridDim.x * MMV_WARPS, g0 = (int)blockIdx.x * MMV_WARPS + warp;
    const int nwg = g0 < ngrp ? (ngrp - 1 - g0) / gstride + 1 : 0; /* the warp's groups */
    mmv_bars_init(bars[warp], D, lane);
    const uint32_t bar0 = mmv_saddr(bars[warp]), ring0 = mmv_saddr(kq_dyn) + (uint32_t)(warp * D * S::item);

    const int n_items = kq_short_items(nwg, G, nf);
    auto bundle = [&](int b) { return min(G, nwg - b); };
    auto grp = [&](int b, int j) { return (int64_t)(g0 + (b + j) * gstride); };

    int issued = 0;
    auto issue = [&](int slot) {
        if (issued == n_items)
            return;
        const kq_short_pos ip = kq_short_at(issued++, G, nf);
        const uint32_t bar = bar0 + 8 * slot, dst = ring0 + (uint32_t)slot * S::item;
        if (ip.j < 0) {
            if (lane < KQ_M * G) {
                const int j = lane / KQ_M;
                const uint8_t *p = NULL;
                if (j < bundle(ip.b)) {
                    int wi;
                    int64_t lrow;
                    p = kq_row(a, woff, nv, grp(ip.b, j), lane % KQ_M, &wi, &lrow);
                    p = p ? p + (size_t)nf * S::bytes : NULL;
                }
                mmv_issue_sub(p, (uint32_t)ns * kq<T>::bb, bar, dst + (uint32_t)lane * sub, lane, KQ_M * G);
            }
        } else if (lane < KQ_M) {
            int wi;
            int64_t lrow;
            kq_issue<T>(kq_row(a, woff, nv, grp(ip.b, ip.j), lane, &wi, &lrow), ip.s, nsb, bar, dst, lane);
        }
    };
    int64_t xl;
    const float *sums;
    x = kq_prologue<T>(a, x, nr, D, kq_dyn, issue, &xl, &sums);
    const int64_t nbr = a.ne0 / 32;
    const kq_smem xr = {mmv_saddr(x)}, sr = {mmv_saddr(sums)};

    /* the row pair CG's row 1 present, and (Q6_K) where its rows start in
     * a slot (every segment starts as its row does: S::bytes is a multiple
     * of 16) */
    uint32_t off[KQ_M] = {0, 0};
    auto row1 = [&](int64_t cg) { return a.glu || KQ_M * cg + 1 < nv; };
    auto offsets = [&](int64_t cg) {
        if (kq<T>::s16) {
#pragma unroll
            for (int m = 0; m < KQ_M; m++) {
                int wi;
                int64_t lrow;
                off[m] = (uint32_t)((uintptr_t)kq_row(a, woff, nv, cg, m, &wi, &lrow) & 15);
            }
        }
    };
    float part[1][KQ_M] = {{0.0f, 0.0f}};
    /* group J of the bundle at B ends: its short term into lane l's sum
     * (the lanes that have one), then mmv_kq_kernel's sums and stores */
    auto finish = [&](int b, int j) {
        const int64_t cg = grp(b, j);
        const bool v1 = row1(cg);
#pragma unroll
        for (int m = 0; m < KQ_M; m++) {
            const float2 tv = ts[warp][j * L + (lane & (L - 1))];
            const float v = m ? tv.y : tv.x;
            if ((lane >> 2) < ns && (m == 0 || v1))
                part[0][m] = kq_add(part[0][m], v);
        }
#pragma unroll
        for (int m = 0; m < KQ_M; m++) {
            if (a.glu ? m > 0 : m > 0 && !v1)
                continue;
            const float g = warp_sum(part[0][m]), u = a.glu ? warp_sum(part[0][1]) : 0.0f;
            if (lane == 0) {
                int wi;
                int64_t lrow;
                kq_row(a, woff, nv, cg, m, &wi, &lrow);
                mmv_store(a, a.glu ? 0 : wi, lrow, yrow, 0, g, u);
            }
        }
        part[0][0] = part[0][1] = 0.0f;
    };
    uint32_t phase = 0;
    int slot = 0;
    bool v1 = true;
    for (int k = 0; k < n_items; k++) {
        const kq_short_pos cp = kq_short_at(k, G, nf);
        mmv_ring_wait(bar0, slot, phase);
        issue(slot == 0 ? D - 1 : slot - 1);
        const uint32_t base = ring0 + (uint32_t)slot * S::item;
        if (cp.j < 0) {
            float pt[1][KQ_M] = {{0.0f, 0.0f}};
            if (gi < bundle(cp.b) && ((lane & (L - 1)) >> 2) < ns) {
                const int64_t cg = grp(cp.b, gi);
                offsets(cg);
                const kq_smem wr[KQ_M] = {{base + (uint32_t)(gi * KQ_M) * sub},
                                          {base + (uint32_t)(gi * KQ_M + 1) * sub}};
                kq_lane_v1<T, 1>(wr, off, row1(cg), lane & (L - 1), (uint32_t)nf, xr, (uint32_t)xl, sr,
                                 (uint32_t)nbr, 1, pt);
            }
            ts[warp][lane] = make_float2(pt[0][0], pt[0][1]); /* read after the __syncwarp below */
        } else {
            if (cp.s == 0) {
                const int64_t cg = grp(cp.b, cp.j);
                v1 = row1(cg);
                offsets(cg);
            }
            const kq_smem wr[KQ_M] = {{base}, {base + S::slot}};
            kq_lane_v1<T, 1>(wr, off, v1, lane, (uint32_t)cp.s, xr, (uint32_t)xl, sr, (uint32_t)nbr, 1, part);
        }
        __syncwarp(); /* the slot is refilled by the next iteration's issue */
        if (cp.j < 0 && nf == 0) {
            for (int j = 0; j < bundle(cp.b); j++)
                finish(cp.b, j);
        } else if (cp.j >= 0 && cp.s == nf - 1) {
            finish(cp.b, cp.j);
        }
        slot = slot == D - 1 ? 0 : slot + 1;
    }
}

#endif
