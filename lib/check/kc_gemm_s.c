/* Kernel check cases: a batched fast step's matmuls (the CUDA skinny
 * tensor-core GEMM, cuda/gemm_s.cu). Each case runs on the fast engine
 * with the rows mode of a batched decode step set (memra__rows_batch):
 *   NAME      against the CPU reference within the f16 bound (x and the
 *             dequantized weights rounded to f16, float32 sums);
 *   NAME.inv  the N rows of one call against the same rows taken two (or
 *             three) at a time, bit for bit: a row does not depend on the other rows
 *             of its step (what keeps a sequence's logits independent of
 *             the batch it is decoded in). */
#include "kc.h"
#include "pipeline_impl.h" /* memra__set_rows_mode */

typedef struct gs_case {
    memra_mm_args_t a[2]; /* cpu, fast engine */
} gs_case;

static memra_status_t gs_run(void *c, memra__backend_t *be, int side)
{
    gs_case *g = c;
    if (side)
        memra__set_rows_mode(MEMRA__ROWS_BATCH);
    memra_status_t st = memra__matmul_ex(be, &g->a[side]);
    memra__set_rows_mode(MEMRA__ROWS_ANY);
    return st;
}

static bool gs_side(kc *k, memra__backend_t *be, memra_mm_args_t *a, const memra_mm_args_t *tmpl, memra_weight_t *w,
                    const kc_out *o, const float *init)
{
    *a = *tmpl;
    int64_t ne1_max = 0;
    for (int i = 0; i < a->n_w; i++) {
        a->w[i] = &w[i];
        a->ldy[i] = o[i].ld;
        if (!(a->y[i] = memra__kc_out_new(k, be, &o[i], i == 0 ? init : NULL)))
            return false;
        ne1_max = o[i].cols > ne1_max ? o[i].cols : ne1_max;
    }
    const int64_t ne0 = w[0].ne[0];
    a->x_tmp = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(a->n_rows * ne0) * 4));
    a->tmp[0] = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(a->n_rows * ne1_max) * 4));
    a->tmp[1] = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(a->n_rows * ne1_max) * 4));
    return a->x_tmp && a->tmp[0] && a->tmp[1];
}

void memra__kc_matmul_ex_gs(kc *k, const char *name, int n_w, const memra_type_t *t, int64_t ne0, const int64_t *ne1,
                            int64_t n_rows, bool norm, memra_mm_epi_t epi, memra_act_t act)
{
    const bool post = epi == MEMRA_MM_STORE && n_w == 4;
    const char *en = epi == MEMRA_MM_ADD ? " add" : epi == MEMRA_MM_GLU ? (act == MEMRA_ACT_GELU ? " geglu" : " swiglu") : "";
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "nmse", TOL_F16, "%s W[%lld..] x %d, %lld wide, %lld rows%s%s, batched fast",
                                                  memra__kc_tname(t[0]), (long long)ne1[0], n_w, (long long)ne0,
                                                  (long long)n_rows, norm ? " norm" : "", en);
    if (!L)
        return;
    memra__backend_t *gb = k->fast;
    gs_case c;
    memset(&c, 0, sizeof c);
    const int64_t ldx = ne0 + 8;
    void *xp[2], *np[2];
    if (!memra__kc_mm_inputs(k, n_rows, ldx, ne0, xp, np))
        return;
    memra_weight_t w[2][MEMRA_MM_MAX_W];
    kc_out o[MEMRA_MM_MAX_W];
    for (int i = 0; i < n_w; i++) {
        memra_weight_t wi[2];
        if (!memra__kc_weight(k, t[i], ne0, ne1[i], 1, 0, wi))
            return;
        w[0][i] = wi[0];
        w[1][i] = wi[1];
        o[i] = (kc_out){n_rows, ne1[i], ne1[i] + 5};
    }
    float *init = epi == MEMRA_MM_ADD ? memra__kc_randf(k, (size_t)(n_rows * (ne1[0] + 5)), -4.0f, 4.0f) : NULL;
    void *pb[2] = {NULL, NULL}, *pa[2] = {NULL, NULL};
    if (post && !memra__kc_mm_post(k, ne1[2], pb, pa))
        return;
    for (int s = 0; s < 2; s++) {
        memra_mm_args_t tm = {.x = xp[s], .ldx = ldx, .n_rows = n_rows, .norm = norm, .norm_w = np[s], .eps = 1e-6f,
                              .n_w = n_w, .epi = epi, .act = act};
        if (post) {
            tm.post[1] = MEMRA_EW_SIGMOID;
            tm.post[2] = MEMRA_EW_SOFTPLUS_MUL;
            tm.post_b[2] = pb[s];
            tm.post_aux[2] = pa[s];
        }
        if (!gs_side(k, s ? gb : k->cpu, &c.a[s], &tm, w[s], o, init))
            return;
    }
    /* the pairs' call before the bench reruns the full one (ADD accumulates) */
    memra_mm_args_t pr;
    if (!gs_side(k, gb, &pr, &c.a[1], w[1], o, init))
        return;
    if (!memra__kc_run2(k, L, gs_run, &c, gb))
        return;
    memra_status_t st = MEMRA_OK;
    memra__set_rows_mode(MEMRA__ROWS_BATCH);
    /* pairs, the last group three rows when N is odd (an ADD adds once) */
    for (int64_t r0 = 0; !st && r0 < n_rows;) {
        const int64_t nr = n_rows - r0 == 3 ? 3 : 2;
        memra_mm_args_t two = pr;
        two.x = (const float *)xp[1] + r0 * ldx;
        two.n_rows = nr;
        for (int i = 0; i < n_w; i++)
            two.y[i] = pr.y[i] + r0 * o[i].ld;
        st = memra__matmul_ex(gb, &two);
        r0 += nr;
    }
    memra__set_rows_mode(MEMRA__ROWS_ANY);
    if (!st)
        st = gb->iface->synchronize(gb);
    const int n_out = epi == MEMRA_MM_STORE ? n_w : 1;
    kc_pair p[MEMRA_MM_MAX_W];
    for (int i = 0; i < n_out; i++)
        p[i] = (kc_pair){c.a[0].y[i], c.a[1].y[i], &o[i], "y"};
    char inv[96];
    snprintf(inv, sizeof inv, "%s.inv", name);
    kc_pair q[MEMRA_MM_MAX_W];
    for (int i = 0; i < n_out; i++)
        q[i] = (kc_pair){c.a[1].y[i], pr.y[i], &o[i], "y"};
    /* vs the CPU first (its bench reruns the call), then row invariance */
    double bytes = 0;
    for (int i = 0; i < n_w; i++)
        bytes += (double)(w[1][i].nb1 * (size_t)ne1[i]);
    memra__kc_finish_cpu_pairs(k, L, gb, p, n_out);
    memra_kernel_check_line_t *LI = memra__kc_line(k, inv, "exact", 0, "%lld rows in one call vs 2 (3) at a time, batched fast", (long long)n_rows);
    if (LI)
        memra__kc_finish_exact(k, LI, st, q, n_out);
    memra__kc_bench(k, L, gs_run, &c, gb, bytes);
}
