/* Kernel check cases: expert routing and the MoE feed-forward. */
#include "kc.h"

/* ---- route ---------------------------------------------------------------- */

typedef struct rt_case {
    memra_route_args_t a[2];
} rt_case;

static memra_status_t rt_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->route(be, &((rt_case *)c)->a[side]);
}

void memra__kc_route(kc *k, int64_t n, int64_t n_expert, int64_t top_k, bool norm, bool ties)
{
    char name[48];
    snprintf(name, sizeof name, "route.e%lld_k%lld%s%s", (long long)n_expert, (long long)top_k, norm ? "" : ".nonorm",
             ties ? ".ties" : "");
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "ulp", TOL_ULP, "%lld tok, %lld experts, top %lld (ids exact)",
                                           (long long)n, (long long)n_expert, (long long)top_k);
    if (!L)
        return;
    float *l = memra__kc_randf(k, (size_t)(n * n_expert), -4.0f, 4.0f);
    void *lp[2];
    if (!l)
        return;
    if (ties) /* coarse logits: many exact ties, the lower id must win */
        for (int64_t i = 0; i < n * n_expert; i++)
            l[i] = floorf(l[i]);
    const kc_out o = {n, top_k, top_k};
    if (!memra__kc_both(k, l, (size_t)(n * n_expert) * 4, lp))
        return;
    rt_case c;
    for (int s = 0; s < 2; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        c.a[s] = (memra_route_args_t){.logits = lp[s], .ids = (int32_t *)memra__kc_out_new(k, be, &o, NULL),
                                      .weights = memra__kc_out_new(k, be, &o, NULL), .n_tokens = n, .n_expert = n_expert,
                                      .k = top_k, .norm = norm};
        if (!c.a[s].ids || !c.a[s].weights)
            return;
    }
    if (!memra__kc_run2(k, L, rt_run, &c, k->gpu))
        return;
    kc_acc ai, aw;
    memra__kc_acc_init(&ai);
    memra__kc_acc_init(&aw);
    /* ids compared as bit patterns: any difference is a wrong pick */
    memra__kc_cmp(&ai, memra__kc_out_get(k, k->cpu, (float *)c.a[0].ids, &o), memra__kc_out_get(k, k->gpu, (float *)c.a[1].ids, &o), &o, "ids");
    memra__kc_cmp(&aw, memra__kc_out_get(k, k->cpu, c.a[0].weights, &o), memra__kc_out_get(k, k->gpu, c.a[1].weights, &o), &o, "weights");
    if (ai.n_diff_bits && !aw.note[0]) {
        snprintf(aw.note, sizeof aw.note, "%lld expert ids differ", (long long)ai.n_diff_bits);
        aw.max_ulp = INFINITY;
    }
    aw.guard_ok = aw.guard_ok && ai.guard_ok;
    if (!ai.guard_ok)
        snprintf(aw.note, sizeof aw.note, "%s", ai.note);
    memra__kc_finish(k, L, &aw);
    memra__kc_bench(k, L, rt_run, &c, k->gpu, 0);
}

/* ---- moe ------------------------------------------------------------------ */

typedef struct mo_case {
    memra_weight_t gate[2], up[2], down[2];
    memra_moe_args_t a[2];
} mo_case;

static memra_status_t mo_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->moe(be, &((mo_case *)c)->a[side]);
}

