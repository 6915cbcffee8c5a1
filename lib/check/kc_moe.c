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

/* ---- router ------------------------------------------------------------- */

typedef struct ro_case {
    memra_weight_t r[2], g[2];
    memra_mm_args_t m[3];
    memra_route_args_t rt[3];
} ro_case;

static memra_status_t ro_run(void *c, memra__backend_t *be, int side)
{
    ro_case *r = c;
    return memra__router(be, &r->m[side], &r->rt[side]);
}

/* memra__router on one decode token: float32 router rows (and with SHARED
 * qwen35moe's one-row shared-expert gate after them) and the route of the
 * logits (on CUDA one launch whose last block routes, MEMRA_ROUTE_FUSE=1).
 * The logits, ids, weights (and gate) against the CPU and bit for bit
 * against the CUDA sequence (matmul_ex, then route). */
void memra__kc_router(kc *k, const char *name, int64_t n_embd, int64_t n_expert, int64_t top_k, bool shared)
{
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "nmse", TOL_F32, "router f32 %lld -> %lld%s, top %lld, 1 tok (ids exact)",
                       (long long)n_embd, (long long)n_expert, shared ? " + gate" : "", (long long)top_k);
    if (!L)
        return;
    ro_case c;
    memset(&c, 0, sizeof c);
    if (!memra__kc_weight(k, MEMRA_TYPE_F32, n_embd, n_expert, 1, 0, c.r) ||
        (shared && !memra__kc_weight(k, MEMRA_TYPE_F32, n_embd, 1, 1, 0, c.g)))
        return;
    float *x = memra__kc_randf(k, (size_t)n_embd, -1.0f, 1.0f);
    void *xp[2];
    if (!x || !memra__kc_both(k, x, (size_t)n_embd * 4, xp))
        return;
    const kc_out ol = {1, n_expert, n_expert}, og = {1, 1, 1}, ok = {1, top_k, top_k};
    float *lo[3], *so[3], *io[3], *wo[3];
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const int i = s ? 1 : 0;
        lo[s] = memra__kc_out_new(k, be, &ol, NULL);
        so[s] = shared ? memra__kc_out_new(k, be, &og, NULL) : NULL;
        io[s] = memra__kc_out_new(k, be, &ok, NULL);
        wo[s] = memra__kc_out_new(k, be, &ok, NULL);
        if (!lo[s] || (shared && !so[s]) || !io[s] || !wo[s])
            return;
        c.m[s] = (memra_mm_args_t){.x = xp[i], .ldx = n_embd, .n_rows = 1, .n_w = shared ? 2 : 1,
                                   .w = {&c.r[i], &c.g[i]}, .y = {lo[s], so[s]}, .ldy = {n_expert, 1}};
        c.rt[s] = (memra_route_args_t){.logits = lo[s], .ids = (int32_t *)io[s], .weights = wo[s], .n_tokens = 1,
                                       .n_expert = n_expert, .k = top_k, .norm = true};
    }
    const kc_fused_out fo[4] = {{lo[0], lo[1], lo[2], &ol, "logits"},
                                {io[0], io[1], io[2], &ok, "ids"},
                                {wo[0], wo[1], wo[2], &ok, "weights"},
                                {so[0], so[1], so[2], &og, "gate"}};
    memra__kc_check_fused(k, L, k->gpu, fo, shared ? 4 : 3, ro_run, &c,
                          (double)(n_embd * (n_expert + (shared ? 1 : 0)) * 4));
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

/* ---- fused moe (memra__moe: the moe_fused slot against the sequence) ------- */

/* The weights of a fused case, made once for all its token counts. */
typedef struct mf_weights {
    memra_weight_t gate[2], up[2], down[2], sh_gate[2], sh_up[2], sh_down[2];
    void *sc[2];
} mf_weights;

/* Sides: 0 cpu, 1 cuda (moe_fused), 2 cuda with moe_fused removed (the
 * sequence); the weights' side is 0 or 1. */
typedef struct mf_case {
    memra_moe_shared_t sh[3];
    memra_moe_args_t a[3];
} mf_case;

static memra_status_t mf_run(void *c, memra__backend_t *be, int side)
{
    return memra__moe(be, &((mf_case *)c)->a[side]);
}

