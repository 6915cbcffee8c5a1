/* Launchers of the MoE decode kernel on K-quant experts
 * (cuda/mmv_moe_kq.cuh) for Q4_K, Q5_K, Q6_K and Q4_0. */
#include <stdio.h>

#include "mmv_moe_kq.cuh"
#include "mmv_occ.cuh"

template <int T> static int kq_pack_of(int64_t ne0)
{
    const int nsb = (int)(ne0 / 256), L = kq_pack_lanes(nsb);
    return ne0 % 256 == 0 && nsb >= 1 && nsb <= 4 && kq_pack_items<T>(nsb, L) >= 2 ? L : 0;
}

int mmv_moe_kq_pack(int t, int64_t ne0)
{
    static long on = -1;
    if (on < 0)
        on = memra__cuda_env_long("MEMRA_MOE_KQ_PACK", 1);
    if (!on)
        return 0;
#define KQ_PACK(T) return kq_pack_of<T>(ne0)
    KQ_DISPATCH(t, KQ_PACK)
#undef KQ_PACK
    return 0;
}

template <int T, bool DOWN> static bool moe_kq_launch_k(mmv_moe_args a, unsigned gy, int sm_count, cudaStream_t s)
{
    static dev_cache_row cache[DEV_CACHE_DEVICES], pcache[DEV_CACHE_DEVICES];
    const int nr = DOWN ? a.k + (a.shW[0] != NULL) : 1;
    /* the ring as deep as mmv_kq_kernel's next to the same x (the depth moves no bit) */
    a.m.ring = kq_ring_depth<T>(kq_x_bytes<T>(a.m.ne0, nr));
    size_t smem = kq_smem_bytes<T>(a.m.ne0, nr, a.m.ring);
    if (smem > MMV_SMEM_MAX) {
        a.m.ring = 2;
        smem = kq_smem_bytes<T>(a.m.ne0, nr, a.m.ring);
        if (smem > MMV_SMEM_MAX)
            return false;
    }
    a.m.xsm = 1;
    a.pack = mmv_moe_kq_pack(T, a.m.ne0);
    const void *kernel =
        a.pack ? (const void *)mmv_moe_kq_kernel<T, DOWN, true> : (const void *)mmv_moe_kq_kernel<T, DOWN, false>;
    const int occ = mmv_occupancy(kernel, smem, a.pack ? pcache : cache);
    if (occ == 0)
        return false;
    const dim3 grid = mmv_moe_grid(DOWN ? (a.rows + KQ_M - 1) / KQ_M : a.rows, occ, sm_count, gy);
    if (mmv_debug())
        fprintf(stderr,
                "mmv moe kq %s type %d: %lld x %lld, k %d%s, grid %u x %u, %d blocks/SM, ring %d, smem %zu, "
                "%d lanes an item\n",
                DOWN ? "down" : "glu", T, (long long)a.m.ne0, (long long)a.rows, a.k, a.shW[0] ? " +shared" : "",
                grid.x, grid.y, occ, a.m.ring, smem, a.pack ? a.pack : 32);
    if (a.pack)
        return memra__launch(mmv_moe_kq_kernel<T, DOWN, true>, grid, MMV_THREADS, smem, s, a) == cudaSuccess;
    return memra__launch(mmv_moe_kq_kernel<T, DOWN, false>, grid, MMV_THREADS, smem, s, a) == cudaSuccess;
}

template <int T> static bool moe_kq_launch_t(const mmv_moe_args &a, bool down, unsigned gy, int sm_count,
                                             cudaStream_t s)
{
    return down ? moe_kq_launch_k<T, true>(a, gy, sm_count, s) : moe_kq_launch_k<T, false>(a, gy, sm_count, s);
}

bool mmv_moe_kq_launch(int t, mmv_moe_args a, bool down, unsigned gy, int sm_count, cudaStream_t s)
{
#define KQ_LAUNCH(T) return moe_kq_launch_t<T>(a, down, gy, sm_count, s)
    KQ_DISPATCH(t, KQ_LAUNCH)
#undef KQ_LAUNCH
    return false;
}
