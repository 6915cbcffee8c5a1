/* Definitions of the per-type launchers declared in mmv.cuh; included only
 * by the cuda/mmv_*.cu files that instantiate them (MMV_INSTANTIATE). */
#ifndef MEMRA_CUDA_MMV_IMPL_CUH
#define MEMRA_CUDA_MMV_IMPL_CUH

#include <atomic>
#include <stdio.h>

#include "mmv.cuh"
#include "mmv_occ.cuh"
#include "mmv_moe.cuh"
#include "mmv_moe_slot.cuh"
#include "mmv_q8b.cuh"
#include "mmv_q8p.cuh"

/* Items per warp in the ring for a block that also stages XBYTES of x: as
 * many as fit MMV_SMEM_TARGET, within the ring limits. Measured on the H200
 * (Q8_0 4096x12288, tools/mmv-lab.cu): with the pair dot, three items
 * per warp at three blocks per SM beat two (19.8 us vs 22.3 us); deeper
 * rings cost resident warps. */
template <int T> static int mmv_ring_depth(size_t xbytes, int nch = mmv_seg<T>::nch)
{
    if constexpr (mq_is_float<T>::value) {
        return MMV_RING_MIN; /* float types: no ring */
    } else {
        const size_t slot = mmv_ring_bytes<T>(1, nch);
        static long force = -1, target = -1; /* experiments: MEMRA_MMV_RING, MEMRA_MMV_SMEM_TARGET */
        if (force < 0) {
            force = memra__cuda_env_long("MEMRA_MMV_RING", 0);
            target = memra__cuda_env_long("MEMRA_MMV_SMEM_TARGET", MMV_SMEM_TARGET);
        }
        if (force >= MMV_RING_MIN && force <= MMV_RING_MAX)
            return (int)force;
        const size_t tg = (size_t)target;
        const int d = xbytes + MMV_RING_MIN * slot <= tg ? (int)((tg - xbytes) / slot) : MMV_RING_MIN;
        return d < MMV_RING_MIN ? MMV_RING_MIN : d > MMV_RING_MAX ? MMV_RING_MAX : d;
    }
}

/* Blocks along x of a resident grid: enough for one virtual row per warp
 * (WARPS a block), at most OCC blocks per SM over the GY problems. */
static unsigned mmv_grid_x(const mmv_args &a, int occ, int sm_count, unsigned gy, int warps = MMV_WARPS)
{
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t need = (nv + warps - 1) / warps;
    int64_t cap = (int64_t)occ * mmv_sms(sm_count) / gy;
    if (cap < 1)
        cap = 1;
    return (unsigned)(need < cap ? need : cap);
}

template <int T, int R, bool TMA>
static bool mmv_launch_r(mmv_args a, unsigned gy, int sm_count, cudaStream_t s, bool vec)
{
    const void *kernel;
    if constexpr (mq_is_float<T>::value)
        kernel = (const void *)mmv_f_kernel<T, R>;
    else
        kernel = (const void *)mmv_q_kernel<T, R, TMA>;
    static dev_cache_row cache[DEV_CACHE_DEVICES];
    size_t xbytes = mmv_x_bytes<T>(a.ne0, R);
    if (mmv_ring_bytes<T>(MMV_RING_MIN) + xbytes > MMV_SMEM_MAX) {
        if (a.norm)
            return false; /* the host checks mmv_x_fits first */
        xbytes = 0;
    }
    a.ring = mmv_ring_depth<T>(xbytes);
    a.xsm = xbytes > 0;
    /* the router's route (mmv_f_route) reuses the dynamic shared memory:
     * the logits and the probabilities with the picks */
    const size_t rbytes = a.route_ticket ? (size_t)(2 * a.route.n_expert + a.route.k) * sizeof(float) : 0;
    size_t smem = mmv_ring_bytes<T>(a.ring) + xbytes;
    smem = smem > rbytes ? smem : rbytes;
    int occ = mmv_occupancy(kernel, smem, cache);
    if (occ == 0) {
        if (!xbytes || a.norm)
            return false;
        a.xsm = 0; /* x from global memory, then */
        a.ring = mmv_ring_depth<T>(0);
        smem = mmv_ring_bytes<T>(a.ring);
        smem = smem > rbytes ? smem : rbytes;
        occ = mmv_occupancy(kernel, smem, cache);
        if (occ == 0)
            return false;
    }
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const dim3 grid(mmv_grid_x(a, occ, sm_count, gy), gy);
    static int probe = -1;
    if (probe < 0)
        probe = memra__cuda_env_long("MEMRA_MMV_PROBE", 0) > 0;
    a.probe = probe;
    if (mmv_debug())
        fprintf(stderr, "mmv type %d R %d%s: %lld x %lld (%d weights%s%s), grid %u x %u, %d blocks/SM, ring %d, smem %zu\n",
                T, R, TMA ? " tma" : "", (long long)a.ne0, (long long)nv, a.nw, a.glu ? " glu" : "", a.norm ? " norm" : "", grid.x, grid.y,
                occ, a.ring, smem);
    if constexpr (mq_is_float<T>::value)
        memra__launch(mmv_f_kernel<T, R>, grid, MMV_THREADS, smem, s, a, vec);
    else
        memra__launch(mmv_q_kernel<T, R, TMA>, grid, MMV_THREADS, smem, s, a);
    return true;
}

#ifdef MEMRA_MMV_TIMELINE
/* Numbers the launch and keeps its shape; at exit writes every recorded
 * block's stamps (mmv.cuh) with the shape of its launch. */
static int mmv_tl_meta[MMV_TL_LAUNCHES][4];
static int mmv_tl_count;

static void mmv_tl_dump(void)
{
    static unsigned long long h[MMV_TL_LAUNCHES][MMV_TL_BLOCKS][8];
    const char *path = getenv("MEMRA_MMV_TIMELINE");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f || cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(h, mmv_tl, sizeof h) != cudaSuccess) {
        if (f)
            fclose(f);
        return;
    }
    const int n = mmv_tl_count < MMV_TL_LAUNCHES ? mmv_tl_count : MMV_TL_LAUNCHES;
    for (int k = mmv_tl_count - n; k < mmv_tl_count; k++) {
        const int i = k % MMV_TL_LAUNCHES, *m = mmv_tl_meta[i];
        for (int b = 0; b < m[0] && b < MMV_TL_BLOCKS; b++)
            fprintf(f, "%d %d %d %d %d %llu %llu %llu %llu %llu %llu\n", k, m[0], m[1], m[2], b, h[i][b][0],
                    h[i][b][1], h[i][b][2], h[i][b][3], h[i][b][4], h[i][b][5]);
    }
    fclose(f);
}

