/* Kernel check cases: matmul (decode, rows, prefill, row invariance,
 * mapped host output), the fused matmul_ex, get_rows. */
#include "kc.h"
#include "pipeline_impl.h" /* memra__set_rows_mode */

/* ---- matmul ------------------------------------------------------------------ */

typedef struct mm_case {
    memra_weight_t w[2];
    const float *x[2];
    float *y[2];
    int64_t ldx, ldy, n_rows;
} mm_case;

static memra_status_t mm_run(void *c, memra__backend_t *be, int side)
{
    mm_case *m = c;
    return be->iface->matmul(be, &m->w[side], m->x[side], m->ldx, m->y[side], m->ldy, m->n_rows);
}

void memra__kc_matmul(kc *k, const char *name, memra_type_t t, int64_t ne0, int64_t ne1, int64_t n_rows, bool fast,
                      int64_t pad, size_t nb1_pad)
{
    const bool bf = getenv("MEMRA_FAST_GEMM") && strcmp(getenv("MEMRA_FAST_GEMM"), "bf16") == 0;
    const double tol = fast && n_rows > 8 ? (bf ? TOL_BF16 : TOL_F16) : TOL_F32;
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "nmse", tol, "%s W[%lld x %lld] x %lld rows%s%s", memra__kc_tname(t), (long long)ne1, (long long)ne0,
                (long long)n_rows, fast ? " fast" : " exact", pad || nb1_pad ? " strided" : "");
    if (!L)
        return;
    mm_case c = {.ldx = ne0 + pad, .ldy = ne1 + pad, .n_rows = n_rows};
    void *xp[2];
    float *x = memra__kc_randf(k, (size_t)(n_rows * c.ldx), -1.0f, 1.0f);
    const kc_out o = {n_rows, ne1, c.ldy};
    if (!x || !memra__kc_weight(k, t, ne0, ne1, 1, nb1_pad, c.w) || !memra__kc_both(k, x, (size_t)(n_rows * c.ldx) * 4, xp))
        return;
    c.x[0] = xp[0];
    c.x[1] = xp[1];
    c.y[0] = memra__kc_out_new(k, k->cpu, &o, NULL);
    c.y[1] = memra__kc_out_new(k, k->gpu, &o, NULL);
    if (!c.y[0] || !c.y[1])
        return;
    memra__backend_t *gb = fast ? k->fast : k->gpu;
    const kc_pair p = {c.y[0], c.y[1], &o, "y"};
    memra__kc_check_vs_cpu(k, L, gb, &p, 1, mm_run, &c, (double)(c.w[1].nb1 * (size_t)ne1));
}

/* Exact mode: N rows in one call equal N one-row calls bit for bit (what
 * makes GPU prefill chunk-invariant). */
void memra__kc_matmul_rowinv(kc *k, const char *name, memra_type_t t, int64_t ne0, int64_t ne1, int64_t n_rows)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "exact", 0, "%s W[%lld x %lld], %lld rows vs 1+1+..",
                                           memra__kc_tname(t), (long long)ne1, (long long)ne0, (long long)n_rows);
    if (!L)
        return;
    memra_weight_t w[2];
    float *x = memra__kc_randf(k, (size_t)(n_rows * ne0), -1.0f, 1.0f);
    const kc_out o = {n_rows, ne1, ne1};
    if (!x || !memra__kc_weight(k, t, ne0, ne1, 1, 0, w))
        return;
    const float *xd = memra__kc_put(k, k->gpu, x, (size_t)(n_rows * ne0) * 4);
    float *ya = memra__kc_out_new(k, k->gpu, &o, NULL), *yb = memra__kc_out_new(k, k->gpu, &o, NULL);
    if (!xd || !ya || !yb)
        return;
    memra_status_t st = k->gpu->iface->matmul(k->gpu, &w[1], xd, ne0, ya, ne1, n_rows);
    for (int64_t r = 0; !st && r < n_rows; r++)
        st = k->gpu->iface->matmul(k->gpu, &w[1], xd + r * ne0, ne0, yb + r * ne1, ne1, 1);
    const kc_pair p = {yb, ya, &o, "y"};
    memra__kc_finish_exact(k, L, st, &p, 1);
}

