/* memra_forward_batch (docs/BATCHING.md): every row of a batched step is
 * bit-identical to running that sequence alone through memra_forward.
 *
 * For every fixture model ($MEMRA_FIXTURES/models/<name>.gguf, every arch):
 *   - random schedules: sequences join at random steps, feed their prompt in
 *     random pieces (some longer than prefill_chunk, so the library chunks
 *     them), decode given tokens, and leave; each step takes a random subset
 *     of the live sequences (up to 16 items), so prefill chunks mix with
 *     decodes; every logits row is compared bit for bit (memcmp) with the
 *     same pieces run alone;
 *   - greedy continuations of the fixture prompt, alone and in a batch of 8
 *     with other prompts, are equal;
 *   - bad input (each kind, the bad item last) fails with its status and a
 *     message naming the item, and leaves every cache's position, state and
 *     the logits buffers unchanged;
 *   - the random schedules again on a model split into two pipeline stages.
 * Sampling-free: inputs are fixed token streams from a seeded generator.
 * MEMRA_TEST_DEVICE=cuda:0 runs it on a GPU engine (as test_models does);
 * MEMRA_TEST_FIXTURE=NAME runs one fixture. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"
#include "memra/memra.h"
#include "testutil.h"

#define N_SEQ 24      /* sequences of a random schedule */
#define MAX_ITEMS 16  /* items per step of a random schedule */
#define MAX_PIECES 16 /* prompt pieces + decode tokens per sequence */
#define CHUNK 8       /* the model's prefill_chunk: prompt pieces up to 20 tokens get chunked */

static memra_engine_t *g_engine;

typedef tu_fixture_case_t fixture_case_t; /* testutil.h */

static memra_model_t *load_stages(const char *name, int32_t stages)
{
    return tu_load_fixture(name, g_engine, CHUNK, stages);
}

static memra_model_t *load(const char *name)
{
    return load_stages(name, 0);
}

/* The fixture prompt of NAME (its .ref.json: "<ref>.ref.json" for
 * "<ref>.<type>.gguf" or "<ref>.gguf"), or NULL. */
static int32_t *fixture_prompt(const char *name, int32_t *n)
{
    char ref[128], rel[256];
    snprintf(ref, sizeof ref, "%s", name);
    const char *paths[2] = {NULL, NULL};
    snprintf(rel, sizeof rel, "models/%s.ref.json", ref);
    paths[0] = tu_fixture_path(rel);
    int32_t *toks = NULL;
    char *dot = strchr(ref, '.');
    if (!paths[0] && dot) {
        *dot = 0;
        snprintf(rel, sizeof rel, "models/%s.ref.json", ref);
        paths[0] = tu_fixture_path(rel);
    }
    *n = 0;
    if (paths[0]) {
        char err[256];
        tj_value_t *doc = tj_parse_file(paths[0], err, sizeof err);
        if (!doc)
            fail_msg("%s: %s", paths[0], err);
        toks = tj_int_array(doc, "tokens", n);
        tj_free(doc);
    }
    return toks;
}

static bool selected(const char *name)
{
    const char *only = getenv("MEMRA_TEST_FIXTURE");
    return !only || !*only || strcmp(only, name) == 0;
}

/* ---- random schedules ------------------------------------------------- */

typedef struct piece {
    int32_t n, at;       /* tokens [at, at+n) of the sequence */
    uint32_t flags;      /* MEMRA_FORWARD_ALL_ROWS or 0 */
    bool logits;         /* false: logits NULL */
} piece_t;

typedef struct seq {
    int32_t tokens[64], n_tokens;
    piece_t piece[MAX_PIECES];
    int32_t n_pieces, next;
    int32_t start;       /* first step it may join */
    float *alone;        /* per piece: its logits rows alone (n rows or 1), back to back */
    float *batched;
    size_t *off;         /* per piece: offset of its rows in alone/batched */
    memra_cache_t *c;
} seq_t;

