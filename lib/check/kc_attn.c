/* Kernel check cases: attention (prefill, decode, sliding window, gated,
 * row invariance). */
#include "kc.h"

/* ---- attention --------------------------------------------------------------- */

typedef struct at_case {
    memra_attn_args_t a[2];
} at_case;

static memra_status_t at_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->attention(be, &((at_case *)c)->a[side]);
}

/* FAST: the GPU side on the fast engine (from 9 queries on, tensor cores
 * with f16 operands: cuda/attn_tc.cu). */
static void attention_case(kc *k, const char *name, int64_t n_tokens, int64_t pos0, int64_t n_head, int64_t n_kv,
                           int64_t hd, int64_t n_swa, bool gated, bool fast)
{
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "nmse", fast ? TOL_ATTN_F16 : TOL_F32, "%lld q at pos %lld, %lld/%lld heads x %lld, swa %lld%s%s",
                       (long long)n_tokens, (long long)pos0, (long long)n_head, (long long)n_kv, (long long)hd,
                       (long long)n_swa, gated ? ", sigmoid gate" : "", fast ? " fast" : "");
    if (!L)
        return;
    const int64_t n_keys = pos0 + n_tokens, kvs = n_kv * hd + 4, qs = n_head * hd + 4;
    const kc_out o = {n_tokens, n_head * hd, n_head * hd};
    float *q = memra__kc_randf(k, (size_t)(n_tokens * qs), -1.0f, 1.0f);
    float *kv = memra__kc_randf(k, (size_t)(2 * n_keys * kvs), -1.0f, 1.0f);
    void *qp[2], *kp[2], *gp[2] = {NULL, NULL};
    if (!q || !kv || !memra__kc_both(k, q, (size_t)(n_tokens * qs) * 4, qp) || !memra__kc_both(k, kv, (size_t)(2 * n_keys * kvs) * 4, kp))
        return;
    /* a gate laid out as qwen35's: head h's gate 2*hd apart, after its q */
    float *gt = gated ? memra__kc_randf(k, (size_t)(n_tokens * 2 * n_head * hd), -4.0f, 4.0f) : NULL;
    if (gated && (!gt || !memra__kc_both(k, gt, (size_t)(n_tokens * 2 * n_head * hd) * 4, gp)))
        return;
    at_case c;
    for (int s = 0; s < 2; s++) {
        c.a[s] = (memra_attn_args_t){.q = qp[s], .k_cache = kp[s], .v_cache = (float *)kp[s] + n_keys * kvs,
                                     .out = memra__kc_out_new(k, s ? k->gpu : k->cpu, &o, NULL), .n_tokens = n_tokens,
                                     .pos0 = pos0, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .q_stride = qs,
                                     .kv_stride = kvs, .scale = 1.0f / sqrtf((float)hd), .n_swa = n_swa,
                                     .gate = gated ? (const float *)gp[s] + hd : NULL, .gate_stride = 2 * n_head * hd,
                                     .gate_head_stride = 2 * hd};
        if (!c.a[s].out)
            return;
    }
    const int64_t span = n_swa > 0 && n_swa < n_keys ? n_swa : n_keys;
    const kc_pair p = {c.a[0].out, c.a[1].out, &o, "out"};
    memra__kc_check_vs_cpu(k, L, fast ? k->fast : k->gpu, &p, 1, at_run, &c, (double)(2 * span * n_kv * hd * 4));
}

void memra__kc_attention(kc *k, const char *name, int64_t n_tokens, int64_t pos0, int64_t n_head, int64_t n_kv,
                         int64_t hd, int64_t n_swa, bool gated)
{
    attention_case(k, name, n_tokens, pos0, n_head, n_kv, hd, n_swa, gated, false);
}

void memra__kc_attention_fast(kc *k, const char *name, int64_t n_tokens, int64_t pos0, int64_t n_head, int64_t n_kv,
                              int64_t hd, int64_t n_swa, bool gated)
{
    attention_case(k, name, n_tokens, pos0, n_head, n_kv, hd, n_swa, gated, true);
}

