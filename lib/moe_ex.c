/* The MoE feed-forward with its optional shared expert (memra_moe_args_t,
 * lib/backend.h): validation, and the sequence of separate ops that
 * defines it. The CPU reference always runs the sequence; the CUDA backend
 * runs decode in two launches (the routed and shared gate/up with the act,
 * then the down dots with the slot sum and the shared expert's add) where
 * the sequence takes four to thirteen. */
#include "backend.h"

static bool one_matrix(const memra_weight_t *w)
{
    return w->ne[2] <= 1;
}

static memra_status_t check_shared(memra__backend_t *be, const memra_moe_args_t *a)
{
    const memra_moe_shared_t *s = a->shared;
    if (!s->gate || !s->up || !s->down || s->n_ff <= 0)
        return memra__fail(be->err, MEMRA_E_INVALID, "moe: the shared expert needs gate, up, down and n_ff");
    const memra_weight_t *ws[3] = {s->gate, s->up, s->down};
    for (int i = 0; i < 3; i++) {
        memra_status_t st = memra__check_weight(be, ws[i], "moe shared expert");
        if (st)
            return st;
        if (!one_matrix(ws[i]))
            return memra__fail(be->err, MEMRA_E_INVALID, "moe: the shared expert's weights are one matrix each");
    }
    for (int i = 0; i < 2; i++)
        if (ws[i]->ne[0] != a->n_embd || ws[i]->ne[1] != s->n_ff)
            return memra__fail(be->err, MEMRA_E_INVALID, "moe: shared gate/up weight shape does not match");
    if (s->down->ne[0] != s->n_ff || s->down->ne[1] != a->n_embd)
        return memra__fail(be->err, MEMRA_E_INVALID, "moe: shared down weight shape does not match");
    if (a->n_tokens > 0 && (!s->logit || !s->ids_tmp || !s->w_tmp || !s->out_tmp))
        return memra__fail(be->err, MEMRA_E_INVALID, "moe: the shared expert needs its logits and scratch");
    return MEMRA_OK;
}

static memra_status_t sequence(memra__backend_t *be, const memra_moe_args_t *a)
{
    const memra__backend_i *ops = be->iface;
    memra_moe_args_t routed = *a;
    routed.shared = NULL;
    memra_status_t st = ops->moe(be, &routed);
    const memra_moe_shared_t *s = a->shared;
    if (st || !s)
        return st;
    const int64_t n = a->n_tokens;
    /* one logit over one expert: id 0 for every token */
    const memra_route_args_t one = {.logits = s->logit, .ids = s->ids_tmp, .weights = s->w_tmp, .n_tokens = n,
                                    .n_expert = 1, .k = 1, .norm = false};
    st = ops->route(be, &one);
    if (st)
        return st;
    const memra_ew_args_t sig = {.op = MEMRA_EW_SIGMOID, .y = s->w_tmp, .a = s->logit, .rows = n, .cols = 1,
                                 .ys = 1, .as = 1};
    st = ops->elementwise(be, &sig);
    if (st)
        return st;
    const memra_moe_args_t se = {.x = a->x, .ids = s->ids_tmp, .weights = s->w_tmp, .gate = s->gate, .up = s->up,
                                 .down = s->down, .out = s->out_tmp, .n_tokens = n, .k = 1, .n_embd = a->n_embd,
                                 .n_ff = s->n_ff, .act = a->act};
    st = ops->moe(be, &se);
    if (st)
        return st;
    const memra_ew_args_t add = {.op = MEMRA_EW_ADD, .y = a->out, .a = a->out, .b = s->out_tmp, .rows = n,
                                 .cols = a->n_embd, .ys = a->n_embd, .as = a->n_embd, .bs = a->n_embd};
    return ops->elementwise(be, &add);
}

memra_status_t memra__moe(memra__backend_t *be, const memra_moe_args_t *a)
{
    if (!a)
        return memra__fail(be->err, MEMRA_E_INVALID, "moe: no arguments");
    memra_moe_args_t routed = *a;
    routed.shared = NULL;
    bool none;
    memra_status_t st = memra__check_moe(be, &routed, &none);
    if (!st && a->shared)
        st = check_shared(be, a);
    if (st || none)
        return st;
    if (be->iface->moe_fused) {
        bool done = false;
        st = be->iface->moe_fused(be, a, &done);
        if (st || done)
            return st;
    }
    return sequence(be, a);
}
