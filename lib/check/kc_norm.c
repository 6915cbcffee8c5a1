/* Kernel check cases: norm, elementwise, rope, per-head norm + rope of q
 * and k (and v), norm with add and scale, argmax. */
#include "kc.h"

/* ---- norm ------------------------------------------------------------------ */

typedef struct nm_case {
    memra_norm_kind_t kind;
    const float *x[2], *w[2];
    float *y[2];
    int64_t xs, ys, rows, dim;
    float eps;
} nm_case;

static memra_status_t nm_run(void *c, memra__backend_t *be, int side)
{
    nm_case *n = c;
    return be->iface->norm(be, n->kind, n->x[side], n->xs, n->w[side], n->y[side], n->ys, n->rows, n->dim, n->eps);
}

void memra__kc_norm(kc *k, const char *name, memra_norm_kind_t kind, int64_t rows, int64_t dim, bool weight,
                    bool in_place, int64_t pad)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "ulp", TOL_ULP, "%s %lld x %lld%s%s", kind == MEMRA_NORM_RMS ? "rms" : "l2",
                                           (long long)rows, (long long)dim, weight ? " *w" : "", in_place ? " in place" : "");
    if (!L)
        return;
    nm_case c = {.kind = kind, .xs = dim + pad, .ys = dim + pad, .rows = rows, .dim = dim, .eps = 1e-6f};
    float *x = memra__kc_randf(k, (size_t)(rows * c.xs), -2.0f, 2.0f), *w = memra__kc_randf(k, (size_t)dim, 0.5f, 1.5f);
    const kc_out o = {rows, dim, c.ys};
    if (!x || !w)
        return;
    void *wp[2] = {NULL, NULL}, *xp[2];
    if (weight && !memra__kc_both(k, w, (size_t)dim * 4, wp))
        return;
    c.w[0] = wp[0];
    c.w[1] = wp[1];
    if (in_place) {
        float *dense = memra__kc_host(k, (size_t)(rows * dim) * 4);
        if (!dense)
            return;
        for (int64_t r = 0; r < rows; r++)
            memcpy(dense + r * dim, x + r * c.xs, (size_t)dim * 4);
        c.y[0] = memra__kc_out_new(k, k->cpu, &o, dense);
        c.y[1] = memra__kc_out_new(k, k->gpu, &o, dense);
        c.x[0] = c.y[0];
        c.x[1] = c.y[1];
    } else {
        if (!memra__kc_both(k, x, (size_t)(rows * c.xs) * 4, xp))
            return;
        c.x[0] = xp[0];
        c.x[1] = xp[1];
        c.y[0] = memra__kc_out_new(k, k->cpu, &o, NULL);
        c.y[1] = memra__kc_out_new(k, k->gpu, &o, NULL);
    }
    if (!c.y[0] || !c.y[1])
        return;
    const kc_pair p = {c.y[0], c.y[1], &o, "y"};
    memra__kc_check_vs_cpu(k, L, k->gpu, &p, 1, nm_run, &c, (double)(rows * dim * 8));
}

/* ---- elementwise ----------------------------------------------------------- */

static const char *ew_name(memra_ew_op_t op)
{
    static const char *n[] = {"copy", "add", "mul", "scale", "add_scaled", "silu", "gelu", "sigmoid",
                              "swiglu", "geglu", "mul_sigmoid", "softcap", "softplus_mul", "fill"};
    return (unsigned)op <= MEMRA_EW_FILL ? n[op] : "?";
}

bool memra__kc_ew_binary(memra_ew_op_t op)
{
    return op == MEMRA_EW_ADD || op == MEMRA_EW_MUL || op == MEMRA_EW_ADD_SCALED || op == MEMRA_EW_SWIGLU ||
           op == MEMRA_EW_GEGLU || op == MEMRA_EW_MUL_SIGMOID || op == MEMRA_EW_SOFTPLUS_MUL;
}

typedef struct ew_case {
    memra_ew_args_t a[2];
} ew_case;

static memra_status_t ew_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->elementwise(be, &((ew_case *)c)->a[side]);
}

/* MODE 0: strided rows; 1: b broadcast (bs 0); 2: in place (y = a); 3:
 * dense rows (every stride = cols: one long row on CUDA); 4: strides of
 * cols + 4 (with cols a multiple of 4: CUDA's 16-byte form a row at a time,
 * for calls of 65536 elements and more). */