/* A decode matvec into page-locked host memory that the backend maps
 * (host_map: the forward's head writes a decode step's logits there) equals
 * the same matvec into device memory bit for bit, guards included. The
 * CUDA backend writes it with the Q8_0 fast path's grouped stores, or
 * through device memory and a copy. CAP > 0: gemma4's head, matmul_ex with
 * the SOFTCAP post op (s = CAP; into device memory the matmul, then the
 * elementwise op; into mapped memory the grouped stores apply it). */
void memra__kc_matmul_mapped(kc *k, memra_type_t t, int64_t ne0, int64_t ne1, float cap)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, "matmul.mapped", "exact", 0, "%s W[%lld x %lld] into mapped host memory%s",
                                           memra__kc_tname(t), (long long)ne1, (long long)ne0, cap > 0.0f ? ", softcap" : "");
    if (!L)
        return;
    memra__backend_t *be = k->gpu;
    memra_weight_t w[2];
    float *x = memra__kc_randf(k, (size_t)ne0, -1.0f, 1.0f);
    const kc_out o = {1, ne1, ne1};
    const size_t n = memra__kc_total(&o);
    if (!x || !memra__kc_weight(k, t, ne0, ne1, 1, 0, w))
        return;
    const float *xd = memra__kc_put(k, be, x, (size_t)ne0 * 4);
    float *yd = memra__kc_out_new(k, be, &o, NULL);
    float *pin = memra_engine_host_alloc(k->e_gpu, n * sizeof *pin);
    if (!xd || !yd || !pin) {
        memra_host_free(pin);
        memra__kc_op_failed(k, L, "cuda", MEMRA_E_NOMEM);
        return;
    }
    const uint32_t sent = KC_SENTINEL;
    for (size_t i = 0; i < n; i++)
        memcpy(&pin[i], &sent, sizeof sent);
    float *ym = be->iface->host_map ? be->iface->host_map(be, pin, n * sizeof *pin) : NULL;
    memra_mm_args_t a = {.x = xd, .ldx = ne0, .n_rows = 1, .n_w = 1, .w = {&w[1]}, .y = {yd}, .ldy = {ne1},
                         .post = {MEMRA_EW_SOFTCAP}, .post_s = {cap}};
    memra_status_t st = cap > 0.0f ? memra__matmul_ex(be, &a) : be->iface->matmul(be, &w[1], xd, ne0, yd, ne1, 1);
    if (!st && ym) {
        a.y[0] = ym + KC_GUARD;
        st = cap > 0.0f ? memra__matmul_ex(be, &a) : be->iface->matmul(be, &w[1], xd, ne0, ym + KC_GUARD, ne1, 1);
    }
    if (!st)
        st = be->iface->synchronize(be);
    if (st) {
        memra_host_free(pin);
        memra__kc_op_failed(k, L, "cuda", st);
        return;
    }
    kc_acc acc;
    memra__kc_acc_init(&acc);
    if (ym)
        memra__kc_cmp(&acc, memra__kc_out_get(k, be, yd, &o), pin, &o, "y");
    else
        snprintf(acc.note, sizeof acc.note, "not mapped (MEMRA_MAP_LOGITS=0?): forward downloads");
    memra_host_free(pin);
    memra__kc_finish(k, L, &acc);
}

/* ---- fused matmuls (matmul_ex) ---------------------------------------------------- */

typedef struct mx_case {
    memra_mm_args_t a[3]; /* cpu, cuda fused, cuda sequence */
    memra__backend_t *gpu;      /* the engine the cuda side runs on */
} mx_case;

static memra_status_t mx_run(void *c, memra__backend_t *be, int side)
{
    mx_case *m = c;
    return memra__matmul_ex(be, &m->a[side]);
}

/* matmul_ex of N_W weights (types T[i], NE1[i] rows, NE0 wide) over N_ROWS
 * x rows: against the CPU reference (its unfused sequence) within the
 * matmul bound, and the CUDA fused path against the CUDA unfused sequence
 * bit for bit (what lets the forwards fuse without changing a logit). */
