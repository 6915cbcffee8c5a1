/* The MoE feed-forward with its optional shared expert (memra_moe_args_t,
 * lib/backend.h): validation, and the sequence of separate ops that
 * defines it. The CPU reference always runs the sequence; the CUDA backend
 * runs decode in two launches (the routed and shared gate/up with the act,
 * then the down dots with the slot sum, the shared expert's add and, with
 * accumulate, the add into out) where the sequence takes four to fourteen. */
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

/* A's routed experts alone, into SUM: the moe slot's arguments. */
static memra_moe_args_t routed_args(const memra_moe_args_t *a, float *sum)
{
    memra_moe_args_t routed = *a;
    routed.shared = NULL;
    routed.accumulate = false;
    routed.out_stride = 0;
    routed.acc_tmp = NULL;
    routed.out = sum;
    return routed;
}

/* out += SUM (rows out_stride apart; SUM's n_embd) */
static memra_status_t accumulate(memra__backend_t *be, const memra_moe_args_t *a, const float *sum)
{
    const int64_t ld = a->out_stride ? a->out_stride : a->n_embd;
    const memra_ew_args_t add = {.op = MEMRA_EW_ADD, .y = a->out, .a = a->out, .b = sum, .rows = a->n_tokens,
                                 .cols = a->n_embd, .ys = ld, .as = ld, .bs = a->n_embd};
    return be->iface->elementwise(be, &add);
}

/* The routed experts and the shared one, summed into SUM. */
static memra_status_t experts(memra__backend_t *be, const memra_moe_args_t *a, float *sum)
{
    const memra__backend_i *ops = be->iface;
    const memra_moe_args_t routed = routed_args(a, sum);
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
    const memra_ew_args_t add = {.op = MEMRA_EW_ADD, .y = sum, .a = sum, .b = s->out_tmp, .rows = n,
                                 .cols = a->n_embd, .ys = a->n_embd, .as = a->n_embd, .bs = a->n_embd};
    return ops->elementwise(be, &add);
}

static memra_status_t sequence(memra__backend_t *be, const memra_moe_args_t *a)
{
    float *sum = a->accumulate ? a->acc_tmp : a->out;
    const memra_status_t st = experts(be, a, sum);
    return st || !a->accumulate ? st : accumulate(be, a, sum);
}

memra_status_t memra__moe(memra__backend_t *be, const memra_moe_args_t *a)
{
    if (!a)
        return memra__fail(be->err, MEMRA_E_INVALID, "moe: no arguments");
    const memra_moe_args_t routed = routed_args(a, a->out);
    bool none;
    memra_status_t st = memra__check_moe(be, &routed, &none);
    if (!st && a->shared)
        st = check_shared(be, a);
    if (!st && (a->out_stride < 0 || (a->out_stride && a->out_stride < a->n_embd) ||
                (a->out_stride && !a->accumulate)))
        st = memra__fail(be->err, MEMRA_E_INVALID, "moe: out_stride %lld (0, or from n_embd with accumulate)",
                         (long long)a->out_stride);
    if (!st && a->accumulate && a->n_tokens > 0 && !a->acc_tmp)
        st = memra__fail(be->err, MEMRA_E_INVALID, "moe: accumulate without its acc_tmp scratch");
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