static int32_t piece_rows(const piece_t *p)
{
    return !p->logits ? 0 : (p->flags & MEMRA_FORWARD_ALL_ROWS) ? p->n : 1;
}

static void make_seq(seq_t *s, uint64_t *rng, int32_t n_vocab, int32_t n_steps)
{
    memset(s, 0, sizeof *s);
    int32_t prompt = 1 + (int32_t)tu_rng_int(rng, 24);
    int32_t n_dec = (int32_t)tu_rng_int(rng, 10);
    int32_t at = 0;
    while (at < prompt && s->n_pieces < 3) {
        int32_t left = prompt - at;
        int32_t n = s->n_pieces == 2 ? left : 1 + (int32_t)tu_rng_int(rng, left);
        s->piece[s->n_pieces++] = (piece_t){.n = n, .at = at};
        at += n;
    }
    if (at < prompt)
        s->piece[s->n_pieces - 1].n += prompt - at;
    for (int32_t i = 0; i < n_dec && s->n_pieces < MAX_PIECES; i++)
        s->piece[s->n_pieces++] = (piece_t){.n = 1, .at = prompt + i};
    s->n_tokens = 0;
    for (int32_t i = 0; i < s->n_pieces; i++) {
        piece_t *p = &s->piece[i];
        p->at = s->n_tokens;
        s->n_tokens += p->n;
        p->flags = tu_rng_int(rng, 2) ? MEMRA_FORWARD_ALL_ROWS : 0;
        p->logits = tu_rng_int(rng, 8) != 0;
    }
    for (int32_t i = 0; i < s->n_tokens; i++)
        s->tokens[i] = (int32_t)tu_rng_int(rng, n_vocab);
    s->start = (int32_t)tu_rng_int(rng, n_steps);
}

static void alloc_rows(seq_t *s, int32_t n_vocab)
{
    s->off = calloc((size_t)s->n_pieces + 1, sizeof *s->off);
    for (int32_t i = 0; i < s->n_pieces; i++)
        s->off[i + 1] = s->off[i] + (size_t)piece_rows(&s->piece[i]) * (size_t)n_vocab;
    size_t total = s->off[s->n_pieces] ? s->off[s->n_pieces] : 1;
    s->alone = malloc(total * sizeof(float));
    s->batched = malloc(total * sizeof(float));
    assert_non_null(s->alone);
    assert_non_null(s->batched);
    for (size_t i = 0; i < total; i++)
        s->alone[i] = s->batched[i] = NAN;
}

static void run_alone(memra_model_t *m, seq_t *s)
{
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, 64, &c), MEMRA_OK);
    for (int32_t i = 0; i < s->n_pieces; i++) {
        const piece_t *p = &s->piece[i];
        memra_status_t st = memra_forward(m, c, s->tokens + p->at, p->n, p->flags,
                                          p->logits ? s->alone + s->off[i] : NULL);
        if (st)
            fail_msg("alone: %s (%s)", memra_strerror(st), memra_model_last_error(m));
    }
    memra_cache_free(c);
}

