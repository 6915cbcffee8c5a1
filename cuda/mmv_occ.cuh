/* Launch helpers shared by the matvec launchers (cuda/mmv_impl.cuh,
 * cuda/mmv_kq.cu): occupancy per kernel and shared-memory size, and the
 * MEMRA_MMV_DEBUG switch. */
#ifndef MEMRA_CUDA_MMV_OCC_CUH
#define MEMRA_CUDA_MMV_OCC_CUH

#include <stdint.h>

#include "dev_cache.cuh"
#include "mmv.cuh"

/* Blocks of KERNEL (THREADS a block) resident per SM with SMEM bytes of
 * dynamic shared memory, cached per device and size (cuda/dev_cache.cuh;
 * a call site's own CACHE, so the key is the size alone). */
static int mmv_occupancy(const void *kernel, size_t smem, dev_cache_row *cache, size_t smem_max = MMV_SMEM_MAX,
                         int threads = MMV_THREADS)
{
    dev_cache_row &row = dev_cache_here(cache);
    const uint64_t key = dev_cache_key((uint64_t)smem);
    int n = 0;
    if (dev_cache_get(row, key, &n))
        return n;
    /* the attributes are per device too; setting them again is harmless.
     * All of the carveout to shared memory: the weights bypass L1. */
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_max) != cudaSuccess ||
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared) !=
            cudaSuccess)
        cudaGetLastError();
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    if (n < 1)
        return 0; /* not cached: asked again next time */
    return dev_cache_put(row, key, n > 255 ? 255 : n);
}

/* Dynamic shared memory one block of KERNEL may take so that OCC blocks
 * still fit an SM: the SM's shared memory over OCC, less each block's
 * reserve and the kernel's static shared memory (0 when unknown). */
static size_t mmv_block_smem_budget(const void *kernel, int occ)
{
    int dev = 0, per_sm = 0, reserved = 0;
    cudaFuncAttributes fa;
    if (occ < 1 || cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    const size_t per = (size_t)per_sm / (size_t)occ, fixed = (size_t)reserved + fa.sharedSizeBytes;
    return per > fixed ? per - fixed : 0;
}

/* MEMRA_MMV_DEBUG=1: every matvec launch prints its configuration. */
static bool mmv_debug(void)
{
    static int debug = -1;
    if (debug < 0)
        debug = memra__cuda_env_long("MEMRA_MMV_DEBUG", 0) > 0;
    return debug != 0;
}

#endif