/* N queries in one call equal N one-query calls bit for bit. */
void memra__kc_attention_rowinv(kc *k, const char *name, int64_t n_tokens, int64_t pos0, int64_t n_head, int64_t n_kv,
                                int64_t hd)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "exact", 0, "%lld q at pos %lld vs 1+1+.., %lld/%lld x %lld",
                                           (long long)n_tokens, (long long)pos0, (long long)n_head, (long long)n_kv,
                                           (long long)hd);
    if (!L)
        return;
    const int64_t n_keys = pos0 + n_tokens, kvs = n_kv * hd, qs = n_head * hd;
    const kc_out o = {n_tokens, qs, qs};
    float *q = memra__kc_randf(k, (size_t)(n_tokens * qs), -1.0f, 1.0f), *kv = memra__kc_randf(k, (size_t)(2 * n_keys * kvs), -1.0f, 1.0f);
    if (!q || !kv)
        return;
    float *qd = memra__kc_put(k, k->gpu, q, (size_t)(n_tokens * qs) * 4), *kd = memra__kc_put(k, k->gpu, kv, (size_t)(2 * n_keys * kvs) * 4);
    float *ya = memra__kc_out_new(k, k->gpu, &o, NULL), *yb = memra__kc_out_new(k, k->gpu, &o, NULL);
    if (!qd || !kd || !ya || !yb)
        return;
    memra_attn_args_t a = {.q = qd, .k_cache = kd, .v_cache = kd + n_keys * kvs, .out = ya, .n_tokens = n_tokens,
                           .pos0 = pos0, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .q_stride = qs,
                           .kv_stride = kvs, .scale = 1.0f / sqrtf((float)hd), .n_swa = 0};
    memra_status_t st = k->gpu->iface->attention(k->gpu, &a);
    for (int64_t t = 0; !st && t < n_tokens; t++) {
        memra_attn_args_t b = a;
        b.q = qd + t * qs;
        b.out = yb + t * qs;
        b.n_tokens = 1;
        b.pos0 = pos0 + t;
        st = k->gpu->iface->attention(k->gpu, &b);
    }
    const kc_pair p = {yb, ya, &o, "out"};
    memra__kc_finish_exact(k, L, st, &p, 1);
}

/* Fast engine: N queries in one call equal the same queries in calls of
 * SPLIT (the last one shorter) bit for bit: a query's output depends on its
 * position and the cache only, whatever the chunking (tensor-core tiles
 * start at fixed key multiples). */
void memra__kc_attention_chunkinv(kc *k, const char *name, int64_t n_tokens, int64_t split, int64_t pos0, int64_t n_head,
                                  int64_t n_kv, int64_t hd, int64_t n_swa)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "exact", 0, "%lld q at pos %lld vs %lld+.., %lld/%lld x %lld, swa %lld fast",
                                                  (long long)n_tokens, (long long)pos0, (long long)split, (long long)n_head,
                                                  (long long)n_kv, (long long)hd, (long long)n_swa);
    if (!L)
        return;
    memra__backend_t *gb = k->fast;
    const int64_t n_keys = pos0 + n_tokens, kvs = n_kv * hd, qs = n_head * hd;
    const kc_out o = {n_tokens, qs, qs};
    float *q = memra__kc_randf(k, (size_t)(n_tokens * qs), -1.0f, 1.0f), *kv = memra__kc_randf(k, (size_t)(2 * n_keys * kvs), -1.0f, 1.0f);
    if (!q || !kv)
        return;
    float *qd = memra__kc_put(k, gb, q, (size_t)(n_tokens * qs) * 4), *kd = memra__kc_put(k, gb, kv, (size_t)(2 * n_keys * kvs) * 4);
    float *ya = memra__kc_out_new(k, gb, &o, NULL), *yb = memra__kc_out_new(k, gb, &o, NULL);
    if (!qd || !kd || !ya || !yb)
        return;
    memra_attn_args_t a = {.q = qd, .k_cache = kd, .v_cache = kd + n_keys * kvs, .out = ya, .n_tokens = n_tokens,
                           .pos0 = pos0, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .q_stride = qs,
                           .kv_stride = kvs, .scale = 1.0f / sqrtf((float)hd), .n_swa = n_swa};
    memra_status_t st = gb->iface->attention(gb, &a);
    for (int64_t t = 0; !st && t < n_tokens; t += split) {
        memra_attn_args_t b = a;
        b.q = qd + t * qs;
        b.out = yb + t * qs;
        b.n_tokens = n_tokens - t < split ? n_tokens - t : split;
        b.pos0 = pos0 + t;
        st = gb->iface->attention(gb, &b);
    }
    if (!st)
        st = gb->iface->synchronize(gb); /* the fast engine's stream, before the GPU engine reads */
    const kc_pair p = {yb, ya, &o, "out"};
    memra__kc_finish_exact(k, L, st, &p, 1);
}

