/* memra_forward_batch_deferred (include/memra/pipeline.h,
 * docs/BATCHING.md): a batched decode step queued on the pipeline workers,
 * one pending per item.
 *
 * For every fixture model ($MEMRA_FIXTURES/models/<name>.gguf), on one
 * stage, on two pipeline stages (the second on a private CPU engine) and
 * on two stages with streams=0 (the step runs inside the call):
 *   - a schedule of decode steps over 8 sequences (each step a seeded
 *     random subset, so sequences join and leave, one step a single
 *     memra_decode_step_deferred) queued two steps ahead of the waits:
 *     every logits row is bit-identical (memcmp) to the same schedule run
 *     through the synchronous memra_forward_batch on fresh caches;
 *   - pendings freed without a wait, before and after their step finished,
 *     leak nothing (the ASan build runs this) and leave the caches where
 *     the queued steps put them;
 *   - misuse and bad input: a second wait or free of a consumed pending
 *     (MEMRA_E_MISUSE); the synchronous calls and cache clear/free on a
 *     cache in flight (MEMRA_E_BUSY); every bad item (the bad one last):
 *     its status, a message naming the call, every OUT entry NULL and no
 *     cache moved; afterwards the same sequences still give the rows of
 *     the same tokens run alone.
 * MEMRA_TEST_DEVICE=cuda:0 runs it on a GPU engine (the second stage of a
 * split model stays on a private CPU engine); MEMRA_TEST_FIXTURE=NAME runs
 * one fixture. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "memra/memra.h"
#include "testutil.h"

#define NS 8     /* sequences */
#define STEPS 10 /* decode steps of a schedule */
#define CAP 32   /* cache capacity */
#define AHEAD 2  /* steps queued before the oldest is waited on */

static memra_engine_t *g_engine;

typedef tu_fixture_case_t fixture_case_t; /* testutil.h */

static memra_model_t *load(const fixture_case_t *fc)
{
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", fc->name);
    const char *path = tu_fixture_path(rel);
    assert_non_null(path);
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.engine = g_engine;
    p.n_stages = fc->stages;
    p.streams = fc->streams;
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(path, &p, &m);
    if (st)
        fail_msg("%s: load failed: %s (%s)", fc->name, memra_strerror(st), memra_last_error());
    return m;
}

static bool selected(const char *name)
{
    const char *only = getenv("MEMRA_TEST_FIXTURE");
    return !only || !*only || strcmp(only, name) == 0;
}

/* A fixed schedule: per step which sequences decode (a bit mask, never
 * empty) and every sequence's prompt and decode tokens. */
typedef struct schedule {
    uint32_t mask[STEPS];
    int32_t prompt[NS][4];
    int32_t tok[NS][STEPS];
} schedule_t;

static void make_schedule(schedule_t *s, int32_t n_vocab, uint64_t seed)
{
    uint64_t rng = seed;
    for (int i = 0; i < NS; i++) {
        for (int j = 0; j < 4; j++)
            s->prompt[i][j] = (int32_t)tu_rng_int(&rng, n_vocab);
        for (int j = 0; j < STEPS; j++)
            s->tok[i][j] = (int32_t)tu_rng_int(&rng, n_vocab);
    }
    for (int t = 0; t < STEPS; t++) {
        /* step 3 is one sequence (memra_decode_step_deferred), the last one all of them */
        s->mask[t] = t == 3 ? 1u << 5 : t == STEPS - 1 ? (1u << NS) - 1 : (uint32_t)tu_rng_int(&rng, 1 << NS);
        if (!s->mask[t])
            s->mask[t] = 1;
    }
}

/* Fresh caches, each with its prompt (1 + i % 4 tokens). */
static void make_caches(memra_model_t *m, const schedule_t *s, memra_cache_t **c)
{
    for (int i = 0; i < NS; i++) {
        assert_int_equal(memra_cache_create(m, CAP, &c[i]), MEMRA_OK);
        assert_int_equal(memra_forward(m, c[i], s->prompt[i], 1 + i % 4, 0, NULL), MEMRA_OK);
    }
}

/* Step T's items (logits ROWS + i*V when ROWS, else NULL); returns how
 * many, the sequence of each in SEQ. */