static bool mf_make_weights(kc *k, mf_weights *w, const kc_moe_shape *m)
{
    memset(w, 0, sizeof *w);
    const size_t gp = m->gu_pad, dp = m->down_pad;
    if (!memra__kc_weight(k, m->tg, m->n_embd, m->gate_up ? 2 * m->n_ff : m->n_ff, m->n_expert, gp, w->gate) ||
        (!m->gate_up && !memra__kc_weight(k, m->tg, m->n_embd, m->n_ff, m->n_expert, gp, w->up)) ||
        !memra__kc_weight(k, m->td, m->n_ff, m->n_embd, m->n_expert, dp, w->down))
        return false;
    if (m->n_ff_shared) {
        const int64_t fs = m->n_ff_shared;
        if (!memra__kc_weight(k, m->tg, m->n_embd, fs, 1, gp, w->sh_gate) ||
            !memra__kc_weight(k, m->tg, m->n_embd, fs, 1, gp, w->sh_up) ||
            !memra__kc_weight(k, m->tsh, fs, m->n_embd, 1, dp, w->sh_down))
            return false;
    }
    float *sc = memra__kc_randf(k, (size_t)m->n_expert, 0.5f, 2.0f);
    return sc && memra__kc_both(k, sc, (size_t)m->n_expert * 4, w->sc);
}

/* Random inputs of an N-token call on every side: distinct expert ids per
 * token (BAD_TOKEN >= 0: that token's last slot gets the id n_expert, out
 * of range), x, routing weights and the shared expert's logits. */
static bool mf_inputs(kc *k, mf_case *c, const mf_weights *w, const kc_moe_shape *m, int64_t n, int64_t bad_token,
                      const kc_out *o)
{
    const int64_t top_k = m->top_k, n_embd = m->n_embd;
    float *x = memra__kc_randf(k, (size_t)(n * n_embd), -1.0f, 1.0f);
    float *wt = memra__kc_randf(k, (size_t)(n * top_k), 0.05f, 0.5f);
    float *lg = memra__kc_randf(k, (size_t)n, -3.0f, 3.0f);
    int32_t *ids = memra__kc_host(k, (size_t)(n * top_k) * 4);
    if (!x || !wt || !lg || !ids)
        return false;
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < top_k; j++) {
            int32_t e;
            bool dup;
            do {
                e = (int32_t)memra__kc_int(k, m->n_expert);
                dup = false;
                for (int64_t i = 0; i < j; i++)
                    dup |= ids[t * top_k + i] == e;
            } while (dup);
            ids[t * top_k + j] = e;
        }
    if (bad_token >= 0)
        ids[bad_token * top_k + top_k - 1] = (int32_t)m->n_expert;
    memset(c, 0, sizeof *c);
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const int i = s ? 1 : 0;
        memra_moe_args_t *a = &c->a[s];
        *a = (memra_moe_args_t){.x = memra__kc_put(k, be, x, (size_t)(n * n_embd) * 4),
                                .ids = memra__kc_put(k, be, ids, (size_t)(n * top_k) * 4),
                                .weights = memra__kc_put(k, be, wt, (size_t)(n * top_k) * 4),
                                .gate = m->gate_up ? NULL : &w->gate[i], .up = m->gate_up ? NULL : &w->up[i],
                                .gate_up = m->gate_up ? &w->gate[i] : NULL, .down = &w->down[i],
                                .expert_scale = m->scale ? w->sc[i] : NULL, .out = memra__kc_out_new(k, be, o, NULL),
                                .n_tokens = n, .k = top_k, .n_embd = n_embd, .n_ff = m->n_ff, .act = m->act};
        if (!a->x || !a->ids || !a->weights || !a->out)
            return false;
        if (m->n_ff_shared) {
            memra_moe_shared_t *sh = &c->sh[s];
            *sh = (memra_moe_shared_t){
                .gate = &w->sh_gate[i], .up = &w->sh_up[i], .down = &w->sh_down[i], .n_ff = m->n_ff_shared,
                .logit = memra__kc_put(k, be, lg, (size_t)n * 4),
                .ids_tmp = memra__kc_track(k, be, be->iface->alloc(be, (size_t)n * 4)),
                .w_tmp = memra__kc_track(k, be, be->iface->alloc(be, (size_t)n * 4)),
                .out_tmp = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(n * n_embd) * 4))};
            a->shared = sh;
            if (!sh->logit || !sh->ids_tmp || !sh->w_tmp || !sh->out_tmp)
                return false;
        }
    }
    return true;
}