void memra__kc_ew(kc *k, memra_ew_op_t op, int64_t rows, int64_t cols, int mode)
{
    static const char *suffix[] = {"", ".bcast", ".inplace", ".dense", ".aligned"};
    char name[48];
    snprintf(name, sizeof name, "elementwise.%s%s", ew_name(op), suffix[mode]);
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "ulp", TOL_ULP, "%lld x %lld", (long long)rows, (long long)cols);
    if (!L)
        return;
    const int64_t pad = mode == 3 ? 0 : 4; /* modes 3 and 4: every stride cols + pad */
    const int64_t ys = mode >= 3 ? cols + pad : mode == 2 ? cols + 2 : cols + 5;
    const int64_t as = mode >= 3 ? cols + pad : mode == 2 ? ys : cols + 3;
    const int64_t bs = mode >= 3 ? cols + pad : mode == 1 ? 0 : cols + 1;
    const float lim = op == MEMRA_EW_SOFTCAP ? 90.0f : 8.0f;
    const size_t bn = (size_t)(rows * (bs > cols ? bs : cols + 1));
    float *a = memra__kc_randf(k, (size_t)(rows * as), -lim, lim), *b = memra__kc_randf(k, bn, -4.0f, 4.0f);
    float *aux = memra__kc_randf(k, (size_t)cols, -2.0f, 2.0f);
    const kc_out o = {rows, cols, ys};
    if (!a || !b || !aux)
        return;
    ew_case c;
    void *ap[2], *bp[2], *xp[2];
    if (!memra__kc_both(k, a, (size_t)(rows * as) * 4, ap) || !memra__kc_both(k, b, bn * 4, bp) ||
        !memra__kc_both(k, aux, (size_t)cols * 4, xp))
        return;
    for (int s = 0; s < 2; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        c.a[s] = (memra_ew_args_t){.op = op, .a = ap[s], .b = memra__kc_ew_binary(op) ? bp[s] : NULL,
                                   .aux = op == MEMRA_EW_SOFTPLUS_MUL ? xp[s] : NULL, .rows = rows, .cols = cols,
                                   .ys = ys, .as = as, .bs = bs, .s = op == MEMRA_EW_SOFTCAP ? 30.0f : 0.7f};
        if (mode == 2) {
            float *dense = memra__kc_host(k, (size_t)(rows * cols) * 4);
            if (!dense)
                return;
            for (int64_t r = 0; r < rows; r++)
                memcpy(dense + r * cols, a + r * as, (size_t)cols * 4);
            c.a[s].y = memra__kc_out_new(k, be, &o, dense);
            c.a[s].a = c.a[s].y;
        } else {
            c.a[s].y = memra__kc_out_new(k, be, &o, NULL);
        }
        if (!c.a[s].y)
            return;
    }
    const kc_pair p = {c.a[0].y, c.a[1].y, &o, "y"};
    memra__kc_check_vs_cpu(k, L, k->gpu, &p, 1, ew_run, &c, (double)(rows * cols * (memra__kc_ew_binary(op) ? 12 : 8)));
}

/* ---- rope ----------------------------------------------------------------- */

typedef struct rp_case {
    memra_rope_args_t a[2];
} rp_case;

static memra_status_t rp_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->rope(be, &((rp_case *)c)->a[side]);
}

void memra__kc_rope(kc *k, const char *name, memra_rope_mode_t mode, int64_t n_tokens, int64_t n_heads, int64_t hd,
                    int64_t n_rot, bool ff, int32_t max_pos)
{
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "nmse", 1e-12, "%s %lld tok x %lld heads x %lld, n_rot %lld%s, pos < %d",
                mode == MEMRA_ROPE_NEOX ? "neox" : "norm", (long long)n_tokens, (long long)n_heads, (long long)hd,
                (long long)n_rot, ff ? ", freq factors" : "", max_pos);
    if (!L)
        return;
    const int64_t ts = n_heads * hd + 8;
    const kc_out o = {n_tokens, ts - 8, ts};
    float *x = memra__kc_randf(k, (size_t)(n_tokens * (ts - 8)), -2.0f, 2.0f), *f = memra__kc_randf(k, (size_t)(n_rot / 2), 1.0f, 8.0f);
    int32_t *pos = memra__kc_host(k, (size_t)n_tokens * 4);
    if (!x || !f || !pos)
        return;
    for (int64_t t = 0; t < n_tokens; t++)
        pos[t] = (int32_t)(t == 0 ? max_pos - 1 : memra__kc_int(k, max_pos));
    void *pp[2], *fp[2];
    if (!memra__kc_both(k, pos, (size_t)n_tokens * 4, pp) || !memra__kc_both(k, f, (size_t)(n_rot / 2) * 4, fp))
        return;
    rp_case c;
    for (int s = 0; s < 2; s++) {
        c.a[s] = (memra_rope_args_t){.x = memra__kc_out_new(k, s ? k->gpu : k->cpu, &o, x), .n_tokens = n_tokens,
                                     .n_heads = n_heads, .head_dim = hd, .head_stride = hd, .token_stride = ts,
                                     .n_rot = n_rot, .pos = pp[s], .base = 1000000.0f, .freq_factors = ff ? fp[s] : NULL,
                                     .mode = mode};
        if (!c.a[s].x)
            return;
    }
    const kc_pair p = {c.a[0].x, c.a[1].x, &o, "x"};
    memra__kc_check_vs_cpu(k, L, k->gpu, &p, 1, rp_run, &c, (double)(n_tokens * n_heads * hd * 8));
}

