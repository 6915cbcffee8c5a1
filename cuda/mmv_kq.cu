/* Launchers of the K-quant matvec (cuda/mmv_kq.cuh) for Q4_K, Q5_K, Q6_K and Q4_0. */
#include <stdio.h>

#include "mmv_kq.cuh"
#include "mmv_kq_pack.cuh"
#include "mmv_occ.cuh"

static_assert(KQ_M == 2, "the kernel pairs two weight rows per item");

/* Launches of rows that end in a short segment (a row of NE0 elements is
 * not a whole number of KQ_SBS super-block segments: Gemma 4's 2560 and
 * 2816, the 27B's 5120, the 31B's 5376) whose warps walk at most four
 * items each at the default grid (NGRP row pairs over NB blocks) take a
 * ring of four items (MEMRA_MMV_KQ_SHORT_RING, default 4; 2 keeps the
 * default ring) where that keeps two blocks an SM: Q4_K at 2816 wide two
 * instead of three.
 * Measured on an H100 (docs/PERFORMANCE.md, 2026-12-06; tg64, two runs
 * each): the 26B-A4B Q4_K 314.6 / 314.9 tok/s against 294.1 / 294.5, the
 * E4B Q4_K 278.1 / 279.0 against 274.7 / 274.5; the 31B Q4_K has no such
 * launch. Why rows of whole segments stay: the same ring for every
 * launch of at most four items a warp took the 9B's and the 35B-A3B's
 * Q4_K tg -0.5 and -1.2 %, and the heads (hundreds of items a warp) are
 * slower with any deeper ring (the 26B-A4B's Q6_K head 354 -> 497 us at
 * a ring of four, one block an SM). */
static int kq_ring_short(void)
{
    static long d = -1;
    if (d < 0)
        d = memra__cuda_env_long("MEMRA_MMV_KQ_SHORT_RING", 4);
    return d >= 2 && d <= KQ_RING_MAX ? (int)d : 2;
}

static bool kq_short_launch(int64_t ne0, int64_t ngrp, int64_t nb)
{
    const int nsb = (int)(ne0 / 256);
    const int64_t nwarps = nb * MMV_WARPS;
    return nsb % KQ_SBS != 0 && (ngrp + nwarps - 1) / nwarps * kq_nseg(nsb) <= 4;
}

/* One x row whose rows end in a short segment that packs (kq_short_groups,
 * cuda/mmv_kq_pack.cuh) takes mmv_kq_pack_kernel where kq_pack_deep holds:
 * MEMRA_MMV_KQ_PACK (default 1; 0 never; the same bits either way). */
static bool kq_pack_on(void)
{
    static long on = -1;
    if (on < 0)
        on = memra__cuda_env_long("MEMRA_MMV_KQ_PACK", 1);
    return on > 0;
}

/* A bundle saves passes only where a warp walks many row pairs: the
 * launch's pairs at least MEMRA_MMV_KQ_PACK_MIN (default 16; 0: every
 * launch) times the warps of three blocks an SM. On an H100 (2026-12-07)
 * packing every launch cost the E4B Q4_K 10.5 % and the 27B Q4_K 7.4 %
 * (0.04-5.5 pairs a warp); from 16 only the vocabulary heads pack (41
 * pairs a warp): the 26B-A4B Q4_K +8.5 %, the E4B Q4_K +1.5 %. */
static bool kq_pack_deep(int64_t ngrp, unsigned gy, int sm_count)
{
    static long min_pairs = -1;
    if (min_pairs < 0)
        min_pairs = memra__cuda_env_long("MEMRA_MMV_KQ_PACK_MIN", 16);
    return ngrp >= (int64_t)min_pairs * 3 * mmv_sms(sm_count) * MMV_WARPS / gy;
}

/* The packed kernel for rows of NSB super-blocks, NULL where none packs. */
template <int T, int NS> static void (*kq_pack_ns(void))(mmv_args)
{
    if constexpr (kq_short_groups<T>(NS) >= 2)
        return mmv_kq_pack_kernel<T, NS>;
    else
        return NULL;
}

template <int T> static void (*kq_pack_kernel(int nsb))(mmv_args)
{
    switch (nsb % KQ_SBS) {
    case 1: return kq_pack_ns<T, 1>();
    case 2: return kq_pack_ns<T, 2>();
    case 3: return kq_pack_ns<T, 3>();
    case 4: return kq_pack_ns<T, 4>();
    default: return NULL;
    }
}

