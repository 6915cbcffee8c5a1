/* The kv_store op and its batched form: one launch each, a block a row
 * (the conversions in cuda/kv_store.cuh). */
#include <math.h>

#include "cuda_common.cuh"
#include "kv_store.cuh"

__global__ void __launch_bounds__(KV_THREADS) kv_store_kernel(const memra_kv_store_args_t a, int code)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x)
        kv_store_row(a, code, r);
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