static void mmv_tl_note(mmv_args &a, unsigned grid, int64_t nv)
{
    if (mmv_tl_count == 0)
        atexit(mmv_tl_dump);
    a.tl_seq = mmv_tl_count % MMV_TL_LAUNCHES;
    int *m = mmv_tl_meta[a.tl_seq];
    m[0] = (int)grid, m[1] = (int)a.ne0, m[2] = (int)nv, m[3] = a.glu;
    mmv_tl_count++;
}
#endif

/* The Q8_0 fast path's slot stride for A's weights: MMV_Q8D_SEG for rows
 * at 16-byte aligned addresses, MMV_Q8D_SLOT_OFF when some row starts off
 * 16 bytes, 0 when one starts off 4 (the kernels read words). */
static int mmv_q8_slot(const mmv_args &a)
{
    bool off16 = false;
    for (int i = 0; i < a.nw; i++) {
        if (a.nb1[i] % 4 || (uintptr_t)a.W[i] % 4)
            return 0;
        off16 = off16 || a.nb1[i] % 16 || (uintptr_t)a.W[i] % 16;
    }
    return off16 ? MMV_Q8D_SLOT_OFF : MMV_Q8D_SEG;
}

/* The deepest ring (at most MMV_Q8D_RING_MAX items of ITEM bytes next to
 * XB bytes of x) that keeps KERNEL at OCC blocks an SM: what the SM's
 * shared memory has left at that occupancy (BUDGET caches it per device:
 * 0 = not yet asked). Sets *SMEM and returns the depth, or returns D0
 * when nothing deeper fits. The ring depth changes no bit. */
static int mmv_ring_deepen(const void *kernel, int occ, size_t xb, size_t item, int d0,
                           std::atomic<size_t> (&budget)[64], dev_cache_row *cache, size_t *smem,
                           size_t smem_max = MMV_SMEM_MAX)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        dev = 0;
    size_t b = budget[dev].load(std::memory_order_relaxed);
    if (b == 0) {
        b = mmv_block_smem_budget(kernel, occ);
        budget[dev].store(b ? b : 1, std::memory_order_relaxed);
    }
    const int d = b > xb ? (int)((b - xb) / item) : 0;
    if (d <= d0)
        return d0;
    const int dd = d < MMV_Q8D_RING_MAX ? d : MMV_Q8D_RING_MAX;
    const size_t s2 = (size_t)dd * item + xb;
    if (s2 > smem_max || mmv_occupancy(kernel, s2, cache, smem_max) != occ)
        return d0;
    *smem = s2;
    return dd;
}

/* The grouped rows' group (2^shift rows, up to 32) of NV rows on NWT warps:
 * the largest whose busiest warp has the fewest rows. */
static int mmv_q8d_group_shift(int64_t nv, int64_t nwt)
{
    auto busiest = [&](int gs) { return ((((nv + (1 << gs) - 1) >> gs) + nwt - 1) / nwt) << gs; };
    int best = 5;
    for (int gs = 4; gs >= 1; gs--)
        if (busiest(gs) < busiest(best))
            best = gs;
    return best;
}

/* The Q8_0 fast path's row map for a one-row launch whose rows need fewer
 * blocks than fit (GRID, the default map's blocks, against FIT = OCC
 * blocks an SM on every SM). The default map gives row r to warp r % 8 of
 * block r / 8, so such a launch runs on GRID blocks and some SMs hold more
 * of them than others (docs/CUDA.md, "Where a matvec's rows
 * fall on the SMs"). MMV_Q8D_SPREAD ranks the grid's warps across blocks
 * first and takes min(FIT, ROWS) blocks, so every SM gets its share; only
 * the warp walking a row moves, so the bits are the default map's.
 * Returns that grid, with SK's attributes set (its occupancy at SMEM at
 * least OCC), or 0 to keep the default map. MEMRA_MMV_SPREAD: 1 (the
 * default) as above, 0 the default map everywhere, 2 every one-row
 * launch (measured 4 % slower on the 31B: docs/PERFORMANCE.md). */
static unsigned mmv_q8d_spread(const void *sk, size_t smem, dev_cache_row *cache, int occ, int sm_count,
                               unsigned grid, int64_t rows)
{
    static long mode = -1;
    if (mode < 0)
        mode = memra__cuda_env_long("MEMRA_MMV_SPREAD", 1);
    const int64_t fit = (int64_t)occ * mmv_sms(sm_count);
    if (mode <= 0 || (mode == 1 && (int64_t)grid >= fit) || rows < 1)
        return 0;
    if (mmv_occupancy(sk, smem, cache) < occ)
        return 0;
    return (unsigned)(rows < fit ? rows : fit);
}

/* The Q8_0 decode fast path (mmv_q8d_kernel) when the launch fits it;
 * false to take the generic kernel. */
