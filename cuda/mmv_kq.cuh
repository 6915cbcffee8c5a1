/* The K-quant matvec (Q4_K, Q5_K, Q6_K; Q4_0 on the same lanes, its eight
 * blocks a 144-byte super-block): decode, batched and exact-mode
 * rows, matmul_ex fusions and the MoE's grouped expert matvecs (a.ids; the
 * fused MoE kernel has the same lanes: cuda/mmv_moe_kq.cuh), at a few
 * instructions per weight instead of the generic kernel's ~10 (mq_dot32: a byte load,
 * shifts, masks, an I2F-like FADD and an FMA per weight, compute-bound at
 * ~0.9 TB/s).
 *
 * Work. A warp walks items = (group of KQ_M = 2 weight rows, segment of 8
 * super-blocks): GLU pairs a virtual row's gate and up rows, other launches
 * pair consecutive virtual rows (of any of the fused weights). Each item is
 * one or two bulk copies (sm_90 TMA, a row each) into a ring slot of the
 * warp, completing on the slot's mbarrier; the warp issues D - 1 items ahead
 * (D from the shared memory left next to x: 2 or 3). The item's two rows
 * share every x load, which halves the shared-memory traffic of x (4 bytes
 * per weight and row otherwise: at 0.56 bytes per Q4_K weight, x and not
 * HBM would set the pace). The lane arithmetic is in cuda/mmv_kq_lane.cuh.
 *
 * Instructions per weight and x row (Q4_K, R = 1; counted from the source,
 * not measured): PRMT + FFMA, a mask per four, one 16-byte x load per four
 * shared by the two rows (1/8), and per item (128 weights a lane) ~60 for
 * the two rows' scales and chain sums, ~25 for the copies (lanes 0 and 1,
 * a row each) and ~15 for the ring: ~3.3, against ~10 in the generic
 * kernel. At 3.3 a 4096 x 12288 Q4_K matvec needs ~5.4 us of issue at
 * every scheduler's full rate against ~7 us of HBM at 4 TB/s. Q5_K adds
 * ~0.9 for the fifth bit, Q6_K ~1.2 for its two high bits and the funnel
 * shifts of its 210-byte blocks (and both stream more bytes per weight).
 *
 * Bits. Lane l always takes the same 64 weights of a segment, segments add
 * into its sum in order from +0 (explicitly rounded), and a row's sum is
 * warp_sum's fixed tree: a row's result depends on the weight alone, never
 * on how many x rows share the launch (R = 1, 2, 4, 8), which rows it is
 * paired with, the fused weights and epilogues, or the grid. The epilogues
 * are mmv_store's (the generic kernel's). kernel-check: matmul.kq.* against
 * the CPU, matmul.rowinv.kq.* and matmul_ex.rowinv.kq.* bit for bit across
 * row counts, matmul_ex.kq.* fused against unfused, moe.kq.* (expert ids)
 * against the CPU, moe.fused.kq.* the fused MoE kernel against these. */
#ifndef MEMRA_CUDA_MMV_KQ_CUH
#define MEMRA_CUDA_MMV_KQ_CUH

#include "mmv.cuh"
#include "mmv_kq_lane.cuh"

#define KQ_RING_MAX 4 /* items per warp in shared memory: at most */

/* Staged x: NR rows as the Q8_0 path stages them (x 2^64, padded, 32-sums)
 * and for Q6_K each row's 16-sums after them. */
template <int T> static __host__ __device__ __forceinline__ size_t kq_x_bytes(int64_t ne0, int nr)
{
    return mmv_x_bytes<MEMRA_TYPE_Q8_0>(ne0, nr) + (kq<T>::s16 ? (size_t)nr * (ne0 / 16) * sizeof(float) : 0);
}

template <int T> static inline size_t kq_smem_bytes(int64_t ne0, int nr, int d)
{
    return (size_t)MMV_WARPS * d * kq_seg<T>::item + kq_x_bytes<T>(ne0, nr);
}

/* Q6_K: the 16-element sums of the staged rows (times 2^-78, as the
 * staging's 32-element sums) into S16; thread t takes sums t, t + 256, ...
 * in one fixed order. */
static __device__ __forceinline__ void kq_sums16(const float *xs, int64_t xl, int nr, int64_t ne0, float *s16)
{
    const int64_t ng = ne0 / 16;
    for (int64_t i = threadIdx.x; i < nr * ng; i += MMV_THREADS) {
        const int64_t r = i / ng, g = i - r * ng;
        const float4 *p = (const float4 *)(xs + r * xl + mmv_xp<true>(16 * g));
        float t[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float4 f = p[j];
            t[j] = (f.x + f.y) + (f.z + f.w);
        }
        s16[i] = ((t[0] + t[1]) + (t[2] + t[3])) * 0x1p-71f * 0x1p-71f;
    }
    __syncthreads();
}