/* ---- per-head norm + rope of q and k -------------------------------------------- */

typedef struct qk_case {
    memra_qk_args_t a[3]; /* cpu, cuda fused, cuda sequence */
} qk_case;

static memra_status_t qk_run(void *c, memra__backend_t *be, int side)
{
    return memra__qk_norm_rope(be, &((qk_case *)c)->a[side]);
}

/* memra__qk_norm_rope as qwen35 calls it (q heads interleaved with their
 * gates, 2hd apart; k heads into cache-like rows): against the CPU
 * reference (its sequence) and bit for bit against the CUDA sequence. */
void memra__kc_qk_norm_rope(kc *k, const char *name, int64_t n, int64_t H, int64_t Hkv, int64_t hd, int64_t n_rot)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "nmse", TOL_F32, "%lld tok, %lld q / %lld k heads x %lld, n_rot %lld",
                                           (long long)n, (long long)H, (long long)Hkv, (long long)hd, (long long)n_rot);
    if (!L)
        return;
    const int64_t qs = 2 * H * hd, ks = Hkv * hd, kvs = Hkv * hd + 8;
    float *qg = memra__kc_randf(k, (size_t)(n * qs), -2.0f, 2.0f), *kr = memra__kc_randf(k, (size_t)(n * ks), -2.0f, 2.0f);
    float *qw = memra__kc_randf(k, (size_t)hd, 0.5f, 1.5f), *kw = memra__kc_randf(k, (size_t)hd, 0.5f, 1.5f);
    int32_t *pos = memra__kc_host(k, (size_t)n * 4);
    if (!qg || !kr || !qw || !kw || !pos)
        return;
    for (int64_t t = 0; t < n; t++)
        pos[t] = (int32_t)(t == 0 ? 40000 : memra__kc_int(k, 40000));
    void *qp[2], *kp[2], *qwp[2], *kwp[2], *pp[2];
    if (!memra__kc_both(k, qg, (size_t)(n * qs) * 4, qp) || !memra__kc_both(k, kr, (size_t)(n * ks) * 4, kp) ||
        !memra__kc_both(k, qw, (size_t)hd * 4, qwp) || !memra__kc_both(k, kw, (size_t)hd * 4, kwp) ||
        !memra__kc_both(k, pos, (size_t)n * 4, pp))
        return;
    const kc_out oq = {n, H * hd, H * hd}, ok = {n, Hkv * hd, kvs};
    qk_case c;
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const int i = s ? 1 : 0;
        memra_qk_args_t a = {
            .part = {{.src = qp[i], .src_head_stride = 2 * hd, .src_token_stride = qs, .dst = memra__kc_out_new(k, be, &oq, NULL),
                      .dst_head_stride = hd, .dst_token_stride = H * hd, .n_heads = H, .norm_w = qwp[i]},
                     {.src = kp[i], .src_head_stride = hd, .src_token_stride = ks, .dst = memra__kc_out_new(k, be, &ok, NULL),
                      .dst_head_stride = hd, .dst_token_stride = kvs, .n_heads = Hkv, .norm_w = kwp[i]}},
            .n_parts = 2, .eps = 1e-6f,
            .rope = {.n_tokens = n, .head_dim = hd, .n_rot = n_rot, .pos = pp[i], .base = 10000000.0f,
                     .mode = MEMRA_ROPE_NEOX}};
        if (!a.part[0].dst || !a.part[1].dst)
            return;
        c.a[s] = a;
    }
    const kc_fused_out f[2] = {{c.a[0].part[0].dst, c.a[1].part[0].dst, c.a[2].part[0].dst, &oq, "q"},
                               {c.a[0].part[1].dst, c.a[1].part[1].dst, c.a[2].part[1].dst, &ok, "k"}};
    memra__kc_check_fused(k, L, k->gpu, f, 2, qk_run, &c, (double)(n * (2 * H + 2 * Hkv) * hd * 4));
}