template <int T> static bool mmv_launch_q8d(const mmv_args &a0, unsigned gy, int sm_count, cudaStream_t s)
{
    static long on = -1, bps = -1, split_on = -1, split_glu = -1, deep = -1, wide = -1, cols = -1;
    if (on < 0) {
        on = memra__cuda_env_long("MEMRA_MMV_Q8D", 1);
        /* a batched step's small matvecs (one x row a block column,
         * ops_matmul.cu batch_cols) here rather than on the generic kernel:
         * each column's rows are the one-row launch's (the same dots and
         * sums, only the grid is narrower), so the same bits. The 26B-A4B's
         * batched steps of 2 / 4 rows +1.9 / +1.0 % against the generic
         * kernel, the 35B-A3B's and the 9B's level (H100, 2026-12-06);
         * MEMRA_MMV_Q8D_COLS=0 keeps the generic kernel (A/B) */
        cols = memra__cuda_env_long("MEMRA_MMV_Q8D_COLS", 1);
        wide = memra__cuda_env_long("MEMRA_MMV_Q8D_WIDE", 1); /* 0: one-block launches keep 8 warps (A/B) */
        deep = memra__cuda_env_long("MEMRA_MMV_Q8D_DEEP", 0); /* 1: deeper rings where x leaves room (A/B) */
        split_on = memra__cuda_env_long("MEMRA_MMV_SPLIT", 1);
        split_glu = memra__cuda_env_long("MEMRA_MMV_SPLIT_GLU", 0); /* 1: SPLIT's GLU form (A/B) */
        /* experiments: MEMRA_MMV_Q8D_BPS caps the grid at that many blocks per SM */
        bps = memra__cuda_env_long("MEMRA_MMV_Q8D_BPS", 0);
    }
    /* any whole number of blocks a row; rows that start on 4 bytes (the
     * generic kernel then takes the same pair dots: its (off & 3) == 0) */
    if (!on || gy < 1 || a0.ids || a0.n_rows != (int64_t)gy || a0.ne0 % 32 || mmv_generic_epi(a0))
        return false;
    const bool grouped = a0.ymap != 0;
    if (gy > 1 && (!cols || grouped))
        return false; /* columns: the default row map only (the grouped stores write one row) */
    if (grouped && (a0.nw != 1 || a0.glu || a0.add || (a0.post[0] != MEMRA_EW_COPY && a0.post[0] != MEMRA_EW_SOFTCAP) ||
                    a0.vrow0[0] != 0))
        return false;
    mmv_args a = a0;
    a.xsm = 1;
    a.q8_slot = mmv_q8_slot(a0);
    if (a.q8_slot == 0)
        return false;
    a.ring = MMV_Q8D_RING;
    size_t smem = (size_t)MMV_WARPS * MMV_Q8D_RING * a.q8_slot + mmv_x_bytes<T>(a.ne0, 1);
    if (smem > MMV_SMEM_MAX)
        return false;
    static dev_cache_row caches[4][DEV_CACHE_DEVICES]; /* per kernel: the attributes are set once per kernel */
    static const void *const kernels[4] = {
        (const void *)mmv_q8d_kernel<T, MMV_Q8D_DEFAULT>, (const void *)mmv_q8d_kernel<T, MMV_Q8D_GROUPED>,
        (const void *)mmv_q8d_kernel<T, MMV_Q8D_SPLIT>, (const void *)mmv_q8d_kernel<T, MMV_Q8D_SPREAD>};
    int mode = grouped ? MMV_Q8D_GROUPED : MMV_Q8D_DEFAULT;
    int occ = mmv_occupancy(kernels[mode], smem, caches[mode]);
    if (occ == 0)
        return false;
    if (occ < 3 && deep) {
        /* what the SM's shared memory has left at the same occupancy (one
         * block, or two: E4B's 10240-wide down) deepens the ring. Off by
         * default: tools/mmv-lab.cu on an H200 (2026-12-04) had the rings
         * of 4-5 at two blocks an SM 1-10 % slower than three (6144 x 4224
         * 12.28 against 11.10 us, 10240 x 2112 11.50 against 10.67) and
         * none faster; in decode within 1 % either way (85eda5b). The
         * one-block widths (16384 floats and more) stay at three here: the
         * budget's ring is over MMV_SMEM_MAX. */
        static std::atomic<size_t> budgets[3][3][64]; /* per mode, occupancy and device */
        a.ring = mmv_ring_deepen(kernels[mode], occ, mmv_x_bytes<T>(a.ne0, 1), (size_t)MMV_WARPS * a.q8_slot,
                                 MMV_Q8D_RING, budgets[mode][occ], caches[mode], &smem);
    }
    if (bps > 0 && bps < occ)
        occ = (int)bps;
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    unsigned grid = mmv_grid_x(a, occ, sm_count, gy);
    if (gy == 1 && !grouped && split_on && !a.glu && a.ne0 == 4096) {
        /* pairs of warps when the busiest warp has three rows or more and
         * the pairs take an eighth or more off its items (attention's
         * in-projections: 8 to 7; not the head: 158 to 157). Not the out
         * projections (4 to 3): their pairs' rendezvous cost more than the
         * item saved (10.2 against 9.4 us; 340 against 345 tok/s). */
        const int64_t nwt = (int64_t)grid * MMV_WARPS, npair = nwt / 2;
        if (nv > 2 * nwt && (nv + npair - 1) / npair * 8 <= (nv + nwt - 1) / nwt * 2 * 7) {
            int o2 = mmv_occupancy(kernels[MMV_Q8D_SPLIT], smem, caches[MMV_Q8D_SPLIT]);
            if (bps > 0 && bps < o2)
                o2 = (int)bps;
            if (o2 == occ)
                mode = MMV_Q8D_SPLIT;
        }
    } else if (gy == 1 && !grouped && split_on && split_glu && a.glu) {
        /* the GLU form (a part per warp of a pair) when the busiest warp's
         * parts fall by an eighth or more: the E4B's GeGLU (8 to 7 parts);
         * not the 9B's or 31B's (rows per warp near the mean) */
        const int64_t nwt = (int64_t)grid * MMV_WARPS, npair = nwt / 2;
        if (npair > 0 && (nv + npair - 1) / npair * 8 <= (nv + nwt - 1) / nwt * 2 * 7) {
            int o2 = mmv_occupancy(kernels[MMV_Q8D_SPLIT], smem, caches[MMV_Q8D_SPLIT]);
            if (bps > 0 && bps < o2)
                o2 = (int)bps;
            if (o2 == occ)
                mode = MMV_Q8D_SPLIT;
        }
    }
    if (gy == 1 && mode == MMV_Q8D_DEFAULT) {
        const unsigned gs =
            mmv_q8d_spread(kernels[MMV_Q8D_SPREAD], smem, caches[MMV_Q8D_SPREAD], occ, sm_count, grid, nv);
        if (gs) {
            mode = MMV_Q8D_SPREAD;
            grid = gs;
        }
    }
    if (gy == 1 && (mode == MMV_Q8D_DEFAULT || mode == MMV_Q8D_SPREAD) && occ == 1 && !a.norm && wide &&
        a.ring == MMV_Q8D_RING) {
        /* one block an SM (x of 16384 floats and more: the 27B's and 31B's
         * ffn down, gemma4's 16384-wide attention out): MMV_Q8D_WIDE_NW
         * warps share the staged x, twice the items in flight an SM.
         * Each row's dot and sum are the default's, only the warp walking
         * the row differs, so the bits are the same. */
        const bool sp = mode == MMV_Q8D_SPREAD;
        const void *kw = sp ? (const void *)mmv_q8d_kernel<T, MMV_Q8D_SPREAD, MMV_Q8D_WIDE_NW>
                            : (const void *)mmv_q8d_kernel<T, MMV_Q8D_DEFAULT, MMV_Q8D_WIDE_NW>;
        static dev_cache_row caches_w[2][DEV_CACHE_DEVICES];
        dev_cache_row *cache_w = caches_w[sp];
        const size_t smem_w = (size_t)MMV_Q8D_WIDE_NW * a.ring * a.q8_slot + mmv_x_bytes<T>(a.ne0, 1);
        if (smem_w <= MMV_Q8D_WIDE_SMEM_MAX &&
            mmv_occupancy(kw, smem_w, cache_w, MMV_Q8D_WIDE_SMEM_MAX, MMV_Q8D_WIDE_NW * 32) >= 1) {
            /* spread: mmv_q8d_spread's grid at one block an SM, min(rows, SMs) */
            const unsigned grid_w = sp ? grid : mmv_grid_x(a, 1, sm_count, 1, MMV_Q8D_WIDE_NW);
            if (mmv_debug())
                fprintf(stderr, "mmv q8d wide: %lld x %lld (%d weights%s), grid %u, %d warps a block, smem %zu\n",
                        (long long)a.ne0, (long long)nv, a.nw, a.glu ? " glu" : "", grid_w, MMV_Q8D_WIDE_NW, smem_w);
#ifdef MEMRA_MMV_TIMELINE
            mmv_tl_note(a, grid_w, nv);
#endif
            if (sp)
                return memra__launch(mmv_q8d_kernel<T, MMV_Q8D_SPREAD, MMV_Q8D_WIDE_NW>, dim3(grid_w),
                                     MMV_Q8D_WIDE_NW * 32, smem_w, s, a) == cudaSuccess;
            return memra__launch(mmv_q8d_kernel<T, MMV_Q8D_DEFAULT, MMV_Q8D_WIDE_NW>, dim3(grid_w),
                                 MMV_Q8D_WIDE_NW * 32, smem_w, s, a) == cudaSuccess;
        }
    }
    if (grouped)
        a.ymap = mmv_q8d_group_shift(nv, (int64_t)grid * MMV_WARPS);
    if (mmv_debug())
        fprintf(stderr, "mmv q8d: %lld x %lld (%d weights%s%s), grid %u x %u, %d blocks/SM, ring %d, smem %zu, mode %d\n",
                (long long)a.ne0, (long long)nv, a.nw, a.glu ? " glu" : "", a.norm ? " norm" : "", grid, gy, occ,
                a.ring, smem, mode);
#ifdef MEMRA_MMV_TIMELINE
    mmv_tl_note(a, grid, nv);
#endif
    switch (mode) {
    case MMV_Q8D_GROUPED:
        return memra__launch(mmv_q8d_kernel<T, MMV_Q8D_GROUPED>, dim3(grid), MMV_THREADS, smem, s, a) == cudaSuccess;
    case MMV_Q8D_SPLIT:
        return memra__launch(mmv_q8d_kernel<T, MMV_Q8D_SPLIT>, dim3(grid), MMV_THREADS, smem, s, a) == cudaSuccess;
    case MMV_Q8D_SPREAD:
        return memra__launch(mmv_q8d_kernel<T, MMV_Q8D_SPREAD>, dim3(grid), MMV_THREADS, smem, s, a) == cudaSuccess;
    default:
        return memra__launch(mmv_q8d_kernel<T, MMV_Q8D_DEFAULT>, dim3(grid, gy), MMV_THREADS, smem, s, a) ==
               cudaSuccess;
    }
}

