/* The batched per-sequence op wrappers (memra__attention_batch,
 * memra__kv_store_batch, memra__gdn_batch; lib/batch_ops.c): on a CPU
 * backend whose batched slots take some items (the even ones, run through
 * the one-item op) and leave the rest, every item's output is the bits of
 * its own one-item call, each item runs exactly once, the slot sees only
 * items with work, and a bad item or two items writing the same memory
 * fail the whole call before anything runs, the message naming them; the
 * overlap check agrees with the pairwise definition on random layouts. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "quant.h"
#include "testutil.h"

static memra__backend_t *g_cpu;

/* ---- a CPU backend with counting, half-taking batched slots ----------------- */

static struct {
    int one;        /* one-item calls (attention, kv_store, delta: one per gdn step) */
    int slot_calls; /* batched slot calls */
    int slot_items; /* items the slots were given */
    bool take_none; /* the slots decline everything */
    bool claim_all; /* the gdn slot marks every item done without running it */
} g_n;

static memra_status_t one_attention(memra__backend_t *be, const memra_attn_args_t *a)
{
    g_n.one++;
    return g_cpu->iface->attention(be, a);
}

static memra_status_t one_kv_store(memra__backend_t *be, const memra_kv_store_args_t *a)
{
    g_n.one++;
    return g_cpu->iface->kv_store(be, a);
}

static memra_status_t one_delta(memra__backend_t *be, const memra_delta_args_t *a)
{
    g_n.one++;
    return g_cpu->iface->delta(be, a);
}

static memra_status_t slot_attention(memra__backend_t *be, const memra_attn_args_t *a, int32_t n, bool *done)
{
    g_n.slot_calls++;
    g_n.slot_items += n;
    for (int32_t i = 0; i < n && !g_n.take_none; i += 2) {
        assert_false(done[i]);
        assert_int_equal(g_cpu->iface->attention(be, &a[i]), MEMRA_OK);
        done[i] = true;
    }
    return MEMRA_OK;
}

static memra_status_t slot_kv_store(memra__backend_t *be, const memra_kv_store_args_t *a, int32_t n, bool *done)
{
    g_n.slot_calls++;
    g_n.slot_items += n;
    for (int32_t i = 0; i < n && !g_n.take_none; i += 2) {
        assert_int_equal(g_cpu->iface->kv_store(be, &a[i]), MEMRA_OK);
        done[i] = true;
    }
    return MEMRA_OK;
}

static memra_status_t slot_gdn(memra__backend_t *be, const memra_gdn_args_t *a, int32_t n, bool *done)
{
    g_n.slot_calls++;
    g_n.slot_items += n;
    for (int32_t i = 0; i < n && g_n.claim_all; i++)
        done[i] = true;
    /* the one-item path of an even item on the plain backend: its bits */
    for (int32_t i = 0; i < n && !g_n.take_none && !g_n.claim_all; i += 2) {
        assert_int_equal(memra__gdn(g_cpu, &a[i]), MEMRA_OK);
        done[i] = true;
    }
    return MEMRA_OK;
}

static memra__backend_i g_iface;
static memra__backend_t g_test; /* g_cpu with the slots above */

static void reset_counts(void)
{
    memset(&g_n, 0, sizeof g_n);
}

/* ---- inputs ----------------------------------------------------------------- */

static uint64_t g_rng = 0x5eed;

static float *randf(size_t n, float lo, float hi)
{
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * (float)tu_rng_unit(&g_rng);
    return p;
}

static float *copyf(const float *x, size_t n)
{
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

/* ---- attention -------------------------------------------------------------- */

#define N_SEQ 7
#define HD 16
#define NH 4
#define NKV 2
#define MAXPOS 90

/* N_SEQ sequences, each its own cache at its own depth; item 3 a chunk of
 * 4 queries, item 5 with nothing to do (0 tokens). */
typedef struct at_fix {
    float *q, *k, *v, *out, *out_ref;
    memra_attn_args_t a[N_SEQ];
} at_fix;

static void at_make(at_fix *f)
{
    const int64_t kvw = NKV * HD, qw = NH * HD, rows = N_SEQ * 4;
    f->q = randf((size_t)(rows * qw), -1, 1);
    f->k = randf((size_t)(N_SEQ * (MAXPOS + 4) * kvw), -1, 1);
    f->v = randf((size_t)(N_SEQ * (MAXPOS + 4) * kvw), -1, 1);
    f->out = calloc((size_t)(rows * qw), sizeof(float));
    f->out_ref = calloc((size_t)(rows * qw), sizeof(float));
    assert_non_null(f->out);
    assert_non_null(f->out_ref);
    for (int i = 0; i < N_SEQ; i++) {
        const int64_t cache = (int64_t)i * (MAXPOS + 4) * kvw;
        f->a[i] = (memra_attn_args_t){.q = f->q + i * 4 * qw, .k_cache = f->k + cache, .v_cache = f->v + cache,
                                      .out = f->out + i * 4 * qw, .n_tokens = i == 3 ? 4 : i == 5 ? 0 : 1,
                                      .pos0 = tu_rng_int(&g_rng, MAXPOS), .n_head = NH, .n_kv_head = NKV,
                                      .head_dim = HD, .q_stride = qw, .kv_stride = kvw, .scale = 0.25f};
    }
}

static void at_free(at_fix *f)
{
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->out);
    free(f->out_ref);
}

