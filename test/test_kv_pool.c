/* The paged KV pool (model.h: kv_pool_bytes, kv_page_bytes; lib/kv_pool.h).
 *
 * For every fixture model, with f32 KV rows in pages of the device's
 * granularity (4 KiB on the CPU, so the fixtures' caches span pages):
 *   - the same logits bit for bit (memcmp) as the model loaded without a
 *     pool, over a prompt in chunks and decode steps; the pool's bytes in
 *     use grow with the cache and go back to 0 when it is cleared or freed;
 *   - a pool too small for a prompt: MEMRA_E_FULL with a message, the
 *     cache's position and contents (digest) unchanged, and the step goes
 *     through once another cache gives its pages back;
 *   - a snapshot restored after a clear is refused (its rows' pages went
 *     back), one restored without a clear goes on as an unforked cache;
 *   - sliding-window layers (gemma4) give back the pages below their
 *     window (and a margin of MEMRA__SWA_MARGIN rows): after N_W tokens the
 *     pool holds fewer bytes than the rows written, the logits are those of
 *     the model without a pool, a snapshot from before the window moved is
 *     refused and one inside it restores;
 *   - copy-on-write: a parent forked, then rolled back by a snapshot into
 *     rows it shares with its fork and written there, leaves the fork's
 *     contents (digest) as they were and gives the logits of a cache that
 *     never forked.
 * MEMRA_TEST_DEVICE=cuda:0 runs it on a GPU engine (pages of 2 MiB). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "memra/memra.h"
#include "model_impl.h" /* memra__cache_digest */
#include "testutil.h"

#define CHUNK 8
#define N_T 40   /* tokens of a run */
#define CAP 64
#define POOL ((int64_t)1 << 30)

static memra_engine_t *g_engine;

static memra_model_t *load(const char *name, int64_t pool)
{
    return tu_load_fixture_pool(name, g_engine, CHUNK, 0, pool, 0);
}

static memra_cache_t *create(memra_model_t *m)
{
    return tu_cache_typed(m, MEMRA_TYPE_F32, CAP);
}

static uint64_t digest(const memra_cache_t *c)
{
    uint64_t h = 0;
    memra_status_t st = memra__cache_digest(c, &h);
    if (st)
        fail_msg("digest: %s (%s)", memra_strerror(st), memra_last_error());
    return h;
}

static void tokens(const memra_model_t *m, const char *name, int32_t *t, int32_t n)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (const char *p = name; *p; p++)
        rng = rng * 1099511628211ull + (unsigned char)*p;
    for (int32_t i = 0; i < n; i++)
        t[i] = (int32_t)tu_rng_int(&rng, memra_model_n_vocab(m));
}

/* Logits of every row: a forward of the first N - 4 tokens (chunks of
 * CHUNK), then 4 decode steps; malloc'ed [N][n_vocab]. */
static float *run(memra_model_t *m, memra_cache_t *c, const int32_t *t, int32_t n)
{
    const size_t V = (size_t)memra_model_n_vocab(m);
    float *out = malloc((size_t)n * V * sizeof *out);
    assert_non_null(out);
    memra_status_t st = memra_forward(m, c, t, n - 4, MEMRA_FORWARD_ALL_ROWS, out);
    for (int32_t i = n - 4; i < n && !st; i++)
        st = memra_decode_step(m, c, t[i], out + (size_t)i * V);
    if (st)
        fail_msg("run: %s (%s)", memra_strerror(st), memra_model_last_error(m));
    return out;
}

static void same(const memra_model_t *m, const char *what, const float *got, const float *want, int32_t n)
{
    tu_same_rows(what, got, want, n, (size_t)memra_model_n_vocab(m));
}

static uint64_t used(const memra_model_t *m)
{
    uint64_t u = 0, t = 0;
    memra_model_kv_pool_bytes(m, &u, &t);
    return u;
}

