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
 * matmul_ex.rowinv.*_r2 cases compare them bit for bit.
 *
 * QX (the fast tier's form, Q8X_NR x rows a block column): the same walk,
 * ring and epilogues, x quantized while it is staged and the dot on dp4a
 * (q8x_stage, q8x_dot below). Why: the exact dot's float FMA a quant and
 * x row keeps the kernel issue-bound from two rows on (docs/CUDA.md,
 * Open); four dp4a a word, x row and part cost about a tenth of that, so
 * a few rows stream at about the one-row kernel's rate. */
#ifndef MEMRA_CUDA_MMV_Q8P_CUH
#define MEMRA_CUDA_MMV_Q8P_CUH

#include "mmv.cuh"

#define Q8P_NR 2 /* x rows a block column */
#define Q8P_M 2  /* weight rows an item */
#define Q8X_NR 4 /* x rows a block column of the QX form */

/* The QX form's staged x (one row): per 64-block segment 2048 bytes of
 * high parts, then the row's segments again for the low parts, lane L's
 * 64 elements of a segment as four 16-byte chunks at (k 32 + L) 16 (a
 * warp's loads of one chunk contiguous: no bank conflicts). After the
 * NR rows, each row's block scales (NBR floats). */
static __host__ __device__ __forceinline__ size_t q8x_row_bytes(int64_t ne0)
{
    return (size_t)((ne0 / 32 + 63) / 64) * 4096;
}

static __host__ __device__ __forceinline__ size_t q8x_x_bytes(int64_t ne0, int nr)
{
    return ((size_t)nr * (q8x_row_bytes(ne0) + (size_t)(ne0 / 32) * 4) + 15) / 16 * 16;
}

/* Stages NR x rows from X (rows a.ldx apart, 16-byte aligned; rmsnorm'd
 * with a.norm, as the skinny GEMM's prep: row_scale, row_scaled) as two
 * 8-bit parts a 32-block: m = the block's largest magnitude, q = x (127 /
 * m), hi = rint(q), lo = rint((q - hi) 254), x ~ (m / (127 254)) (254 hi
 * + lo): ~15 bits against the block's largest element (f16 keeps 11
 * against each element). Every block stages the same bits. Eight lanes a
 * 32-block, four elements a lane; the whole block's threads (row_scale's
 * reduction). */
static __device__ __forceinline__ void q8x_stage(const mmv_args &a, const float *x, int nr, uint8_t *xq)
{
    __shared__ float red[MEMRA_NORM_BLOCK / 32];
    const int64_t ne0 = a.ne0, nbr = ne0 / 32;
    const size_t rb = q8x_row_bytes(ne0);
    float *xd = (float *)(xq + (size_t)nr * rb);
    const int lane = threadIdx.x & 31, sub = lane & 7;
    for (int r = 0; r < nr; r++) {
        const float *xr = x + (int64_t)r * a.ldx;
        const float s = a.norm ? (float)row_scale(true, xr, ne0, a.eps, red) : 1.0f;
        uint8_t *hi = xq + (size_t)r * rb, *lo = hi + rb / 2;
        for (int64_t b0 = (threadIdx.x >> 3); b0 - (lane >> 3) < nbr; b0 += MMV_THREADS / 8) {
            const int64_t b = b0, e = b * 32 + 4 * sub;
            float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (b < nbr) {
                const float4 t = *(const float4 *)(xr + e);
                v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
                if (a.norm)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        v[i] = row_scaled(v[i], s, a.norm_w, e + i);
            }
            float m = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
            for (int o = 4; o; o >>= 1)
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            if (b >= nbr)
                continue;
            const float inv = m > 0.0f ? __fdiv_rn(127.0f, m) : 0.0f;
            int h[4], l[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float q = __fmul_rn(v[i], inv), hf = rintf(q);
                h[i] = (int)hf;
                l[i] = (int)rintf(__fmul_rn(__fsub_rn(q, hf), 254.0f));
            }
            const int bi = (int)(b & 63), k = ((bi & 1) * 32 + 4 * sub) >> 4;
            const size_t off = (size_t)(b >> 6) * 2048 + (size_t)(k * 32 + (bi >> 1)) * 16 + ((4 * sub) & 15);
            *(uint32_t *)(hi + off) = __byte_perm(__byte_perm(h[0], h[1], 0x0040), __byte_perm(h[2], h[3], 0x0040), 0x5410);
            *(uint32_t *)(lo + off) = __byte_perm(__byte_perm(l[0], l[1], 0x0040), __byte_perm(l[2], l[3], 0x0040), 0x5410);
            if (sub == 0)
                xd[(int64_t)r * nbr + b] = __fdiv_rn(m, 127.0f * 254.0f);
        }
    }
    __syncthreads();
}

static __device__ __forceinline__ uint4 q8x_lds128(uint32_t a)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}

