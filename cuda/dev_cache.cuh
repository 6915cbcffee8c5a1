/* A host-side cache, per device, of small values computed once per device
 * and shape (occupancy queries: cuda/mmv_occ.cuh, cuda/ops_ssm.cu). Each
 * device has DEV_CACHE_WAYS entries of one atomic word, a key above bit 16
 * and its value below, because pipeline stages launch on several GPUs from
 * several threads. */
#ifndef MEMRA_CUDA_DEV_CACHE_CUH
#define MEMRA_CUDA_DEV_CACHE_CUH

#include <atomic>
#include <stdint.h>

#include <cuda_runtime.h>

#define DEV_CACHE_DEVICES 64
#define DEV_CACHE_WAYS 8

typedef std::atomic<uint64_t> dev_cache_row[DEV_CACHE_WAYS];

/* The current device's row of CACHE ([DEV_CACHE_DEVICES] rows). */
static inline dev_cache_row &dev_cache_here(dev_cache_row *cache)
{
    int dev = 0;
    cudaGetDevice(&dev);
    return cache[dev >= 0 && dev < DEV_CACHE_DEVICES ? dev : 0];
}

/* KEY's word: the key above bit 16, never 0 (an empty entry). */
static inline uint64_t dev_cache_key(uint64_t key)
{
    return (key << 16) | (uint64_t)1 << 63;
}

/* Whether ROW holds KEY (dev_cache_key's); its value into *V. */
static inline bool dev_cache_get(dev_cache_row &row, uint64_t key, int *v)
{
    for (int i = 0; i < DEV_CACHE_WAYS; i++) {
        const uint64_t e = row[i].load(std::memory_order_relaxed);
        if ((e & ~(uint64_t)0xFFFF) == key) {
            *v = (int)(e & 0xFFFF);
            return true;
        }
    }
    return false;
}

/* V (0..0xFFFF) for KEY into ROW: an empty entry, else one the key picks. */
static inline int dev_cache_put(dev_cache_row &row, uint64_t key, int v)
{
    const uint64_t e = key | (uint64_t)v;
    for (int i = 0; i < DEV_CACHE_WAYS; i++) {
        uint64_t empty = 0;
        if (row[i].compare_exchange_strong(empty, e))
            return v;
    }
    row[(key >> 16) % DEV_CACHE_WAYS].store(e, std::memory_order_relaxed);
    return v;
}

#endif
