/* The Gated DeltaNet step (memra_gdn_args_t, lib/backend.h): validation,
 * and the sequence of separate ops that defines it. The CPU reference
 * always runs the sequence; the CUDA backend runs the step as one kernel in
 * decode (the conv, L2 norm of q and k, the delta rule, the gated RMS norm:
 * five launches and four passes over scratch become one). */
#include "batch_ops.h"

static memra_status_t check(memra__backend_t *be, const memra_gdn_args_t *a)
{
    if (!a)
        return memra__fail(be->err, MEMRA_E_INVALID, "gdn: no arguments");
    const memra_delta_args_t *d = &a->delta;
    if (d->n_tokens > 0 && (!a->norm_w || !a->z || !a->y || !a->qk_tmp || !a->o_tmp))
        return memra__fail(be->err, MEMRA_E_INVALID, "gdn: missing norm weight, gate, output or scratch");
    if (d->n_tokens > 1 && a->z_stride < d->n_v * d->d)
        return memra__fail(be->err, MEMRA_E_INVALID, "gdn: gate stride %lld below %lld", (long long)a->z_stride,
                           (long long)(d->n_v * d->d));
    if (a->conv.w && a->conv.n_tokens != d->n_tokens)
        return memra__fail(be->err, MEMRA_E_INVALID, "gdn: conv of %lld tokens for a step of %lld",
                           (long long)a->conv.n_tokens, (long long)d->n_tokens);
    return MEMRA_OK;
}

static memra_status_t sequence(memra__backend_t *be, const memra_gdn_args_t *a)
{
    const memra__backend_i *ops = be->iface;
    const memra_delta_args_t *d = &a->delta;
    const int64_t n = d->n_tokens, KD = d->n_k * d->d, VD = d->n_v * d->d;
    memra_status_t st = a->conv.w ? ops->conv(be, &a->conv) : MEMRA_OK;
    if (st)
        return st;
    const memra_ew_args_t gq = {.op = MEMRA_EW_COPY, .y = a->qk_tmp, .a = d->q, .rows = n, .cols = KD,
                                .ys = 2 * KD, .as = d->qk_stride};
    memra_ew_args_t gk = gq;
    gk.y = a->qk_tmp + KD;
    gk.a = d->k;
    st = ops->elementwise(be, &gq);
    if (!st)
        st = ops->elementwise(be, &gk);
    if (!st)
        st = ops->norm(be, MEMRA_NORM_L2, a->qk_tmp, d->d, NULL, a->qk_tmp, d->d, n * 2 * d->n_k, d->d, a->l2_eps);
    if (st)
        return st;
    memra_delta_args_t dr = *d;
    dr.q = a->qk_tmp;
    dr.k = a->qk_tmp + KD;
    dr.qk_stride = 2 * KD;
    dr.out = a->o_tmp;
    st = ops->delta(be, &dr);
    if (!st)
        st = ops->norm(be, MEMRA_NORM_RMS, a->o_tmp, d->d, a->norm_w, a->o_tmp, d->d, n * d->n_v, d->d, a->norm_eps);
    if (st)
        return st;
    const memra_ew_args_t g = {.op = MEMRA_EW_SWIGLU, .y = a->y, .a = a->z, .b = a->o_tmp, .rows = n, .cols = VD,
                               .ys = VD, .as = a->z_stride, .bs = VD};
    return ops->elementwise(be, &g);
}

/* memra__gdn's validation: an error, or *none when there is nothing to do. */
static memra_status_t validate(memra__backend_t *be, const memra_gdn_args_t *a, bool *none)
{
    MEMRA__TRY(check(be, a));
    memra_delta_args_t d = a->delta;
    d.out = a->o_tmp; /* delta.out is unused */
    MEMRA__TRY(memra__check_delta(be, &d, none));
    if (*none || !a->conv.w)
        return MEMRA_OK;
    return memra__check_conv(be, &a->conv, none);
}

/* A validated step: the backend's fused gdn, or the sequence. */
static memra_status_t run(memra__backend_t *be, const memra_gdn_args_t *a)
{
    if (be->iface->gdn) {
        bool done = false;
        memra_status_t st = be->iface->gdn(be, a, &done);
        if (st || done)
            return st;
    }
    return sequence(be, a);
}

memra_status_t memra__gdn(memra__backend_t *be, const memra_gdn_args_t *a)
{
    bool none;
    MEMRA__TRY(validate(be, a, &none));
    return none ? MEMRA_OK : run(be, a);
}

/* ---- several sequences' steps (memra__gdn_batch) ------------------------------- */

static memra_status_t batch_check(memra__backend_t *be, const void *item, bool *none)
{
    return validate(be, item, none);
}

/* What a step writes, in floats: y, the delta-rule state, the scratch, and
 * with the conv its state and output rows. */
static int batch_writes(const void *item, const void **p, size_t *n)
{
    const memra_gdn_args_t *a = item;
    const memra_delta_args_t *d = &a->delta;
    const size_t t = (size_t)d->n_tokens, vd = (size_t)(d->n_v * d->d);
    const struct {
        const float *at;
        size_t floats;
    } w[6] = {{a->y, t * vd},
              {d->state, vd * (size_t)d->d},
              {a->qk_tmp, t * 2 * (size_t)(d->n_k * d->d)},
              {a->o_tmp, t * vd},
              {a->conv.state, (size_t)(a->conv.channels * (a->conv.kernel - 1))},
              {a->conv.out, t * (size_t)a->conv.channels}};
    const int k = a->conv.w ? 6 : 4;
    for (int i = 0; i < k; i++) {
        p[i] = w[i].at;
        n[i] = w[i].floats * sizeof(float);
    }
    return k;
}

static memra_status_t batch_one(memra__backend_t *be, const void *item)
{
    return run(be, item);
}

static memra_status_t batch_slot(memra__backend_t *be, const void *items, int32_t n, bool *done)
{
    return be->iface->gdn_batch(be, items, n, done);
}

memra_status_t memra__gdn_batch(memra__backend_t *be, const memra_gdn_args_t *a, int32_t n)
{
    _Static_assert(sizeof *a <= MEMRA__BATCH_ITEM_MAX, "gdn args exceed the batch item buffer");
    _Static_assert(MEMRA__BATCH_MAX_WRITES >= 6, "a gdn step writes six ranges");
    if (n == 1)
        return memra__gdn(be, a);
    const memra__batch_op_t op = {"gdn_batch", sizeof *a, batch_check, batch_writes,
                                  be->iface->gdn_batch ? batch_slot : NULL, batch_one};
    return memra__batch_run(be, &op, a, n);
}