/* The QX dot of a lane's block pair (W: the pair's 17 words for each of M
 * weight rows, as the exact kernel reads them) against NR staged x rows:
 * XQ the lane's chunk 0 of row 0's high part (a row RB bytes on, the low
 * part RB / 2), XD row 0's scale of the pair's first block (a row DS
 * bytes on). Per block and row: 254 Σ w hi + Σ w lo exact in int32 (eight
 * dp4a each), then one float32 multiply by (weight scale · x scale), the
 * second block's added by an FMA; T[r][m] += the pair's value. The
 * arithmetic depends on the row's own x only. */
template <int NR, int M>
static __device__ __forceinline__ void q8x_dot(const uint32_t (&w)[M][17], bool two, uint32_t xq, uint32_t rb,
                                               uint32_t xd, uint32_t ds, int nr, float (&t)[NR][M])
{
    uint32_t q[M][16]; /* the pair's quant words: block 0's shifted by its 2-byte scale */
    float d0[M], d1[M];
#pragma unroll
    for (int m = 0; m < M; m++) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            q[m][j] = __byte_perm(w[m][j], w[m][j + 1], 0x5432);
            q[m][8 + j] = w[m][9 + j];
        }
        d0[m] = __half2float(__ushort_as_half((unsigned short)(w[m][0] & 0xFFFFu)));
        d1[m] = __half2float(__ushort_as_half((unsigned short)(w[m][8] >> 16)));
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
        if (r >= nr)
            continue;
        int h[M][2], l[M][2];
#pragma unroll
        for (int m = 0; m < M; m++)
            h[m][0] = h[m][1] = l[m][0] = l[m][1] = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint4 xh = q8x_lds128(xq + r * rb + 512 * k), xl = q8x_lds128(xq + r * rb + rb / 2 + 512 * k);
            const uint32_t hw[4] = {xh.x, xh.y, xh.z, xh.w}, lw[4] = {xl.x, xl.y, xl.z, xl.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int m = 0; m < M; m++) {
                    h[m][k >> 1] = __dp4a((int)q[m][4 * k + i], (int)hw[i], h[m][k >> 1]);
                    l[m][k >> 1] = __dp4a((int)q[m][4 * k + i], (int)lw[i], l[m][k >> 1]);
                }
        }
        const float xd0 = mmv_ldsf(xd + r * ds), xd1 = two ? mmv_ldsf(xd + r * ds + 4) : 0.0f;
#pragma unroll
        for (int m = 0; m < M; m++) {
            float v = __fmul_rn((float)(254 * h[m][0] + l[m][0]), __fmul_rn(d0[m], xd0));
            if (two)
                v = __fmaf_rn((float)(254 * h[m][1] + l[m][1]), __fmul_rn(d1[m], xd1), v);
            t[r][m] = __fadd_rn(t[r][m], v);
        }
    }
}

/* q8b_dot for NR x rows at once (XA, SA: row 0's; XS, SS: bytes to the
 * next row's): each weight byte converted once for all NR rows, each
 * (x row, weight row) with q8b_dot's arithmetic. T[r][m] += 0 + v. (NR
 * calls of q8b_dot kept every converted weight live between the calls:
 * 128 registers and spills. The batched kernel keeps its own q8b_dot: the
 * same arithmetic through this one compiles to another schedule, not
 * measured.) */