/* memra__qk_norm_rope as gemma4 calls it: q and k heads dense, normed with
 * their weights and roped (FF: with frequency factors, as full layers),
 * and a third, norm-only part for v without a weight, read from its own
 * projection or (V_IS_K: a layer without attn_v) from the raw k heads the
 * k part reads too. Against the CPU and bit for bit against the CUDA
 * sequence. */
void memra__kc_qk_norm_rope_v(kc *k, const char *name, int64_t n, int64_t H, int64_t Hkv, int64_t hd, int64_t n_rot,
                              bool ff, bool v_is_k)
{
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "nmse", TOL_F32, "%lld tok, %lld q / %lld k / %lld v heads x %lld, n_rot %lld%s%s",
                       (long long)n, (long long)H, (long long)Hkv, (long long)Hkv, (long long)hd, (long long)n_rot,
                       ff ? ", freq factors" : "", v_is_k ? ", v = raw k" : "");
    if (!L)
        return;
    const int64_t qs = H * hd, ks = Hkv * hd, kvs = Hkv * hd + 8;
    float *q = memra__kc_randf(k, (size_t)(n * qs), -2.0f, 2.0f), *kr = memra__kc_randf(k, (size_t)(n * ks), -2.0f, 2.0f);
    float *vr = memra__kc_randf(k, (size_t)(n * ks), -3.0f, 3.0f);
    float *qw = memra__kc_randf(k, (size_t)hd, 0.5f, 1.5f), *kw = memra__kc_randf(k, (size_t)hd, 0.5f, 1.5f);
    float *f = memra__kc_randf(k, (size_t)(n_rot / 2), 1.0f, 8.0f);
    int32_t *pos = memra__kc_host(k, (size_t)n * 4);
    if (!q || !kr || !vr || !qw || !kw || !f || !pos)
        return;
    for (int64_t t = 0; t < n; t++)
        pos[t] = (int32_t)(t == 0 ? 100000 : memra__kc_int(k, 100000));
    void *qp[2], *kp[2], *vp[2], *qwp[2], *kwp[2], *fp[2], *pp[2];
    if (!memra__kc_both(k, q, (size_t)(n * qs) * 4, qp) || !memra__kc_both(k, kr, (size_t)(n * ks) * 4, kp) ||
        !memra__kc_both(k, vr, (size_t)(n * ks) * 4, vp) || !memra__kc_both(k, qw, (size_t)hd * 4, qwp) ||
        !memra__kc_both(k, kw, (size_t)hd * 4, kwp) || !memra__kc_both(k, f, (size_t)(n_rot / 2) * 4, fp) ||
        !memra__kc_both(k, pos, (size_t)n * 4, pp))
        return;
    const kc_out oq = {n, H * hd, H * hd}, ok = {n, Hkv * hd, kvs};
    qk_case c;
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const int i = s ? 1 : 0;
        memra_qk_args_t a = {
            .part = {{.src = qp[i], .src_head_stride = hd, .src_token_stride = qs, .dst = memra__kc_out_new(k, be, &oq, NULL),
                      .dst_head_stride = hd, .dst_token_stride = H * hd, .n_heads = H, .norm_w = qwp[i]},
                     {.src = kp[i], .src_head_stride = hd, .src_token_stride = ks, .dst = memra__kc_out_new(k, be, &ok, NULL),
                      .dst_head_stride = hd, .dst_token_stride = kvs, .n_heads = Hkv, .norm_w = kwp[i]},
                     {.src = v_is_k ? kp[i] : vp[i], .src_head_stride = hd, .src_token_stride = ks,
                      .dst = memra__kc_out_new(k, be, &ok, NULL), .dst_head_stride = hd, .dst_token_stride = kvs,
                      .n_heads = Hkv, .norm_w = NULL, .no_rope = true}},
            .n_parts = 3, .eps = 1e-6f,
            .rope = {.n_tokens = n, .head_dim = hd, .n_rot = n_rot, .pos = pp[i], .base = 1000000.0f,
                     .freq_factors = ff ? fp[i] : NULL, .mode = MEMRA_ROPE_NEOX}};
        if (!a.part[0].dst || !a.part[1].dst || !a.part[2].dst)
            return;
        c.a[s] = a;
    }
    const kc_fused_out fo[3] = {{c.a[0].part[0].dst, c.a[1].part[0].dst, c.a[2].part[0].dst, &oq, "q"},
                                {c.a[0].part[1].dst, c.a[1].part[1].dst, c.a[2].part[1].dst, &ok, "k"},
                                {c.a[0].part[2].dst, c.a[1].part[2].dst, c.a[2].part[2].dst, &ok, "v"}};
    memra__kc_check_fused(k, L, k->gpu, fo, 3, qk_run, &c, (double)(n * (2 * H + 4 * Hkv) * hd * 4));
}