/* The two-row Q8_0 kernel (cuda/mmv_q8p.cuh) for steps of two x rows
 * (GY block columns of two); false when it does not apply or fit. Its
 * ring is as deep as the shared memory left at the occupancy of a ring of
 * two allows (two x rows of 12288 floats leave one block an SM: a ring of
 * two would keep one item a warp in flight), up to 225 KiB a block rather
 * than MMV_SMEM_MAX: at 200 KiB that block's ring stayed at two (177 KB),
 * where three take 212 KB. Which shapes take the kernel (a ring of two
 * within MMV_SMEM_MAX; the 27B's 17408-wide down does not) is unchanged. */
template <int T> static bool mmv_launch_q8p(const mmv_args &a0, int R, unsigned gy, int sm_count, cudaStream_t s)
{
    static long on = -1;
    if (on < 0)
        on = memra__cuda_env_long("MEMRA_MMV_Q8P", 1); /* A/B: 0 sends two rows to the batched kernel */
    if (!on || R != Q8P_NR || a0.ymap || a0.ids || a0.ne0 % 32 || mmv_generic_epi(a0) ||
        a0.n_rows > (int64_t)gy * Q8P_NR)
        return false;
    mmv_args a = a0;
    a.xsm = 1;
    a.q8_slot = mmv_q8_slot(a0);
    if (a.q8_slot == 0)
        return false;
    const size_t xb = mmv_x_bytes<T>(a.ne0, Q8P_NR), item = (size_t)MMV_WARPS * Q8P_M * a.q8_slot;
    const void *kernel = (const void *)mmv_q8p_kernel<T>;
    static dev_cache_row cache[DEV_CACHE_DEVICES];
    size_t smem = 2 * item + xb;
    const size_t smax = MMV_Q8D_WIDE_SMEM_MAX; /* the deepened ring's cap; a ring of two keeps MMV_SMEM_MAX's */
    const int occ = smem <= MMV_SMEM_MAX ? mmv_occupancy(kernel, smem, cache, smax) : 0;
    if (occ == 0)
        return false;
    static std::atomic<size_t> budgets[3][64]; /* per occupancy (1, 2 or more) and device */
    a.ring = mmv_ring_deepen(kernel, occ, xb, item, 2, budgets[occ < 2 ? occ : 2], cache, &smem, smax);
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const unsigned grid = mmv_grid_x(a, occ, sm_count, gy);
    if (mmv_debug())
        fprintf(stderr, "mmv q8p: %lld x %lld (%d weights%s%s), rows %lld, grid %u x %u, %d blocks/SM, ring %d, smem %zu\n",
                (long long)a.ne0, (long long)nv, a.nw, a.glu ? " glu" : "", a.norm ? " norm" : "", (long long)a.n_rows,
                grid, gy, occ, a.ring, smem);
    return memra__launch(mmv_q8p_kernel<T>, dim3(grid, gy), MMV_THREADS, smem, s, a) == cudaSuccess;
}

