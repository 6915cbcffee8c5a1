/* Kernel check cases: the recurrent ops (causal conv, delta rule, the
 * fused Gated DeltaNet step). */
#include "kc.h"

/* ---- conv ----------------------------------------------------------------- */

typedef struct cv_case {
    memra_conv_args_t a[2];
} cv_case;

static memra_status_t cv_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->conv(be, &((cv_case *)c)->a[side]);
}

void memra__kc_conv(kc *k, const char *name, int64_t n_tokens, int64_t channels, int64_t K)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "ulp", TOL_ULP, "%lld tok x %lld ch, kernel %lld (out + state)",
                                           (long long)n_tokens, (long long)channels, (long long)K);
    if (!L)
        return;
    const int64_t xs = channels + 7;
    const kc_out oo = {n_tokens, channels, channels}, os = {channels, K - 1, K - 1};
    float *x = memra__kc_randf(k, (size_t)(n_tokens * xs), -2.0f, 2.0f), *w = memra__kc_randf(k, (size_t)(channels * K), -1.0f, 1.0f);
    float *st = memra__kc_randf(k, (size_t)(channels * (K - 1)), -2.0f, 2.0f);
    void *xp[2], *wp[2];
    if (!x || !w || !st || !memra__kc_both(k, x, (size_t)(n_tokens * xs) * 4, xp) || !memra__kc_both(k, w, (size_t)(channels * K) * 4, wp))
        return;
    cv_case c;
    for (int s = 0; s < 2; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        c.a[s] = (memra_conv_args_t){.x = xp[s], .x_stride = xs, .state = memra__kc_out_new(k, be, &os, st), .w = wp[s],
                                     .out = memra__kc_out_new(k, be, &oo, NULL), .n_tokens = n_tokens, .channels = channels,
                                     .kernel = K};
        if (!c.a[s].state || !c.a[s].out)
            return;
    }
    const kc_pair p[2] = {{c.a[0].out, c.a[1].out, &oo, "out"}, {c.a[0].state, c.a[1].state, &os, "state"}};
    memra__kc_check_vs_cpu(k, L, k->gpu, p, 2, cv_run, &c, (double)(n_tokens * channels * 8 + channels * (2 * K - 1) * 4));
}

/* ---- delta ---------------------------------------------------------------- */

typedef struct dl_case {
    memra_delta_args_t a[2];
} dl_case;

static memra_status_t dl_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->delta(be, &((dl_case *)c)->a[side]);
}

/* Inputs as qwen35 feeds them: L2-normed q/k heads, log decay <= 0,
 * beta in (0, 1). Row strides wider than the rows. */
static bool dl_inputs(kc *k, int64_t n, int64_t n_k, int64_t n_v, int64_t d, float **qk, float **v, float **g,
                      float **b, float **state)
{
    const int64_t qks = 2 * n_k * d + 4, vs = n_v * d + 4, gs = n_v + 2;
    *qk = memra__kc_randf(k, (size_t)(n * qks), -1.0f, 1.0f);
    *v = memra__kc_randf(k, (size_t)(n * vs), -1.0f, 1.0f);
    *g = memra__kc_randf(k, (size_t)(n * gs), -1.5f, 0.0f);
    *b = memra__kc_randf(k, (size_t)(n * gs), 0.05f, 0.95f);
    *state = memra__kc_randf(k, (size_t)(n_v * d * d), -0.1f, 0.1f);
    if (!*qk || !*v || !*g || !*b || !*state)
        return false;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < 2 * n_k; h++) {
            float *p = *qk + t * qks + h * d;
            double s = 0;
            for (int64_t i = 0; i < d; i++)
                s += (double)p[i] * p[i];
            for (int64_t i = 0; i < d; i++)
                p[i] = (float)(p[i] / sqrt(s));
        }
    return true;
}

/* FAST: the GPU side on the fast engine (from 9 tokens on, d 128 or 256:
 * the float32 warp-per-row kernel of cuda/ops_ssm.cu). */
