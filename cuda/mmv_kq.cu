/* Launchers of the K-quant matvec (cuda/mmv_kq.cuh) for Q4_K, Q5_K, Q6_K and Q4_0. */
#include <stdio.h>

#include "mmv_kq.cuh"
#include "mmv_occ.cuh"

static_assert(KQ_M == 2, "the kernel pairs two weight rows per item");

template <int T, int R> static bool kq_launch_r(mmv_args a, unsigned gy, int sm_count, cudaStream_t s)
{
    static dev_cache_row cache[DEV_CACHE_DEVICES];
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
    const int occ = mmv_occupancy((const void *)mmv_kq_kernel<T, R>, smem, cache);
    if (occ == 0)
        return false;
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t ngrp = a.glu ? nv : (nv + KQ_M - 1) / KQ_M, need = (ngrp + MMV_WARPS - 1) / MMV_WARPS;
    int64_t cap = (int64_t)occ * (sm_count > 0 ? sm_count : 132) / gy;
    cap = cap < 1 ? 1 : cap;
    const unsigned gx = (unsigned)(need < cap ? need : cap);
    static long probe = -1;
    if (probe < 0)
        probe = memra__cuda_env_long("MEMRA_MMV_PROBE", 0) > 0;
    a.probe = (int)probe;
    if (mmv_debug())
        fprintf(stderr,
                "mmv kq type %d R %d: %lld x %lld (%d weights%s%s%s), grid %u x %u, %d blocks/SM, ring %d, smem %zu\n",
                T, R, (long long)a.ne0, (long long)nv, a.nw, a.glu ? " glu" : "", a.norm ? " norm" : "",
                a.ids ? " ids" : "", gx, gy, occ, a.ring, smem);
    return memra__launch(mmv_kq_kernel<T, R>, dim3(gx, gy), MMV_THREADS, smem, s, a) == cudaSuccess;
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
