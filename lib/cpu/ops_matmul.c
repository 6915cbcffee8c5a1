/* matmul and get_rows over weights in their stored GGUF type.
 *
 * Every output y[r][o] is (float) of the sequential float64 dot product of
 * the dequantized weight row o with x[r] (memra__cpu_dot), whatever n_rows
 * is: decode and prefill run the same loop, so a prompt split into chunks of
 * any size gives bit-identical logits. The result also equals
 * (float)memra__dot_row(), which sums in the same order. */
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_backend.h"
#include "quant.h"

/* Weight rows dequantized together: each x row is then streamed once per
 * tile instead of once per output row. Does not change any result. */
#define MM_TILE 8

static const void *weight_row(const memra_weight_t *w, int64_t row)
{
    return (const char *)w->data + (size_t)row * w->nb1;
}

typedef struct mm_job {
    const memra_weight_t *w;
    const float *x;
    float *y;
    int64_t ldx, ldy, n_rows;
    atomic_int nomem;
} mm_job;

static void mm_part(void *ctx, int64_t o_begin, int64_t o_end)
{
    mm_job *j = ctx;
    const int64_t ne0 = j->w->ne[0];
    float *buf = malloc((size_t)MM_TILE * (size_t)ne0 * sizeof *buf);
    if (!buf) {
        atomic_store(&j->nomem, 1);
        return;
    }
    for (int64_t o = o_begin; o < o_end; o += MM_TILE) {
        const int64_t nt = o_end - o < MM_TILE ? o_end - o : MM_TILE;
        for (int64_t t = 0; t < nt; t++)
            memra__dequantize_row(j->w->type, weight_row(j->w, o + t), buf + t * ne0, ne0);
        for (int64_t r = 0; r < j->n_rows; r++) {
            const float *xr = j->x + r * j->ldx;
            float *yr = j->y + r * j->ldy + o;
            for (int64_t t = 0; t < nt; t++)
                yr[t] = (float)memra__cpu_dot(buf + t * ne0, xr, ne0);
        }
    }
    free(buf);
}

memra_status_t memra__cpu_matmul(memra__backend_t *be, const memra_weight_t *w, const float *x,
                                 int64_t ldx, float *y, int64_t ldy, int64_t n_rows)
{
    bool none;
    memra_status_t st = memra__check_matmul(be, w, x, ldx, y, ldy, n_rows, &none);
    if (st || none)
        return st;
    mm_job j = {.w = w, .x = x, .y = y, .ldx = ldx, .ldy = ldy, .n_rows = n_rows};
    atomic_init(&j.nomem, 0);
    memra__pool_for(memra__cpu_pool(be), w->ne[1], MM_TILE, mm_part, &j);
    if (atomic_load(&j.nomem))
        return memra__fail(be->err, MEMRA_E_NOMEM, "matmul: out of memory for a row buffer");
    return MEMRA_OK;
}

typedef struct rows_job {
    const memra_weight_t *w;
    const int32_t *ids;
    float *y;
    int64_t ldy;
} rows_job;

static void rows_part(void *ctx, int64_t begin, int64_t end)
{
    rows_job *j = ctx;
    for (int64_t r = begin; r < end; r++)
        memra__dequantize_row(j->w->type, weight_row(j->w, j->ids[r]), j->y + r * j->ldy, j->w->ne[0]);
}

memra_status_t memra__cpu_get_rows(memra__backend_t *be, const memra_weight_t *w, const int32_t *ids,
                                   int64_t n, float *y, int64_t ldy)
{
    memra_status_t st = memra__check_weight(be, w, "get_rows");
    if (st)
        return st;
    if (n < 0 || (n > 0 && (!ids || !y)) || (n > 1 && ldy < w->ne[0]))
        return memra__fail(be->err, MEMRA_E_INVALID, "get_rows: bad rows, buffers or stride");
    /* ids are host memory here, so a bad token id is an error, not a wild read */
    for (int64_t r = 0; r < n; r++)
        if (ids[r] < 0 || ids[r] >= w->ne[1])
            return memra__fail(be->err, MEMRA_E_RANGE, "get_rows: id %d out of [0, %lld)", (int)ids[r],
                               (long long)w->ne[1]);
    rows_job j = {.w = w, .ids = ids, .y = y, .ldy = ldy};
    memra__pool_for(memra__cpu_pool(be), n, 1, rows_part, &j);
    return MEMRA_OK;
}