/* Row M of group G: its bytes, weight and local row; NULL past the last
 * virtual row (an odd count's last group). */
static __device__ __forceinline__ const uint8_t *kq_row(const mmv_args &a, size_t woff, int64_t nv, int64_t g, int m,
                                                        int *wi, int64_t *lrow)
{
    if (a.glu) {
        *wi = m;
        *lrow = g;
    } else {
        const mmv_pos q = {KQ_M * g + m, 0, 0};
        if (q.v >= nv)
            return NULL;
        *wi = mmv_weight(a, q, lrow);
    }
    return a.W[*wi] + woff + (size_t)*lrow * a.nb1[*wi];
}

/* Lanes 0 and 1 together, lane m for row m of an item: segment IS (of a
 * row of NSB super-blocks) of the row at P (NULL: absent) into the item's
 * slot at DST, from the 16-byte boundary at or below it in whole 16 bytes
 * (S::bytes is a multiple of 16); lane 0 first arms the slot's barrier BAR
 * with both rows' bytes (mmv_issue_sub's copy for two lanes, a segment of
 * a longer row). */
template <int T>
static __device__ __forceinline__ void kq_issue(const uint8_t *p, int is, int nsb, uint32_t bar, uint32_t dst,
                                                int lane)
{
    using S = kq_seg<T>;
    const uint32_t nb = (uint32_t)min(KQ_SBS, nsb - is * KQ_SBS) * kq<T>::bb;
    const uintptr_t src = p ? (uintptr_t)(p + (size_t)is * S::bytes) : 0;
    const uint32_t n = p ? ((uint32_t)(src & 15) + nb + 15) & ~15u : 0u;
    const uint32_t total = n + __shfl_sync(0x3u, n, 1); /* lane 0: both rows */
    if (lane == 0)
        mmv_bar_arm(bar, total);
    __syncwarp(0x3u); /* the bytes are expected before any arrives */
    if (n)
        mmv_bulk_copy_f(dst + lane * S::slot, (const void *)(src & ~(uintptr_t)15), n, bar, mmv_evict_first());
}

/* A launch's start once its walk's ISSUE(slot) is set: the first D - 1
 * slots issued (LEAN, after a latency-bound step: one before the wait,
 * the rest once x is staged, as the Q8_0 fast path), x's NR rows staged
 * after the ring in DYN (XL floats apart) with their 32-sums and (Q6_K)
 * 16-sums (*SUMS). Returns the staged x. */
template <int T, class ISSUE>
static __device__ __forceinline__ const float *kq_prologue(const mmv_args &a, const float *x, int nr, int D,
                                                           uint8_t *dyn, ISSUE &issue, int64_t *xl,
                                                           const float **sums)
{
    const int pre = a.lean ? 1 : D - 1;
    for (int d = 0; d < pre; d++)
        issue(d);
    if (!a.ids)
        MEMRA_PDL_ENTER(); /* x is the previous kernel's output */
    float *xs = (float *)(dyn + (size_t)MMV_WARPS * D * kq_seg<T>::item);
    x = mmv_stage_x<true>(a, x, nr, xs, xl);
    const float *s = x + (int64_t)nr * *xl; /* 32-sums; Q6_K: its 16-sums after them */
    if (kq<T>::s16) {
        s += (int64_t)nr * (a.ne0 / 32);
        kq_sums16(x, *xl, nr, a.ne0, (float *)s);
    }
    *sums = s;
    for (int d = pre; d < D - 1; d++)
        issue(d);
    return x;
}

/* Three blocks per SM for one row (24 warps streaming; x and the ring fit
 * 72 KiB at 4096 wide, the lane state 80 registers), one for batched rows
 * (registers for R sums). */
