/* A MoE router: its matmul (the router weight first; more weights of the
 * same x may follow it, qwen35moe's shared-expert gate) and the route of
 * the first weight's outputs (lib/backend.h: memra__router). The CPU
 * reference always runs the two ops; the CUDA backend's router slot runs
 * a decode token's as one launch, whose last block routes the logits the
 * others wrote (cuda/mmv.cuh), one launch boundary fewer on the critical
 * path of every MoE layer. */
#include "backend.h"

memra_status_t memra__router(memra__backend_t *be, const memra_mm_args_t *m, const memra_route_args_t *rt)
{
    if (!m || !rt || m->n_w < 1 || !m->w[0])
        return memra__fail(be->err, MEMRA_E_INVALID, "router: no arguments");
    if (rt->logits != m->y[0] || rt->n_tokens != m->n_rows || rt->n_expert != m->w[0]->ne[1] ||
        (m->n_rows > 1 && m->ldy[0] != rt->n_expert))
        return memra__fail(be->err, MEMRA_E_INVALID,
                           "router: the route must take the first weight's outputs (%lld rows of %lld, packed)",
                           (long long)m->n_rows, (long long)m->w[0]->ne[1]);
    bool none = false;
    memra_status_t st = memra__check_route(be, rt, &none);
    if (st)
        return st;
    if (be->iface->router && !none) {
        bool done = false;
        st = be->iface->router(be, m, rt, &done);
        if (st || done)
            return st;
    }
    st = memra__matmul_ex(be, m);
    return st ? st : be->iface->route(be, rt);
}