void memra__kc_matmul_ex(kc *k, const char *name, int n_w, const memra_type_t *t, int64_t ne0, const int64_t *ne1,
                         int64_t n_rows, bool norm, memra_mm_epi_t epi, memra_act_t act, bool fast, bool conv)
{
    const int64_t K = 4; /* conv: weight 0's outputs through qwen35's causal conv + SiLU, checked with its state */
    /* four STORE weights: the middle two get qwen35's sigmoid / softplus·a post ops (its order) */
    const bool post = epi == MEMRA_MM_STORE && n_w == 4;
    const bool bf = getenv("MEMRA_FAST_GEMM") && strcmp(getenv("MEMRA_FAST_GEMM"), "bf16") == 0;
    const double tol = fast && n_rows > 8 ? (bf ? TOL_BF16 : TOL_F16) : TOL_F32;
    const char *en = epi == MEMRA_MM_ADD ? " add" : epi == MEMRA_MM_GLU ? (act == MEMRA_ACT_GELU ? " geglu" : " swiglu") : "";
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "nmse", tol, "%s%s W[%lld..] x %d, %lld wide, %lld rows%s%s%s%s%s",
                                           memra__kc_tname(t[0]), n_w > 1 && t[n_w - 1] != t[0] ? "+" : "", (long long)ne1[0],
                                           n_w, (long long)ne0, (long long)n_rows, norm ? " norm" : "", en,
                                           post ? " sigmoid/softplus" : "", conv ? " conv" : "", fast ? " fast" : "");
    if (!L)
        return;
    memra__backend_t *gb = fast ? k->fast : k->gpu;
    mx_case c;
    memset(&c, 0, sizeof c);
    const int64_t ldx = ne0 + 3;
    void *xp[2], *np[2];
    if (!memra__kc_mm_inputs(k, n_rows, ldx, ne0, xp, np))
        return;
    memra_weight_t w[MEMRA_MM_MAX_W][2];
    kc_out o[MEMRA_MM_MAX_W];
    int64_t ne1_max = 0;
    for (int i = 0; i < n_w; i++) {
        if (!memra__kc_weight(k, t[i], ne0, ne1[i], 1, 0, w[i]))
            return;
        o[i] = (kc_out){n_rows, ne1[i], ne1[i] + (conv && i == 0 ? 0 : 5)};
        if (ne1[i] > ne1_max)
            ne1_max = ne1[i];
    }
    const kc_out os = {1, ne1[0] * (K - 1), ne1[0] * (K - 1)};
    float *cw = conv ? memra__kc_randf(k, (size_t)(ne1[0] * K), -0.5f, 0.5f) : NULL;
    float *cst = conv ? memra__kc_randf(k, (size_t)(ne1[0] * (K - 1)), -1.0f, 1.0f) : NULL;
    void *cwp[2] = {NULL, NULL};
    if (conv && (!cw || !cst || !memra__kc_both(k, cw, (size_t)(ne1[0] * K) * 4, cwp)))
        return;
    float *init = epi == MEMRA_MM_ADD ? memra__kc_randf(k, (size_t)(n_rows * ne1[0]), -4.0f, 4.0f) : NULL;
    void *pb[2] = {NULL, NULL}, *pa[2] = {NULL, NULL};
    if (post && !memra__kc_mm_post(k, ne1[2], pb, pa))
        return;
    for (int s = 0; s < 2; s++) {
        memra__backend_t *be = s ? gb : k->cpu;
        memra_mm_args_t *a = &c.a[s];
        a->x = xp[s];
        a->ldx = ldx;
        a->n_rows = n_rows;
        a->norm = norm;
        a->norm_w = np[s];
        a->eps = 1e-6f;
        a->n_w = n_w;
        a->epi = epi;
        a->act = act;
        if (conv) {
            a->conv_w = cwp[s];
            a->conv_k = K;
            if (!(a->conv_state = memra__kc_out_new(k, be, &os, cst)))
                return;
        }
        if (post) {
            a->post[1] = MEMRA_EW_SIGMOID;
            a->post[2] = MEMRA_EW_SOFTPLUS_MUL;
            a->post_b[2] = pb[s];
            a->post_aux[2] = pa[s];
        }
        for (int i = 0; i < n_w; i++) {
            a->w[i] = &w[i][s];
            a->ldy[i] = o[i].ld;
            if (!(a->y[i] = memra__kc_out_new(k, be, &o[i], i == 0 ? init : NULL)))
                return;
        }
        a->x_tmp = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(n_rows * ne0) * 4));
        a->tmp[0] = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(n_rows * ne1_max) * 4));
        a->tmp[1] = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(n_rows * ne1_max) * 4));
        if (!a->x_tmp || !a->tmp[0] || !a->tmp[1])
            return;
    }
    memra_mm_args_t *u = &c.a[2];
    *u = c.a[1];
    for (int i = 0; i < n_w; i++)
        if (!(u->y[i] = memra__kc_out_new(k, gb, &o[i], i == 0 ? init : NULL)))
            return;
    if (conv && !(u->conv_state = memra__kc_out_new(k, gb, &os, cst)))
        return;
    kc_fused_out f[MEMRA_MM_MAX_W + 1];
    int n_f = 0;
    const int n_out = epi == MEMRA_MM_STORE ? n_w : 1;
    for (int i = 0; i < n_out; i++)
        f[n_f++] = (kc_fused_out){c.a[0].y[i], c.a[1].y[i], u->y[i], &o[i], "y"};
    if (conv)
        f[n_f++] = (kc_fused_out){c.a[0].conv_state, c.a[1].conv_state, u->conv_state, &os, "conv state"};
    double bytes = 0;
    for (int i = 0; i < n_w; i++)
        bytes += (double)(w[i][1].nb1 * (size_t)ne1[i]);
    memra__kc_check_fused(k, L, gb, f, n_f, mx_run, &c, bytes);
}