static void test_pool(void **state)
{
    const tu_fixture_case_t *fc = *state;
    int32_t t[N_T];
    /* the reference: no pool */
    memra_model_t *m0 = load(fc->name, 0);
    tokens(m0, fc->name, t, N_T);
    memra_cache_t *c0 = create(m0);
    float *want = run(m0, c0, t, N_T);
    uint64_t u = 1, tot = 1;
    memra_model_kv_pool_bytes(m0, &u, &tot);
    assert_true(u == 0 && tot == 0);
    memra_cache_free(c0);
    assert_int_equal(memra_model_free(m0), MEMRA_OK);

    memra_model_t *m = load(fc->name, POOL);
    memra_cache_t *c = create(m);
    assert_true(used(m) == 0); /* no rows written, no pages */
    float *got = run(m, c, t, N_T);
    same(m, "paged", got, want, N_T);
    free(got);
    const bool attn = memra_cache_kv_bytes_per_token(c) > 0;
    if (attn && used(m) == 0)
        fail_msg("%s: no pages in use after %d tokens", fc->name, N_T);
    assert_int_equal(memra_cache_clear(c), MEMRA_OK);
    assert_true(used(m) == 0);
    got = run(m, c, t, N_T); /* pages taken again after the clear */
    same(m, "paged after a clear", got, want, N_T);
    free(got);

    /* restore: without a clear it goes on, after one it is refused */
    memra_cache_t *d = create(m);
    got = run(m, d, t, N_T / 2);
    free(got);
    memra_cache_snapshot_t *s = NULL;
    assert_int_equal(memra_cache_snapshot(d, &s), MEMRA_OK);
    assert_int_equal(memra_forward(m, d, t + N_T / 2, 4, 0, NULL), MEMRA_OK);
    assert_int_equal(memra_cache_restore(d, s), MEMRA_OK);
    assert_int_equal(memra_cache_pos(d), N_T / 2);
    assert_int_equal(memra_cache_clear(d), MEMRA_OK);
    if (attn) {
        assert_int_equal(memra_cache_restore(d, s), MEMRA_E_MISUSE);
        assert_non_null(strstr(memra_last_error(), "cleared"));
        assert_int_equal(memra_cache_pos(d), 0);
    }
    memra_cache_snapshot_free(s);
    assert_int_equal(memra_cache_free(d), MEMRA_OK);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    assert_true(used(m) == 0);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    free(want);
}

