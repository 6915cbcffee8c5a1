/* Kernel check cases: the batched per-sequence ops (attention_batch,
 * kv_store_batch, gdn_batch in lib/backend.h). Each case is a step's worth
 * of sequences, run three ways: on the CPU (the reference), on the GPU
 * engine through the batched wrapper (the backend's batched launch), and
 * on the GPU engine with the batched slots removed (every item its
 * one-item launch). The batched outputs must be the one-item launches'
 * bits exactly, and within the op's bound of the CPU's. */
#include "kc.h"

#define KC_BATCH_SIDES 3 /* cpu, cuda batched, cuda one item at a time */

/* Item I's rows: it starts at row ROW0[I] of the step and holds N[I]. */
static void kc_rows(int n_items, const int64_t *n, int64_t *row0)
{
    row0[0] = 0;
    for (int i = 0; i < n_items; i++)
        row0[i + 1] = row0[i] + n[i];
}

/* ---- kv_store ------------------------------------------------------------------ */

typedef struct kvb_case {
    memra_kv_store_args_t a[KC_BATCH_SIDES][MEMRA_MAX_BATCH];
    int n;
} kvb_case;

static memra_status_t kvb_run(void *c, memra__backend_t *be, int side)
{
    kvb_case *k = c;
    return memra__kv_store_batch(be, k->a[side], k->n);
}

/* N items of COLS floats a row; item i of TYPES[i % N_TYPES] and
 * ROWS[i % N_ROWS] rows (a chunk among decodes), each into its own rows of
 * one cache-like buffer (rows of the widest type, two sentinel floats of
 * gap between rows). A narrower type's row leaves the rest of its row as
 * it was (zeros on every side): a stray write there differs. */
void memra__kc_kv_store_batch(kc *k, const char *name, int n, const memra_type_t *types, int n_types,
                              const int64_t *rows, int n_rows, int64_t cols)
{
    memra_kernel_check_line_t *L = memra__kc_line(k, name, "exact", 0, "%d items of %lld floats, %s%s, %lld%s rows", n,
                                                  (long long)cols, memra__kc_tname(types[0]), n_types > 1 ? ".." : "",
                                                  (long long)rows[0], n_rows > 1 ? ".." : "");
    if (!L)
        return;
    int64_t nr[MEMRA_MAX_BATCH], row0[MEMRA_MAX_BATCH + 1];
    size_t rb_max = 0;
    for (int i = 0; i < n && i < MEMRA_MAX_BATCH; i++) {
        const size_t rb = memra__row_bytes(types[i % n_types], cols);
        nr[i] = rows[i % n_rows];
        rb_max = rb > rb_max ? rb : rb_max;
        if (!rb || rb % 4)
            rb_max = 0;
    }
    if (n < 1 || n > MEMRA_MAX_BATCH || !rb_max) {
        memra__kc_op_failed(k, L, "case", MEMRA_E_INVALID);
        return;
    }
    kc_rows(n, nr, row0);
    const int64_t xs = cols + 3, T = row0[n];
    const kc_out o = {T, (int64_t)rb_max / 4, (int64_t)rb_max / 4 + 2};
    float *x = memra__kc_randf(k, (size_t)(T * xs), -3.0f, 3.0f);
    float *zero = memra__kc_host(k, (size_t)(T * o.cols) * sizeof(float));
    void *xp[2];
    if (!x || !zero || !memra__kc_both(k, x, (size_t)(T * xs) * 4, xp))
        return;
    memset(zero, 0, (size_t)(T * o.cols) * sizeof(float));
    kvb_case c;
    c.n = n;
    for (int s = 0; s < KC_BATCH_SIDES; s++) {
        float *y = memra__kc_out_new(k, s ? k->gpu : k->cpu, &o, zero);
        if (!y)
            return;
        for (int i = 0; i < n; i++)
            c.a[s][i] = (memra_kv_store_args_t){.src = (const float *)xp[s ? 1 : 0] + row0[i] * xs, .src_stride = xs,
                                                .dst = y + row0[i] * o.ld, .dst_row_bytes = (size_t)o.ld * 4,
                                                .type = types[i % n_types], .rows = nr[i], .cols = cols};
    }
    const kc_fused_out f = {c.a[0][0].dst, c.a[1][0].dst, c.a[2][0].dst, &o, "rows"};
    memra__kc_check_batch(k, L, k->gpu, &f, 1, kvb_run, &c, (double)(T * cols * 4 + T * (int64_t)rb_max));
}

/* ---- attention ------------------------------------------------------------------ */

