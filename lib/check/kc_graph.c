/* Kernel check case: recorded steps (backend.h graph_*). A decode step's
 * attention and KV store, recorded at one position and replayed at two
 * later ones (the position read on the device), give the bits of direct
 * calls at those positions. */
#include "kc.h"

typedef struct gr_bufs {
    float *q, *kv, *x;        /* query, F32 K|V cache rows, the row to store */
    int32_t *pos;             /* device: the step's position */
    float *out_ref[2], *out_rep[2], *out_g; /* out_g: the recording's output */
    void *rows_ref, *rows_rep; /* stored rows of TYPE */
} gr_bufs;

static memra_status_t set_pos(memra__backend_t *be, int32_t *pos_dev, int64_t pos)
{
    const int32_t p = (int32_t)pos;
    memra_status_t st = be->iface->upload(be, pos_dev, &p, sizeof p);
    return st ? st : be->iface->synchronize(be);
}

/* The recorded form of the step at POS_REC (host arguments of that
 * position, the device's position in pos_dev, launches sized for KEYS). */
static memra_status_t gr_step(memra__backend_t *be, const memra_attn_args_t *a0, const memra_kv_store_args_t *s0,
                              int32_t *pos_dev, int64_t pos_rec, int64_t keys, float *out)
{
    memra_attn_args_t a = *a0;
    a.pos0 = pos_rec;
    a.pos_dev = pos_dev;
    a.keys_max = keys;
    a.out = out;
    memra_kv_store_args_t s = *s0;
    s.dst = (char *)s.dst + pos_rec * (int64_t)s.dst_row_bytes;
    s.pos = pos_rec;
    s.pos_dev = pos_dev;
    memra_status_t st = be->iface->attention(be, &a);
    return st ? st : be->iface->kv_store(be, &s);
}