static void test_exhausted(void **state)
{
    const tu_fixture_case_t *fc = *state;
    memra_model_t *m = load(fc->name, POOL);
    int32_t t[N_T];
    tokens(m, fc->name, t, N_T);
    memra_cache_t *a = create(m);
    if (memra_cache_kv_bytes_per_token(a) == 0) {
        memra_cache_free(a);
        memra_model_free(m);
        TU_SKIP("%s: no attention layers (no KV rows, no pages)", fc->name);
        return;
    }
    /* the pages N_T tokens take, then a pool of those pages only */
    assert_int_equal(memra_forward(m, a, t, N_T, 0, NULL), MEMRA_OK);
    const uint64_t need = used(m);
    memra_cache_free(a);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    m = load(fc->name, (int64_t)need);
    a = create(m);
    memra_cache_t *b = create(m);
    assert_int_equal(memra_forward(m, a, t, N_T, 0, NULL), MEMRA_OK);
    const uint64_t da = digest(a), db = digest(b);
    assert_int_equal(memra_forward(m, b, t, 4, 0, NULL), MEMRA_E_FULL);
    assert_non_null(strstr(memra_model_last_error(m), "KV pool"));
    assert_int_equal(memra_cache_pos(b), 0);
    if (digest(a) != da || digest(b) != db)
        fail_msg("%s: a step refused for want of pages changed a cache", fc->name);
    assert_int_equal(memra_cache_free(a), MEMRA_OK); /* its pages go back */
    assert_int_equal(memra_forward(m, b, t, N_T, 0, NULL), MEMRA_OK);
    memra_cache_free(b);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

static void test_cow(void **state)
{
    const tu_fixture_case_t *fc = *state;
    memra_model_t *m = load(fc->name, POOL);
    int32_t t[N_T + 8];
    tokens(m, fc->name, t, N_T + 8);
    /* the reference: t[0..8) then t[N_T..N_T+8) in a cache that never forked */
    memra_cache_t *r = create(m);
    assert_int_equal(memra_forward(m, r, t, 8, 0, NULL), MEMRA_OK);
    float *want = run(m, r, t + N_T, 8);

    memra_cache_t *p = create(m);
    assert_int_equal(memra_forward(m, p, t, 8, 0, NULL), MEMRA_OK);
    memra_cache_snapshot_t *s = NULL;
    assert_int_equal(memra_cache_snapshot(p, &s), MEMRA_OK);
    assert_int_equal(memra_forward(m, p, t + 8, N_T - 8, 0, NULL), MEMRA_OK);
    memra_cache_t *f = NULL;
    assert_int_equal(memra_cache_fork(p, 0, &f), MEMRA_OK);
    const uint64_t df = digest(f);
    /* back to 8 tokens, then rows 8.. written again: into pages the fork shares */
    assert_int_equal(memra_cache_restore(p, s), MEMRA_OK);
    float *got = run(m, p, t + N_T, 8);
    same(m, "parent rolled back into shared pages", got, want, 8);
    if (digest(f) != df)
        fail_msg("%s: the parent's writes after its rollback changed its fork", fc->name);
    free(got);
    free(want);
    memra_cache_snapshot_free(s);
    memra_cache_t *all[] = {f, p, r};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        assert_int_equal(memra_cache_free(all[i]), MEMRA_OK);
    assert_true(used(m) == 0);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

#define N_W 400 /* past the fixtures' window of 8 and the 256-row margin */

/* The last 4 rows' logits of N_W tokens (a forward, then 4 decode steps). */
static float *run_long(memra_model_t *m, memra_cache_t *c, const int32_t *t)
{
    const size_t V = (size_t)memra_model_n_vocab(m);
    float *out = malloc(4 * V * sizeof *out);
    assert_non_null(out);
    memra_status_t st = memra_forward(m, c, t, N_W - 4, 0, NULL);
    for (int32_t i = 0; i < 4 && !st; i++)
        st = memra_decode_step(m, c, t[N_W - 4 + i], out + (size_t)i * V);
    if (st)
        fail_msg("run_long: %s (%s)", memra_strerror(st), memra_model_last_error(m));
    return out;
}

static void test_window(void **state)
{
    const tu_fixture_case_t *fc = *state;
    memra_model_t *m = load(fc->name, POOL);
    bool sliding = false;
    for (int32_t il = 0; il < memra_model_n_layers(m); il++)
        sliding = sliding || memra_model_layer_kind(m, il) == MEMRA_LAYER_SLIDING;
    if (!sliding) {
        memra_model_free(m);
        TU_SKIP("%s: no sliding-window layers", fc->name);
        return;
    }
    int32_t t[N_W];
    tokens(m, fc->name, t, N_W);
    memra_model_t *m0 = load(fc->name, 0);
    memra_cache_t *c0 = tu_cache_typed(m0, MEMRA_TYPE_F32, N_W);
    float *want = run_long(m0, c0, t);
    memra_cache_free(c0);
    assert_int_equal(memra_model_free(m0), MEMRA_OK);

    memra_cache_t *c = tu_cache_typed(m, MEMRA_TYPE_F32, N_W + 8);
    const size_t V = (size_t)memra_model_n_vocab(m);
    float *got = malloc(4 * V * sizeof *got);
    assert_non_null(got);
    memra_cache_snapshot_t *early = NULL, *late = NULL;
    assert_int_equal(memra_forward(m, c, t, 32, 0, NULL), MEMRA_OK);
    assert_int_equal(memra_cache_snapshot(c, &early), MEMRA_OK);
    assert_int_equal(memra_forward(m, c, t + 32, N_W - 36, 0, NULL), MEMRA_OK);
    for (int32_t i = 0; i < 4; i++)
        assert_int_equal(memra_decode_step(m, c, t[N_W - 4 + i], got + (size_t)i * V), MEMRA_OK);
    same(m, "paged with sliding windows", got, want, 4);
    free(got);
    free(want);
    const uint64_t written = memra_cache_kv_bytes_per_token(c) * (uint64_t)N_W;
    if (used(m) > memra_cache_kv_bytes(c, N_W))
        fail_msg("%s: %llu bytes of pages in use, memra_cache_kv_bytes says %llu", fc->name,
                 (unsigned long long)used(m), (unsigned long long)memra_cache_kv_bytes(c, N_W));
    /* pages smaller than the rows: the windows gave some back and moved
     * past the early snapshot's rows (a device page of 2 MiB holds all of
     * a fixture's rows: nothing to give back); a late snapshot restores */
    const uint64_t page = memra_model_kv_page_bytes(m);
    if (page && page < written / 8) {
        if (memra_cache_kv_bytes(c, N_W) >= written || used(m) >= written)
            fail_msg("%s: %llu bytes of pages in use, memra_cache_kv_bytes says %llu, for %llu bytes of rows: "
                     "the windows gave none back",
                     fc->name, (unsigned long long)used(m), (unsigned long long)memra_cache_kv_bytes(c, N_W),
                     (unsigned long long)written);
        assert_int_equal(memra_cache_restore(c, early), MEMRA_E_MISUSE);
        assert_non_null(strstr(memra_last_error(), "window"));
        assert_int_equal(memra_cache_pos(c), N_W);
    } else {
        printf("%s: pages of %llu bytes against %llu bytes of rows: give-back not checked\n", fc->name,
               (unsigned long long)page, (unsigned long long)written);
    }
    assert_int_equal(memra_cache_snapshot(c, &late), MEMRA_OK);
    assert_int_equal(memra_decode_step(m, c, t[0], NULL), MEMRA_OK);
    assert_int_equal(memra_cache_restore(c, late), MEMRA_OK);
    assert_int_equal(memra_cache_pos(c), N_W);
    memra_cache_snapshot_free(early);
    memra_cache_snapshot_free(late);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    assert_true(used(m) == 0);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

int main(void)
{
    setenv("MEMRA_BATCH_FAST", "0", 1);
    static const tu_kind_t kinds[] = {
        {"pool", test_pool, 0, 0},
        {"exhausted", test_exhausted, 0, 0},
        {"cow", test_cow, 0, 0},
        {"window", test_window, 0, 0},
    };
    return tu_run_fixture_kinds("kv_pool", kinds, sizeof kinds / sizeof kinds[0], &g_engine);
}