/* ---- KV cache types ------------------------------------------------------------ */

typedef struct kv_store_case {
    memra_kv_store_args_t a[2];
} kv_store_case;

static memra_status_t kv_store_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->kv_store(be, &((kv_store_case *)c)->a[side]);
}

/* Float rows into cache rows of TYPE: the same bytes on both sides. The
 * rows are compared as the floats their bytes spell (row bytes a multiple
 * of 4, two sentinel floats of gap between rows: a stray write shows). */
void memra__kc_kv_store(kc *k, const char *name, memra_type_t type, int64_t rows, int64_t cols)
{
    const size_t rb = memra__row_bytes(type, cols);
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "exact", 0, "%lld rows of %lld floats -> %s",
                                                  (long long)rows, (long long)cols, memra__kc_tname(type));
    if (!L)
        return;
    if (!rb || rb % 4) {
        memra__kc_op_failed(k, L, "case", MEMRA_E_INVALID);
        return;
    }
    const int64_t xs = cols + 3;
    const kc_out o = {rows, (int64_t)rb / 4, (int64_t)rb / 4 + 2};
    float *x = memra__kc_randf(k, (size_t)(rows * xs), -3.0f, 3.0f);
    void *xp[2];
    if (!x || !memra__kc_both(k, x, (size_t)(rows * xs) * 4, xp))
        return;
    kv_store_case c;
    for (int s = 0; s < 2; s++) {
        float *y = memra__kc_out_new(k, s ? k->gpu : k->cpu, &o, NULL);
        if (!y)
            return;
        c.a[s] = (memra_kv_store_args_t){.src = xp[s], .src_stride = xs, .dst = y, .dst_row_bytes = (size_t)o.ld * 4,
                                         .type = type, .rows = rows, .cols = cols};
    }
    const kc_pair p = {c.a[0].dst, c.a[1].dst, &o, "rows"};
    memra__kc_check_vs_cpu(k, L, k->gpu, &p, 1, kv_store_run, &c, (double)(rows * cols * 4 + rows * (int64_t)rb));
}

/* Attention over K rows of KT and V rows of VT (made on the host with
 * memra__quantize_row, the same bytes on both sides): against the CPU
 * within the F32 attention's bound, and, on the GPU alone, bit for bit
 * the F32 attention over the same rows dequantized (the same floats reach
 * the same arithmetic). */