template <int T, int R> static bool kq_launch_r(mmv_args a, unsigned gy, int sm_count, cudaStream_t s)
{
    static dev_cache_row cache[DEV_CACHE_DEVICES], pcache[KQ_SBS][DEV_CACHE_DEVICES];
    static long probe = -1;
    if (probe < 0)
        probe = memra__cuda_env_long("MEMRA_MMV_PROBE", 0) > 0;
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t ngrp = a.glu ? nv : (nv + KQ_M - 1) / KQ_M, need = (ngrp + MMV_WARPS - 1) / MMV_WARPS;
    void (*kern)(mmv_args) = mmv_kq_kernel<T, R>;
    dev_cache_row *kc = cache;
    if constexpr (R == 1) {
        if (kq_pack_on() && !probe && nv < ((int64_t)1 << 30) && kq_pack_deep(ngrp, gy, sm_count)) {
            kern = kq_pack_kernel<T>((int)(a.ne0 / 256));
            kc = pcache[a.ne0 / 256 % KQ_SBS];
            if (!kern) {
                kern = mmv_kq_kernel<T, R>;
                kc = cache;
            }
        }
    }
    const size_t xbytes = kq_x_bytes<T>(a.ne0, R);
    a.ring = kq_ring_depth<T>(xbytes);
    size_t smem = kq_smem_bytes<T>(a.ne0, R, a.ring);
    if (smem > MMV_SMEM_MAX) { /* a forced depth too deep: the smallest ring */
        a.ring = 2;
        smem = kq_smem_bytes<T>(a.ne0, R, a.ring);
        if (smem > MMV_SMEM_MAX)
            return false;
    }
    a.xsm = 1;
    int occ = mmv_occupancy((const void *)kern, smem, kc);
    if (occ == 0)
        return false;
    /* blocks along x: one warp a row pair, at most OC blocks an SM over the GY problems */
    auto blocks = [&](int oc) {
        int64_t cap = (int64_t)oc * mmv_sms(sm_count) / gy;
        cap = cap < 1 ? 1 : cap;
        return need < cap ? need : cap;
    };
    if (R == 1 && gy == 1 && kq_short_launch(a.ne0, ngrp, blocks(occ))) {
        /* the deeper ring: fewer blocks an SM (the ring depth and the grid
         * move no bit: every row's lanes and sums are the same) */
        const int d = kq_ring_short();
        const size_t s2 = kq_smem_bytes<T>(a.ne0, R, d);
        const int o2 =
            d > a.ring && s2 <= MMV_SMEM_MAX ? mmv_occupancy((const void *)kern, s2, kc) : 0;
        if (o2 >= 2) { /* at one block an SM (a Q6_K row's slot at 2816 wide) unmeasured: not taken */
            a.ring = d;
            smem = s2;
            occ = o2;
        }
    }
    const unsigned gx = (unsigned)blocks(occ);
    a.probe = (int)probe;
    if (mmv_debug()) {
        const bool packed = kern != (void (*)(mmv_args))mmv_kq_kernel<T, R>;
        fprintf(stderr,
                "mmv kq type %d R %d%s: %lld x %lld (%d weights%s%s%s), grid %u x %u, %d blocks/SM, ring %d, smem %zu\n",
                T, R, packed ? " packed" : "", (long long)a.ne0, (long long)nv, a.nw, a.glu ? " glu" : "",
                a.norm ? " norm" : "", a.ids ? " ids" : "", gx, gy, occ, a.ring, smem);
    }
    return memra__launch(kern, dim3(gx, gy), MMV_THREADS, smem, s, a) == cudaSuccess;
}

template <int T> static bool kq_launch_t(const mmv_args &a, int R, unsigned gy, int sm_count, cudaStream_t s)
{
    switch (R) {
    case 1: return kq_launch_r<T, 1>(a, gy, sm_count, s);
    case 2: return kq_launch_r<T, 2>(a, gy, sm_count, s);
    case 4: return kq_launch_r<T, 4>(a, gy, sm_count, s);
    case 8: return kq_launch_r<T, 8>(a, gy, sm_count, s);
    default: return false;
    }
}

bool mmv_kq_launch(int t, const mmv_args &a, int R, unsigned gy, int sm_count, cudaStream_t s)
{
    if (a.ymap) /* mapped host output: run_mmv goes through device memory */
        return false;
#define KQ_LAUNCH(T) return kq_launch_t<T>(a, R, gy, sm_count, s)
    KQ_DISPATCH(t, KQ_LAUNCH)
#undef KQ_LAUNCH
    return false;
}