void memra__kc_moe_fused(kc *k, const char *name, const kc_moe_shape *m, const int64_t *ns, int n_ns)
{
    mf_weights w;
    bool made = false;
    for (int i = 0; i < n_ns; i++) {
        const int64_t n = ns[i];
        char line[64];
        snprintf(line, sizeof line, "%s.n%lld", name, (long long)n);
        memra_kernel_check_line_t *L = memra__kc_line(
            k, line, "nmse", TOL_F32, "%lld tok, %lld experts top %lld, %lld->%lld, %s/%s%s%s%s%s%s%s",
            (long long)n, (long long)m->n_expert, (long long)m->top_k, (long long)m->n_embd, (long long)m->n_ff,
            memra__kc_tname(m->tg), memra__kc_tname(m->td), m->gate_up ? " gate_up" : "", m->scale ? " scaled" : "",
            m->act == MEMRA_ACT_GELU ? " gelu" : "", m->n_ff_shared ? " +shared" : "",
            m->gu_pad ? " gate/up rows padded" : "", m->down_pad ? " down rows padded" : "");
        if (!L)
            continue;
        if (!made && !mf_make_weights(k, &w, m))
            return;
        made = true;
        const kc_out o = {n, m->n_embd, m->n_embd};
        mf_case c;
        if (!mf_inputs(k, &c, &w, m, n, -1, &o))
            return;
        const kc_fused_out f = {c.a[0].out, c.a[1].out, c.a[2].out, &o, "out"};
        /* bytes: each (token, slot)'s expert rows, the shared expert's once */
        const double per_slot = (double)(w.gate[1].nb2 + (m->gate_up ? 0 : w.up[1].nb2) + w.down[1].nb2);
        const double per_sh =
            m->n_ff_shared ? (double)(w.sh_gate[1].nb2 + w.sh_up[1].nb2 + w.sh_down[1].nb2) : 0.0;
        memra__kc_check_fused(k, L, k->gpu, &f, 1, mf_run, &c, per_slot * (double)(n * m->top_k) + per_sh);
    }
}

/* NaNs of BUF's written region as one pattern: a poisoned row's payload is
 * the hardware's, compared only as NaN. */
static void mf_nan_canon(float *buf, const kc_out *o)
{
    for (int64_t r = 0; r < o->rows; r++)
        for (int64_t c = 0; c < o->cols; c++)
            if (isnan(buf[KC_GUARD + r * o->ld + c]))
                buf[KC_GUARD + r * o->ld + c] = NAN;
}

void memra__kc_moe_fused_bad_id(kc *k, const char *name, const kc_moe_shape *mp)
{
    const kc_moe_shape m = *mp;
    const int64_t n = 3, bad = 1;
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "exact", 0,
                       "%lld tok, %lld experts top %lld, %lld->%lld, %s/%s%s, token %lld's expert id out of "
                       "range: a NaN row",
                       (long long)n, (long long)m.n_expert, (long long)m.top_k, (long long)m.n_embd,
                       (long long)m.n_ff, memra__kc_tname(m.tg), memra__kc_tname(m.td),
                       m.n_ff_shared ? " +shared" : "", (long long)bad);
    if (!L)
        return;
    mf_weights w;
    const kc_out o = {n, m.n_embd, m.n_embd};
    mf_case c;
    if (!mf_make_weights(k, &w, &m) || !mf_inputs(k, &c, &w, &m, n, bad, &o))
        return;
    /* the GPU sides only: the CPU rejects the id */
    memra__backend_i seq_i = *k->gpu->iface;
    seq_i.moe_fused = NULL;
    memra__backend_t seq = *k->gpu;
    seq.iface = &seq_i;
    kc_acc acc;
    memra__kc_acc_init(&acc);
    if (k->gpu->iface->host_memory) { /* the CPU as the device (MEMRA_KERNEL_CHECK_CPU=1): both reject it */
        const memra_status_t s1 = mf_run(&c, k->gpu, 1), s2 = mf_run(&c, &seq, 2);
        if (s1 != MEMRA_E_RANGE || s2 != MEMRA_E_RANGE) {
            snprintf(acc.note, sizeof acc.note, "statuses %d and %d, not MEMRA_E_RANGE", (int)s1, (int)s2);
            acc.n_diff_bits = 1;
        }
        memra__kc_finish(k, L, &acc);
        return;
    }
    memra_status_t st = mf_run(&c, k->gpu, 1);
    if (!st)
        st = mf_run(&c, &seq, 2);
    if (!st)
        st = k->gpu->iface->synchronize(k->gpu);
    if (st) {
        memra__kc_op_failed(k, L, "cuda", st);
        return;
    }
    float *got = memra__kc_out_get(k, k->gpu, c.a[1].out, &o), *ref = memra__kc_out_get(k, k->gpu, c.a[2].out, &o);
    int64_t finite = 0;
    if (got && ref) {
        for (int64_t i = 0; i < m.n_embd; i++)
            finite += !isnan(got[KC_GUARD + bad * m.n_embd + i]) + !isnan(ref[KC_GUARD + bad * m.n_embd + i]);
        mf_nan_canon(got, &o);
        mf_nan_canon(ref, &o);
    }
    memra__kc_cmp(&acc, ref, got, &o, "out");
    if (finite) {
        snprintf(acc.note, sizeof acc.note, "%lld elements of the bad token's rows not NaN", (long long)finite);
        acc.n_diff_bits += finite;
    }
    memra__kc_finish(k, L, &acc);
}