static int32_t step_items(const schedule_t *s, int t, memra_cache_t **c, float *rows, int32_t V,
                          memra_batch_item_t *it, int *seq)
{
    int32_t n = 0;
    for (int i = 0; i < NS; i++)
        if (s->mask[t] & (1u << i)) {
            it[n] = (memra_batch_item_t){.cache = c[i], .tokens = &s->tok[i][t], .n_tokens = 1,
                                         .logits = rows ? rows + (size_t)i * V : NULL};
            seq[n++] = i;
        }
    return n;
}

/* Same schedule synchronous (memra_forward_batch) and deferred, AHEAD
 * steps in flight: every row the same bits. */
static void test_equals_sync(void **state)
{
    const fixture_case_t *fc = *state;
    if (!selected(fc->name)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", fc->name);
        return;
    }
    if (tu_skip_stages_on_gpu(fc->name, fc->stages))
        return;
    memra_model_t *m = load(fc);
    const int32_t V = memra_model_n_vocab(m);
    schedule_t s;
    make_schedule(&s, V, 1234);
    /* [step][seq][V], NaN-free: rows a step does not touch stay 0 on both sides */
    const size_t step_floats = (size_t)NS * (size_t)V;
    float *want = calloc(STEPS * step_floats, sizeof *want);
    float *got = calloc(STEPS * step_floats, sizeof *got);
    memra_cache_t *c[NS];
    memra_batch_item_t it[NS];
    int seq[NS];

    make_caches(m, &s, c);
    for (int t = 0; t < STEPS; t++) {
        int32_t n = step_items(&s, t, c, want + t * step_floats, V, it, seq);
        assert_int_equal(memra_forward_batch(m, it, n, 0), MEMRA_OK);
    }
    for (int i = 0; i < NS; i++)
        assert_int_equal(memra_cache_free(c[i]), MEMRA_OK);

    make_caches(m, &s, c);
    memra_pending_t *pend[STEPS][NS];
    int pseq[STEPS][NS], np[STEPS];
    for (int t = 0; t < STEPS + AHEAD; t++) {
        if (t < STEPS) {
            np[t] = step_items(&s, t, c, NULL, V, it, pseq[t]);
            if (np[t] == 1 && t == 3)
                assert_int_equal(memra_decode_step_deferred(m, it[0].cache, *it[0].tokens, &pend[t][0]), MEMRA_OK);
            else
                assert_int_equal(memra_forward_batch_deferred(m, it, np[t], 0, pend[t]), MEMRA_OK);
            for (int j = 0; j < np[t]; j++)
                assert_non_null(pend[t][j]);
        }
        const int w = t - AHEAD; /* the step waited on now */
        if (w < 0)
            continue;
        /* the newest first: waits may come in any order */
        for (int j = np[w] - 1; j >= 0; j--) {
            memra_status_t st = memra_pending_wait(pend[w][j], got + w * step_floats + (size_t)pseq[w][j] * V);
            if (st)
                fail_msg("%s: step %d item %d: %s (%s)", fc->name, w, j, memra_status_name(st), memra_last_error());
        }
    }
    for (int t = 0; t < STEPS; t++)
        for (int i = 0; i < NS; i++)
            if (memcmp(got + t * step_floats + (size_t)i * V, want + t * step_floats + (size_t)i * V,
                       (size_t)V * sizeof(float)) != 0)
                fail_msg("%s (%d stages, streams %d): step %d sequence %d: deferred row differs from "
                         "memra_forward_batch",
                         fc->name, fc->stages, fc->streams, t, i);
    for (int i = 0; i < NS; i++) {
        int32_t want_pos = 1 + i % 4;
        for (int t = 0; t < STEPS; t++)
            want_pos += (s.mask[t] >> i) & 1;
        assert_int_equal(memra_cache_pos(c[i]), want_pos);
        assert_int_equal(memra_cache_free(c[i]), MEMRA_OK);
    }
    free(want);
    free(got);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* Pendings freed without a wait, some at once (the step may still run),
 * some after a later wait (the step has finished): nothing leaks, and the
 * model and caches work afterwards. */
static void test_free_without_wait(void **state)
{
    const fixture_case_t *fc = *state;
    if (!selected(fc->name)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", fc->name);
        return;
    }
    if (tu_skip_stages_on_gpu(fc->name, fc->stages))
        return;
    memra_model_t *m = load(fc);
    const int32_t V = memra_model_n_vocab(m);
    schedule_t s;
    make_schedule(&s, V, 99);
    memra_cache_t *c[NS];
    make_caches(m, &s, c);
    memra_batch_item_t it[NS];
    int seq[NS];
    memra_pending_t *pend[3][NS];
    int32_t n[3];
    for (int t = 0; t < 3; t++) {
        n[t] = step_items(&s, STEPS - 1, c, NULL, V, it, seq); /* every sequence */
        assert_int_equal(memra_forward_batch_deferred(m, it, n[t], 0, pend[t]), MEMRA_OK);
    }
    /* step 0: freed at once; step 2: its last item waited on, which orders
     * every earlier step; step 1 and step 2's others freed after */
    for (int j = 0; j < n[0]; j++)
        assert_int_equal(memra_pending_free(pend[0][j]), MEMRA_OK);
    float *row = malloc((size_t)V * sizeof *row);
    assert_int_equal(memra_pending_wait(pend[2][n[2] - 1], row), MEMRA_OK);
    for (int j = 0; j < n[1]; j++)
        assert_int_equal(memra_pending_free(pend[1][j]), MEMRA_OK);
    for (int j = 0; j < n[2] - 1; j++)
        assert_int_equal(memra_pending_free(pend[2][j]), MEMRA_OK);
    for (int i = 0; i < NS; i++)
        assert_int_equal(memra_cache_pos(c[i]), 1 + i % 4 + 3);
    /* nothing in flight any more: the synchronous calls work again */
    assert_int_equal(memra_decode_step(m, c[0], 1, row), MEMRA_OK);
    /* queued and never waited on: memra_pending_free before the caches go */
    assert_int_equal(memra_forward_batch_deferred(m, it, n[0], 0, pend[0]), MEMRA_OK);
    for (int j = 0; j < n[0]; j++)
        assert_int_equal(memra_pending_free(pend[0][j]), MEMRA_OK);
    for (int i = 0; i < NS; i++)
        assert_int_equal(memra_cache_free(c[i]), MEMRA_OK);
    free(row);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* Calls ITEMS deferred, expecting WANT, OUT's N entries NULL (none written
 * when N is outside 1..max) and no cache moved. */
static void expect_bad(memra_model_t *m, memra_cache_t **c, int nc, const memra_batch_item_t *items, int32_t n,
                       uint32_t flags, memra_status_t want, const char *what)
{
    int32_t pos[NS + 2];
    for (int i = 0; i < nc; i++)
        pos[i] = memra_cache_pos(c[i]);
    memra_pending_t *out[MEMRA_MAX_BATCH + 1];
    for (int i = 0; i <= MEMRA_MAX_BATCH; i++)
        out[i] = (memra_pending_t *)(uintptr_t)0x1; /* must come back NULL */
    memra_status_t st = memra_forward_batch_deferred(m, items, n, flags, out);
    if (st != want)
        fail_msg("%s: status %s, want %s (%s)", what, memra_status_name(st), memra_status_name(want),
                 memra_model_last_error(m));
    const char *msg = memra_model_last_error(m);
    if (!msg || !strstr(msg, "memra_forward_batch_deferred"))
        fail_msg("%s: the message does not name the call: '%s'", what, msg ? msg : "(null)");
    /* a valid count's entries come back NULL; outside 1..max OUT is not
     * written (pipeline.h) */
    const bool counted = n > 0 && n <= memra_model_max_batch(m);
    for (int i = 0; i <= MEMRA_MAX_BATCH; i++) {
        const bool cleared = counted && i < n;
        if (cleared ? out[i] != NULL : out[i] != (memra_pending_t *)(uintptr_t)0x1)
            fail_msg("%s: out[%d] %s", what, i, cleared ? "is not NULL" : "was written");
    }
    for (int i = 0; i < nc; i++)
        if (memra_cache_pos(c[i]) != pos[i])
            fail_msg("%s: cache %d moved from %d to %d", what, i, pos[i], memra_cache_pos(c[i]));
}

static void test_misuse(void **state)
{
    const fixture_case_t *fc = *state;
    if (!selected(fc->name)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", fc->name);
        return;
    }
    if (tu_skip_stages_on_gpu(fc->name, fc->stages))
        return;
    memra_model_t *m = load(fc), *other = load(fc);
    const int32_t V = memra_model_n_vocab(m);
    enum { NC = 3 };
    int32_t prompt[4] = {1, 2, 3, 4}, tok = 5, two[2] = {5, 6}, hi = V, lo = -1;
    memra_cache_t *c[NC + 2], *foreign = NULL;
    for (int i = 0; i < NC; i++) {
        assert_int_equal(memra_cache_create(m, CAP, &c[i]), MEMRA_OK);
        assert_int_equal(memra_forward(m, c[i], prompt, 1 + i, 0, NULL), MEMRA_OK);
    }
    memra_cache_t *full = NULL;
    assert_int_equal(memra_cache_create(m, 2, &full), MEMRA_OK);
    assert_int_equal(memra_forward(m, full, prompt, 2, 0, NULL), MEMRA_OK);
    assert_int_equal(memra_cache_create(other, CAP, &foreign), MEMRA_OK);
    c[NC] = full;
    c[NC + 1] = foreign;
    float *row = malloc((size_t)V * sizeof *row);

    memra_batch_item_t it[NC];
    for (int i = 0; i < NC; i++)
        it[i] = (memra_batch_item_t){.cache = c[i], .tokens = &tok, .n_tokens = 1};
    const memra_batch_item_t base = it[NC - 1];
    memra_batch_item_t *b = &it[NC - 1];
    expect_bad(m, c, NC + 2, NULL, 1, 0, MEMRA_E_INVALID, "NULL items");
    expect_bad(m, c, NC + 2, it, 0, 0, MEMRA_E_INVALID, "no items");
    expect_bad(m, c, NC + 2, it, memra_model_max_batch(m) + 1, 0, MEMRA_E_INVALID, "above the maximum");
    expect_bad(m, c, NC + 2, it, NC, 2, MEMRA_E_INVALID, "unknown step flags");
    b->cache = NULL;
    expect_bad(m, c, NC + 2, it, NC, 0, MEMRA_E_INVALID, "NULL cache");
    *b = base;
    b->tokens = NULL;
    expect_bad(m, c, NC + 2, it, NC, 0, MEMRA_E_INVALID, "NULL tokens");
    *b = base;
    b->flags = 4;
    expect_bad(m, c, NC + 2, it, NC, 0, MEMRA_E_INVALID, "unknown item flags");
    *b = base;
    b->tokens = two;
    b->n_tokens = 2;
    expect_bad(m, c, NC + 2, it, NC, 0, MEMRA_E_INVALID, "two tokens");
    *b = base;
    b->logits = row;
    expect_bad(m, c, NC + 2, it, NC, 0, MEMRA_E_INVALID, "a logits buffer");
    *b = base;
    b->cache = c[0];
    expect_bad(m, c, NC + 2, it, NC, 0, MEMRA_E_INVALID, "the same cache twice");
    *b = base;
    b->cache = foreign;
    expect_bad(m, c, NC + 2, it, NC, 0, MEMRA_E_MISUSE, "cache of another model");
    *b = base;
    b->cache = full;
    expect_bad(m, c, NC + 2, it, NC, 0, MEMRA_E_FULL, "full cache");
    *b = base;
    b->tokens = &hi;
    expect_bad(m, c, NC + 2, it, NC, 0, MEMRA_E_RANGE, "token n_vocab");
    b->tokens = &lo;
    expect_bad(m, c, NC + 2, it, NC, 0, MEMRA_E_RANGE, "token -1");
    *b = base;
    assert_int_equal(memra_forward_batch_deferred(NULL, it, NC, 0, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_forward_batch_deferred(m, it, NC, 0, NULL), MEMRA_E_INVALID);

    /* two steps in flight on caches 0..2 */
    memra_pending_t *p1[NC], *p2[NC];
    assert_int_equal(memra_forward_batch_deferred(m, it, NC, 0, p1), MEMRA_OK);
    assert_int_equal(memra_forward_batch_deferred(m, it, NC, 0, p2), MEMRA_OK);
    memra_batch_item_t sync = {.cache = c[1], .tokens = &tok, .n_tokens = 1, .logits = row};
    assert_int_equal(memra_forward_batch(m, &sync, 1, 0), MEMRA_E_BUSY);
    assert_int_equal(memra_decode_step(m, c[1], tok, row), MEMRA_E_BUSY);
    assert_int_equal(memra_cache_clear(c[1]), MEMRA_E_BUSY);
    assert_int_equal(memra_cache_free(c[1]), MEMRA_E_BUSY);
    assert_int_equal(memra_model_free(m), MEMRA_E_BUSY);
    assert_int_equal(memra_cache_pos(c[1]), 2 + 2);

    /* consumed once: a second wait or free is MEMRA_E_MISUSE */
    for (int i = 0; i < NC; i++)
        assert_int_equal(memra_pending_wait(p1[i], row), MEMRA_OK);
    assert_int_equal(memra_pending_wait(p1[0], row), MEMRA_E_MISUSE);
    assert_int_equal(memra_pending_free(p1[1]), MEMRA_E_MISUSE);
    assert_int_equal(memra_pending_poll(p1[2]), MEMRA_E_MISUSE);
    for (int i = 0; i < NC; i++)
        assert_int_equal(memra_pending_free(p2[i]), MEMRA_OK);
    assert_int_equal(memra_pending_free(p2[0]), MEMRA_E_MISUSE);

    /* every sequence where its two steps put it: one more step equals the
     * same tokens alone */
    assert_int_equal(memra_forward_batch(m, it, NC, 0), MEMRA_OK);
    float *alone = malloc((size_t)V * sizeof *alone);
    float *got = malloc((size_t)V * sizeof *got);
    for (int i = 0; i < NC; i++) {
        memra_cache_t *a = NULL;
        assert_int_equal(memra_cache_create(m, CAP, &a), MEMRA_OK);
        assert_int_equal(memra_forward(m, a, prompt, 1 + i, 0, NULL), MEMRA_OK);
        for (int k = 0; k < 3; k++)
            assert_int_equal(memra_decode_step(m, a, tok, NULL), MEMRA_OK);
        assert_int_equal(memra_decode_step(m, a, tok, alone), MEMRA_OK);
        assert_int_equal(memra_decode_step(m, c[i], tok, got), MEMRA_OK);
        assert_int_equal(memra_cache_pos(a), memra_cache_pos(c[i]));
        if (memcmp(alone, got, (size_t)V * sizeof *alone) != 0)
            fail_msg("%s: sequence %d after the deferred steps and bad calls differs from the same tokens alone",
                     fc->name, i);
        memra_cache_free(a);
    }
    free(alone);
    free(got);
    free(row);
    for (int i = 0; i < NC + 2; i++)
        assert_int_equal(memra_cache_free(c[i]), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    assert_int_equal(memra_model_free(other), MEMRA_OK);
}

/* ---- runner ------------------------------------------------------------- */

int main(void)
{
    /* the exact tier: batched rows on the decode kernels, bit for bit
     * (test_batch_fast checks the fast tier's batched kernels) */
    setenv("MEMRA_BATCH_FAST", "0", 1);
    static const tu_kind_t kinds[] = {
        {"equals_sync", test_equals_sync, 0, 1},
        {"equals_sync_2_stages", test_equals_sync, 2, 1},
        {"equals_sync_2_stages_serial", test_equals_sync, 2, 0},
        {"free_without_wait", test_free_without_wait, 0, 1},
        {"free_without_wait_2_stages", test_free_without_wait, 2, 1},
        {"misuse", test_misuse, 0, 1},
        {"misuse_2_stages", test_misuse, 2, 1},
    };
    return tu_run_fixture_kinds("batch_deferred", kinds, sizeof kinds / sizeof kinds[0], &g_engine);
}
