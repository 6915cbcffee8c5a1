/* Rows written into a KV cache (memra_kv_store_args_t): float rows
 * converted to the cache's type with the CPU reference's bits
 * (cuda/kv_types.cuh for F16/BF16; Q8_0 and Q4_0 below as lib/quant.c's
 * quant_q8_0 and quant_legacy). */
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

/* Q4_0 of one 32-element block per warp, lane j element j, as
 * quant_legacy(4 bits, no min): the signed element of the largest |x|,
 * the first in index order on ties (the reference's strict compare from
 * 0, which also skips NaN and zeros: none found leaves +0), d = max/-8,
 * q = (int8)(x·(1/d) + 8.5) capped at 15 (no contraction into an FMA:
 * the reference rounds the product), byte j = q_j | q_{j+16} << 4. */
static __device__ __forceinline__ void kv_q4_0_block(const float *x, char *b, int lane)
{
    const float v = x[lane];
    float ab = fabsf(v) > 0.0f ? fabsf(v) : -1.0f;
    int at = lane;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, ab, o);
        const int oat = __shfl_xor_sync(0xffffffffu, at, o);
        if (ob > ab || (ob == ab && oat < at)) {
            ab = ob;
            at = oat;
        }
    }
    const float vmax = __shfl_sync(0xffffffffu, v, at);
    const float max = ab > 0.0f ? vmax : 0.0f;
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q = (int)(signed char)__float2int_rz(__fadd_rn(__fmul_rn(v, id), 8.5f));
    q = q < 15 ? q : 15;
    const int q_hi = __shfl_down_sync(0xffffffffu, q, 16);
    if (lane == 0)
        *(unsigned short *)b = kv_to_f16(d);
    if (lane < 16)
        b[2 + lane] = (char)((q & 0xF) | ((q_hi & 0xF) << 4));
}

/* Row R of A converted by the block (the one-item and the batched kernel
 * share it, so a row gets the same bits whichever launch holds it). */
static __device__ __forceinline__ void kv_store_row(const memra_kv_store_args_t &a, int code, int64_t r)
{
    const float *x = a.src + r * a.src_stride;
    /* a replay's rows go where its step's position says (memra_kv_store_args_t) */
    const int64_t at = a.pos_dev ? r + ((int64_t)*a.pos_dev - a.pos) : r;
    char *y = (char *)a.dst + at * (int64_t)a.dst_row_bytes;
    if (code == KV_Q8_0 || code == KV_Q4_0) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        for (int64_t blk = warp; blk < a.cols / 32; blk += KV_THREADS / 32) {
            if (code == KV_Q8_0)
                kv_q8_0_block(x + blk * 32, y + blk * 34, lane);
            else
                kv_q4_0_block(x + blk * 32, y + blk * 18, lane);
        }
        return;
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

__global__ void __launch_bounds__(KV_THREADS) kv_store_kernel(const memra_kv_store_args_t a, int code)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x)
        kv_store_row(a, code, r);
}

/* Why the kernel cannot store A's rows (NULL: it can): the one-item op's
 * checks beyond memra__check_kv_store. */
static const char *kv_misaligned(const memra_kv_store_args_t *a)
{
    const int code = kv_code(a->type);
    const bool blocks = code == KV_Q8_0 || code == KV_Q4_0;
    if (!blocks && (uintptr_t)a->dst % (code == KV_F32 ? 4 : 2) != 0)
        return "dst is not aligned to its elements";
    if (blocks && ((uintptr_t)a->dst % 2 || a->dst_row_bytes % 2))
        return "q8_0 and q4_0 rows must start at even addresses";
    return NULL;
}

memra_status_t memra__cuda_kv_store(memra__backend_t *be, const memra_kv_store_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_kv_store(be, a, &none);
    if (st || none)
        return st;
    if (const char *why = kv_misaligned(a))
        return memra__fail(be->err, MEMRA_E_INVALID, "kv_store: %s", why);
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    memra__launch(kv_store_kernel, memra__cuda_blocks(a->rows, 1, 65535), KV_THREADS, 0, c->stream, *a, kv_code(a->type));
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- several sequences' rows in one launch ------------------------------------ */

/* The items of a batched store by value (a kernel parameter: nothing to
 * upload, so the launch queues like any other): the rows of every item
 * numbered back to back, item i's from row0[i] on. */
struct kv_batch {
    memra_kv_store_args_t a[MEMRA_MAX_BATCH];
    int code[MEMRA_MAX_BATCH];
    int64_t row0[MEMRA_MAX_BATCH + 1]; /* row0[n]: all the rows */
    int n;
};

/* Block b takes the batch's rows b, b + gridDim.x, ...: each row the one
 * kv_store_kernel's block would convert, with the same code. */
__global__ void __launch_bounds__(KV_THREADS) kv_store_batch_kernel(const __grid_constant__ kv_batch b)
{
    MEMRA_PDL_ENTER();
    for (int64_t f = blockIdx.x; f < b.row0[b.n]; f += gridDim.x) {
        int lo = 0, hi = b.n - 1; /* the item holding row f: the last with row0 <= f */
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (b.row0[mid] <= f)
                lo = mid;
            else
                hi = mid - 1;
        }
        kv_store_row(b.a[lo], b.code[lo], f - b.row0[lo]);
    }
}

/* Every item the one-item op would run (validated; misaligned ones are
 * left to it, which reports them) in one launch, whatever their types and
 * row counts. */
memra_status_t memra__cuda_kv_store_batch(memra__backend_t *be, const memra_kv_store_args_t *a, int32_t n, bool *done)
{
    kv_batch b = {}; /* every byte defined: the whole struct is the kernel parameter */
    b.n = 0;
    b.row0[0] = 0;
    int idx[MEMRA_MAX_BATCH];
    for (int32_t i = 0; i < n && i < MEMRA_MAX_BATCH; i++) {
        if (kv_misaligned(&a[i]) || a[i].rows <= 0)
            continue;
        idx[b.n] = i;
        b.a[b.n] = a[i];
        b.code[b.n] = kv_code(a[i].type);
        b.row0[b.n + 1] = b.row0[b.n] + a[i].rows;
        b.n++;
    }
    if (b.n < 2)
        return MEMRA_OK; /* one item: the one-item op does the same */
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    memra__launch(kv_store_batch_kernel, memra__cuda_blocks(b.row0[b.n], 1, 65535), KV_THREADS, 0, c->stream, b);
    MEMRA_CUDA_LAUNCHED(be);
    for (int j = 0; j < b.n; j++)
        done[idx[j]] = true;
    return MEMRA_OK;
}