static void attention_items_bit_identical(void **state)
{
    (void)state;
    at_fix f;
    at_make(&f);
    for (int i = 0; i < N_SEQ; i++) { /* the reference: each item alone */
        memra_attn_args_t r = f.a[i];
        r.out = f.out_ref + (r.out - f.out);
        assert_int_equal(g_cpu->iface->attention(g_cpu, &r), MEMRA_OK);
    }
    reset_counts();
    assert_int_equal(memra__attention_batch(&g_test, f.a, N_SEQ), MEMRA_OK);
    assert_memory_equal(f.out, f.out_ref, (size_t)(N_SEQ * 4 * NH * HD) * sizeof(float));
    assert_int_equal(g_n.slot_calls, 1);
    assert_int_equal(g_n.slot_items, N_SEQ - 1); /* not item 5 (nothing to do) */
    assert_int_equal(g_n.one, (N_SEQ - 1) / 2);  /* the odd ones of the six */

    /* a slot that takes nothing: every item through the one-item op */
    reset_counts();
    g_n.take_none = true;
    memset(f.out, 0, (size_t)(N_SEQ * 4 * NH * HD) * sizeof(float));
    assert_int_equal(memra__attention_batch(&g_test, f.a, N_SEQ), MEMRA_OK);
    assert_memory_equal(f.out, f.out_ref, (size_t)(N_SEQ * 4 * NH * HD) * sizeof(float));
    assert_int_equal(g_n.one, N_SEQ - 1);

    /* one item: the one-item op alone; none: nothing */
    reset_counts();
    assert_int_equal(memra__attention_batch(&g_test, f.a, 1), MEMRA_OK);
    assert_int_equal(g_n.slot_calls, 0);
    assert_int_equal(g_n.one, 1);
    reset_counts();
    assert_int_equal(memra__attention_batch(&g_test, f.a, 0), MEMRA_OK);
    assert_int_equal(g_n.slot_calls + g_n.one, 0);
    at_free(&f);
}

static void attention_bad_items_run_nothing(void **state)
{
    (void)state;
    at_fix f;
    at_make(&f);
    /* a bad shape in item 4: the call fails naming it, nothing ran */
    f.a[4].n_head = 3;
    reset_counts();
    assert_int_equal(memra__attention_batch(&g_test, f.a, N_SEQ), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "item 4"));
    assert_int_equal(g_n.slot_calls + g_n.one, 0);
    f.a[4].n_head = NH;
    /* items 2 and 6 writing the same rows */
    f.a[6].out = f.a[2].out;
    reset_counts();
    assert_int_equal(memra__attention_batch(&g_test, f.a, N_SEQ), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "items 2 and 6"));
    assert_int_equal(g_n.slot_calls + g_n.one, 0);
    /* an item with nothing to do may point anywhere */
    f.a[6].out = f.out + 6 * 4 * NH * HD;
    f.a[5].out = f.a[0].out;
    assert_int_equal(memra__attention_batch(&g_test, f.a, N_SEQ), MEMRA_OK);
    /* counts outside 0..MEMRA_MAX_BATCH, and NULL items */
    assert_int_equal(memra__attention_batch(&g_test, f.a, -1), MEMRA_E_INVALID);
    assert_int_equal(memra__attention_batch(&g_test, f.a, MEMRA_MAX_BATCH + 1), MEMRA_E_INVALID);
    assert_int_equal(memra__attention_batch(&g_test, NULL, 3), MEMRA_E_INVALID);
    at_free(&f);
}

/* ---- kv_store --------------------------------------------------------------- */