static void delta_case(kc *k, const char *name, int64_t n, int64_t n_k, int64_t n_v, int64_t d, bool fast)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "nmse", TOL_F32, "%lld tok, %lld k / %lld v heads x %lld (out + state)%s",
                                                  (long long)n, (long long)n_k, (long long)n_v, (long long)d, fast ? " fast" : "");
    if (!L)
        return;
    float *qk, *v, *g, *b, *state;
    if (!dl_inputs(k, n, n_k, n_v, d, &qk, &v, &g, &b, &state))
        return;
    const int64_t qks = 2 * n_k * d + 4, vs = n_v * d + 4, gs = n_v + 2;
    const kc_out oo = {n, n_v * d, n_v * d}, os = {n_v, d * d, d * d};
    void *qp[2], *vp[2], *gp[2], *bp[2];
    if (!memra__kc_both(k, qk, (size_t)(n * qks) * 4, qp) || !memra__kc_both(k, v, (size_t)(n * vs) * 4, vp) ||
        !memra__kc_both(k, g, (size_t)(n * gs) * 4, gp) || !memra__kc_both(k, b, (size_t)(n * gs) * 4, bp))
        return;
    dl_case c;
    for (int s = 0; s < 2; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu; /* the fast engine runs on the same device memory */
        c.a[s] = (memra_delta_args_t){.q = qp[s], .k = (float *)qp[s] + n_k * d, .v = vp[s], .g = gp[s], .beta = bp[s],
                                      .qk_stride = qks, .v_stride = vs, .gb_stride = gs,
                                      .state = memra__kc_out_new(k, be, &os, state), .out = memra__kc_out_new(k, be, &oo, NULL),
                                      .n_tokens = n, .n_k = n_k, .n_v = n_v, .d = d, .scale = 1.0f / sqrtf((float)d)};
        if (!c.a[s].state || !c.a[s].out)
            return;
    }
    const kc_pair p[2] = {{c.a[0].out, c.a[1].out, &oo, "out"}, {c.a[0].state, c.a[1].state, &os, "state"}};
    memra__kc_check_vs_cpu(k, L, fast ? k->fast : k->gpu, p, 2, dl_run, &c, (double)(2 * n_v * d * d * 4));
}

void memra__kc_delta(kc *k, const char *name, int64_t n, int64_t n_k, int64_t n_v, int64_t d)
{
    delta_case(k, name, n, n_k, n_v, d, false);
}

void memra__kc_delta_fast(kc *k, const char *name, int64_t n, int64_t n_k, int64_t n_v, int64_t d)
{
    delta_case(k, name, n, n_k, n_v, d, true);
}

/* N tokens in one call leave what N one-token calls leave, bit for bit. */
void memra__kc_delta_rowinv(kc *k, int64_t n, int64_t n_k, int64_t n_v, int64_t d)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, "delta.rowinv", "exact", 0, "%lld tok vs 1+1+.., %lld/%lld x %lld",
                                           (long long)n, (long long)n_k, (long long)n_v, (long long)d);
    if (!L)
        return;
    float *qk, *v, *g, *b, *state;
    if (!dl_inputs(k, n, n_k, n_v, d, &qk, &v, &g, &b, &state))
        return;
    const int64_t qks = 2 * n_k * d + 4, vs = n_v * d + 4, gs = n_v + 2;
    const kc_out oo = {n, n_v * d, n_v * d}, os = {n_v, d * d, d * d};
    float *qd = memra__kc_put(k, k->gpu, qk, (size_t)(n * qks) * 4), *vd = memra__kc_put(k, k->gpu, v, (size_t)(n * vs) * 4);
    float *gd = memra__kc_put(k, k->gpu, g, (size_t)(n * gs) * 4), *bd = memra__kc_put(k, k->gpu, b, (size_t)(n * gs) * 4);
    float *sa = memra__kc_out_new(k, k->gpu, &os, state), *sb = memra__kc_out_new(k, k->gpu, &os, state);
    float *oa = memra__kc_out_new(k, k->gpu, &oo, NULL), *ob = memra__kc_out_new(k, k->gpu, &oo, NULL);
    if (!qd || !vd || !gd || !bd || !sa || !sb || !oa || !ob)
        return;
    memra_delta_args_t a = {.q = qd, .k = qd + n_k * d, .v = vd, .g = gd, .beta = bd, .qk_stride = qks, .v_stride = vs,
                            .gb_stride = gs, .state = sa, .out = oa, .n_tokens = n, .n_k = n_k, .n_v = n_v, .d = d,
                            .scale = 1.0f / sqrtf((float)d)};
    memra_status_t st = k->gpu->iface->delta(k->gpu, &a);
    for (int64_t t = 0; !st && t < n; t++) {
        memra_delta_args_t o1 = a;
        o1.q = qd + t * qks;
        o1.k = o1.q + n_k * d;
        o1.v = vd + t * vs;
        o1.g = gd + t * gs;
        o1.beta = bd + t * gs;
        o1.state = sb;
        o1.out = ob + t * n_v * d;
        o1.n_tokens = 1;
        st = k->gpu->iface->delta(k->gpu, &o1);
    }
    const kc_pair p[2] = {{ob, oa, &oo, "out"}, {sb, sa, &os, "state"}};
    memra__kc_finish_exact(k, L, st, p, 2);
}

/* ---- the fused Gated DeltaNet step -------------------------------------------- */

typedef struct gd_case {
    memra_gdn_args_t a[3]; /* cpu, cuda fused, cuda sequence */
} gd_case;

static memra_status_t gd_run(void *c, memra__backend_t *be, int side)
{
    return memra__gdn(be, &((gd_case *)c)->a[side]);
}