typedef struct atb_case {
    memra_attn_args_t a[KC_BATCH_SIDES][MEMRA_MAX_BATCH];
    int n;
} atb_case;

static memra_status_t atb_run(void *c, memra__backend_t *be, int side)
{
    atb_case *k = c;
    return memra__attention_batch(be, k->a[side], k->n);
}

/* Cache rows of TYPE for N_KEYS random keys in [LO, HI) (made with
 * memra__quantize_row, so both sides get the same bytes), ROW_BYTES apart
 * from DST on. The floats are freed at once: a case of 64 caches would
 * otherwise hold 128 tracked buffers. */
static bool atb_rows(kc *k, memra_type_t type, int64_t kvw, int64_t n_keys, size_t row_bytes, float lo, float hi,
                     uint8_t *dst)
{
    float *x = malloc((size_t)(n_keys * kvw) * sizeof *x);
    if (!x) {
        memra__kc_track(k, NULL, NULL); /* fails the suite: out of host memory */
        return false;
    }
    for (int64_t i = 0; i < n_keys * kvw; i++)
        x[i] = memra__kc_unif(k, lo, hi);
    for (int64_t p = 0; p < n_keys; p++)
        memra__quantize_row(type, x + p * kvw, dst + (size_t)p * row_bytes, kvw);
    free(x);
    return true;
}

/* N sequences of a step, each over its own cache of K rows KT and V rows
 * VT at its own depth: item 0 at depth 0 (one key), item 1 at MAX_POS,
 * the rest at random depths in between, so their split counts differ.
 * PREFILL > 0: item 2 is a chunk of that many queries (the batched op
 * leaves it to the one-item launch). MIXED: every third item's cache is
 * F16/F16 instead (another kernel: one-item launches too). GATED: qwen35's
 * output gate, head h's gate 2*hd apart after its q. FAST: the GPU side on
 * the fast engine (decode queries take the same kernel there; a chunk of
 * more than 8 queries the tensor cores, hence their bound). */
