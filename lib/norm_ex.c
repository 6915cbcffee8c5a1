/* RMS norm with an add and scale epilogue (memra_norm_args_t,
 * lib/backend.h), and chains of them over the same rows: validation, and
 * the sequence of separate ops that defines them. The CPU reference always
 * runs the sequence; the CUDA backend runs a chain in one launch (gemma4's
 * post-attention, post-FFN and PLE post-norms each feed a residual add,
 * and the last one of a layer its output scale: up to three launches
 * become one; a MoE layer's post-attention norm and the two norms of its
 * result, or its three post-FFN norms, are one launch each). */
#include "backend.h"

static memra_status_t check(memra__backend_t *be, const memra_norm_args_t *a, bool *none)
{
    if (!a)
        return memra__fail(be->err, MEMRA_E_INVALID, "norm_ex: no arguments");
    memra_status_t st = memra__check_norm(be, MEMRA_NORM_RMS, a->x, a->xs, a->y, a->ys, a->rows, a->dim, a->eps, none);
    if (st || *none)
        return st;
    if (a->add && (!a->tmp || (a->rows > 1 && a->adds < a->dim)))
        return memra__fail(be->err, MEMRA_E_INVALID, "norm_ex: add without tmp scratch, or its stride %lld below %lld",
                           (long long)a->adds, (long long)a->dim);
    if (a->add && a->y == a->add && a->rows > 1 && a->ys != a->adds)
        return memra__fail(be->err, MEMRA_E_INVALID, "norm_ex: y is add with another stride (%lld, %lld)",
                           (long long)a->ys, (long long)a->adds);
    if (!(a->scale == a->scale))
        return memra__fail(be->err, MEMRA_E_INVALID, "norm_ex: scale is NaN");
    return MEMRA_OK;
}

static memra_status_t sequence(memra__backend_t *be, const memra_norm_args_t *a)
{
    const memra__backend_i *ops = be->iface;
    float *n = a->add ? a->tmp : a->y;
    const int64_t ns = a->add ? a->xs : a->ys;
    memra_status_t st = ops->norm(be, MEMRA_NORM_RMS, a->x, a->xs, a->w, n, ns, a->rows, a->dim, a->eps);
    if (!st && a->add) {
        const memra_ew_args_t e = {.op = MEMRA_EW_ADD, .y = a->y, .a = a->add, .b = n, .rows = a->rows,
                                   .cols = a->dim, .ys = a->ys, .as = a->adds, .bs = ns};
        st = ops->elementwise(be, &e);
    }
    if (!st && a->scale != 1.0f) {
        const memra_ew_args_t e = {.op = MEMRA_EW_SCALE, .y = a->y, .a = a->y, .rows = a->rows, .cols = a->dim,
                                   .ys = a->ys, .as = a->ys, .s = a->scale};
        st = ops->elementwise(be, &e);
    }
    return st;
}

/* A buffer one step of a chain touches: ROWS rows of DIM floats, STRIDE
 * apart (0: a vector every row reads, the weight). */
typedef struct chain_ref {
    const float *p;
    int64_t stride, dim;
    bool write, tmp;
} chain_ref;

static int chain_refs(const memra_norm_args_t *a, chain_ref *r)
{
    int n = 0;
    r[n++] = (chain_ref){a->x, a->xs, a->dim, false, false};
    if (a->w)
        r[n++] = (chain_ref){a->w, 0, a->dim, false, false};
    if (a->add) {
        r[n++] = (chain_ref){a->add, a->adds, a->dim, false, false};
        r[n++] = (chain_ref){a->tmp, a->xs, a->dim, true, true}; /* the sequence's norm writes it */
    }
    r[n++] = (chain_ref){a->y, a->ys, a->dim, true, false};
    return n;
}

/* Whether A's and B's ROWS (> 0) rows share a byte (addresses compared as
 * integers: the buffers may be unrelated objects). Rows of one stride
 * interleave without sharing when each of B's rows lies in the gap after
 * one of A's (two parts of one carry row: gemma4's hidden row and its
 * normed copy). */