/* One weight (type T, NE1 rows, NE0 wide) over N_ROWS x rows with the post
 * op OP, as gemma4 calls it: GEGLU (the per-layer gate), b = a per-row
 * vector (rows apart as a carry's per-layer inputs); SOFTCAP (the head)
 * with s = 4 after the RMS norm of x. Against the CPU within the matmul
 * bound and the CUDA sequence (matmul, then the elementwise op) bit for
 * bit. */
void memra__kc_matmul_ex_post(kc *k, const char *name, memra_ew_op_t op, memra_type_t t, int64_t ne0, int64_t ne1,
                              int64_t n_rows, bool fast)
{
    const double tol = fast && n_rows > 8 ? TOL_F16 : TOL_F32;
    const bool cap = op == MEMRA_EW_SOFTCAP;
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "nmse", tol, "%s W[%lld] x 1, %lld wide, %lld rows, %s post%s",
                                                  memra__kc_tname(t), (long long)ne1, (long long)ne0, (long long)n_rows,
                                                  cap ? "norm, softcap" : "geglu", fast ? " fast" : "");
    if (!L)
        return;
    memra__backend_t *gb = fast ? k->fast : k->gpu;
    mx_case c;
    memset(&c, 0, sizeof c);
    const int64_t ldx = ne0 + 3, bs = ne1 + 7;
    void *xp[2], *np[2], *bp[2] = {NULL, NULL};
    memra_weight_t w[2];
    const kc_out o = {n_rows, ne1, ne1 + 5};
    float *b = cap ? NULL : memra__kc_randf(k, (size_t)(n_rows * bs), -2.0f, 2.0f);
    if (!memra__kc_mm_inputs(k, n_rows, ldx, ne0, xp, np) || !memra__kc_weight(k, t, ne0, ne1, 1, 0, w) ||
        (!cap && (!b || !memra__kc_both(k, b, (size_t)(n_rows * bs) * 4, bp))))
        return;
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? gb : k->cpu;
        const int i = s ? 1 : 0;
        c.a[s] = (memra_mm_args_t){.x = xp[i], .ldx = ldx, .n_rows = n_rows, .norm = cap, .norm_w = np[i], .eps = 1e-6f,
                                   .n_w = 1, .w = {&w[i]}, .ldy = {o.ld}, .post = {op}, .post_b = {bp[i]},
                                   .post_bs = {cap ? 0 : bs}, .post_s = {cap ? 4.0f : 0.0f}};
        if (!(c.a[s].y[0] = memra__kc_out_new(k, be, &o, NULL)))
            return;
        if (cap && !(c.a[s].x_tmp = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(n_rows * ne0) * 4))))
            return;
    }
    const kc_fused_out f = {c.a[0].y[0], c.a[1].y[0], c.a[2].y[0], &o, "y"};
    memra__kc_check_fused(k, L, gb, &f, 1, mx_run, &c, (double)(w[1].nb1 * (size_t)ne1));
}

