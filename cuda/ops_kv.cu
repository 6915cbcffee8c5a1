/* Rows written into a KV cache (memra_kv_store_args_t): float rows
 * converted to the cache's type with the CPU reference's bits
 * (cuda/kv_types.cuh for F16/BF16; Q8_0 below as lib/quant.c's
 * quant_q8_0). */
#include <math.h>

#include "cuda_common.cuh"
#include "kv_types.cuh"

#define KV_THREADS 256

/* Q8_0 of one 32-element block per warp, lane j element j: amax over the
 * warp (fmaxf from 0 skips NaN as the reference's strict compare does; a
 * max's value does not depend on the order), d = amax/127 in float (IEEE
 * division: no fast math in this build) stored as F16, q = roundf(x·(1/d))
 * with the float d, as ggml. */
static __device__ __forceinline__ void kv_q8_0_block(const float *x, char *b, int lane)
{
    const float v = x[lane];
    float amax = fabsf(v);
    amax = fmaxf(0.0f, amax);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (lane == 0)
        *(unsigned short *)b = kv_to_f16(d);
    b[2 + lane] = (char)(signed char)roundf(v * id);
}

__global__ void __launch_bounds__(KV_THREADS) kv_store_kernel(const memra_kv_store_args_t a, int code)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const float *x = a.src + r * a.src_stride;
        char *y = (char *)a.dst + r * (int64_t)a.dst_row_bytes;
        if (code == KV_Q8_0) {
            const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
            for (int64_t blk = warp; blk < a.cols / 32; blk += KV_THREADS / 32)
                kv_q8_0_block(x + blk * 32, y + blk * 34, lane);
            continue;
        }
        for (int64_t i = threadIdx.x; i < a.cols; i += KV_THREADS) {
            if (code == KV_F16)
                ((unsigned short *)y)[i] = kv_to_f16(x[i]);
            else if (code == KV_BF16)
                ((unsigned short *)y)[i] = kv_to_bf16(x[i]);
            else
                ((float *)y)[i] = x[i];
        }
    }
}

memra_status_t memra__cuda_kv_store(memra__backend_t *be, const memra_kv_store_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_kv_store(be, a, &none);
    if (st || none)
        return st;
    const int code = kv_code(a->type);
    if (code != KV_Q8_0 && (uintptr_t)a->dst % (code == KV_F32 ? 4 : 2) != 0)
        return memra__fail(be->err, MEMRA_E_INVALID, "kv_store: dst is not aligned to its elements");
    if (code == KV_Q8_0 && ((uintptr_t)a->dst % 2 || a->dst_row_bytes % 2))
        return memra__fail(be->err, MEMRA_E_INVALID, "kv_store: q8_0 rows must start at even addresses");
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    memra__launch(kv_store_kernel, memra__cuda_blocks(a->rows, 1, 65535), KV_THREADS, 0, c->stream, *a, code);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}