template <int NR, int M>
static __device__ __forceinline__ void q8p_dot(const uint32_t (&w)[M][17], const float (&da)[M], const float (&db)[M],
                                               bool two, uint32_t xa, uint32_t xs, uint32_t sa, uint32_t ss, int nr,
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
            const float4 xv = r < nr ? mmv_lds128(xa + r * xs + 16 * j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
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
        if (r < nr) {
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
}

template <int T, int NR = Q8P_NR, bool QX = false>
__global__ void __launch_bounds__(MMV_THREADS, 2) mmv_q8p_kernel(const mmv_args a)
{
    static_assert(T == MEMRA_TYPE_Q8_0, "the fast path is Q8_0's");
    static_assert(QX || NR == Q8P_NR, "the exact form takes two rows");
    constexpr int M = Q8P_M;
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
    /* QX: up to NR rows a column, as many as the launch's shared memory
     * took (the bits do not depend on it) */
    const int64_t per = QX ? (a.n_rows + gridDim.y - 1) / gridDim.y : NR;
    const int64_t r0 = (int64_t)blockIdx.y * per;
    const int nr = (int)min(per, a.n_rows - r0);
    int64_t xl;
    float *xs = (float *)(q8p_dyn + (size_t)MMV_WARPS * D * IS);
    uint32_t xa, sa;
    if constexpr (QX) {
        q8x_stage(a, a.x + r0 * a.ldx, nr, (uint8_t *)xs);
        xl = (int64_t)q8x_row_bytes(a.ne0);
        xa = mmv_saddr(xs);
        sa = xa + (uint32_t)(nr * xl);
    } else {
        const float *x = mmv_stage_x<true>(a, a.x + r0 * a.ldx, nr, xs, &xl);
        xa = mmv_saddr(x), sa = mmv_saddr(x + nr * xl);
    }

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
                if constexpr (!QX) {
                    da[m] = __half2float(__ushort_as_half((unsigned short)(w[m][0] & 0xFFFFu))) * 0x1p85f;
                    db[m] = __half2float(__ushort_as_half((unsigned short)(w[m][8] >> 16))) * 0x1p85f;
                }
            }
            const int64_t b0 = (int64_t)cq.s * 64 + pb;
            float t[NR][M]; /* the segment's parts: 0 + v, as the one-row kernel's */
#pragma unroll
            for (int r = 0; r < NR; r++)
#pragma unroll
                for (int m = 0; m < M; m++)
                    t[r][m] = 0.0f;
            if constexpr (QX)
                q8x_dot<NR, M>(w, two, xa + (uint32_t)cq.s * 2048u + 16u * (uint32_t)lane, (uint32_t)xl,
                               sa + 4 * (uint32_t)b0, 4 * (uint32_t)nbr, nr, t);
            else
                q8p_dot<NR, M>(w, da, db, two, xa + 4 * (uint32_t)mmv_xp<true>(b0 * 32), 4 * (uint32_t)xl,
                               sa + 4 * (uint32_t)b0, 4 * (uint32_t)nbr, nr, t);
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
            if (lane == 0) {
#pragma unroll
                for (int m = 0; m < M; m++) {
                    if (m == 0 || two_rows) {
                        const mmv_pos q = {cq.v + m * nwt, cq.p, 0};
                        int64_t lrow;
                        const int wi = mmv_weight(a, q, &lrow);
#pragma unroll
                        for (int r = 0; r < NR; r++)
                            if (r < nr)
                                mmv_store<false>(a, wi, lrow, r0, r, g[r][m], u[r][m]);
                    }
                }
            }
        }
        mmv_next(cq, np, nseg, 2 * nwt);
        if (cq.s == 0 && k + 1 < n_items)
            set_off(cq);
        slot = slot == D - 1 ? 0 : slot + 1;
    }
}

#endif