/* matmul_ex with a pre step, as gemma4's dense layers call it: x = add +
 * rms(a, w) (* SCALE) into x, then Q8_0 weights over x, either the GeGLU
 * pair (NE1 rows each, normalized x) or the per-layer gate (GEGLU post op
 * with a per-row vector, x as it is). One decode row; against the CPU and
 * the CUDA sequence (the norm_ex launch, then the matmul_ex) bit for bit,
 * both outputs (y and the pre step's x). The CUDA backend runs the pre
 * step as that sequence (its fused form was removed, docs/CUDA.md), so
 * the CPU comparison is what can fail here. */
void memra__kc_matmul_ex_pre(kc *k, const char *name, int64_t ne0, int64_t ne1, bool glu, float scale)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "nmse", TOL_F32, "q8_0 W[%lld] x %d, %lld wide, pre rms%s%s",
                                                  (long long)ne1, glu ? 2 : 1, (long long)ne0,
                                                  scale != 1.0f ? " scaled" : "", glu ? " norm geglu" : " geglu post");
    if (!L)
        return;
    mx_case c;
    memset(&c, 0, sizeof c);
    memra_norm_args_t pre[3];
    memra_weight_t w[2][2];
    const kc_out o = {1, ne1, ne1}, ox = {1, ne0, ne0};
    float *a = memra__kc_randf(k, (size_t)ne0, -2.0f, 2.0f), *r = memra__kc_randf(k, (size_t)ne0, -4.0f, 4.0f);
    float *pw = memra__kc_randf(k, (size_t)ne0, 0.5f, 1.5f), *nw = memra__kc_randf(k, (size_t)ne0, 0.5f, 1.5f);
    float *b = memra__kc_randf(k, (size_t)ne1, -2.0f, 2.0f);
    void *pwp[2], *nwp[2], *bp[2];
    if (!a || !r || !pw || !nw || !b || !memra__kc_weight(k, MEMRA_TYPE_Q8_0, ne0, ne1, 1, 0, w[0]) ||
        (glu && !memra__kc_weight(k, MEMRA_TYPE_Q8_0, ne0, ne1, 1, 0, w[1])) ||
        !memra__kc_both(k, pw, (size_t)ne0 * 4, pwp) || !memra__kc_both(k, nw, (size_t)ne0 * 4, nwp) ||
        !memra__kc_both(k, b, (size_t)ne1 * 4, bp))
        return;
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const int i = s ? 1 : 0;
        /* every side its own rows: the sequence norms a in place (tmp) */
        float *ad = memra__kc_put(k, be, a, (size_t)ne0 * 4), *rd = memra__kc_put(k, be, r, (size_t)ne0 * 4);
        float *x = memra__kc_out_new(k, be, &ox, NULL), *y = memra__kc_out_new(k, be, &o, NULL);
        float *xt = memra__kc_track(k, be, be->iface->alloc(be, (size_t)ne0 * 4));
        float *t0 = memra__kc_track(k, be, be->iface->alloc(be, (size_t)ne1 * 4));
        float *t1 = memra__kc_track(k, be, be->iface->alloc(be, (size_t)ne1 * 4));
        if (!ad || !rd || !x || !y || !xt || !t0 || !t1)
            return;
        pre[s] = (memra_norm_args_t){.x = ad, .xs = ne0, .w = pwp[i], .eps = 1e-6f, .add = rd, .adds = ne0,
                                     .scale = scale, .y = x, .ys = ne0, .rows = 1, .dim = ne0, .tmp = ad};
        c.a[s] = (memra_mm_args_t){.x = x, .ldx = ne0, .n_rows = 1, .n_w = glu ? 2 : 1, .w = {&w[0][i], &w[1][i]},
                                   .y = {y}, .ldy = {ne1}, .x_tmp = xt, .tmp = {t0, t1}, .pre = &pre[s]};
        if (glu) {
            c.a[s].norm = true;
            c.a[s].norm_w = nwp[i];
            c.a[s].eps = 1e-6f;
            c.a[s].epi = MEMRA_MM_GLU;
            c.a[s].act = MEMRA_ACT_GELU;
        } else {
            c.a[s].post[0] = MEMRA_EW_GEGLU;
            c.a[s].post_b[0] = bp[i];
        }
    }
    const kc_fused_out f[2] = {{c.a[0].y[0], c.a[1].y[0], c.a[2].y[0], &o, "y"},
                               {c.a[0].x, c.a[1].x, c.a[2].x, &ox, "pre y"}};
    memra__kc_check_fused(k, L, k->gpu, f, 2, mx_run, &c, (double)(w[0][1].nb1 * (size_t)ne1 * (glu ? 2 : 1)));
}