template <int T, int R> __global__ void __launch_bounds__(MMV_THREADS, R == 1 ? 3 : 2) mmv_kq_kernel(const mmv_args a)
{
    using S = kq_seg<T>;
    extern __shared__ __align__(128) uint8_t kq_dyn[];
    __shared__ __align__(8) uint64_t bars[MMV_WARPS][KQ_RING_MAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (a.ids)
        MEMRA_PDL_ENTER(); /* expert ids come from the previous kernel */
    const float *x;
    int nr;
    int64_t yrow;
    size_t woff;
    if (!mmv_setup<R>(a, x, nr, yrow, woff))
        return;
    const int D = a.ring;
    const int nsb = (int)(a.ne0 / 256), nseg = kq_nseg(nsb);
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t ngrp = a.glu ? nv : (nv + KQ_M - 1) / KQ_M;
    const int64_t gstride = (int64_t)gridDim.x * MMV_WARPS, g0 = (int64_t)blockIdx.x * MMV_WARPS + warp;
    const int n_items = g0 < ngrp ? (int)((ngrp - 1 - g0) / gstride + 1) * nseg : 0;
    mmv_bars_init(bars[warp], D, lane);
    const uint32_t bar0 = mmv_saddr(bars[warp]), ring0 = mmv_saddr(kq_dyn) + (uint32_t)(warp * D * S::item);

    /* issue side: item `issued` is segment is of group ig (kq_issue) */
    int64_t ig = g0;
    int is = 0, issued = 0;
    auto issue = [&](int slot) {
        if (issued == n_items)
            return;
        if (lane < KQ_M) {
            int wi;
            int64_t lrow;
            kq_issue<T>(kq_row(a, woff, nv, ig, lane, &wi, &lrow), is, nsb, bar0 + 8 * slot,
                        ring0 + (uint32_t)slot * S::item, lane);
        }
        if (++issued < n_items && ++is == nseg) {
            is = 0;
            ig += gstride;
        }
    };
    int64_t xl;
    const float *sums;
    x = kq_prologue<T>(a, x, nr, D, kq_dyn, issue, &xl, &sums);
    const int64_t nbr = a.ne0 / 32;
    const kq_smem xr = {mmv_saddr(x)}, sr = {mmv_saddr(sums)};

    float part[R][KQ_M];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < KQ_M; m++)
            part[r][m] = 0.0f;
    /* the current group: row 1 present, and (Q6_K) where its rows'
     * segments start in their slots (Q4_K/Q5_K rows start on 16 bytes:
     * mmv_kq_takes) */
    int64_t cg = g0;
    int cs = 0;
    uint32_t off[KQ_M] = {0, 0};
    bool v1 = true;
    auto group = [&] {
        v1 = a.glu || KQ_M * cg + 1 < nv;
        if (kq<T>::s16) {
#pragma unroll
            for (int m = 0; m < KQ_M; m++) {
                int wi;
                int64_t lrow;
                off[m] = (uint32_t)((uintptr_t)kq_row(a, woff, nv, cg, m, &wi, &lrow) & 15);
            }
        }
    };
    if (n_items)
        group();
    uint32_t phase = 0;
    int slot = 0;
    for (int k = 0; k < n_items; k++) {
        mmv_ring_wait(bar0, slot, phase);
        issue(slot == 0 ? D - 1 : slot - 1);
        const uint32_t base = ring0 + (uint32_t)slot * S::item;
        if (a.probe) { /* MEMRA_MMV_PROBE: the bytes streamed, no dot (timing only) */
            part[0][0] += (float)(kq_smem{base}.u32(4 * lane) & 0xFF);
        } else if ((lane >> 2) < nsb - cs * KQ_SBS) { /* the lane's super-block is in the segment */
            const kq_smem wr[KQ_M] = {{base}, {base + S::slot}};
            /* one row: a loop without the test of row 1 for each case (an
             * odd row count's last row alone) */
            kq_lane_v1<T, R>(wr, off, v1, lane, (uint32_t)cs, xr, (uint32_t)xl, sr, (uint32_t)nbr, nr, part);
        }
        __syncwarp(); /* the slot is refilled by the next iteration's issue */
        if (cs == nseg - 1) {
            /* GLU: one output per pair; else each present row's */
#pragma unroll
            for (int m = 0; m < KQ_M; m++) {
                if (a.glu ? m > 0 : m > 0 && !v1)
                    continue;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float g = warp_sum(part[r][m]), u = a.glu ? warp_sum(part[r][1]) : 0.0f;
                    if (lane == 0 && r < nr) {
                        int wi;
                        int64_t lrow;
                        kq_row(a, woff, nv, cg, m, &wi, &lrow);
                        mmv_store(a, a.glu ? 0 : wi, lrow, yrow, r, g, u);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int m = 0; m < KQ_M; m++)
                    part[r][m] = 0.0f;
            cs = 0;
            cg += gstride;
            if (k + 1 < n_items)
                group();
        } else {
            cs++;
        }
        slot = slot == D - 1 ? 0 : slot + 1;
    }
}

/* ---- host side ------------------------------------------------------------------ */

/* The types the kernel takes, listed once: the K-quants and Q4_0 (its
 * eight blocks a super-block; the 9B Q4_0's tg128 346.3 against 256.5
 * tok/s on the generic kernel, H100, 2026-12-05). KQ_DISPATCH runs
 * CASE(T) for type t when the kernel takes it (CASE returns), and falls
 * through otherwise. */
#define KQ_DISPATCH(t, CASE)                                                                                           \
    switch (t) {                                                                                                       \
    case MEMRA_TYPE_Q4_K: CASE(MEMRA_TYPE_Q4_K);                                                                       \
    case MEMRA_TYPE_Q5_K: CASE(MEMRA_TYPE_Q5_K);                                                                       \
    case MEMRA_TYPE_Q6_K: CASE(MEMRA_TYPE_Q6_K);                                                                       \
    case MEMRA_TYPE_Q4_0: CASE(MEMRA_TYPE_Q4_0);                                                                       \
    default: break;                                                                                                    \
    }

static inline bool kq_type(int t)
{
#define KQ_TAKES(T) return true
    KQ_DISPATCH(t, KQ_TAKES)
#undef KQ_TAKES
    return false;
}

/* (SIZE_MAX for a type the kernel does not take: it fits nothing) */
static inline size_t kq_smem_of(int t, int64_t ne0, int nr, int d)
{
#define KQ_SMEM(T) return kq_smem_bytes<T>(ne0, nr, d)
    KQ_DISPATCH(t, KQ_SMEM)
#undef KQ_SMEM
    return SIZE_MAX;
}

/* NR x rows fit next to the smallest ring. */
static inline bool mmv_kq_x_fits(int t, int64_t ne0, int nr)
{
    return kq_smem_of(t, ne0, nr, 2) <= MMV_SMEM_MAX;
}

/* The one selection rule: the K-quant kernel takes every matvec of A's
 * weights (any row count, fusion, expert ids) when it is on
 * (MEMRA_MMV_KFAST, default 1, =0 the generic kernel for all its types;
 * its copies are TMA, so MEMRA_MMV_TMA=0 turns
 * it off too), one x row fits shared memory, and the rows and expert
 * slices start on 16 bytes (Q6_K: on 2, its blocks' own alignment).
 * Everything here is a property of the weights, so a row's kernel, and its
 * bits, are the same in every call. */
static inline bool mmv_kq_takes(int t, const mmv_args &a)
{
    static long on = -1;
    if (on < 0)
        on = memra__cuda_env_long("MEMRA_MMV_KFAST", 1) && memra__cuda_env_long("MEMRA_MMV_TMA", 1);
    /* the MoE's grouped expert matvecs (a.ids) too: the fused MoE kernel
     * asks the same (memra__cuda_grouped_kq) and then takes these lanes
     * (cuda/mmv_moe_kq.cuh), so fused and unfused give the same bits */
    if (!on || !kq_type(t) || a.ne0 % 256 || a.ne0 > INT32_MAX / 8 || !mmv_kq_x_fits(t, a.ne0, 1))
        return false;
    const size_t al = t == MEMRA_TYPE_Q6_K ? 2 : 16;
    for (int i = 0; i < a.nw; i++)
        if ((uintptr_t)a.W[i] % al || a.nb1[i] % al || (a.ids && a.nb2 % al))
            return false;
    return true;
}

/* Items per warp: as many as fit MMV_SMEM_TARGET next to XBYTES of staged
 * x (the Q8_0 fast path's budget: three blocks per SM), between 2 and
 * KQ_RING_MAX; at 4096 wide Q4_K gets 3, Q5_K and Q6_K 2. The depth moves
 * no bit. MEMRA_MMV_KQ_RING=N forces N (experiments). */
template <int T> static inline int kq_ring_depth(size_t xbytes)
{
    static long force = -1;
    if (force < 0)
        force = memra__cuda_env_long("MEMRA_MMV_KQ_RING", 0);
    if (force >= 2 && force <= KQ_RING_MAX)
        return (int)force;
    const size_t slot = (size_t)MMV_WARPS * kq_seg<T>::item;
    const int d = xbytes + 2 * slot <= MMV_SMEM_TARGET ? (int)((MMV_SMEM_TARGET - xbytes) / slot) : 2;
    return d < 2 ? 2 : d > KQ_RING_MAX ? KQ_RING_MAX : d;
}

/* Whether the grouped matvec of W's experts takes the K-quant kernel
 * (mmv_kq_takes on memra__cuda_matvec_grouped's arguments,
 * cuda/ops_matmul.cu): the fused MoE (cuda/ops_moe_fused.cu) takes the
 * K-quant lanes for exactly those weights, so that its dots are the
 * sequence's. */
bool memra__cuda_grouped_kq(const memra_weight_t *w);

/* Launches the K-quant kernel (R in 1, 2, 4, 8, its x rows fitting: the
 * caller checks mmv_kq_x_fits); false when it cannot be configured. */
bool mmv_kq_launch(int t, const mmv_args &a, int R, unsigned gy, int sm_count, cudaStream_t s);

#endif