static bool chain_overlap(const chain_ref *a, const chain_ref *b, int64_t rows)
{
    const uintptr_t a0 = (uintptr_t)a->p, b0 = (uintptr_t)b->p;
    const uintptr_t a1 = a0 + (uintptr_t)((a->stride ? (rows - 1) * a->stride : 0) + a->dim) * sizeof(float);
    const uintptr_t b1 = b0 + (uintptr_t)((b->stride ? (rows - 1) * b->stride : 0) + b->dim) * sizeof(float);
    if (!(a0 < b1 && b0 < a1))
        return false;
    if (rows > 1 && a->stride == b->stride && a->stride >= a->dim && a->stride >= b->dim) {
        const int64_t period = a->stride * (int64_t)sizeof(float);
        const int64_t off = (((int64_t)(b0 - a0)) % period + period) % period; /* B's start in A's period */
        if (off >= a->dim * (int64_t)sizeof(float) && off + b->dim * (int64_t)sizeof(float) <= period)
            return false;
    }
    return true;
}

/* Whether step J's refs may share memory with an earlier step I's: only
 * row for row (the same address and stride), never the weight, and never
 * a read of I's scratch. */
static memra_status_t chain_hazards(memra__backend_t *be, const memra_norm_args_t *steps, int i, int j)
{
    chain_ref ri[5], rj[5];
    const int ni = chain_refs(&steps[i], ri), nj = chain_refs(&steps[j], rj);
    const int64_t rows = steps[i].rows;
    if (rows <= 0)
        return MEMRA_OK; /* nothing runs */
    for (int u = 0; u < ni; u++)
        for (int v = 0; v < nj; v++) {
            const chain_ref *a = &ri[u], *b = &rj[v];
            if (!(a->write || b->write) || !chain_overlap(a, b, rows))
                continue;
            if (!a->stride || !b->stride || a->p != b->p || a->stride != b->stride)
                return memra__fail(be->err, MEMRA_E_INVALID,
                                   "norm_chain: steps %d and %d share memory other than row for row", i, j);
            if (a->tmp && !b->write)
                return memra__fail(be->err, MEMRA_E_INVALID, "norm_chain: step %d reads step %d's scratch", j, i);
        }
    return MEMRA_OK;
}

memra_status_t memra__norm_chain(memra__backend_t *be, const memra_norm_args_t *steps, int n)
{
    if (!steps || n < 1 || n > MEMRA_NORM_CHAIN_MAX)
        return memra__fail(be->err, MEMRA_E_INVALID, "norm_chain: %d steps (1 to %d)", n, MEMRA_NORM_CHAIN_MAX);
    bool none = false;
    for (int i = 0; i < n; i++) {
        memra_status_t st = check(be, &steps[i], &none);
        if (st)
            return st;
        if (steps[i].rows != steps[0].rows)
            return memra__fail(be->err, MEMRA_E_INVALID, "norm_chain: step %d has %lld rows, step 0 %lld", i,
                               (long long)steps[i].rows, (long long)steps[0].rows);
        for (int h = 0; h < i; h++) {
            st = chain_hazards(be, steps, h, i);
            if (st)
                return st;
        }
    }
    if (none)
        return MEMRA_OK;
    if (be->iface->norm_ex) {
        bool done = false;
        memra_status_t st = be->iface->norm_ex(be, steps, n, &done);
        if (st || done)
            return st;
    }
    for (int i = 0; i < n; i++) {
        memra_status_t st = sequence(be, &steps[i]);
        if (st)
            return st;
    }
    return MEMRA_OK;
}

memra_status_t memra__norm_ex(memra__backend_t *be, const memra_norm_args_t *a)
{
    if (!a)
        return memra__fail(be->err, MEMRA_E_INVALID, "norm_ex: no arguments");
    return memra__norm_chain(be, a, 1);
}