/* A batched decode step's fused matmul (qwen35's shapes and epilogues):
 * N_ROWS rows in one call equal N_ROWS one-row calls bit for bit, on the
 * engine K->GPU (exact) or K->FAST, which batched decode rows run on. The
 * CUDA backend takes the rows in passes of a batched kernel (Q8_0:
 * cuda/mmv_q8b.cuh) and one row through the one-row kernels. ROWS_MODE
 * (MEMRA__ROWS_*, backend.h) is set for the N-row call: with
 * MEMRA__ROWS_EXACT, an exact batched step's, weights of at most 8 MiB
 * run one x row a block column (cuda/ops_matmul.cu, batch_cols). */
void memra__kc_matmul_ex_rowinv(kc *k, const char *name, int n_w, const memra_type_t *t, int64_t ne0,
                                const int64_t *ne1, int64_t n_rows, bool norm, memra_mm_epi_t epi, memra_act_t act,
                                int rows_mode)
{
    const bool post = epi == MEMRA_MM_STORE && n_w == 4;
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "exact", 0, "%s W[%lld..] x %d, %lld wide, %lld rows%s vs 1+1+..%s%s",
                       memra__kc_tname(t[0]), (long long)ne1[0], n_w, (long long)ne0, (long long)n_rows,
                       rows_mode == MEMRA__ROWS_EXACT ? " (a step's)" : "", norm ? " norm" : "",
                       epi == MEMRA_MM_ADD ? " add" : epi == MEMRA_MM_GLU ? " glu" : "");
    if (!L)
        return;
    memra__backend_t *be = k->gpu;
    const int64_t ldx = ne0 + 4;
    float *x = memra__kc_randf(k, (size_t)(n_rows * ldx), -1.0f, 1.0f);
    float *nw = memra__kc_randf(k, (size_t)ne0, 0.5f, 1.5f);
    const float *xd = x ? memra__kc_put(k, be, x, (size_t)(n_rows * ldx) * 4) : NULL;
    const float *nwd = nw ? memra__kc_put(k, be, nw, (size_t)ne0 * 4) : NULL;
    if (!xd || !nwd)
        return;
    memra_weight_t w[MEMRA_MM_MAX_W][2];
    kc_out o[MEMRA_MM_MAX_W];
    int64_t ne1_max = 0;
    memra_mm_args_t a[2];
    memset(a, 0, sizeof a);
    for (int i = 0; i < n_w; i++) {
        if (!memra__kc_weight(k, t[i], ne0, ne1[i], 1, 0, w[i]))
            return;
        o[i] = (kc_out){n_rows, ne1[i], ne1[i] + 3};
        ne1_max = ne1[i] > ne1_max ? ne1[i] : ne1_max;
    }
    float *init = epi == MEMRA_MM_ADD ? memra__kc_randf(k, (size_t)(n_rows * (ne1[0] + 3)), -4.0f, 4.0f) : NULL;
    const float *pb = NULL, *pa = NULL;
    if (post) {
        float *b = memra__kc_randf(k, (size_t)ne1[2], -2.0f, 2.0f), *aux = memra__kc_randf(k, (size_t)ne1[2], -3.0f, -0.1f);
        pb = b ? memra__kc_put(k, be, b, (size_t)ne1[2] * 4) : NULL;
        pa = aux ? memra__kc_put(k, be, aux, (size_t)ne1[2] * 4) : NULL;
        if (!pb || !pa)
            return;
    }
    for (int s = 0; s < 2; s++) {
        memra_mm_args_t *m = &a[s];
        *m = (memra_mm_args_t){.x = xd, .ldx = ldx, .n_rows = n_rows, .norm = norm, .norm_w = nwd, .eps = 1e-6f,
                               .n_w = n_w, .epi = epi, .act = act};
        if (post) {
            m->post[1] = MEMRA_EW_SIGMOID;
            m->post[2] = MEMRA_EW_SOFTPLUS_MUL;
            m->post_b[2] = pb;
            m->post_aux[2] = pa;
        }
        for (int i = 0; i < n_w; i++) {
            m->w[i] = &w[i][1];
            m->ldy[i] = o[i].ld;
            if (!(m->y[i] = memra__kc_out_new(k, be, &o[i], i == 0 ? init : NULL)))
                return;
        }
        m->x_tmp = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(n_rows * ne0) * 4));
        m->tmp[0] = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(n_rows * ne1_max) * 4));
        m->tmp[1] = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(n_rows * ne1_max) * 4));
        if (!m->x_tmp || !m->tmp[0] || !m->tmp[1])
            return;
    }
    memra__set_rows_mode(rows_mode);
    memra_status_t st = memra__matmul_ex(be, &a[0]);
    memra__set_rows_mode(MEMRA__ROWS_ANY);
    for (int64_t r = 0; !st && r < n_rows; r++) {
        memra_mm_args_t one = a[1];
        one.x = xd + r * ldx;
        one.n_rows = 1;
        for (int i = 0; i < n_w; i++)
            one.y[i] = a[1].y[i] + r * o[i].ld;
        st = memra__matmul_ex(be, &one);
    }
    kc_pair p[MEMRA_MM_MAX_W];
    const int n_out = epi == MEMRA_MM_STORE ? n_w : 1;
    for (int i = 0; i < n_out; i++)
        p[i] = (kc_pair){a[1].y[i], a[0].y[i], &o[i], "y"};
    memra__kc_finish_exact(k, L, st, p, n_out);
}