/* memra__qk_norm_rope with the step's K and V stores into caches of TYPE,
 * as the forwards pass them: V_PART, gemma4's (k and a norm-only v part,
 * each store reading its part's rows); else qwen35's (q and k parts, V
 * stored from rows no part writes). q, k and v against the CPU and the
 * CUDA sequence (the launch, then kv_store); the caches' bytes (read as
 * floats: the rows' bytes a multiple of 4, a sentinel gap between rows)
 * against the sequence alone, bit for bit. */
void memra__kc_qk_store(kc *k, const char *name, int64_t n, int64_t H, int64_t Hkv, int64_t hd, memra_type_t type,
                        bool v_part)
{
    const int64_t kvw = Hkv * hd;
    const size_t rb = memra__row_bytes(type, kvw);
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "nmse", TOL_F32, "%lld tok, %lld q / %lld kv heads x %lld, stores -> %s%s", (long long)n,
                       (long long)H, (long long)Hkv, (long long)hd, memra__kc_tname(type), v_part ? ", v part" : "");
    if (!L)
        return;
    if (!rb || rb % 4) {
        memra__kc_op_failed(k, L, "case", MEMRA_E_INVALID);
        return;
    }
    const int64_t qs = H * hd, kvs = kvw + 8;
    float *q = memra__kc_randf(k, (size_t)(n * qs), -2.0f, 2.0f), *kr = memra__kc_randf(k, (size_t)(n * kvs), -2.0f, 2.0f);
    float *vr = memra__kc_randf(k, (size_t)(n * kvs), -3.0f, 3.0f);
    float *qw = memra__kc_randf(k, (size_t)hd, 0.5f, 1.5f), *kw = memra__kc_randf(k, (size_t)hd, 0.5f, 1.5f);
    int32_t *pos = memra__kc_host(k, (size_t)n * 4);
    if (!q || !kr || !vr || !qw || !kw || !pos)
        return;
    for (int64_t t = 0; t < n; t++)
        pos[t] = (int32_t)(1000 + t);
    void *qp[2], *kp[2], *vp[2], *qwp[2], *kwp[2], *pp[2];
    if (!memra__kc_both(k, q, (size_t)(n * qs) * 4, qp) || !memra__kc_both(k, kr, (size_t)(n * kvs) * 4, kp) ||
        !memra__kc_both(k, vr, (size_t)(n * kvs) * 4, vp) || !memra__kc_both(k, qw, (size_t)hd * 4, qwp) ||
        !memra__kc_both(k, kw, (size_t)hd * 4, kwp) || !memra__kc_both(k, pos, (size_t)n * 4, pp))
        return;
    const kc_out oq = {n, qs, qs}, ok = {n, kvw, kvs}, oc = {n, (int64_t)rb / 4, (int64_t)rb / 4 + 2};
    qk_case c;
    memra_kv_store_args_t st[3][2]; /* the sides' stores (their qk args point at them) */
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const int i = s ? 1 : 0;
        float *kd = memra__kc_out_new(k, be, &ok, NULL), *vd = v_part ? memra__kc_out_new(k, be, &ok, NULL) : NULL;
        float *ck = memra__kc_out_new(k, be, &oc, NULL), *cv = memra__kc_out_new(k, be, &oc, NULL);
        memra_qk_args_t a = {
            .part = {{.src = qp[i], .src_head_stride = hd, .src_token_stride = qs, .dst = memra__kc_out_new(k, be, &oq, NULL),
                      .dst_head_stride = hd, .dst_token_stride = qs, .n_heads = H, .norm_w = qwp[i]},
                     {.src = kp[i], .src_head_stride = hd, .src_token_stride = kvs, .dst = kd, .dst_head_stride = hd,
                      .dst_token_stride = kvs, .n_heads = Hkv, .norm_w = kwp[i]},
                     {.src = vp[i], .src_head_stride = hd, .src_token_stride = kvs, .dst = vd, .dst_head_stride = hd,
                      .dst_token_stride = kvs, .n_heads = Hkv, .norm_w = NULL, .no_rope = true}},
            .n_parts = v_part ? 3 : 2, .eps = 1e-6f,
            .rope = {.n_tokens = n, .head_dim = hd, .n_rot = hd, .pos = pp[i], .base = 1000000.0f,
                     .mode = MEMRA_ROPE_NEOX}};
        if (!a.part[0].dst || !kd || (v_part && !vd) || !ck || !cv)
            return;
        st[s][0] = (memra_kv_store_args_t){.src = kd, .src_stride = kvs, .dst = ck, .dst_row_bytes = (size_t)oc.ld * 4,
                                           .type = type, .rows = n, .cols = kvw, .pos = 1000};
        st[s][1] = (memra_kv_store_args_t){.src = v_part ? vd : (const float *)vp[i], .src_stride = kvs, .dst = cv,
                                           .dst_row_bytes = (size_t)oc.ld * 4, .type = type, .rows = n, .cols = kvw,
                                           .pos = 1000};
        a.store = st[s];
        a.n_store = 2;
        c.a[s] = a;
    }
    kc_fused_out fo[5] = {{c.a[0].part[0].dst, c.a[1].part[0].dst, c.a[2].part[0].dst, &oq, "q"},
                          {c.a[0].part[1].dst, c.a[1].part[1].dst, c.a[2].part[1].dst, &ok, "k"},
                          {NULL, st[1][0].dst, st[2][0].dst, &oc, "k cache"},
                          {NULL, st[1][1].dst, st[2][1].dst, &oc, "v cache"},
                          {c.a[0].part[2].dst, c.a[1].part[2].dst, c.a[2].part[2].dst, &ok, "v"}};
    memra__kc_check_fused(k, L, k->gpu, fo, v_part ? 5 : 4, qk_run, &c, (double)(n * (2 * H + 6 * Hkv) * hd * 4));
}