static void attention_kv_case(kc *k, const char *name, memra_type_t kt, memra_type_t vt, int64_t n_tokens, int64_t pos0,
                              int64_t n_head, int64_t n_kv, int64_t hd, int64_t n_swa, bool fast)
{
    memra__backend_t *gb = fast ? k->fast : k->gpu; /* fast: tensor cores from 9 queries on (cuda/attn_tc.cu) */
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "nmse", fast ? TOL_ATTN_F16 : TOL_F32, "K %s, V %s: %lld q at pos %lld, %lld/%lld heads x %lld, swa %lld%s",
                       memra__kc_tname(kt), memra__kc_tname(vt), (long long)n_tokens, (long long)pos0,
                       (long long)n_head, (long long)n_kv, (long long)hd, (long long)n_swa, fast ? " fast" : "");
    if (!L)
        return;
    const int64_t n_keys = pos0 + n_tokens, kvw = n_kv * hd, qs = n_head * hd;
    const memra_type_t ty[2] = {kt, vt};
    const size_t rb[2] = {memra__row_bytes(kt, kvw) + 16, memra__row_bytes(vt, kvw) + 16};
    const kc_out o = {n_tokens, qs, qs};
    float *q = memra__kc_randf(k, (size_t)(n_tokens * qs), -1.0f, 1.0f);
    void *qp[2], *rows[2][2], *deq_d[2] = {NULL, NULL};
    if (!q || !memra__kc_both(k, q, (size_t)(n_tokens * qs) * 4, qp))
        return;
    for (int i = 0; i < 2; i++) {
        float *x = memra__kc_randf(k, (size_t)(n_keys * kvw), i ? -1.0f : -3.0f, i ? 1.0f : 3.0f);
        uint8_t *r = memra__kc_host(k, rb[i] * (size_t)n_keys);
        float *dq = memra__kc_host(k, (size_t)(n_keys * kvw) * sizeof(float));
        if (!x || !r || !dq)
            return;
        memset(r, 0, rb[i] * (size_t)n_keys);
        for (int64_t p = 0; p < n_keys; p++) {
            memra__quantize_row(ty[i], x + p * kvw, r + (size_t)p * rb[i], kvw);
            memra__dequantize_row(ty[i], r + (size_t)p * rb[i], dq + p * kvw, kvw);
        }
        if (!memra__kc_both(k, r, rb[i] * (size_t)n_keys, rows[i]) ||
            !(deq_d[i] = memra__kc_put(k, k->gpu, dq, (size_t)(n_keys * kvw) * sizeof(float))))
            return;
    }
    at_case c;
    for (int s = 0; s < 2; s++) {
        c.a[s] = (memra_attn_args_t){.q = qp[s], .k_cache = rows[0][s], .v_cache = rows[1][s],
                                     .out = memra__kc_out_new(k, s ? k->gpu : k->cpu, &o, NULL), .n_tokens = n_tokens,
                                     .pos0 = pos0, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .q_stride = qs,
                                     .scale = 1.0f / sqrtf((float)hd), .n_swa = n_swa, .k_type = kt, .v_type = vt,
                                     .k_row_bytes = rb[0], .v_row_bytes = rb[1]};
        if (!c.a[s].out)
            return;
    }
    const int64_t span = n_swa > 0 && n_swa < n_keys ? n_swa : n_keys;
    const kc_pair p = {c.a[0].out, c.a[1].out, &o, "out"};
    memra__kc_check_vs_cpu(k, L, gb, &p, 1, at_run, &c, (double)span * (double)(rb[0] + rb[1] - 32));

    /* a fast engine takes the tensor cores for K and V of one type only: a
     * mixed pair's kernel is not the F32 rows' kernel there */
    if (fast && kt != vt)
        return;
    char name2[96];
    snprintf(name2, sizeof name2, "%s.vs_f32", name);
    memra_kernel_check_line_t *E = memra__kc_line(k, name2, "exact", 0, "cuda: K %s, V %s rows vs f32 rows of their values",
                                                  memra__kc_tname(kt), memra__kc_tname(vt));
    if (!E)
        return;
    memra_attn_args_t f = c.a[1];
    f.k_cache = deq_d[0];
    f.v_cache = deq_d[1];
    f.k_type = f.v_type = MEMRA_TYPE_F32;
    f.k_row_bytes = f.v_row_bytes = 0;
    f.kv_stride = kvw;
    f.out = memra__kc_out_new(k, k->gpu, &o, NULL);
    if (!f.out)
        return;
    memra_status_t st = gb->iface->attention(gb, &c.a[1]);
    if (!st)
        st = gb->iface->attention(gb, &f);
    if (!st)
        st = gb->iface->synchronize(gb);
    const kc_pair pe = {f.out, c.a[1].out, &o, "out"};
    memra__kc_finish_exact(k, E, st, &pe, 1);
}

void memra__kc_attention_kv(kc *k, const char *name, memra_type_t kt, memra_type_t vt, int64_t n_tokens, int64_t pos0,
                            int64_t n_head, int64_t n_kv, int64_t hd, int64_t n_swa)
{
    attention_kv_case(k, name, kt, vt, n_tokens, pos0, n_head, n_kv, hd, n_swa, false);
}

void memra__kc_attention_kv_fast(kc *k, const char *name, memra_type_t kt, memra_type_t vt, int64_t n_tokens,
                                 int64_t pos0, int64_t n_head, int64_t n_kv, int64_t hd, int64_t n_swa)
{
    attention_kv_case(k, name, kt, vt, n_tokens, pos0, n_head, n_kv, hd, n_swa, true);
}