static void kv_store_items_bit_identical(void **state)
{
    (void)state;
    enum { N = 6, COLS = 64, ROWS = 3 };
    static const memra_type_t types[N] = {MEMRA_TYPE_Q8_0, MEMRA_TYPE_F16, MEMRA_TYPE_F32,
                                          MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0, MEMRA_TYPE_F32};
    const size_t rb = (size_t)COLS * 4 + 8; /* room for the widest type */
    float *x = randf((size_t)(N * ROWS * COLS), -3, 3);
    uint8_t *dst = calloc(N * ROWS, rb), *ref = calloc(N * ROWS, rb);
    assert_non_null(dst);
    assert_non_null(ref);
    memra_kv_store_args_t a[N];
    for (int i = 0; i < N; i++) {
        a[i] = (memra_kv_store_args_t){.src = x + i * ROWS * COLS, .src_stride = COLS, .dst = dst + i * ROWS * rb,
                                       .dst_row_bytes = rb, .type = types[i], .rows = 1 + i % ROWS, .cols = COLS};
        memra_kv_store_args_t r = a[i];
        r.dst = ref + i * ROWS * rb;
        assert_int_equal(g_cpu->iface->kv_store(g_cpu, &r), MEMRA_OK);
    }
    reset_counts();
    assert_int_equal(memra__kv_store_batch(&g_test, a, N), MEMRA_OK);
    assert_memory_equal(dst, ref, N * ROWS * rb);
    assert_int_equal(g_n.slot_calls, 1);
    assert_int_equal(g_n.one, N / 2);
    /* the last row of item 1 reaching into item 2's first */
    a[1].dst_row_bytes = (size_t)ROWS * rb;
    reset_counts();
    assert_int_equal(memra__kv_store_batch(&g_test, a, N), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "items 1 and 2"));
    assert_int_equal(g_n.slot_calls + g_n.one, 0);
    /* q8_0 of a partial block */
    a[1].dst_row_bytes = rb;
    a[4].cols = COLS - 8;
    assert_int_equal(memra__kv_store_batch(&g_test, a, N), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "item 4"));
    free(x);
    free(dst);
    free(ref);
}

/* ---- gdn --------------------------------------------------------------------- */