/* ---- norm with add and scale ------------------------------------------------ */

typedef struct nx_case {
    memra_norm_args_t a[3]; /* cpu, cuda fused, cuda sequence */
} nx_case;

static memra_status_t nx_run(void *c, memra__backend_t *be, int side)
{
    return memra__norm_ex(be, &((nx_case *)c)->a[side]);
}

/* memra__norm_ex as gemma4 calls it. ADD: 0 none, 1 into a separate y, 2
 * in place on the residual (y = add) with tmp = x, as the forward passes
 * it; SCALE 1 for none. Strided rows (x, y and add each padded
 * differently; ALIGNED: by whole 16-byte chunks). Against the CPU and bit for bit against the CUDA
 * sequence. */
void memra__kc_norm_ex(kc *k, const char *name, int64_t rows, int64_t dim, bool weight, int add, float scale,
                       bool aligned)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "nmse", TOL_F32, "rms %lld x %lld%s%s, scale %g",
                                                  (long long)rows, (long long)dim, weight ? " *w" : "",
                                                  add == 2 ? " + y in place" : add ? " + add" : "", (double)scale);
    if (!L)
        return;
    /* ALIGNED: rows 16-byte aligned (whole chunks of 4: the kernels' register path) */
    const int64_t xs = dim + (aligned ? 4 : 3), ys = dim + (aligned ? 8 : 5), adds = add == 2 ? ys : dim + (aligned ? 12 : 1);
    float *x = memra__kc_randf(k, (size_t)(rows * xs), -2.0f, 2.0f), *w = memra__kc_randf(k, (size_t)dim, 0.5f, 1.5f);
    float *r = memra__kc_randf(k, (size_t)(rows * adds), -4.0f, 4.0f);
    const kc_out o = {rows, dim, ys};
    if (!x || !w || !r)
        return;
    void *wp[2] = {NULL, NULL}, *ap[2] = {NULL, NULL};
    if ((weight && !memra__kc_both(k, w, (size_t)dim * 4, wp)) ||
        (add == 1 && !memra__kc_both(k, r, (size_t)(rows * adds) * 4, ap)))
        return;
    float *init = NULL; /* y's initial rows: the residual when y is add */
    if (add == 2) {
        if (!(init = memra__kc_host(k, (size_t)(rows * dim) * 4)))
            return;
        for (int64_t i = 0; i < rows; i++)
            memcpy(init + i * dim, r + i * adds, (size_t)dim * 4);
    }
    nx_case c;
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const int i = s ? 1 : 0;
        /* every side its own x: the sequence normalizes it in place when tmp is x */
        float *xd = memra__kc_put(k, be, x, (size_t)(rows * xs) * 4);
        float *y = memra__kc_out_new(k, be, &o, init);
        float *tmp = add == 1 ? memra__kc_track(k, be, be->iface->alloc(be, (size_t)(rows * xs) * 4)) : xd;
        if (!xd || !y || !tmp)
            return;
        c.a[s] = (memra_norm_args_t){.x = xd, .xs = xs, .w = wp[i], .eps = 1e-6f,
                                     .add = add == 2 ? y : add ? ap[i] : NULL, .adds = adds, .scale = scale,
                                     .y = y, .ys = ys, .rows = rows, .dim = dim, .tmp = add ? tmp : NULL};
    }
    const kc_fused_out f = {c.a[0].y, c.a[1].y, c.a[2].y, &o, "y"};
    memra__kc_check_fused(k, L, k->gpu, &f, 1, nx_run, &c, (double)(rows * dim * (add ? 12 : 8)));
}

