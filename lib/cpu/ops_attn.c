/* Causal (optionally sliding-window) attention with GQA, writes into the
 * KV cache, and argmax.
 *
 * Each (token, head) is computed on its own, in float64: scores
 * scale·(q·k) with memra__cpu_dot, a max-subtracted softmax, the weighted
 * sum of V, one rounding to float. A query's result depends only on its
 * position and the cache, never on how many tokens share the call. Cache
 * rows of F16/BF16/Q8_0 are dequantized head by head into float (exact),
 * then used as F32 rows are. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_backend.h"
#include "quant.h"

typedef struct attn_job {
    const memra_attn_args_t *a;
    atomic_int nomem;
} attn_job;

/* Head KVH of cache row K as floats: the row itself for F32, else
 * dequantized into BUF (head_dim floats). */
static const float *kv_head(const void *cache, memra_type_t type, size_t row_bytes, int64_t k, int64_t kvh,
                            int64_t hd, float *buf)
{
    const char *row = (const char *)cache + (size_t)k * row_bytes;
    if (type == MEMRA_TYPE_F32)
        return (const float *)row + kvh * hd;
    memra__dequantize_row(type, row + memra__row_bytes(type, kvh * hd), buf, hd);
    return buf;
}

static void attn_part(void *ctx, int64_t begin, int64_t end)
{
    attn_job *j = ctx;
    const memra_attn_args_t *a = j->a;
    const int64_t hd = a->head_dim, group = a->n_head / a->n_kv_head;
    const int64_t n_keys = a->pos0 + a->n_tokens;
    const size_t krb = memra__attn_k_row_bytes(a), vrb = memra__attn_v_row_bytes(a);
    double *w = malloc((size_t)n_keys * sizeof *w);
    double *acc = malloc((size_t)hd * sizeof *acc);
    float *buf = malloc((size_t)hd * sizeof *buf);
    if (!w || !acc || !buf) {
        atomic_store(&j->nomem, 1);
        free(w);
        free(acc);
        free(buf);
        return;
    }
    for (int64_t u = begin; u < end; u++) {
        const int64_t t = u / a->n_head, h = u % a->n_head, kvh = h / group;
        const int64_t p = a->pos0 + t;
        const int64_t lo = a->n_swa > 0 && p - a->n_swa + 1 > 0 ? p - a->n_swa + 1 : 0;
        const float *q = a->q + t * a->q_stride + h * hd;
        double max = -INFINITY;
        for (int64_t k = lo; k <= p; k++) {
            const float *kr = kv_head(a->k_cache, a->k_type, krb, k, kvh, hd, buf);
            w[k - lo] = (double)a->scale * memra__cpu_dot(q, kr, hd);
            if (w[k - lo] > max)
                max = w[k - lo];
        }
        double sum = 0.0;
        for (int64_t d = 0; d < hd; d++)
            acc[d] = 0.0;
        for (int64_t k = lo; k <= p; k++) {
            const double e = exp(w[k - lo] - max);
            const float *vr = kv_head(a->v_cache, a->v_type, vrb, k, kvh, hd, buf);
            sum += e;
            for (int64_t d = 0; d < hd; d++)
                acc[d] += e * (double)vr[d];
        }
        float *o = a->out + t * a->n_head * hd + h * hd;
        for (int64_t d = 0; d < hd; d++)
            o[d] = (float)(acc[d] / sum);
        if (a->gate) { /* elementwise MUL_SIGMOID's arithmetic (ops_norm.c) */
            const float *g = a->gate + t * a->gate_stride + h * a->gate_head_stride;
            for (int64_t d = 0; d < hd; d++)
                o[d] = (float)((double)o[d] * memra__cpu_sigmoid(g[d]));
        }
    }
    free(w);
    free(acc);
    free(buf);
}

memra_status_t memra__cpu_attention(memra__backend_t *be, const memra_attn_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_attention(be, a, &none);
    if (st || none)
        return st;
    attn_job j = {.a = a};
    atomic_init(&j.nomem, 0);
    memra__pool_for(memra__cpu_pool(be), a->n_tokens * a->n_head, 1, attn_part, &j);
    if (atomic_load(&j.nomem))
        return memra__fail(be->err, MEMRA_E_NOMEM, "attention: out of memory for scores");
    return MEMRA_OK;
}

/* Row by row with memra__quantize_row: the definition of the cache's
 * bits, which the CUDA kernel reproduces. */
memra_status_t memra__cpu_kv_store(memra__backend_t *be, const memra_kv_store_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_kv_store(be, a, &none);
    if (st || none)
        return st;
    /* the rows' place as a replay's (backend.h); a direct call's shift is 0 */
    const int64_t shift = a->pos_dev ? (int64_t)*a->pos_dev - a->pos : 0;
    for (int64_t r = 0; r < a->rows; r++)
        memra__quantize_row(a->type, a->src + r * a->src_stride,
                            (char *)a->dst + (r + shift) * (int64_t)a->dst_row_bytes, a->cols);
    return MEMRA_OK;
}

memra_status_t memra__cpu_argmax(memra__backend_t *be, const float *x, int64_t n, int32_t *out)
{
    if (!x || !out || n <= 0 || n > INT32_MAX)
        return memra__fail(be->err, MEMRA_E_INVALID, "argmax: bad input");
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best]))
            best = i;
    *out = best < 0 ? 0 : (int32_t)best;
    return MEMRA_OK;
}