static void test_random_schedules(void **state)
{
    const fixture_case_t *fc = *state;
    const char *name = fc->name;
    if (!selected(name)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", name);
        return;
    }
    if (tu_skip_stages_on_gpu(name, fc->stages))
        return;
    memra_model_t *m = load_stages(name, fc->stages);
    if (fc->stages > 1 && memra_model_n_stages(m) != fc->stages)
        fail_msg("%s: %d stages loaded, %d asked", name, memra_model_n_stages(m), fc->stages);
    const int32_t V = memra_model_n_vocab(m);
    assert_int_equal(memra_model_max_batch(m), MEMRA_MAX_BATCH);
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)strlen(name);
    for (const char *p = name; *p; p++)
        rng = rng * 1099511628211ull + (unsigned char)*p;
    if (!rng)
        rng = 1;

    seq_t *seqs = calloc(N_SEQ, sizeof *seqs);
    for (int i = 0; i < N_SEQ; i++) {
        make_seq(&seqs[i], &rng, V, 12);
        alloc_rows(&seqs[i], V);
        run_alone(m, &seqs[i]);
    }

    int32_t max_b = 0, steps = 0, mixed = 0;
    for (int32_t step = 0;; step++) {
        memra_batch_item_t items[MAX_ITEMS];
        int32_t who[MAX_ITEMS], n_items = 0, unfinished = 0;
        for (int i = 0; i < N_SEQ; i++) {
            seq_t *s = &seqs[i];
            if (s->next >= s->n_pieces) {
                if (s->c) { /* done: leaves */
                    assert_int_equal(memra_cache_free(s->c), MEMRA_OK);
                    s->c = NULL;
                }
                continue;
            }
            unfinished++;
            if (step < s->start)
                continue;
            /* a live sequence sits a step out now and then */
            if (n_items == MAX_ITEMS || tu_rng_int(&rng, 5) == 0)
                continue;
            if (!s->c) /* joins */
                assert_int_equal(memra_cache_create(m, 64, &s->c), MEMRA_OK);
            const piece_t *p = &s->piece[s->next];
            who[n_items] = i;
            items[n_items++] = (memra_batch_item_t){.cache = s->c, .tokens = s->tokens + p->at, .n_tokens = p->n,
                                                    .flags = p->flags,
                                                    .logits = p->logits ? s->batched + s->off[s->next] : NULL};
        }
        if (unfinished == 0)
            break;
        if (n_items == 0)
            continue;
        /* shuffle the item order: it must not matter either */
        for (int32_t i = n_items - 1; i > 0; i--) {
            int32_t j = (int32_t)tu_rng_int(&rng, i + 1);
            memra_batch_item_t t = items[i];
            items[i] = items[j];
            items[j] = t;
            int32_t w = who[i];
            who[i] = who[j];
            who[j] = w;
        }
        bool has1 = false, hasn = false;
        for (int32_t i = 0; i < n_items; i++) {
            has1 |= items[i].n_tokens == 1;
            hasn |= items[i].n_tokens > 1;
        }
        mixed += has1 && hasn;
        memra_status_t st = memra_forward_batch(m, items, n_items, 0);
        if (st)
            fail_msg("%s: step %d (%d items): %s (%s)", name, step, n_items, memra_strerror(st),
                     memra_model_last_error(m));
        for (int32_t i = 0; i < n_items; i++) {
            seq_t *s = &seqs[who[i]];
            const int32_t k = s->next++;
            const size_t len = s->off[k + 1] - s->off[k];
            assert_int_equal(memra_cache_pos(s->c), s->piece[k].at + s->piece[k].n);
            if (len && memcmp(s->alone + s->off[k], s->batched + s->off[k], len * sizeof(float)) != 0) {
                size_t bad = 0;
                while (bad < len && tu_f2u(s->alone[s->off[k] + bad]) == tu_f2u(s->batched[s->off[k] + bad]))
                    bad++;
                fail_msg("%s: step %d, %d items: sequence %d piece %d (%d tokens at %d, flags %u): logit %zu "
                         "batched %.9g != alone %.9g",
                         name, step, n_items, who[i], k, s->piece[k].n, s->piece[k].at, s->piece[k].flags, bad,
                         (double)s->batched[s->off[k] + bad], (double)s->alone[s->off[k] + bad]);
            }
        }
        max_b = n_items > max_b ? n_items : max_b;
        steps++;
    }
    fprintf(stderr, "%s: %d batched steps, largest %d items, %d mixing prefill and decode\n", name, steps, max_b,
            mixed);
    assert_true(max_b >= 8);
    assert_true(mixed > 0);
    for (int i = 0; i < N_SEQ; i++) {
        assert_null(seqs[i].c);
        free(seqs[i].alone);
        free(seqs[i].batched);
        free(seqs[i].off);
    }
    free(seqs);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* B = 1 ... 16 decodes of one prompt each, every B on fresh caches, against
 * the same decodes alone: each B is its own step composition. */