/* ---- chains of norm_ex steps ------------------------------------------------- */

typedef struct nc_case {
    memra_norm_args_t s[3][3]; /* [cpu, cuda fused, cuda sequence][step] */
} nc_case;

static memra_status_t nc_run(void *c, memra__backend_t *be, int side)
{
    return memra__norm_chain(be, ((nc_case *)c)->s[side], 3);
}

/* memra__norm_chain as gemma4's MoE layers call it. POST_FFN false: the
 * post-attention chain (r = x + rms(a, w0); rn = rms(r, w1) * s; h2 =
 * rms(r, w2)); true: the post-FFN chain (f = rms(f, w0) in place; f = f +
 * rms(e, w1); x = (r + rms(f, w2)) * s). Rows padded (ALIGNED: by whole
 * 16-byte chunks), x's as a carry row's. Against the CPU and bit for bit
 * against the CUDA sequence. */
void memra__kc_norm_chain(kc *k, const char *name, int64_t rows, int64_t dim, bool post_ffn, bool aligned)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "nmse", TOL_F32, "3 rms steps %lld x %lld, %s",
                                                  (long long)rows, (long long)dim,
                                                  post_ffn ? "post-FFN" : "post-attention");
    if (!L)
        return;
    const int64_t rs = dim + (aligned ? 4 : 3), cf = dim + (aligned ? 12 : 7);
    const size_t rt = (size_t)(rows * rs) * 4, ct = (size_t)(rows * cf) * 4;
    float *a = memra__kc_randf(k, (size_t)(rows * rs), -2.0f, 2.0f), *x = memra__kc_randf(k, (size_t)(rows * cf), -4.0f, 4.0f);
    float *r = memra__kc_randf(k, (size_t)(rows * rs), -4.0f, 4.0f), *f = memra__kc_host(k, (size_t)(rows * dim) * 4);
    float *w = memra__kc_randf(k, (size_t)(3 * dim), 0.5f, 1.5f);
    if (!a || !x || !r || !f || !w)
        return;
    for (int64_t i = 0; i < rows; i++) /* f's initial rows (packed, as kc_out_new takes them) */
        for (int64_t j = 0; j < dim; j++)
            f[i * dim + j] = a[i * rs + (j + 7) % dim] * 0.5f;
    void *wp[2];
    if (!memra__kc_both(k, w, (size_t)(3 * dim) * 4, wp))
        return;
    const kc_out orow = {rows, dim, rs}, ocarry = {rows, dim, cf};
    nc_case c;
    float *out[3][3];
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const float *w0 = (const float *)wp[s ? 1 : 0], *w1 = w0 + dim, *w2 = w1 + dim;
        /* every side its own inputs: the sequence norms its scratch in place */
        float *ad = memra__kc_put(k, be, a, rt), *xd = memra__kc_put(k, be, x, ct), *rd = memra__kc_put(k, be, r, rt);
        if (!ad || !xd || !rd)
            return;
        if (!post_ffn) {
            float *rr = memra__kc_out_new(k, be, &orow, NULL), *rn = memra__kc_out_new(k, be, &orow, NULL);
            float *h2 = memra__kc_out_new(k, be, &orow, NULL);
            if (!rr || !rn || !h2)
                return;
            c.s[s][0] = (memra_norm_args_t){.x = ad, .xs = rs, .w = w0, .eps = 1e-6f, .add = xd, .adds = cf,
                                            .scale = 1.0f, .y = rr, .ys = rs, .rows = rows, .dim = dim, .tmp = ad};
            c.s[s][1] = (memra_norm_args_t){.x = rr, .xs = rs, .w = w1, .eps = 1e-6f, .scale = 0.018844f, .y = rn,
                                            .ys = rs, .rows = rows, .dim = dim};
            c.s[s][2] = (memra_norm_args_t){.x = rr, .xs = rs, .w = w2, .eps = 1e-6f, .scale = 1.0f, .y = h2,
                                            .ys = rs, .rows = rows, .dim = dim};
            out[s][0] = rr;
            out[s][1] = rn;
            out[s][2] = h2;
        } else {
            float *fd = memra__kc_out_new(k, be, &orow, f), *xo = memra__kc_out_new(k, be, &ocarry, NULL);
            if (!fd || !xo)
                return;
            c.s[s][0] = (memra_norm_args_t){.x = fd, .xs = rs, .w = w0, .eps = 1e-6f, .scale = 1.0f, .y = fd,
                                            .ys = rs, .rows = rows, .dim = dim};
            c.s[s][1] = (memra_norm_args_t){.x = ad, .xs = rs, .w = w1, .eps = 1e-6f, .add = fd, .adds = rs,
                                            .scale = 1.0f, .y = fd, .ys = rs, .rows = rows, .dim = dim, .tmp = ad};
            c.s[s][2] = (memra_norm_args_t){.x = fd, .xs = rs, .w = w2, .eps = 1e-6f, .add = rd, .adds = rs,
                                            .scale = 0.5f, .y = xo, .ys = cf, .rows = rows, .dim = dim, .tmp = fd};
            out[s][0] = xo;
            out[s][1] = NULL;
        }
    }
    if (!post_ffn) {
        const kc_fused_out fo[3] = {{out[0][0], out[1][0], out[2][0], &orow, "r"},
                                    {out[0][1], out[1][1], out[2][1], &orow, "rn"},
                                    {out[0][2], out[1][2], out[2][2], &orow, "h2"}};
        memra__kc_check_fused(k, L, k->gpu, fo, 3, nc_run, &c, (double)(rows * dim * 20));
    } else {
        /* f is the sequence's scratch of the last step (normed in place there): x only */
        const kc_fused_out fo[1] = {{out[0][0], out[1][0], out[2][0], &ocarry, "x"}};
        memra__kc_check_fused(k, L, k->gpu, fo, 1, nc_run, &c, (double)(rows * dim * 24));
    }
}