/* ---- get_rows ------------------------------------------------------------------ */

typedef struct gr_case {
    memra_weight_t w[2];
    const int32_t *ids[2];
    float *y[2];
    int64_t n, ldy;
} gr_case;

static memra_status_t gr_run(void *c, memra__backend_t *be, int side)
{
    gr_case *g = c;
    return be->iface->get_rows(be, &g->w[side], g->ids[side], g->n, g->y[side], g->ldy);
}

void memra__kc_get_rows(kc *k, memra_type_t t, int64_t ne0, int64_t ne1, int64_t n)
{
    char name[48];
    snprintf(name, sizeof name, "get_rows.%s", memra__kc_tname(t));
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "exact", 0, "%s E[%lld x %lld], %lld ids", memra__kc_tname(t), (long long)ne1, (long long)ne0, (long long)n);
    if (!L)
        return;
    gr_case c = {.n = n, .ldy = ne0 + 3};
    int32_t *ids = memra__kc_host(k, (size_t)n * sizeof *ids);
    void *ip[2];
    const kc_out o = {n, ne0, c.ldy};
    if (!ids || !memra__kc_weight(k, t, ne0, ne1, 1, 0, c.w))
        return;
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)(i == 0 ? ne1 - 1 : memra__kc_int(k, ne1));
    if (!memra__kc_both(k, ids, (size_t)n * sizeof *ids, ip))
        return;
    c.ids[0] = ip[0];
    c.ids[1] = ip[1];
    c.y[0] = memra__kc_out_new(k, k->cpu, &o, NULL);
    c.y[1] = memra__kc_out_new(k, k->gpu, &o, NULL);
    if (!c.y[0] || !c.y[1])
        return;
    const kc_pair p = {c.y[0], c.y[1], &o, "y"};
    memra__kc_check_vs_cpu(k, L, k->gpu, &p, 1, gr_run, &c, (double)(n * ne0 * 4 + n * (int64_t)c.w[1].nb1));
}