static void gdn_items_bit_identical(void **state)
{
    (void)state;
    enum { N = 5, NK = 2, NV = 4, D = 16, KW = 4 };
    const int64_t KD = NK * D, VD = NV * D, C = 2 * KD + VD, T = N + 2; /* item 1: three tokens */
    float *raw = randf((size_t)(T * C), -1, 1), *g = randf((size_t)(T * NV), -1.5f, 0), *b = randf((size_t)(T * NV), 0.1f, 0.9f);
    float *z = randf((size_t)(T * VD), -3, 3), *nw = randf(D, 0.5f, 1.5f), *cw = randf((size_t)(C * KW), -0.6f, 0.6f);
    float *st0 = randf((size_t)(N * NV * D * D), -0.1f, 0.1f), *cs0 = randf((size_t)(N * C * (KW - 1)), -1, 1);
    float *st[2] = {copyf(st0, (size_t)(N * NV * D * D)), copyf(st0, (size_t)(N * NV * D * D))};
    float *cs[2] = {copyf(cs0, (size_t)(N * C * (KW - 1))), copyf(cs0, (size_t)(N * C * (KW - 1)))};
    float *y[2], *co[2], *qk[2], *ot[2];
    for (int s = 0; s < 2; s++) {
        y[s] = calloc((size_t)(T * VD), sizeof(float));
        co[s] = calloc((size_t)(T * C), sizeof(float));
        qk[s] = calloc((size_t)(T * 2 * KD), sizeof(float));
        ot[s] = calloc((size_t)(T * VD), sizeof(float));
        assert_true(y[s] && co[s] && qk[s] && ot[s]);
    }
    memra_gdn_args_t a[2][N];
    for (int s = 0; s < 2; s++)
        for (int i = 0, r0 = 0; i < N; r0 += i == 1 ? 3 : 1, i++) {
            const int64_t n = i == 1 ? 3 : 1;
            a[s][i] = (memra_gdn_args_t){
                .conv = {.x = raw + r0 * C, .x_stride = C, .state = cs[s] + i * C * (KW - 1), .w = cw,
                         .out = co[s] + r0 * C, .n_tokens = n, .channels = C, .kernel = KW},
                .delta = {.q = co[s] + r0 * C, .k = co[s] + r0 * C + KD, .v = co[s] + r0 * C + 2 * KD, .g = g + r0 * NV,
                          .beta = b + r0 * NV, .qk_stride = C, .v_stride = C, .gb_stride = NV,
                          .state = st[s] + i * NV * D * D, .out = ot[s] + r0 * VD, .n_tokens = n, .n_k = NK, .n_v = NV,
                          .d = D, .scale = 0.25f},
                .l2_eps = 1e-6f, .norm_w = nw, .norm_eps = 1e-6f, .z = z + r0 * VD, .z_stride = VD, .y = y[s] + r0 * VD,
                .qk_tmp = qk[s] + r0 * 2 * KD, .o_tmp = ot[s] + r0 * VD};
        }
    for (int i = 0; i < N; i++)
        assert_int_equal(memra__gdn(g_cpu, &a[0][i]), MEMRA_OK);
    reset_counts();
    assert_int_equal(memra__gdn_batch(&g_test, a[1], N), MEMRA_OK);
    assert_memory_equal(y[0], y[1], (size_t)(T * VD) * sizeof(float));
    assert_memory_equal(st[0], st[1], (size_t)(N * NV * D * D) * sizeof(float));
    assert_memory_equal(cs[0], cs[1], (size_t)(N * C * (KW - 1)) * sizeof(float));
    assert_int_equal(g_n.slot_calls, 1);
    assert_int_equal(g_n.one, N / 2); /* one delta each: the odd steps through the test backend */
    /* two steps on one state */
    a[1][3].delta.state = a[1][1].delta.state;
    reset_counts();
    assert_int_equal(memra__gdn_batch(&g_test, a[1], N), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "items 1 and 3"));
    assert_int_equal(g_n.slot_calls + g_n.one, 0);
    a[1][3].delta.state = st[1] + 3 * NV * D * D;
    /* a conv of another length than the step */
    a[1][2].conv.n_tokens = 2;
    assert_int_equal(memra__gdn_batch(&g_test, a[1], N), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "item 2"));
    assert_int_equal(g_n.slot_calls + g_n.one, 0);
    float *all[] = {raw, g, b, z, nw, cw, st0, cs0, st[0], st[1], cs[0], cs[1],
                    y[0], y[1], co[0], co[1], qk[0], qk[1], ot[0], ot[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* The independence check against the pairwise definition: random steps
 * of five items whose six written ranges each (y, state, scratch, conv
 * state and rows) are placed at random in a small window, overlapping one
 * another within an item (allowed) and across items (refused). The slot
 * claims every item without running it, so the pointers are never used. */
static void gdn_overlap_check_matches_pairs(void **state)
{
    (void)state;
    enum { N = 5, D = 2, TRIALS = 3000 };
    static float window[4096];
    memra_gdn_args_t a[N];
    int refused = 0;
    g_n.claim_all = true;
    for (int trial = 0; trial < TRIALS; trial++) {
        const void *p[N][6];
        size_t len[N][6];
        for (int i = 0; i < N; i++) {
            float *at[6];
            for (int j = 0; j < 6; j++)
                at[j] = window + tu_rng_int(&g_rng, 4000);
            /* n_v = 1, d = 2, n_k = 1, conv of 8 channels, kernel 3: y 2, state 4, qk 4, o 2, conv state 16, conv
             * rows 8 floats */
            a[i] = (memra_gdn_args_t){
                .conv = {.x = window, .x_stride = 8, .state = at[4], .w = window, .out = at[5], .n_tokens = 1,
                         .channels = 8, .kernel = 3},
                .delta = {.q = window, .k = window, .v = window, .g = window, .beta = window, .state = at[1],
                          .out = at[3], .n_tokens = 1, .n_k = 1, .n_v = 1, .d = D, .scale = 1.0f},
                .norm_w = window, .z = window, .z_stride = D, .y = at[0], .qk_tmp = at[2], .o_tmp = at[3]};
            const size_t fl[6] = {2, 4, 4, 2, 16, 8};
            for (int j = 0; j < 6; j++) {
                p[i][j] = at[j];
                len[i][j] = fl[j] * sizeof(float);
            }
        }
        bool overlap = false;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < i; j++)
                for (int x = 0; x < 6; x++)
                    for (int y = 0; y < 6; y++)
                        overlap = overlap || memra__ranges_overlap(p[i][x], len[i][x], p[j][y], len[j][y]);
        const memra_status_t st = memra__gdn_batch(&g_test, a, N);
        assert_int_equal(st, overlap ? MEMRA_E_INVALID : MEMRA_OK);
        refused += overlap;
    }
    g_n.claim_all = false;
    /* both verdicts well represented */
    assert_true(refused > TRIALS / 10 && refused < TRIALS - TRIALS / 10);
}

int main(void)
{
    if (memra__cpu_backend_create(2, &g_cpu) != MEMRA_OK)
        return 1;
    g_iface = *g_cpu->iface;
    g_iface.attention = one_attention;
    g_iface.kv_store = one_kv_store;
    g_iface.delta = one_delta;
    g_iface.attention_batch = slot_attention;
    g_iface.kv_store_batch = slot_kv_store;
    g_iface.gdn_batch = slot_gdn;
    g_test = *g_cpu;
    g_test.iface = &g_iface;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(attention_items_bit_identical),
        cmocka_unit_test(attention_bad_items_run_nothing),
        cmocka_unit_test(kv_store_items_bit_identical),
        cmocka_unit_test(gdn_items_bit_identical),
        cmocka_unit_test(gdn_overlap_check_matches_pairs),
    };
    const int r = cmocka_run_group_tests(tests, NULL, NULL);
    memra__cpu_backend_destroy(g_cpu);
    return r;
}