void memra__kc_attention_batch(kc *k, const char *name, int n, memra_type_t kt, memra_type_t vt, int64_t max_pos,
                               int64_t n_head, int64_t n_kv, int64_t hd, int64_t n_swa, bool gated, int64_t prefill,
                               bool mixed, bool fast)
{
    memra_kernel_check_line_t *L = memra__kc_line(
        k, name, "nmse", fast && prefill > 0 ? TOL_ATTN_F16 : TOL_F32,
        "%d seqs at depth 0..%lld, K %s, V %s, %lld/%lld heads x %lld, swa %lld%s%s%s%s", n,
        (long long)max_pos, memra__kc_tname(kt), memra__kc_tname(vt), (long long)n_head, (long long)n_kv,
        (long long)hd, (long long)n_swa, gated ? ", gate" : "", prefill > 0 ? ", a prefill" : "",
        mixed ? ", mixed types" : "", fast ? " fast" : "");
    if (!L)
        return;
    if (n < 3 || n > MEMRA_MAX_BATCH) {
        memra__kc_op_failed(k, L, "case", MEMRA_E_INVALID);
        return;
    }
    const int64_t kvw = n_kv * hd, qw = n_head * hd, qs = qw + 4, gw = 2 * qw;
    int64_t nt[MEMRA_MAX_BATCH], pos[MEMRA_MAX_BATCH], row0[MEMRA_MAX_BATCH + 1];
    memra_type_t ty[MEMRA_MAX_BATCH][2];
    size_t rb[MEMRA_MAX_BATCH][2], off[MEMRA_MAX_BATCH + 1][2] = {{0, 0}};
    for (int i = 0; i < n; i++) {
        nt[i] = i == 2 && prefill > 0 ? prefill : 1;
        pos[i] = i == 0 ? 0 : i == 1 ? max_pos : memra__kc_int(k, max_pos + 1);
        const bool other = mixed && i % 3 == 2;
        ty[i][0] = other ? MEMRA_TYPE_F16 : kt;
        ty[i][1] = other ? MEMRA_TYPE_F16 : vt;
        for (int j = 0; j < 2; j++) {
            rb[i][j] = memra__row_bytes(ty[i][j], kvw) + 16; /* rows wider than their data, as cache rows may be */
            off[i + 1][j] = off[i][j] + rb[i][j] * (size_t)(pos[i] + nt[i]);
        }
    }
    kc_rows(n, nt, row0);
    /* the caches: item i's K rows at off[i][0] of one buffer, V likewise */
    void *cache[2][2];
    for (int j = 0; j < 2; j++) {
        uint8_t *h = memra__kc_host(k, off[n][j]);
        if (!h)
            return;
        memset(h, 0, off[n][j]);
        for (int i = 0; i < n; i++)
            if (!atb_rows(k, ty[i][j], kvw, pos[i] + nt[i], rb[i][j], j ? -1.0f : -3.0f, j ? 1.0f : 3.0f,
                          h + off[i][j]))
                return;
        if (!memra__kc_both(k, h, off[n][j], cache[j]))
            return;
    }
    float *q = memra__kc_randf(k, (size_t)(row0[n] * qs), -1.0f, 1.0f);
    float *gt = gated ? memra__kc_randf(k, (size_t)(row0[n] * gw), -4.0f, 4.0f) : NULL;
    void *qp[2], *gp[2] = {NULL, NULL};
    if (!q || !memra__kc_both(k, q, (size_t)(row0[n] * qs) * 4, qp) || (gated && !gt) ||
        (gated && !memra__kc_both(k, gt, (size_t)(row0[n] * gw) * 4, gp)))
        return;
    const kc_out o = {row0[n], qw, qw};
    atb_case c;
    c.n = n;
    for (int s = 0; s < KC_BATCH_SIDES; s++) {
        const int d = s ? 1 : 0; /* the side's copy of the inputs */
        float *out = memra__kc_out_new(k, s ? k->gpu : k->cpu, &o, NULL);
        if (!out)
            return;
        for (int i = 0; i < n; i++)
            c.a[s][i] = (memra_attn_args_t){
                .q = (const float *)qp[d] + row0[i] * qs, .k_cache = (const uint8_t *)cache[0][d] + off[i][0],
                .v_cache = (const uint8_t *)cache[1][d] + off[i][1], .out = out + row0[i] * qw, .n_tokens = nt[i],
                .pos0 = pos[i], .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .q_stride = qs,
                .scale = 1.0f / sqrtf((float)hd), .n_swa = n_swa,
                .gate = gated ? (const float *)gp[d] + row0[i] * gw + hd : NULL, .gate_stride = gw,
                .gate_head_stride = 2 * hd, .k_type = ty[i][0], .v_type = ty[i][1], .k_row_bytes = rb[i][0],
                .v_row_bytes = rb[i][1]};
    }
    const kc_fused_out f = {c.a[0][0].out, c.a[1][0].out, c.a[2][0].out, &o, "out"};
    double bytes = 0;
    for (int i = 0; i < n; i++) {
        const int64_t keys = pos[i] + nt[i], span = n_swa > 0 && n_swa < keys ? n_swa : keys;
        bytes += (double)span * (double)(rb[i][0] + rb[i][1] - 32);
    }
    memra__kc_check_batch(k, L, fast ? k->fast : k->gpu, &f, 1, atb_run, &c, bytes);
}

/* ---- the Gated DeltaNet step -------------------------------------------------- */

typedef struct gdb_case {
    memra_gdn_args_t a[KC_BATCH_SIDES][MEMRA_MAX_BATCH];
    int n;
} gdb_case;

static memra_status_t gdb_run(void *c, memra__backend_t *be, int side)
{
    gdb_case *k = c;
    return memra__gdn_batch(be, k->a[side], k->n);
}

/* N sequences' steps as qwen35's deltanet lays them out: the step's rows
 * back to back (raw projections, gate, decay, beta), each sequence its own
 * delta-rule state and (CONV) conv state. PREFILL > 0: item 1 is a chunk of
 * that many tokens (left to the one-item path). Outputs y, the states and
 * the conv states of every item. FAST: the GPU side on the fast engine. */