/* The batched Q8_0 kernel (cuda/mmv_q8b.cuh) for R x rows per block
 * column; false when it does not apply or fit. */
template <int RH, bool OFF> static bool mmv_launch_q8b_rh(mmv_args a, int R, unsigned gy, int sm_count, cudaStream_t s)
{
    static dev_cache_row cache[DEV_CACHE_DEVICES];
    const size_t smem = q8b_smem(a.ne0, R, OFF);
    const int occ = mmv_occupancy((const void *)mmv_q8b_kernel<RH, OFF>, smem, cache, Q8B_SMEM_MAX);
    if (occ == 0)
        return false;
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t ngrp = (nv + (a.glu ? 2 : Q8B_M) - 1) / (a.glu ? 2 : Q8B_M);
    const int64_t need = (ngrp + Q8B_PAIRS - 1) / Q8B_PAIRS;
    int64_t cap = (int64_t)occ * mmv_sms(sm_count) / gy;
    cap = cap < 1 ? 1 : cap;
    const unsigned gx = (unsigned)(need < cap ? need : cap);
    a.xsm = 1;
    a.rows_pb = R;
    if (mmv_debug())
        fprintf(stderr, "mmv q8b RH %d%s: %lld x %lld (%d weights%s%s), rows %lld, grid %u x %u, %d blocks/SM, smem %zu\n",
                RH, OFF ? " off" : "", (long long)a.ne0, (long long)nv, a.nw, a.glu ? " glu" : "", a.norm ? " norm" : "",
                (long long)a.n_rows, gx, gy, occ, smem);
    return memra__launch(mmv_q8b_kernel<RH, OFF>, dim3(gx, gy), MMV_THREADS, smem, s, a) == cudaSuccess;
}

template <bool OFF> static bool mmv_launch_q8b_off(const mmv_args &a, int R, unsigned gy, int sm_count, cudaStream_t s)
{
    switch ((R + 1) / 2) {
    case 1: return mmv_launch_q8b_rh<1, OFF>(a, R, gy, sm_count, s);
    case 2: return mmv_launch_q8b_rh<2, OFF>(a, R, gy, sm_count, s);
    case 3: return mmv_launch_q8b_rh<3, OFF>(a, R, gy, sm_count, s);
    default: return mmv_launch_q8b_rh<4, OFF>(a, R, gy, sm_count, s);
    }
}

static bool mmv_launch_q8b(const mmv_args &a, int R, unsigned gy, int sm_count, cudaStream_t s)
{
    if (R < 2 || R > Q8B_ROWS_MAX || mmv_q8b_rows_for(a, R) != R)
        return false;
    return mmv_q8b_off(a) ? mmv_launch_q8b_off<true>(a, R, gy, sm_count, s)
                          : mmv_launch_q8b_off<false>(a, R, gy, sm_count, s);
}

/* Decode (one x row, quantized weights) streams the ring with bulk copies
 * (sm_90 TMA) unless MEMRA_MMV_TMA=0. */
template <int T> bool mmv_launch(mmv_args a, int R, unsigned gy, int sm_count, cudaStream_t s, bool vec)
{
    static long tma = -1;
    if (tma < 0)
        tma = memra__cuda_env_long("MEMRA_MMV_TMA", 1);
    if (a.ymap) { /* only the grouped fast path writes mapped memory (run_mmv redirects the rest) */
        if constexpr (T == MEMRA_TYPE_Q8_0)
            return R == 1 && tma && mmv_launch_q8d<T>(a, gy, sm_count, s);
        return false;
    }
    if constexpr (T == MEMRA_TYPE_Q8_0)
        if (R > 1 && tma && (mmv_launch_q8p<T>(a, R, gy, sm_count, s) || mmv_launch_q8b(a, R, gy, sm_count, s)))
            return true;
    if (R != 1 && R != 2 && R != 4 && R != 8)
        return false; /* rows per pass only the batched Q8_0 kernel takes */
    switch (R) {
    case 1:
        if constexpr (T == MEMRA_TYPE_Q8_0)
            if (tma && mmv_launch_q8d<T>(a, gy, sm_count, s))
                return true;
        if (tma && !mq_is_float<T>::value)
            return mmv_launch_r<T, 1, true>(a, gy, sm_count, s, vec);
        return mmv_launch_r<T, 1, false>(a, gy, sm_count, s, vec);
    case 2: return mmv_launch_r<T, 2, false>(a, gy, sm_count, s, vec);
    case 4: return mmv_launch_r<T, 4, false>(a, gy, sm_count, s, vec);
    default: return mmv_launch_r<T, 8, false>(a, gy, sm_count, s, vec);
    }
}

/* ---- fast-prefill dequantization ------------------------------------------ */

template <int T>
static __device__ __forceinline__ void mmv_issue(const mmv_item<T> &it, int lane, uint4 *buf)
{
#pragma unroll
    for (int j = 0; j < mmv_seg<T>::cpl; j++) {
        const int c = lane + 32 * j;
        if (c < it.nchunk)
            buf[j] = ld_stream(it.a0 + c);
    }
}

template <int T>
static __device__ __forceinline__ void mmv_stash(const mmv_item<T> &it, int lane, const uint4 *buf, uint8_t *sm)
{
#pragma unroll
    for (int j = 0; j < mmv_seg<T>::cpl; j++) {
        const int c = lane + 32 * j;
        if (c < it.nchunk)
            ((uint4 *)sm)[c] = buf[j];
    }
}

/* Quantized rows [o0, o0+nrow) of W into OUT ([nrow][ne0]): a staged,
 * register-pipelined walk over (row, segment), then 16-byte stores. */
