/* RMS norm with an add and scale epilogue (memra_norm_args_t,
 * lib/backend.h): validation, and the sequence of separate ops that defines
 * it. The CPU reference always runs the sequence; the CUDA backend runs it
 * in one launch (gemma4's post-attention, post-FFN and PLE post-norms each
 * feed a residual add, and the last one of a layer its output scale: up to
 * three launches become one). */
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

memra_status_t memra__norm_ex(memra__backend_t *be, const memra_norm_args_t *a)
{
    bool none;
    memra_status_t st = check(be, a, &none);
    if (st || none)
        return st;
    if (be->iface->norm_ex) {
        bool done = false;
        st = be->iface->norm_ex(be, a, &done);
        if (st || done)
            return st;
    }
    return sequence(be, a);
}
