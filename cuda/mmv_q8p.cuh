/* The Q8_0 matvec of a batched step of two rows: the one-row fast path
 * (mmv_q8d_kernel) with two x rows and each item two weight rows' segment.
 *
 * Why: the batched kernel (mmv_q8b.cuh) ran a 9B step of two rows at
 * 1.6-2x the one-row kernel's time per matvec (MEMRA_CUDA_PROFILE: GLU
 * 47.8 against 28.8 us, down 37.5 against 18.1), and the one-row kernel
 * given two x rows (each weight item read against both) at 1.9-2.2x: a
 * lane reads its 64 x floats from shared memory per x row and item, so
 * two x rows doubled the shared-memory reads per weight byte (8 KB of x a
 * warp against a 2176-byte item) on top of twice the FMAs. Here an item is
 * the same segment of two of the warp's weight rows, each x load serving
 * both: per weight byte the x reads of one row, the FMAs of two. It runs
 * the 9B's GLU at two rows in 44.9 us (the batched kernel 47.8), its down
 * in 30.4 (37.5), its head in 354 (408); two rows' FMAs keep it above the
 * one-row time (docs/CUDA.md, Open).
 *
 * Rows: warp w walks its rows w, w + nwt, ... (the one-row kernel's) in
 * pairs (v, v + nwt), each pair's parts (GLU: gate, up) and segments in
 * the one-row kernel's order. Bits: each (x row, weight row) is the
 * one-row kernel's arithmetic (q8b_dot: mmv_q8_pair's operations, a
 * segment's part 0 + v, added to the row's sum in segment order, the warp
 * sum), so a row's result is the one it gets decoded alone; kernel-check's
 * matmul_ex.rowinv.*_r2 cases compare them bit for bit. */
#ifndef MEMRA_CUDA_MMV_Q8P_CUH
#define MEMRA_CUDA_MMV_Q8P_CUH

#include "mmv.cuh"

#define Q8P_NR 2 /* x rows a block column */
#define Q8P_M 2  /* weight rows an item */

/* q8b_dot for NR x rows at once (XA, SA: row 0's; XS, SS: bytes to the
 * next row's, 0 when the block has one row: its second row then repeats
 * the first and is not stored): each weight byte converted once for all
 * NR rows, each (x row, weight row) with q8b_dot's arithmetic. T[r][m] +=
 * 0 + v. (Loads under a row predicate cost each x load a zeroing of its
 * four registers, 64 of the 744 instructions an item took: Nsight
 * Compute, H100, 2026-12-05. NR calls of q8b_dot kept every converted
 * weight live between the calls: 128 registers and spills. The batched
 * kernel keeps its own q8b_dot: the same arithmetic through this one
 * compiles to another schedule, not measured.) */
template <int NR, int M>
static __device__ __forceinline__ void q8p_dot(const uint32_t (&w)[M][17], const float (&da)[M], const float (&db)[M],
                                               bool two, uint32_t xa, uint32_t xs, uint32_t sa, uint32_t ss,
                                               float (&t)[NR][M])
{
    float s[NR][M][2][4];
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    s[r][m][h][c] = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        float xx[NR][4];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const float4 xv = mmv_lds128(xa + r * xs + 16 * j);
            xx[r][0] = xv.x, xx[r][1] = xv.y, xx[r][2] = xv.z, xx[r][3] = xv.w;
        }
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int i = 4 * j + c;
            const int byte = i < 32 ? 2 + i : 36 + (i - 32);
#pragma unroll
            for (int m = 0; m < M; m++) {
                const float q = __int_as_float(__byte_perm(w[m][byte >> 2] ^ 0x80808080u, 0u, 0x4440 + (byte & 3)));
#pragma unroll
                for (int r = 0; r < NR; r++)
                    s[r][m][i >> 5][c] = fmaf(q, xx[r][c], s[r][m][i >> 5][c]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const float suma = mmv_ldsf(sa + r * ss), sumb = two ? mmv_ldsf(sa + r * ss + 4) : 0.0f;
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float ta = (s[r][m][0][0] + s[r][m][0][1]) + (s[r][m][0][2] + s[r][m][0][3]);
            const float tb = (s[r][m][1][0] + s[r][m][1][1]) + (s[r][m][1][2] + s[r][m][1][3]);
            float v = __fmul_rn(__fsub_rn(ta, suma), da[m]);
            if (two)
                v = __fmaf_rn(__fsub_rn(tb, sumb), db[m], v);
            t[r][m] += __fadd_rn(0.0f, v);
        }
    }
}