template <int T, typename H>
__global__ void __launch_bounds__(MMV_THREADS)
    deq_hq_kernel(const uint8_t *W, size_t nb1, int64_t ne0, int64_t o0, int64_t nrow, H *out)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    using S = mmv_seg<T>;
    __shared__ __align__(16) uint4 smem[MMV_WARPS][S::nch];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint8_t *sm = (uint8_t *)smem[warp];
    const int64_t nblk = ne0 / S::qk, nseg = (nblk + S::segb - 1) / S::segb;
    const int64_t rstride = (int64_t)gridDim.x * MMV_WARPS;
    int64_t row = (int64_t)blockIdx.x * MMV_WARPS + warp, seg = 0;
    if (row >= nrow)
        return;
    W += (size_t)o0 * nb1;
    uint4 buf[S::cpl];
    mmv_item<T> it = mmv_locate<T>(W + (size_t)row * nb1, 0, nblk);
    mmv_issue<T>(it, lane, buf);
    for (;;) {
        mmv_stash<T>(it, lane, buf, sm);
        __syncwarp();
        int64_t nrw = row, nsg = seg + 1;
        if (nsg == nseg) {
            nsg = 0;
            nrw = row + rstride;
        }
        const mmv_item<T> cur = it;
        if (nrw < nrow) {
            it = mmv_locate<T>(W + (size_t)nrw * nb1, nsg, nblk);
            mmv_issue<T>(it, lane, buf);
        }
#pragma unroll
        for (int u = 0; u < S::u; u++) {
            const int sb = lane + 32 * u;
            if (sb < cur.nb * S::subs) {
                const int blk = sb / S::subs, sub = sb % S::subs;
                float v[32];
                mq_deq32<T>(sm + cur.off + blk * S::bb, sub, v);
                uint4 *o = (uint4 *)(out + row * ne0 + (seg * S::segb + blk) * S::qk + sub * 32);
#pragma unroll
                for (int q = 0; q < 4; q++)
                    o[q] = make_uint4(pack2(H(), v[8 * q], v[8 * q + 1]), pack2(H(), v[8 * q + 2], v[8 * q + 3]),
                                      pack2(H(), v[8 * q + 4], v[8 * q + 5]), pack2(H(), v[8 * q + 6], v[8 * q + 7]));
            }
        }
        __syncwarp();
        if (nrw >= nrow)
            break;
        row = nrw;
        seg = nsg;
    }
}

/* Float-type rows [o0, o0+nrow) of W into OUT ([nrow][ne0]). */
template <int T, typename H>
__global__ void deq_h_kernel(const uint8_t *W, size_t nb1, int64_t ne0, int64_t o0, int64_t nrow, H *out)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const int64_t n = nrow * ne0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / ne0, k = i % ne0;
        out[i] = to_h<H>(mq_float_at<T>(W + (size_t)(o0 + r) * nb1, k));
    }
}

/* Q8_0 rows [o0, o0+nrow) of W into OUT, steadily: each warp walks groups
 * of 32 blocks of a row (1088 bytes, 16-byte aligned: the host checks the
 * rows are), the next group's bytes in registers while it converts the
 * current one; lane l converts block l as mq_deq32 does (the same values,
 * then pack2's one rounding). deq_hq_kernel's warps take one row each
 * (two items) and leave: its launch was one wave of ramps, ~2 TB/s
 * (26 % of the 9B's pp512 in it, CUPTI, 2026-12-04). */
#define DEQ_Q8_GB 32 /* blocks a group */
template <typename H>
__global__ void __launch_bounds__(MMV_THREADS)
    deq_q8_kernel(const uint8_t *W, size_t nb1, int64_t ne0, int64_t o0, int64_t nrow, H *out)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    constexpr int CH = DEQ_Q8_GB * 34 / 16; /* 68 16-byte chunks a whole group */
    __shared__ __align__(16) uint4 smem[MMV_WARPS][CH];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint8_t *sm = (uint8_t *)smem[warp];
    const int64_t nblk = ne0 / 32, gpr = (nblk + DEQ_Q8_GB - 1) / DEQ_Q8_GB, ng = nrow * gpr;
    const int64_t gstride = (int64_t)gridDim.x * MMV_WARPS;
    W += (size_t)o0 * nb1;
    int64_t g = (int64_t)blockIdx.x * MMV_WARPS + warp;
    uint4 buf[3];
    auto issue = [&](int64_t gi) {
        const int64_t r = gi / gpr, b0 = gi % gpr * DEQ_Q8_GB;
        const int64_t nb = nblk - b0 < DEQ_Q8_GB ? nblk - b0 : DEQ_Q8_GB;
        const uint4 *src = (const uint4 *)(W + (size_t)r * nb1 + (size_t)b0 * 34);
        const int nch = (int)(nb * 34 / 16);
#pragma unroll
        for (int j = 0; j < 3; j++)
            if (lane + 32 * j < nch)
                buf[j] = ld_stream(src + lane + 32 * j);
    };
    if (g < ng)
        issue(g);
    for (; g < ng; g += gstride) {
#pragma unroll
        for (int j = 0; j < 3; j++)
            if (lane + 32 * j < CH)
                ((uint4 *)sm)[lane + 32 * j] = buf[j];
        __syncwarp();
        if (g + gstride < ng)
            issue(g + gstride);
        const int64_t r = g / gpr, b0 = g % gpr * DEQ_Q8_GB;
        if (b0 + lane < nblk) {
            const uint8_t *b = sm + 34 * lane;
            const float d = mq_fp16(b);
            uint32_t w[16];
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const float2 p = mq_q8_pair(mq_rd16(b + 2 + 2 * j), d);
                w[j] = pack2(H(), p.x, p.y);
            }
            uint4 *o = (uint4 *)(out + r * ne0 + (b0 + lane) * 32);
#pragma unroll
            for (int q = 0; q < 4; q++)
                o[q] = make_uint4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
        }
        __syncwarp();
    }
}

template <int T, typename H>
void mmv_dequant(const uint8_t *W, size_t nb1, int64_t ne0, int64_t o0, int64_t nrow, H *out, int sm_count,
                 cudaStream_t s)
{
    static long q8 = -1;
    if (q8 < 0)
        q8 = memra__cuda_env_long("MEMRA_DEQ_Q8", 1); /* 0: deq_hq_kernel for Q8_0 too (A/B) */
    if constexpr (T == MEMRA_TYPE_Q8_0) {
        if (q8 && nb1 % 16 == 0 && ((uintptr_t)W + (size_t)o0 * nb1) % 16 == 0 && (uintptr_t)out % 16 == 0) {
            const int64_t ng = nrow * ((ne0 / 32 + DEQ_Q8_GB - 1) / DEQ_Q8_GB);
            memra__launch(deq_q8_kernel<H>, memra__cuda_blocks(ng, MMV_WARPS, 8 * (int64_t)sm_count), MMV_THREADS, 0,
                          s, W, nb1, ne0, o0, nrow, out);
            return;
        }
    }
    if constexpr (mq_is_float<T>::value)
        memra__launch(deq_h_kernel<T, H>, memra__cuda_blocks(nrow * ne0, 256, 65535), 256, 0, s, W, nb1, ne0, o0, nrow, out);
    else
        memra__launch(deq_hq_kernel<T, H>, memra__cuda_blocks(nrow, MMV_WARPS, 8 * (int64_t)sm_count), MMV_THREADS, 0, s, W, nb1, ne0, o0, nrow, out);
}