/* ---- argmax --------------------------------------------------------------- */

void memra__kc_argmax(kc *k, const char *name, int64_t n, int kind)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "exact", 0, "%lld values%s", (long long)n,
                                           kind == 1 ? ", ties" : kind == 2 ? ", NaN" : "");
    if (!L)
        return;
    float *x = memra__kc_randf(k, (size_t)n, -10.0f, 10.0f);
    if (!x)
        return;
    if (kind == 1) { /* the max several times: the lowest index wins */
        for (int i = 0; i < 5; i++)
            x[memra__kc_int(k, n)] = 11.0f;
    } else if (kind == 2) {
        for (int i = 0; i < 50; i++)
            x[memra__kc_int(k, n)] = NAN;
        x[0] = NAN;
    }
    void *xp[2];
    if (!memra__kc_both(k, x, (size_t)n * 4, xp))
        return;
    int32_t r[2] = {-1, -1};
    memra_status_t st = k->cpu->iface->argmax(k->cpu, xp[0], n, &r[0]);
    if (st) {
        memra__kc_op_failed(k, L, "cpu", st);
        return;
    }
    st = k->gpu->iface->argmax(k->gpu, xp[1], n, &r[1]);
    if (st) {
        memra__kc_op_failed(k, L, "cuda", st);
        return;
    }
    kc_acc a;
    memra__kc_acc_init(&a);
    if (r[0] != r[1]) {
        a.n_diff_bits = 1;
        a.max_abs = fabs((double)r[0] - r[1]);
        snprintf(a.note, sizeof a.note, "cpu %d, cuda %d", r[0], r[1]);
    }
    memra__kc_finish(k, L, &a);
    if (k->p.bench) {
        const int iters = k->p.bench_iters > 0 ? k->p.bench_iters : 20;
        const double t0 = memra__kc_now();
        for (int i = 0; i < iters; i++)
            k->gpu->iface->argmax(k->gpu, xp[1], n, &r[1]);
        L->bench_us = (memra__kc_now() - t0) / iters * 1e6;
        L->bench_gbs = (double)n * 4 / (L->bench_us * 1e3);
    }
}
