/* The Gated DeltaNet step (memra_gdn_args_t, lib/backend.h): validation,
 * and the sequence of separate ops that defines it. The CPU reference
 * always runs the sequence; the CUDA backend runs the step as one kernel in
 * decode (the conv, L2 norm of q and k, the delta rule, the gated RMS norm:
 * five launches and four passes over scratch become one). */
#include "backend.h"

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

memra_status_t memra__gdn(memra__backend_t *be, const memra_gdn_args_t *a)
{
    memra_status_t st = check(be, a);
    if (st)
        return st;
    bool none;
    memra_delta_args_t d = a->delta;
    d.out = a->o_tmp; /* delta.out is unused */
    st = memra__check_delta(be, &d, &none);
    if (st || none)
        return st;
    if (a->conv.w && ((st = memra__check_conv(be, &a->conv, &none)) || none))
        return st;
    if (be->iface->gdn) {
        bool done = false;
        st = be->iface->gdn(be, a, &done);
        if (st || done)
            return st;
    }
    return sequence(be, a);
}