/* ---- the MoE decode launches (cuda/mmv_moe.cuh) ---------------------------- */

/* Lanes an item of A's packed passes (mmv_moe_kernel): Q8_0 rows of one
 * segment of at most 32 blocks (16 lane pairs) whose every row starts on a
 * 4-byte boundary (the pair dot's word reads), the least power of two that
 * holds a row's pairs; 0 (one item a pass) otherwise or with
 * MEMRA_MOE_PACK=0 (A/B). */
template <int T> static int mmv_moe_pack(const mmv_moe_args &a)
{
    static long on = -1;
    if (on < 0)
        on = memra__cuda_env_long("MEMRA_MOE_PACK", 1);
    if (!on || !mmv_q8x<T>::on)
        return 0;
    const int64_t nb = a.m.ne0 / 32, pairs = (nb + 1) / 2;
    if (a.m.ne0 % 32 != 0 || pairs < 1 || pairs > 16)
        return 0;
    uintptr_t bits = (uintptr_t)a.W[0] | (uintptr_t)a.nb1[0] | (uintptr_t)a.nb2 | (uintptr_t)a.shW[0] | a.sh_nb1[0];
    if (a.W[1])
        bits |= (uintptr_t)a.W[1] | (uintptr_t)a.nb1[1] | (uintptr_t)a.shW[1] | a.sh_nb1[1];
    if (bits & 3)
        return 0;
    int L = 1;
    while (L < pairs)
        L *= 2;
    return L;
}

/* The slot form of A's packed passes (mmv_moe_slot_kernel, the default;
 * MEMRA_MOE_SLOT=0 keeps mmv_moe_kernel's; MEMRA_MOE_SLOT_RING=2..8 sets
 * its slots a warp): false when it is off or does not fit, and
 * mmv_moe_kernel runs them. Slots: the deepest of up to
 * four (three passes ahead) next to XBYTES of x within MMV_SMEM_TARGET,
 * else two. */
template <bool DOWN> static bool mmv_moe_slot_launch(mmv_moe_args a, size_t xbytes, unsigned gy, int sm_count,
                                                     cudaStream_t s)
{
    static long on = -1, ring = 0, rows = 0;
    if (on < 0) {
        ring = memra__cuda_env_long("MEMRA_MOE_SLOT_RING", 0);
        on = memra__cuda_env_long("MEMRA_MOE_SLOT", 1);
        rows = memra__cuda_env_long("MEMRA_MOE_DOWN_ROWS", 1);
    }
    if (!on || !a.pack)
        return false;
    /* DOWN's rows form (mmv_moe_slot_rows) for rows adjacent in memory, the
     * shared expert's too, where its grid (a warp a row group, not a row)
     * still holds half the blocks the SMs take at once: at fewer it was
     * slower (H100, 2026-12-07, tg64 at 1 / 2 / 4 rows: the 26B-A4B's 176
     * blocks at one row -1.4 %, 352 at two +5.0 %, 396 (the resident cap)
     * at four +6.1 %; the 35B-A3B's 64 blocks at one row -5.0 %, 128 at two
     * +0.6 %, 256 at four +5.1 %). MEMRA_MOE_DOWN_ROWS=0 never, =2 always. */
    const int64_t rb = a.m.ne0 / 32 * 34;
    const bool rows_ok = DOWN && rows && (int64_t)a.nb1[0] == rb && (!a.shW[0] || (int64_t)a.sh_nb1[0] == rb);
    for (int form = rows_ok ? 1 : 0; form >= 0; form--) {
        a.rows_g = form ? 32 / a.pack : 0;
        const size_t slot_b =
            form ? mmv_moe_rows_slot(a.m.ne0, a.rows_g) : (size_t)(32 / a.pack) * mmv_moe_slot_sub(a.m.ne0);
        auto bytes = [&](int d) { return (size_t)MMV_WARPS * d * slot_b + xbytes; };
        int d = ring >= 2 && ring <= MMV_MOE_RING_MAX ? (int)ring : 4;
        if (ring < 2 || ring > MMV_MOE_RING_MAX)
            while (d > 2 && bytes(d) > MMV_SMEM_TARGET)
                d--;
        if (bytes(d) > MMV_SMEM_MAX)
            continue;
        a.m.ring = d;
        a.m.xsm = 1;
        const size_t smem = bytes(d);
        static dev_cache_row cache[2][DEV_CACHE_DEVICES];
        void (*const kernel)(const mmv_moe_args) = form ? mmv_moe_slot_kernel<DOWN, DOWN> : mmv_moe_slot_kernel<DOWN>;
        const int occ = mmv_occupancy((const void *)kernel, smem, cache[form]);
        if (occ == 0)
            continue;
        const dim3 grid = mmv_moe_grid(form ? (a.rows + a.rows_g - 1) / a.rows_g : a.rows, occ, sm_count, gy);
        if (form && rows == 1 && 2 * (int64_t)grid.x * grid.y < (int64_t)occ * mmv_sms(sm_count))
            continue;
        if (mmv_debug())
            fprintf(stderr, "mmv moe %s slots: %lld x %lld, k %d%s, %d lanes an item%s, grid %u x %u, %d blocks/SM, ring %d, smem %zu\n",
                    DOWN ? "down" : "glu", (long long)a.m.ne0, (long long)a.rows, a.k, a.shW[0] ? " +shared" : "",
                    a.pack, form ? ", rows form" : "", grid.x, grid.y, occ, d, smem);
        return memra__launch(kernel, grid, MMV_THREADS, smem, s, a) == cudaSuccess;
    }
    return false;
}