void memra__kc_moe_ex(kc *k, const char *name, memra_type_t tg, memra_type_t td, int64_t n, int64_t n_expert,
                      int64_t top_k, int64_t n_embd, int64_t n_ff, bool fused, bool scale, memra_act_t act, bool fast,
                      int dist)
{
    /* fast: x, weights and h in f16 on the tensor cores from 9 tokens on */
    const double tol = fast && n > 8 ? TOL_MOE_F16 : TOL_F32;
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "nmse", tol, "%lld tok, %lld experts top %lld, %lld->%lld, %s/%s%s%s%s%s", (long long)n,
                       (long long)n_expert, (long long)top_k, (long long)n_embd, (long long)n_ff, memra__kc_tname(tg),
                       memra__kc_tname(td), fused ? " gate_up" : "", scale ? " scaled" : "", fast ? " fast" : "",
                       dist == KC_MOE_SKEWED ? " skewed" : "");
    if (!L)
        return;
    mo_case c;
    memset(&c, 0, sizeof c);
    if (!memra__kc_weight(k, tg, n_embd, fused ? 2 * n_ff : n_ff, n_expert, 0, c.gate) ||
        (!fused && !memra__kc_weight(k, tg, n_embd, n_ff, n_expert, 0, c.up)) ||
        !memra__kc_weight(k, td, n_ff, n_embd, n_expert, 0, c.down))
        return;
    float *x = memra__kc_randf(k, (size_t)(n * n_embd), -1.0f, 1.0f), *w = memra__kc_randf(k, (size_t)(n * top_k), 0.05f, 0.5f);
    float *sc = memra__kc_randf(k, (size_t)n_expert, 0.5f, 2.0f);
    int32_t *ids = memra__kc_host(k, (size_t)(n * top_k) * 4);
    if (!x || !w || !sc || !ids)
        return;
    for (int64_t t = 0; t < n; t++) /* distinct experts per token, as route gives */
        for (int64_t j = 0; j < top_k; j++) {
            int32_t e;
            bool dup;
            do {
                if (dist == KC_MOE_SKEWED)
                    e = j == 0 ? 0 : (int32_t)(1 + memra__kc_int(k, top_k + 2 < n_expert ? top_k + 2 : n_expert - 1));
                else
                    e = (int32_t)memra__kc_int(k, n_expert);
                dup = false;
                for (int64_t i = 0; i < j; i++)
                    dup |= ids[t * top_k + i] == e;
            } while (dup);
            ids[t * top_k + j] = e;
        }
    void *xp[2], *wp[2], *sp[2], *ip[2];
    const kc_out o = {n, n_embd, n_embd};
    if (!memra__kc_both(k, x, (size_t)(n * n_embd) * 4, xp) || !memra__kc_both(k, w, (size_t)(n * top_k) * 4, wp) ||
        !memra__kc_both(k, sc, (size_t)n_expert * 4, sp) || !memra__kc_both(k, ids, (size_t)(n * top_k) * 4, ip))
        return;
    for (int s = 0; s < 2; s++) {
        c.a[s] = (memra_moe_args_t){.x = xp[s], .ids = ip[s], .weights = wp[s], .gate = fused ? NULL : &c.gate[s],
                                    .up = fused ? NULL : &c.up[s], .gate_up = fused ? &c.gate[s] : NULL,
                                    .down = &c.down[s], .expert_scale = scale ? sp[s] : NULL,
                                    .out = memra__kc_out_new(k, s ? k->gpu : k->cpu, &o, NULL), .n_tokens = n, .k = top_k,
                                    .n_embd = n_embd, .n_ff = n_ff, .act = act};
        if (!c.a[s].out)
            return;
    }
    /* bytes: each (token, slot)'s expert rows, or with the grouped GEMM
     * (fast prefill) every used expert's once */
    int64_t used = 0;
    for (int64_t e = 0; e < n_expert; e++)
        for (int64_t i = 0; i < n * top_k; i++)
            if (ids[i] == e) {
                used++;
                break;
            }
    const double per_expert = (double)(c.gate[1].nb2 + (fused ? 0 : c.up[1].nb2) + c.down[1].nb2);
    const kc_pair p = {c.a[0].out, c.a[1].out, &o, "out"};
    memra__kc_check_vs_cpu(k, L, fast ? k->fast : k->gpu, &p, 1, mo_run, &c,
                           per_expert * (double)(fast && n > 8 ? used : n * top_k));
}

void memra__kc_moe(kc *k, const char *name, memra_type_t tg, memra_type_t td, int64_t n, int64_t n_expert, int64_t top_k,
                   int64_t n_embd, int64_t n_ff, bool fused, bool scale, memra_act_t act)
{
    memra__kc_moe_ex(k, name, tg, td, n, n_expert, top_k, n_embd, n_ff, fused, scale, act, false, KC_MOE_UNIFORM);
}