static void test_every_b(void **state)
{
    const char *name = ((const fixture_case_t *)*state)->name;
    if (!selected(name)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", name);
        return;
    }
    memra_model_t *m = load(name);
    const int32_t V = memra_model_n_vocab(m);
    enum { NB = 16, LEN = 6 };
    uint64_t rng = 77;
    int32_t toks[NB][LEN];
    for (int i = 0; i < NB; i++)
        for (int j = 0; j < LEN; j++)
            toks[i][j] = (int32_t)tu_rng_int(&rng, V);
    float *alone = malloc((size_t)NB * LEN * (size_t)V * sizeof *alone);
    float *got = malloc((size_t)LEN * (size_t)V * sizeof *got);
    for (int i = 0; i < NB; i++) {
        memra_cache_t *c = NULL;
        assert_int_equal(memra_cache_create(m, LEN, &c), MEMRA_OK);
        for (int j = 0; j < LEN; j++)
            assert_int_equal(memra_decode_step(m, c, toks[i][j], alone + ((size_t)i * LEN + j) * V), MEMRA_OK);
        memra_cache_free(c);
    }
    for (int b = 1; b <= NB; b++) {
        memra_cache_t *c[NB] = {0};
        for (int i = 0; i < b; i++)
            assert_int_equal(memra_cache_create(m, LEN, &c[i]), MEMRA_OK);
        for (int j = 0; j < LEN; j++) {
            memra_batch_item_t it[NB];
            float *rows = malloc((size_t)b * (size_t)V * sizeof *rows);
            for (int i = 0; i < b; i++)
                it[i] = (memra_batch_item_t){.cache = c[i], .tokens = &toks[i][j], .n_tokens = 1,
                                             .logits = rows + (size_t)i * V};
            assert_int_equal(memra_forward_batch(m, it, b, 0), MEMRA_OK);
            for (int i = 0; i < b; i++)
                if (memcmp(rows + (size_t)i * V, alone + ((size_t)i * LEN + j) * V, (size_t)V * sizeof(float)))
                    fail_msg("%s: B = %d, sequence %d, token %d: batched row differs from decode alone", name, b, i,
                             j);
            free(rows);
        }
        for (int i = 0; i < b; i++)
            memra_cache_free(c[i]);
    }
    (void)got;
    free(got);
    free(alone);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* ---- greedy ------------------------------------------------------------- */

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

enum { GB = 8, GEN = 16 };

static void test_greedy_batch_of_8(void **state)
{
    const char *name = ((const fixture_case_t *)*state)->name;
    if (!selected(name)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", name);
        return;
    }
    int32_t n_prompt = 0;
    int32_t *prompt = fixture_prompt(name, &n_prompt);
    if (!prompt) {
        TU_SKIP("%s: no .ref.json prompt", name);
        return;
    }
    memra_model_t *m = load(name);
    const int32_t V = memra_model_n_vocab(m);
    /* sequence 0: the fixture prompt; the others: its prefixes and
     * rotations, so the prompts differ in length and content */
    int32_t *p[GB], n[GB];
    for (int i = 0; i < GB; i++) {
        n[i] = i == 0 ? n_prompt : 1 + (n_prompt * (i + 1)) / (GB + 2);
        p[i] = malloc((size_t)n[i] * sizeof *p[i]);
        for (int32_t j = 0; j < n[i]; j++)
            p[i][j] = prompt[(j + (i % 2) * i * 3) % n_prompt];
    }
    int32_t want[GB][GEN], got[GB][GEN];
    float *row = malloc((size_t)GB * (size_t)V * sizeof *row);
    const int32_t cap = n_prompt + GEN + 1;
    for (int i = 0; i < GB; i++) { /* alone */
        memra_cache_t *c = NULL;
        assert_int_equal(memra_cache_create(m, cap, &c), MEMRA_OK);
        assert_int_equal(memra_forward(m, c, p[i], n[i], 0, row), MEMRA_OK);
        for (int g = 0; g < GEN; g++) {
            want[i][g] = argmax(row, V);
            if (g + 1 < GEN)
                assert_int_equal(memra_decode_step(m, c, want[i][g], row), MEMRA_OK);
        }
        memra_cache_free(c);
    }
    memra_cache_t *c[GB];
    memra_batch_item_t it[GB];
    for (int i = 0; i < GB; i++) {
        assert_int_equal(memra_cache_create(m, cap, &c[i]), MEMRA_OK);
        it[i] = (memra_batch_item_t){.cache = c[i], .tokens = p[i], .n_tokens = n[i], .logits = row + (size_t)i * V};
    }
    assert_int_equal(memra_forward_batch(m, it, GB, 0), MEMRA_OK); /* all prompts in one call */
    for (int g = 0; g < GEN; g++) {
        for (int i = 0; i < GB; i++) {
            got[i][g] = argmax(row + (size_t)i * V, V);
            it[i].tokens = &got[i][g];
            it[i].n_tokens = 1;
        }
        if (g + 1 < GEN)
            assert_int_equal(memra_forward_batch(m, it, GB, 0), MEMRA_OK);
    }
    for (int i = 0; i < GB; i++) {
        for (int g = 0; g < GEN; g++)
            if (got[i][g] != want[i][g])
                fail_msg("%s: sequence %d: greedy token %d is %d in a batch of %d, %d alone", name, i, g, got[i][g],
                         GB, want[i][g]);
        memra_cache_free(c[i]);
        free(p[i]);
    }
    free(row);
    free(prompt);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* ---- bad input ---------------------------------------------------------- */

enum { NC = 3, CAP = 12 };

typedef struct bad_ctx {
    memra_model_t *m, *other;
    memra_cache_t *c[NC], *full, *foreign;
    float *logits[NC + 1];
    int32_t V;
} bad_ctx_t;

/* Runs ITEMS, expecting WANT, then checks that nothing changed: positions,
 * logits buffers (NaN-filled before), and state (checked at the end by a
 * good step compared with the same sequences alone). */
static void expect_bad(bad_ctx_t *x, const memra_batch_item_t *items, int32_t n, uint32_t flags,
                       memra_status_t want, const char *what)
{
    int32_t pos[NC];
    for (int i = 0; i < NC; i++)
        pos[i] = memra_cache_pos(x->c[i]);
    const int32_t pos_full = memra_cache_pos(x->full);
    for (int i = 0; i <= NC; i++)
        for (int32_t j = 0; j < x->V; j++)
            x->logits[i][j] = NAN;
    memra_status_t st = memra_forward_batch(x->m, items, n, flags);
    if (st != want)
        fail_msg("%s: status %s, want %s (%s)", what, memra_status_name(st), memra_status_name(want),
                 memra_model_last_error(x->m));
    const char *msg = memra_model_last_error(x->m);
    if (!msg || !strstr(msg, "memra_forward_batch"))
        fail_msg("%s: the message does not name the call: '%s'", what, msg ? msg : "(null)");
    for (int i = 0; i < NC; i++)
        if (memra_cache_pos(x->c[i]) != pos[i])
            fail_msg("%s: cache %d moved from %d to %d", what, i, pos[i], memra_cache_pos(x->c[i]));
    assert_int_equal(memra_cache_pos(x->full), pos_full);
    for (int i = 0; i <= NC; i++)
        for (int32_t j = 0; j < x->V; j++)
            if (!isnan(x->logits[i][j]))
                fail_msg("%s: logits buffer %d written at %d", what, i, j);
}

static void test_bad_input(void **state)
{
    const char *name = ((const fixture_case_t *)*state)->name;
    if (!selected(name)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", name);
        return;
    }
    bad_ctx_t x = {0};
    x.m = load(name);
    x.other = load(name);
    x.V = memra_model_n_vocab(x.m);
    const int32_t V = x.V;
    int32_t prompt[4] = {1, 2, 3, 4};
    for (int i = 0; i < NC; i++) {
        assert_int_equal(memra_cache_create(x.m, CAP, &x.c[i]), MEMRA_OK);
        assert_int_equal(memra_forward(x.m, x.c[i], prompt, 1 + i, 0, NULL), MEMRA_OK);
    }
    for (int i = 0; i <= NC; i++)
        x.logits[i] = malloc((size_t)V * sizeof(float));
    assert_int_equal(memra_cache_create(x.m, 2, &x.full), MEMRA_OK);
    assert_int_equal(memra_forward(x.m, x.full, prompt, 2, 0, NULL), MEMRA_OK);
    assert_int_equal(memra_cache_create(x.other, CAP, &x.foreign), MEMRA_OK);

    /* items 0 and 1 are good (caches 0 and 1); item 2 is the one that varies */
    int32_t tok = 5, many[CAP], hi[2] = {5, V}, lo[2] = {5, -1};
    for (int i = 0; i < CAP; i++)
        many[i] = i;
    memra_batch_item_t it[NC];
    for (int i = 0; i < NC; i++)
        it[i] = (memra_batch_item_t){.cache = x.c[i], .tokens = &tok, .n_tokens = 1, .logits = x.logits[i]};
    const memra_batch_item_t base = it[NC - 1];
    memra_batch_item_t *b = &it[NC - 1];

    expect_bad(&x, NULL, 1, 0, MEMRA_E_INVALID, "NULL items");
    expect_bad(&x, it, 0, 0, MEMRA_E_INVALID, "no items");
    expect_bad(&x, it, -1, 0, MEMRA_E_INVALID, "n_items -1");
    expect_bad(&x, it, memra_model_max_batch(x.m) + 1, 0, MEMRA_E_INVALID, "above the maximum");
    expect_bad(&x, it, NC, 2, MEMRA_E_INVALID, "unknown step flags");
    *b = base;
    b->cache = NULL;
    expect_bad(&x, it, NC, 0, MEMRA_E_INVALID, "NULL cache");
    *b = base;
    b->tokens = NULL;
    expect_bad(&x, it, NC, 0, MEMRA_E_INVALID, "NULL tokens");
    *b = base;
    b->n_tokens = 0;
    expect_bad(&x, it, NC, 0, MEMRA_E_INVALID, "no tokens");
    *b = base;
    b->flags = 4;
    expect_bad(&x, it, NC, 0, MEMRA_E_INVALID, "unknown item flags");
    *b = base;
    b->cache = x.foreign;
    expect_bad(&x, it, NC, 0, MEMRA_E_MISUSE, "cache of another model");
    *b = base;
    b->cache = x.c[0];
    expect_bad(&x, it, NC, 0, MEMRA_E_INVALID, "the same cache twice");
    *b = base;
    b->cache = x.full;
    expect_bad(&x, it, NC, 0, MEMRA_E_FULL, "full cache");
    *b = base;
    b->tokens = many;
    b->n_tokens = CAP;
    expect_bad(&x, it, NC, 0, MEMRA_E_FULL, "pos + n beyond the capacity");
    *b = base;
    b->tokens = hi;
    b->n_tokens = 2;
    expect_bad(&x, it, NC, 0, MEMRA_E_RANGE, "token n_vocab");
    b->tokens = lo;
    expect_bad(&x, it, NC, 0, MEMRA_E_RANGE, "token -1");
    /* a deferred step in flight on cache 2: the whole model is busy */
    *b = base;
    memra_pending_t *pend = NULL;
    assert_int_equal(memra_decode_step_deferred(x.m, x.c[NC - 1], 7, &pend), MEMRA_OK);
    expect_bad(&x, it, NC - 1, 0, MEMRA_E_BUSY, "deferred step of the model in flight");
    expect_bad(&x, it, NC, 0, MEMRA_E_BUSY, "deferred step on the cache in flight");
    assert_int_equal(memra_pending_wait(pend, NULL), MEMRA_OK);

    /* every handle still works, and each sequence's state is the one it
     * had: a good step equals the same sequences alone */
    assert_int_equal(memra_forward_batch(x.m, it, NC, 0), MEMRA_OK);
    float *alone = malloc((size_t)V * sizeof *alone);
    for (int i = 0; i < NC; i++) {
        memra_cache_t *c = NULL;
        assert_int_equal(memra_cache_create(x.m, CAP, &c), MEMRA_OK);
        assert_int_equal(memra_forward(x.m, c, prompt, 1 + i, 0, NULL), MEMRA_OK);
        if (i == NC - 1)
            assert_int_equal(memra_decode_step(x.m, c, 7, NULL), MEMRA_OK);
        assert_int_equal(memra_decode_step(x.m, c, tok, alone), MEMRA_OK);
        assert_int_equal(memra_cache_pos(c), memra_cache_pos(x.c[i]));
        if (memcmp(alone, x.logits[i], (size_t)V * sizeof *alone) != 0)
            fail_msg("%s: sequence %d after the bad calls differs from the same tokens alone", name, i);
        memra_cache_free(c);
    }
    free(alone);

    /* exactly the maximum runs */
    const int32_t max = memra_model_max_batch(x.m);
    memra_cache_t **cs = calloc((size_t)max, sizeof *cs);
    memra_batch_item_t *all = calloc((size_t)max, sizeof *all);
    for (int32_t i = 0; i < max; i++) {
        assert_int_equal(memra_cache_create(x.m, 2, &cs[i]), MEMRA_OK);
        all[i] = (memra_batch_item_t){.cache = cs[i], .tokens = &tok, .n_tokens = 1};
    }
    assert_int_equal(memra_forward_batch(x.m, all, max, 0), MEMRA_OK);
    for (int32_t i = 0; i < max; i++) {
        assert_int_equal(memra_cache_pos(cs[i]), 1);
        memra_cache_free(cs[i]);
    }
    free(cs);
    free(all);
    assert_int_equal(memra_model_max_batch(NULL), 0);
    assert_int_equal(memra_forward_batch(NULL, it, NC, 0), MEMRA_E_INVALID);

    for (int i = 0; i < NC; i++)
        memra_cache_free(x.c[i]);
    memra_cache_free(x.full);
    memra_cache_free(x.foreign);
    for (int i = 0; i <= NC; i++)
        free(x.logits[i]);
    assert_int_equal(memra_model_free(x.m), MEMRA_OK);
    assert_int_equal(memra_model_free(x.other), MEMRA_OK);
}

/* ---- runner ------------------------------------------------------------- */

int main(void)
{
    /* the exact tier: batched rows on the decode kernels, bit for bit
     * (test_batch_fast checks the fast tier's batched kernels) */
    setenv("MEMRA_BATCH_FAST", "0", 1);
    static const tu_kind_t kinds[] = {
        {"random_schedules", test_random_schedules, 0, 0},
        {"random_schedules_2_stages", test_random_schedules, 2, 0},
        {"every_b", test_every_b, 0, 0},
        {"greedy_batch_of_8", test_greedy_batch_of_8, 0, 0},
        {"bad_input", test_bad_input, 0, 0},
    };
    return tu_run_fixture_kinds("batch", kinds, sizeof kinds / sizeof kinds[0], &g_engine);
}
