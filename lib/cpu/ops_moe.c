/* MoE routing and the routed expert FFN (model-spec §3.4).
 *
 * moe is defined as the composition of the plain ops, and computes exactly
 * what they would: g = matmul(gate_e, x), u = matmul(up_e, x) (floats),
 * h = elementwise SWIGLU/GEGLU(g, u), y = matmul(down_e, h), then
 * out = (float) Σ_{j=0..k-1} w_j·scale_e·y_j summed in float64 in slot order.
 * Internally the (token, slot) pairs are grouped by expert so every used
 * weight row is dequantized once per pass, as in matmul. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "quant.h"

/* The top-k sum is clamped to the smallest normal half, as llama.cpp does. */
#define ROUTE_SUM_MIN 6.103515625e-5

/* Tokens per pass: bounds the h/y scratch to PASS·k·(n_ff + n_embd) floats. */
#define MOE_PASS_TOKENS 64

/* ---- route --------------------------------------------------------------- */

typedef struct route_job {
    const memra_route_args_t *a;
    atomic_int nomem, nan;
} route_job;

static void route_part(void *ctx, int64_t begin, int64_t end)
{
    route_job *j = ctx;
    const memra_route_args_t *a = j->a;
    const int64_t ne = a->n_expert;
    float *p = malloc((size_t)ne * sizeof *p);
    if (!p) {
        atomic_store(&j->nomem, 1);
        return;
    }
    for (int64_t t = begin; t < end; t++) {
        const float *l = a->logits + t * ne;
        double max = -INFINITY, sum = 0.0;
        for (int64_t e = 0; e < ne; e++) {
            if (isnan(l[e]))
                atomic_store(&j->nan, 1);
            max = fmax(max, (double)l[e]);
        }
        for (int64_t e = 0; e < ne; e++)
            sum += exp((double)l[e] - max);
        for (int64_t e = 0; e < ne; e++)
            p[e] = (float)(exp((double)l[e] - max) / sum);
        /* Selection sort in the order (prob descending, id ascending): the
         * next pick is the best expert strictly after the previous pick in
         * that order, so no "taken" marks are needed. */
        int32_t *ids = a->ids + t * a->k;
        float *w = a->weights + t * a->k;
        float prev_p = INFINITY;
        int64_t prev_id = -1;
        double wsum = 0.0;
        for (int64_t s = 0; s < a->k; s++) {
            int64_t best = -1;
            for (int64_t e = 0; e < ne; e++) {
                const bool after = p[e] < prev_p || (p[e] == prev_p && e > prev_id);
                if (after && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            if (best < 0) { /* only NaN left; reported by the caller */
                best = 0;
                atomic_store(&j->nan, 1);
            }
            ids[s] = (int32_t)best;
            w[s] = p[best];
            wsum += (double)p[best];
            prev_p = p[best];
            prev_id = best;
        }
        if (a->norm)
            for (int64_t s = 0; s < a->k; s++)
                w[s] = (float)((double)w[s] / fmax(wsum, ROUTE_SUM_MIN));
    }
    free(p);
}

memra_status_t memra__cpu_route(memra__backend_t *be, const memra_route_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_route(be, a, &none);
    if (st || none)
        return st;
    route_job j = {.a = a};
    atomic_init(&j.nomem, 0);
    atomic_init(&j.nan, 0);
    memra__pool_for(memra__cpu_pool(be), a->n_tokens, 1, route_part, &j);
    if (atomic_load(&j.nomem))
        return memra__fail(be->err, MEMRA_E_NOMEM, "route: out of memory");
    if (atomic_load(&j.nan))
        return memra__fail(be->err, MEMRA_E_RANGE, "route: NaN router logits");
    return MEMRA_OK;
}

/* ---- moe ----------------------------------------------------------------- */

typedef struct moe_job {
    const memra_moe_args_t *a;
    int64_t t0;            /* first token of the pass */
    const int32_t *used;   /* experts with at least one slot */
    const int64_t *start;  /* slots of expert e: slot[start[e] .. start[e+1]) */
    const int64_t *slot;   /* pass-local t*k + j, ascending within an expert */
    float *h;              /* [slot][n_ff] */
    float *y;              /* [slot][n_embd] */
    atomic_int nomem;
} moe_job;

static const void *expert_row(const memra_weight_t *w, int64_t e, int64_t row)
{
    return (const char *)w->data + (size_t)e * w->nb2 + (size_t)row * w->nb1;
}

/* Items (used expert, ff row): h = act(gate_f·x) * (up_f·x). */
static void moe_up_part(void *ctx, int64_t begin, int64_t end)
{
    moe_job *j = ctx;
    const memra_moe_args_t *a = j->a;
    const int64_t n = a->n_embd, nff = a->n_ff;
    float *gbuf = malloc((size_t)2 * (size_t)n * sizeof *gbuf);
    if (!gbuf) {
        atomic_store(&j->nomem, 1);
        return;
    }
    float *ubuf = gbuf + n;
    for (int64_t it = begin; it < end; it++) {
        const int64_t e = j->used[it / nff], f = it % nff;
        if (a->gate_up) {
            memra__dequantize_row(a->gate_up->type, expert_row(a->gate_up, e, f), gbuf, n);
            memra__dequantize_row(a->gate_up->type, expert_row(a->gate_up, e, nff + f), ubuf, n);
        } else {
            memra__dequantize_row(a->gate->type, expert_row(a->gate, e, f), gbuf, n);
            memra__dequantize_row(a->up->type, expert_row(a->up, e, f), ubuf, n);
        }
        for (int64_t s = j->start[e]; s < j->start[e + 1]; s++) {
            const int64_t sl = j->slot[s];
            const float *x = a->x + (j->t0 + sl / a->k) * n;
            const float g = (float)memra__cpu_dot(gbuf, x, n);
            const float u = (float)memra__cpu_dot(ubuf, x, n);
            j->h[sl * nff + f] = memra__cpu_glu(a->act, g, u);
        }
    }
    free(gbuf);
}

/* Items (used expert, embd row): y = down_i·h. */
static void moe_down_part(void *ctx, int64_t begin, int64_t end)
{
    moe_job *j = ctx;
    const memra_moe_args_t *a = j->a;
    const int64_t n = a->n_embd, nff = a->n_ff;
    float *dbuf = malloc((size_t)nff * sizeof *dbuf);
    if (!dbuf) {
        atomic_store(&j->nomem, 1);
        return;
    }
    for (int64_t it = begin; it < end; it++) {
        const int64_t e = j->used[it / n], i = it % n;
        memra__dequantize_row(a->down->type, expert_row(a->down, e, i), dbuf, nff);
        for (int64_t s = j->start[e]; s < j->start[e + 1]; s++) {
            const int64_t sl = j->slot[s];
            j->y[sl * n + i] = (float)memra__cpu_dot(dbuf, j->h + sl * nff, nff);
        }
    }
    free(dbuf);
}

/* Items (pass token, embd element): the weighted sum in slot order. */
static void moe_sum_part(void *ctx, int64_t begin, int64_t end)
{
    moe_job *j = ctx;
    const memra_moe_args_t *a = j->a;
    const int64_t n = a->n_embd;
    for (int64_t it = begin; it < end; it++) {
        const int64_t tl = it / n, i = it % n, t = j->t0 + tl;
        double acc = 0.0;
        for (int64_t s = 0; s < a->k; s++) {
            const int32_t e = a->ids[t * a->k + s];
            const double sc = a->expert_scale ? (double)a->expert_scale[e] : 1.0;
            acc += (double)a->weights[t * a->k + s] * sc * (double)j->y[(tl * a->k + s) * n + i];
        }
        a->out[t * n + i] = (float)acc;
    }
}

/* The shared checks, then the expert ids (host memory here: checkable). */
static memra_status_t moe_check(memra__backend_t *be, const memra_moe_args_t *a, int64_t *n_expert)
{
    bool none;
    memra_status_t st = memra__check_moe(be, a, &none);
    if (st)
        return st;
    const int64_t ne = a->down->ne[2] > 0 ? a->down->ne[2] : 1;
    for (int64_t s = 0; s < a->n_tokens * a->k; s++)
        if (a->ids[s] < 0 || a->ids[s] >= ne)
            return memra__fail(be->err, MEMRA_E_RANGE, "moe: expert id %d out of [0, %lld)", (int)a->ids[s],
                               (long long)ne);
    *n_expert = ne;
    return MEMRA_OK;
}

memra_status_t memra__cpu_moe(memra__backend_t *be, const memra_moe_args_t *a)
{
    int64_t ne = 0;
    memra_status_t st = moe_check(be, a, &ne);
    if (st || a->n_tokens == 0)
        return st;
    const int64_t pass = a->n_tokens < MOE_PASS_TOKENS ? a->n_tokens : MOE_PASS_TOKENS;
    const size_t slots = (size_t)(pass * a->k);
    int64_t *start = calloc((size_t)ne + 1, sizeof *start);
    int64_t *slot = malloc(slots * sizeof *slot);
    int64_t *cursor = malloc((size_t)ne * sizeof *cursor);
    int32_t *used = malloc((size_t)ne * sizeof *used);
    float *h = malloc(slots * (size_t)a->n_ff * sizeof *h);
    float *y = malloc(slots * (size_t)a->n_embd * sizeof *y);
    memra__pool_t *pool = memra__cpu_pool(be);
    if (!start || !slot || !cursor || !used || !h || !y)
        st = memra__fail(be->err, MEMRA_E_NOMEM, "moe: out of memory");
    for (int64_t t0 = 0; !st && t0 < a->n_tokens; t0 += pass) {
        const int64_t nt = a->n_tokens - t0 < pass ? a->n_tokens - t0 : pass;
        const int32_t *ids = a->ids + t0 * a->k;
        /* counting sort of the pass's slots by expert */
        memset(start, 0, ((size_t)ne + 1) * sizeof *start);
        for (int64_t s = 0; s < nt * a->k; s++)
            start[ids[s] + 1]++;
        int64_t n_used = 0;
        for (int64_t e = 0; e < ne; e++) {
            if (start[e + 1])
                used[n_used++] = (int32_t)e;
            start[e + 1] += start[e];
        }
        memcpy(cursor, start, (size_t)ne * sizeof *cursor);
        for (int64_t s = 0; s < nt * a->k; s++)
            slot[cursor[ids[s]]++] = s;
        moe_job j = {.a = a, .t0 = t0, .used = used, .start = start, .slot = slot, .h = h, .y = y};
        atomic_init(&j.nomem, 0);
        memra__pool_for(pool, n_used * a->n_ff, 4, moe_up_part, &j);
        if (!atomic_load(&j.nomem))
            memra__pool_for(pool, n_used * a->n_embd, 4, moe_down_part, &j);
        if (atomic_load(&j.nomem)) {
            st = memra__fail(be->err, MEMRA_E_NOMEM, "moe: out of memory for a row buffer");
            break;
        }
        memra__pool_for(pool, nt * a->n_embd, 256, moe_sum_part, &j);
    }
    free(start);
    free(slot);
    free(cursor);
    free(used);
    free(h);
    free(y);
    return st;
}