template <int T, bool TMA, bool DOWN> static bool mmv_moe_launch_k(mmv_moe_args a, unsigned gy, int sm_count, cudaStream_t s)
{
    const void *kernel = (const void *)mmv_moe_kernel<T, TMA, DOWN>;
    static dev_cache_row cache[DEV_CACHE_DEVICES];
    const int nr = DOWN ? a.k + (a.shW[0] != NULL) : 1;
    const size_t xbytes = mmv_x_bytes<T>(a.m.ne0, nr);
    /* A row shorter than a segment (the experts' down rows: 704 or 512
     * wide) may fill a short slot, so the same bytes hold a deeper ring.
     * Taken only where whole-segment slots leave the ring at its minimum
     * (one item in flight behind the one computed: a chain of memory
     * latencies). Measured 2026-12-02 (tg128, H200): gemma-4-26b-a4b's
     * down (8 staged h rows of 704) ring 2 -> 7, 200.8 -> 207.5 tok/s;
     * qwen3.6-35b-a3b's (9 rows of 512) ring 3 -> 8 was slower, 244.8 ->
     * 230.1, so it keeps 3. The fill changes no bit.
     * MEMRA_MOE_SHORT_SLOTS=0 never takes them, =2 always (A/B). */
    static long short_slots = -1;
    if (short_slots < 0)
        short_slots = memra__cuda_env_long("MEMRA_MOE_SHORT_SLOTS", 1);
    const bool at_min = mmv_ring_depth<T>(xbytes) <= MMV_RING_MIN;
    a.m.slot_nch = short_slots == 2 || (short_slots == 1 && at_min) ? mmv_item_nch<T>(a.m.ne0) : mmv_seg<T>::nch;
    a.pack = mmv_moe_pack<T>(a);
    if constexpr (T == MEMRA_TYPE_Q8_0 && TMA)
        if (a.pack && mmv_moe_slot_launch<DOWN>(a, xbytes, gy, sm_count, s))
            return true;
    if (a.pack)
        a.m.slot_nch = mmv_item_nch<T>(a.m.ne0);
    if (mmv_ring_bytes<T>(MMV_RING_MIN, a.m.slot_nch) + xbytes > MMV_SMEM_MAX)
        return false;
    a.m.ring = mmv_ring_depth<T>(xbytes, a.m.slot_nch);
    if (a.pack) { /* up to three passes' items (3 G + 1 slots) in the default's bytes */
        const int want = 3 * (32 / a.pack) + 1;
        for (int d = want < MMV_MOE_RING_MAX ? want : MMV_MOE_RING_MAX; d > a.m.ring; d--)
            if (mmv_ring_bytes<T>(d, a.m.slot_nch) + xbytes <= MMV_SMEM_TARGET) {
                a.m.ring = d;
                break;
            }
        if (a.m.ring < 3)
            a.pack = 0; /* a pass of one item */
    }
    a.m.xsm = 1;
    const size_t smem = mmv_ring_bytes<T>(a.m.ring, a.m.slot_nch) + xbytes;
    const int occ = mmv_occupancy(kernel, smem, cache);
    if (occ == 0)
        return false;
    dim3 grid = mmv_moe_grid(a.rows, occ, sm_count, gy);
    /* GLU, one item a pass: a block's gate and up dots dealt to its warps
     * one by one (mmv_moe_kernel's units) where a block's run of rows fits
     * its table and the busiest warp then takes fewer dots than with whole
     * rows a warp (MEMRA_MOE_GLU_UNITS=1); =2 also where it takes as many,
     * =0 never (A/B) */
    static long units = -1;
    if (units < 0)
        units = memra__cuda_env_long("MEMRA_MOE_GLU_UNITS", 1);
    if (!DOWN && !a.pack && units) {
        const dim3 g2 = mmv_moe_grid(2 * a.rows, occ, sm_count, gy);
        const int64_t w = (int64_t)grid.x * MMV_WARPS, per_block = (a.rows + g2.x - 1) / g2.x;
        const int64_t dots_rows = 2 * ((a.rows + w - 1) / w), dots_units = (2 * per_block + MMV_WARPS - 1) / MMV_WARPS;
        if (per_block <= MMV_MOE_UNIT_ROWS && (dots_units < dots_rows || (units == 2 && dots_units == dots_rows))) {
            grid = g2;
            a.units = 1;
        }
    }
    if (mmv_debug())
        fprintf(stderr, "mmv moe %s type %d%s: %lld x %lld, k %d%s, grid %u x %u, %d blocks/SM, ring %d, smem %zu%s\n",
                DOWN ? "down" : "glu", T, TMA ? " tma" : "", (long long)a.m.ne0, (long long)a.rows, a.k,
                a.shW[0] ? " +shared" : "", grid.x, grid.y, occ, a.m.ring, smem, a.units ? ", units" : "");
    if (mmv_debug() && a.pack)
        fprintf(stderr, "mmv moe %s: packed passes, %d lanes an item\n", DOWN ? "down" : "glu", a.pack);
    return memra__launch(mmv_moe_kernel<T, TMA, DOWN>, grid, MMV_THREADS, smem, s, a) == cudaSuccess;
}

/* TMA only: the host runs the unfused sequence with MEMRA_MMV_TMA=0 (the
 * ring's fill does not change a bit; two instances per type, not four) */
template <int T> bool mmv_moe_launch(mmv_moe_args a, bool down, unsigned gy, int sm_count, cudaStream_t s)
{
    if constexpr (mq_is_float<T>::value) {
        return false; /* the float matvec has no ring: the host runs the unfused sequence */
    } else {
        if (down)
            return mmv_moe_launch_k<T, true, true>(a, gy, sm_count, s);
        return mmv_moe_launch_k<T, true, false>(a, gy, sm_count, s);
    }
}

#define MMV_INSTANTIATE(T, _)                                                                                          \
    template bool mmv_launch<T>(mmv_args, int, unsigned, int, cudaStream_t, bool);                                     \
    template void mmv_dequant<T, __half>(const uint8_t *, size_t, int64_t, int64_t, int64_t, __half *, int,            \
                                         cudaStream_t);                                                                \
    template void mmv_dequant<T, __nv_bfloat16>(const uint8_t *, size_t, int64_t, int64_t, int64_t, __nv_bfloat16 *,   \
                                                int, cudaStream_t);                                                    \
    template bool mmv_moe_launch<T>(mmv_moe_args, bool, unsigned, int, cudaStream_t);

#endif