void memra__kc_graph_replay(kc *k, const char *name, memra_type_t type, int64_t pos_rec, int64_t pos_a, int64_t pos_b,
                            int64_t n_head, int64_t n_kv, int64_t hd, int64_t n_swa)
{
    memra_kernel_check_line_t *L =
        memra__kc_line(k, name, "exact", 0, "recorded at %lld, replayed at %lld and %lld: %lld/%lld heads x %lld, swa %lld, rows %s",
                       (long long)pos_rec, (long long)pos_a, (long long)pos_b, (long long)n_head, (long long)n_kv,
                       (long long)hd, (long long)n_swa, memra__kc_tname(type));
    if (!L)
        return;
    memra__backend_t *gb = k->gpu;
    const memra__backend_i *ops = gb->iface;
    if (!ops->graph_begin) {
        memra__kc_op_failed(k, L, "graph", MEMRA_E_UNSUPPORTED);
        return;
    }
    const int64_t n_keys = pos_b + 1, kvs = n_kv * hd, qs = n_head * hd, w = n_kv * hd;
    const int64_t keys = (n_keys + 255) / 256 * 256;
    const size_t rb = memra__row_bytes(type, w);
    const kc_out oo = {1, qs, qs}, ro = {n_keys, (int64_t)rb / 4, (int64_t)rb / 4};
    float *q = memra__kc_randf(k, (size_t)qs, -1.0f, 1.0f), *kv = memra__kc_randf(k, (size_t)(2 * n_keys * kvs), -1.0f, 1.0f);
    float *x = memra__kc_randf(k, (size_t)w, -3.0f, 3.0f);
    if (!q || !kv || !x || rb % 4) {
        memra__kc_op_failed(k, L, "case", MEMRA_E_INVALID);
        return;
    }
    const int32_t zero = 0;
    gr_bufs b = {
        .q = memra__kc_put(k, gb, q, (size_t)qs * 4), .kv = memra__kc_put(k, gb, kv, (size_t)(2 * n_keys * kvs) * 4),
        .x = memra__kc_put(k, gb, x, (size_t)w * 4), .pos = memra__kc_put(k, gb, &zero, sizeof zero),
    };
    for (int i = 0; i < 2; i++) {
        b.out_ref[i] = memra__kc_out_new(k, gb, &oo, NULL);
        b.out_rep[i] = memra__kc_out_new(k, gb, &oo, NULL);
    }
    b.out_g = memra__kc_out_new(k, gb, &oo, NULL);
    /* rows the steps do not write are zero on both sides */
    float *zeros = memra__kc_host(k, (size_t)(n_keys * ro.cols) * sizeof *zeros);
    if (!zeros)
        return;
    memset(zeros, 0, (size_t)(n_keys * ro.cols) * sizeof *zeros);
    b.rows_ref = memra__kc_out_new(k, gb, &ro, zeros);
    b.rows_rep = memra__kc_out_new(k, gb, &ro, zeros);
    if (!b.q || !b.kv || !b.x || !b.pos || !b.out_ref[0] || !b.out_ref[1] || !b.out_rep[0] || !b.out_rep[1] ||
        !b.out_g || !b.rows_ref || !b.rows_rep)
        return;
    const memra_attn_args_t a0 = {.q = b.q, .k_cache = b.kv, .v_cache = b.kv + n_keys * kvs, .n_tokens = 1,
                                  .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .q_stride = qs,
                                  .kv_stride = kvs, .scale = 1.0f / sqrtf((float)hd), .n_swa = n_swa};
    const memra_kv_store_args_t s0 = {.src = b.x, .src_stride = w, .dst = b.rows_rep, .dst_row_bytes = rb,
                                      .type = type, .rows = 1, .cols = w};
    const int64_t at[2] = {pos_a, pos_b};
    /* direct calls at each position */
    memra_status_t st = MEMRA_OK;
    for (int i = 0; i < 2 && !st; i++) {
        memra_attn_args_t a = a0;
        a.pos0 = at[i];
        a.out = b.out_ref[i];
        memra_kv_store_args_t s = s0;
        s.dst = (char *)b.rows_ref + at[i] * (int64_t)rb;
        st = ops->attention(gb, &a);
        if (!st)
            st = ops->kv_store(gb, &s);
    }
    /* the recorded form once directly (it grows the scratch the recording
     * uses, as the forward's first step of a key does), then recorded */
    if (!st)
        st = set_pos(gb, b.pos, pos_rec);
    if (!st)
        st = gr_step(gb, &a0, &s0, b.pos, pos_rec, keys, b.out_g);
    if (!st)
        st = ops->synchronize(gb);
    void *g = NULL;
    const uint64_t epoch = ops->graph_epoch(gb);
    if (!st && !(st = ops->graph_begin(gb))) {
        st = gr_step(gb, &a0, &s0, b.pos, pos_rec, keys, b.out_g);
        const memra_status_t e = ops->graph_end(gb, &g);
        st = st ? st : e;
    }
    if (!st && ops->graph_epoch(gb) != epoch)
        st = MEMRA_E_INTERNAL;
    /* the recorded row at pos_rec (from the direct run) is not a replay's:
     * put the reference's bytes there */
    if (!st)
        st = ops->copy(gb, (char *)b.rows_rep + pos_rec * (int64_t)rb, (char *)b.rows_ref + pos_rec * (int64_t)rb, rb);
    for (int i = 0; i < 2 && !st; i++) {
        st = set_pos(gb, b.pos, at[i]);
        if (!st)
            st = ops->graph_launch(gb, g);
        if (!st)
            st = ops->copy(gb, b.out_rep[i], b.out_g, (size_t)qs * 4);
    }
    if (!st)
        st = ops->synchronize(gb);
    if (g)
        ops->graph_free(gb, g);
    const kc_pair p[3] = {{b.out_ref[0], b.out_rep[0], &oo, "out at a"},
                          {b.out_ref[1], b.out_rep[1], &oo, "out at b"},
                          {b.rows_ref, b.rows_rep, &ro, "rows"}};
    memra__kc_finish_exact(k, L, st, p, 3);
}