template <int T> __global__ void __launch_bounds__(MMV_THREADS, 2) mmv_q8p_kernel(const mmv_args a)
{
    static_assert(T == MEMRA_TYPE_Q8_0, "the fast path is Q8_0's");
    constexpr int NR = Q8P_NR, M = Q8P_M;
    const int D = a.ring;
    extern __shared__ __align__(128) uint8_t q8p_dyn[];
    __shared__ __align__(8) uint64_t bars[MMV_WARPS][MMV_Q8D_RING_MAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t nbr = a.ne0 / 32;
    const int nseg = (int)((nbr + 63) / 64), np = a.glu ? 2 : 1;
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t nwt = (int64_t)gridDim.x * MMV_WARPS, gw = (int64_t)blockIdx.x * MMV_WARPS + warp;
    const int SL = a.q8_slot, IS = M * SL; /* a slot, an item */
    const int64_t nrow = gw < nv ? (nv - 1 - gw) / nwt + 1 : 0;
    const int64_t n_items = (nrow + 1) / 2 * np * nseg;
    const uint32_t ring0 = mmv_saddr(q8p_dyn + (size_t)warp * D * IS);
    mmv_bars_init(bars[warp], D, lane);
    const uint32_t bar0 = mmv_saddr(bars[warp]);
    const uint64_t policy = mmv_evict_first();

    auto row_src = [&](int64_t v, int p) {
        const mmv_pos q = {v, p, 0};
        int64_t lrow;
        const int wi = mmv_weight(a, q, &lrow);
        return a.W[wi] + (size_t)lrow * a.nb1[wi];
    };
    /* issue side: the current pair part's two rows (the second NULL past nv) */
    mmv_pos iq = {gw, 0, 0};
    const uint8_t *src[M] = {NULL, NULL};
    auto set_src = [&](const mmv_pos &q) {
        src[0] = row_src(q.v, q.p);
        src[1] = q.v + nwt < nv ? row_src(q.v + nwt, q.p) : NULL;
    };
    if (n_items)
        set_src(iq);
    int64_t issued = 0;
    auto issue = [&](int slot) {
        if (issued == n_items)
            return;
        if (lane == 0) {
            mmv_item<T> it[M];
            uint32_t total = 0;
#pragma unroll
            for (int m = 0; m < M; m++) {
                if (src[m]) {
                    it[m] = mmv_locate<T>(src[m], iq.s, nbr);
                    total += (uint32_t)it[m].nchunk * 16u;
                }
            }
            const uint32_t bar = bar0 + 8u * (uint32_t)slot;
            mmv_bar_expect(bar, total);
#pragma unroll
            for (int m = 0; m < M; m++)
                if (src[m])
                    mmv_bulk_copy(ring0 + (uint32_t)(slot * IS + m * SL), it[m].a0, (uint32_t)it[m].nchunk * 16u, bar,
                                  policy);
        }
        if (++issued < n_items) {
            mmv_next(iq, np, nseg, 2 * nwt);
            if (iq.s == 0)
                set_src(iq);
        }
    };
    /* the weights (which no kernel writes) start before the wait for x */
    for (int d = 0; d < D - 1; d++)
        issue(d);
    MEMRA_PDL_ENTER();
    const int64_t r0 = (int64_t)blockIdx.y * NR;
    const int nr = (int)min((int64_t)NR, a.n_rows - r0);
    int64_t xl;
    float *xs = (float *)(q8p_dyn + (size_t)MMV_WARPS * D * IS);
    const float *x = mmv_stage_x<true>(a, a.x + r0 * a.ldx, nr, xs, &xl);
    const uint32_t xa = mmv_saddr(x), sa = mmv_saddr(x + nr * xl);
    const uint32_t xstep = nr > 1 ? 4 * (uint32_t)xl : 0u, sstep = nr > 1 ? 4 * (uint32_t)nbr : 0u;
    static_assert(NR == 2, "rows past nr repeat row 0 (xstep, sstep)");

    mmv_pos cq = {gw, 0, 0};
    /* the compute side's row starts modulo 16 (rows off 16 bytes only) */
    uint32_t coff[M] = {0u, 0u};
    bool two_rows = false;
    auto set_off = [&](const mmv_pos &q) {
        two_rows = q.v + nwt < nv;
        if (SL != MMV_Q8D_SEG) {
            coff[0] = (uint32_t)((uintptr_t)row_src(q.v, q.p) & 15);
            coff[1] = two_rows ? (uint32_t)((uintptr_t)row_src(q.v + nwt, q.p) & 15) : 0u;
        }
    };
    if (n_items)
        set_off(cq);
    float acc0[NR][M], acc1[NR][M];
#pragma unroll
    for (int r = 0; r < NR; r++)
#pragma unroll
        for (int m = 0; m < M; m++)
            acc0[r][m] = acc1[r][m] = 0.0f;
    uint32_t phase = 0;
    int slot = 0;
    for (int64_t k = 0; k < n_items; k++) {
        mmv_ring_wait(bar0, slot, phase);
        issue(slot == 0 ? D - 1 : slot - 1);
        const int nb = cq.s == nseg - 1 ? (int)(nbr - (int64_t)cq.s * 64) : 64, pb = 2 * lane;
        if (pb < nb) {
            const bool two = pb + 1 < nb;
            uint32_t w[M][17];
            float da[M], db[M];
#pragma unroll
            for (int m = 0; m < M; m++) {
                const uint32_t at = ring0 + (uint32_t)(slot * IS + m * SL) + coff[m] + 68u * lane;
#pragma unroll
                for (int i = 0; i < 17; i++)
                    w[m][i] = mmv_lds32(at + 4 * i);
                da[m] = __half2float(__ushort_as_half((unsigned short)(w[m][0] & 0xFFFFu))) * 0x1p85f;
                db[m] = __half2float(__ushort_as_half((unsigned short)(w[m][8] >> 16))) * 0x1p85f;
            }
            const int64_t b0 = (int64_t)cq.s * 64 + pb;
            float t[NR][M]; /* the segment's parts: 0 + v, as the one-row kernel's */
#pragma unroll
            for (int r = 0; r < NR; r++)
#pragma unroll
                for (int m = 0; m < M; m++)
                    t[r][m] = 0.0f;
            q8p_dot<NR, M>(w, da, db, two, xa + 4 * (uint32_t)mmv_xp<true>(b0 * 32), xstep, sa + 4 * (uint32_t)b0,
                           sstep, t);
#pragma unroll
            for (int r = 0; r < NR; r++)
#pragma unroll
                for (int m = 0; m < M; m++) {
                    if (cq.p == 0)
                        acc0[r][m] += t[r][m];
                    else
                        acc1[r][m] += t[r][m];
                }
        }
        __syncwarp(); /* the slot is refilled by the next iteration's issue */
        if (cq.s == nseg - 1 && cq.p == np - 1) {
            float g[NR][M], u[NR][M];
#pragma unroll
            for (int r = 0; r < NR; r++)
#pragma unroll
                for (int m = 0; m < M; m++) {
                    g[r][m] = warp_sum(acc0[r][m]);
                    u[r][m] = a.glu ? warp_sum(acc1[r][m]) : 0.0f;
                    acc0[r][m] = acc1[r][m] = 0.0f;
                }
            /* lane r * M + m stores (x row r, weight row m): one copy of
             * the epilogue's code instead of NR * M inlined in the loop
             * (36 KB of the loop's 51, where instruction fetch was 19 %
             * of the warps' stalls); every lane holds each sum, the
             * butterfly's bits */
            const int sr = lane / M, sm = lane % M;
            float gv = 0.0f, uv = 0.0f;
#pragma unroll
            for (int r = 0; r < NR; r++)
#pragma unroll
                for (int m = 0; m < M; m++)
                    if (sr == r && sm == m)
                        gv = g[r][m], uv = u[r][m];
            if (lane < NR * M && sr < nr && (sm == 0 || two_rows)) {
                const mmv_pos q = {cq.v + sm * nwt, cq.p, 0};
                int64_t lrow;
                const int wi = mmv_weight(a, q, &lrow);
                mmv_store<false>(a, wi, lrow, r0, sr, gv, uv);
            }
        }
        mmv_next(cq, np, nseg, 2 * nwt);
        if (cq.s == 0 && k + 1 < n_items)
            set_off(cq);
        slot = slot == D - 1 ? 0 : slot + 1;
    }
}

#endif