/* memra__gdn on raw (un-normed) q/k rows as the conv leaves them (q|k|v in
 * one row), or with CONV on the raw projections through the conv (4 taps,
 * its state an output too): against the CPU reference within the f32
 * bound, and the CUDA fused step against the CUDA sequence of separate ops
 * bit for bit. */
void memra__kc_gdn(kc *k, const char *name, int64_t n, int64_t n_k, int64_t n_v, int64_t d, bool conv_on)
{
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "nmse", TOL_F32, "%lld tok, %lld k / %lld v heads x %lld (y + state%s)", (long long)n,
                (long long)n_k, (long long)n_v, (long long)d, conv_on ? " + conv state" : "");
    if (!L)
        return;
    /* with the conv its rows are exactly q|k|v (the fused kernel's layout) */
    const int64_t KD = n_k * d, VD = n_v * d, C = 2 * KD + VD + (conv_on ? 0 : 4), gs = n_v + 2, zs = VD + 3, K = 4;
    float *conv = memra__kc_randf(k, (size_t)(n * C), -1.0f, 1.0f), *g = memra__kc_randf(k, (size_t)(n * gs), -1.5f, 0.0f);
    float *cw = memra__kc_randf(k, (size_t)(C * K), -0.6f, 0.6f), *cst = memra__kc_randf(k, (size_t)(C * (K - 1)), -1.0f, 1.0f);
    void *cwp[2];
    if (!cw || !cst || !memra__kc_both(k, cw, (size_t)(C * K) * 4, cwp))
        return;
    const kc_out ocs = {C, K - 1, K - 1}, ocv = {n, C, C};
    float *b = memra__kc_randf(k, (size_t)(n * gs), 0.05f, 0.95f), *state = memra__kc_randf(k, (size_t)(n_v * d * d), -0.1f, 0.1f);
    float *z = memra__kc_randf(k, (size_t)(n * zs), -3.0f, 3.0f), *nw = memra__kc_randf(k, (size_t)d, 0.5f, 1.5f);
    void *cp[2], *gp[2], *bp[2], *zp[2], *np[2];
    if (!conv || !g || !b || !state || !z || !nw || !memra__kc_both(k, conv, (size_t)(n * C) * 4, cp) ||
        !memra__kc_both(k, g, (size_t)(n * gs) * 4, gp) || !memra__kc_both(k, b, (size_t)(n * gs) * 4, bp) ||
        !memra__kc_both(k, z, (size_t)(n * zs) * 4, zp) || !memra__kc_both(k, nw, (size_t)d * 4, np))
        return;
    const kc_out oy = {n, VD, VD}, os = {n_v, d * d, d * d};
    gd_case c;
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const float *cv = cp[s ? 1 : 0];
        memra_gdn_args_t a = {
            .delta = {.q = cv, .k = cv + KD, .v = cv + 2 * KD, .g = gp[s ? 1 : 0], .beta = bp[s ? 1 : 0],
                      .qk_stride = C, .v_stride = C, .gb_stride = gs, .state = memra__kc_out_new(k, be, &os, state),
                      .n_tokens = n, .n_k = n_k, .n_v = n_v, .d = d, .scale = 1.0f / sqrtf((float)d)},
            .l2_eps = 1e-6f, .norm_w = np[s ? 1 : 0], .norm_eps = 1e-6f, .z = zp[s ? 1 : 0], .z_stride = zs,
            .y = memra__kc_out_new(k, be, &oy, NULL),
            .qk_tmp = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(n * 2 * KD) * 4)),
            .o_tmp = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(n * VD) * 4))};
        if (!a.delta.state || !a.y || !a.qk_tmp || !a.o_tmp)
            return;
        a.delta.out = a.o_tmp;
        if (conv_on) { /* cv holds the raw projections; q|k|v come out of the conv */
            float *out = memra__kc_out_new(k, be, &ocv, NULL);
            a.conv = (memra_conv_args_t){.x = cv, .x_stride = C, .state = memra__kc_out_new(k, be, &ocs, cst),
                                         .w = cwp[s ? 1 : 0], .out = out, .n_tokens = n, .channels = C, .kernel = K};
            if (!out || !a.conv.state)
                return;
            a.delta.q = out;
            a.delta.k = out + KD;
            a.delta.v = out + 2 * KD;
        }
        c.a[s] = a;
    }
    const kc_fused_out f[3] = {{c.a[0].y, c.a[1].y, c.a[2].y, &oy, "y"},
                               {c.a[0].delta.state, c.a[1].delta.state, c.a[2].delta.state, &os, "state"},
                               {c.a[0].conv.state, c.a[1].conv.state, c.a[2].conv.state, &ocs, "conv state"}};
    memra__kc_check_fused(k, L, k->gpu, f, conv_on ? 3 : 2, gd_run, &c, (double)(2 * n_v * d * d * 4));
}