void memra__kc_gdn_batch(kc *k, const char *name, int n, int64_t n_k, int64_t n_v, int64_t d, bool conv_on,
                         int64_t prefill, bool fast)
{
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "nmse", TOL_F32, "%d seqs, %lld k / %lld v heads x %lld%s%s (y + states)%s", n,
                       (long long)n_k, (long long)n_v, (long long)d, conv_on ? ", conv" : "",
                       prefill > 0 ? ", a prefill" : "", fast ? " fast" : "");
    if (!L)
        return;
    if (n < 2 || n > MEMRA_MAX_BATCH) {
        memra__kc_op_failed(k, L, "case", MEMRA_E_INVALID);
        return;
    }
    int64_t nt[MEMRA_MAX_BATCH], row0[MEMRA_MAX_BATCH + 1];
    for (int i = 0; i < n; i++)
        nt[i] = i == 1 && prefill > 0 ? prefill : 1;
    kc_rows(n, nt, row0);
    const int64_t T = row0[n], KD = n_k * d, VD = n_v * d, K = 4;
    /* with the conv its rows are exactly q|k|v (the fused kernel's layout) */
    const int64_t C = 2 * KD + VD + (conv_on ? 0 : 4), gs = n_v + 2, zs = VD + 3;
    float *raw = memra__kc_randf(k, (size_t)(T * C), -1.0f, 1.0f), *g = memra__kc_randf(k, (size_t)(T * gs), -1.5f, 0.0f);
    float *b = memra__kc_randf(k, (size_t)(T * gs), 0.05f, 0.95f), *z = memra__kc_randf(k, (size_t)(T * zs), -3.0f, 3.0f);
    float *nw = memra__kc_randf(k, (size_t)d, 0.5f, 1.5f), *cw = memra__kc_randf(k, (size_t)(C * K), -0.6f, 0.6f);
    float *state = memra__kc_randf(k, (size_t)(n * n_v * d * d), -0.1f, 0.1f);
    float *cst = memra__kc_randf(k, (size_t)(n * C * (K - 1)), -1.0f, 1.0f);
    void *rp[2], *gp[2], *bp[2], *zp[2], *np[2], *cwp[2];
    if (!raw || !g || !b || !z || !nw || !cw || !state || !cst || !memra__kc_both(k, raw, (size_t)(T * C) * 4, rp) ||
        !memra__kc_both(k, g, (size_t)(T * gs) * 4, gp) || !memra__kc_both(k, b, (size_t)(T * gs) * 4, bp) ||
        !memra__kc_both(k, z, (size_t)(T * zs) * 4, zp) || !memra__kc_both(k, nw, (size_t)d * 4, np) ||
        !memra__kc_both(k, cw, (size_t)(C * K) * 4, cwp))
        return;
    const kc_out oy = {T, VD, VD}, os = {n * n_v, d * d, d * d}, ocs = {n * C, K - 1, K - 1}, ocv = {T, C, C};
    gdb_case c;
    c.n = n;
    for (int s = 0; s < KC_BATCH_SIDES; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const int di = s ? 1 : 0;
        float *y = memra__kc_out_new(k, be, &oy, NULL), *st = memra__kc_out_new(k, be, &os, state);
        float *cs = conv_on ? memra__kc_out_new(k, be, &ocs, cst) : NULL;
        float *co = conv_on ? memra__kc_out_new(k, be, &ocv, NULL) : NULL;
        float *qk = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(T * 2 * KD) * 4));
        float *ot = memra__kc_track(k, be, be->iface->alloc(be, (size_t)(T * VD) * 4));
        if (!y || !st || (conv_on && (!cs || !co)) || !qk || !ot)
            return;
        for (int i = 0; i < n; i++) {
            const int64_t r0 = row0[i];
            const float *in = (const float *)rp[di] + r0 * C, *qkv = conv_on ? co + r0 * C : in;
            memra_gdn_args_t a = {
                .delta = {.q = qkv, .k = qkv + KD, .v = qkv + 2 * KD, .g = (const float *)gp[di] + r0 * gs,
                          .beta = (const float *)bp[di] + r0 * gs, .qk_stride = C, .v_stride = C, .gb_stride = gs,
                          .state = st + i * n_v * d * d, .out = ot + r0 * VD, .n_tokens = nt[i], .n_k = n_k, .n_v = n_v,
                          .d = d, .scale = 1.0f / sqrtf((float)d)},
                .l2_eps = 1e-6f, .norm_w = np[di], .norm_eps = 1e-6f, .z = (const float *)zp[di] + r0 * zs,
                .z_stride = zs, .y = y + r0 * VD, .qk_tmp = qk + r0 * 2 * KD, .o_tmp = ot + r0 * VD};
            if (conv_on)
                a.conv = (memra_conv_args_t){.x = in, .x_stride = C, .state = cs + i * C * (K - 1), .w = cwp[di],
                                             .out = co + r0 * C, .n_tokens = nt[i], .channels = C, .kernel = K};
            c.a[s][i] = a;
        }
    }
    const kc_fused_out f[3] = {
        {c.a[0][0].y, c.a[1][0].y, c.a[2][0].y, &oy, "y"},
        {c.a[0][0].delta.state, c.a[1][0].delta.state, c.a[2][0].delta.state, &os, "state"},
        {c.a[0][0].conv.state, c.a[1][0].conv.state, c.a[2][0].conv.state, &ocs, "conv state"}};
    memra__kc_check_batch(k, L, fast ? k->fast : k->gpu, f, conv_on ? 3 : 2, gdb_run, &c,
                          (double)(2 * n * n_v * d * d * 4));
}
