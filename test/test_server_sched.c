/* memra-server's scheduler (examples/server/scheduler.c) on the bundled
 * model, without HTTP: a round's sequences go through memra_forward_batch
 * together, a request whose step the library would refuse (a full cache,
 * a token outside the vocabulary) fails alone while the others of the same
 * steps go on, more sequences than memra_model_max_batch are split into
 * several calls, and one sequence alone (B = 1) works.
 *
 * The scheduler's source is included so that a test can queue several
 * requests under one hold of its lock: the next round then admits them
 * all, which makes "these requests shared a step" certain rather than a
 * matter of thread timing. Expected texts come from memra_forward /
 * memra_decode_step and an argmax here, not from the scheduler. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "scheduler.c"
#include "testutil.h"

static memra_model_t *g_model;
static const memra_tokenizer_t *g_tok;
static int32_t g_prompt[64], g_n_prompt;

#define PROMPT "The quick brown fox"

static int setup(void **state)
{
    (void)state;
    const char *path = tu_data_path("default.gguf");
    memra_model_params_t p;
    memra_model_default_params(&p);
    if (!path || memra_model_load(path, &p, &g_model) != MEMRA_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path ? path : "test/data/default.gguf", memra_last_error());
        return -1;
    }
    g_tok = memra_model_tokenizer(g_model);
    if (!g_tok || memra_tokenize(g_tok, PROMPT, strlen(PROMPT), g_prompt, 64, MEMRA_TOKENIZE_ADD_SPECIAL,
                                 &g_n_prompt) != MEMRA_OK)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    memra_model_free(g_model);
    return 0;
}

typedef struct text {
    char buf[4096];
    size_t n;
    int32_t n_gen;
} text_t;

/* The greedy continuation of PROMPT[0..N) by the model alone, as the
 * scheduler's sampling loop ends it (max_tokens, a context of N_CTX, an
 * end-of-generation token). */
static void greedy_alone(const int32_t *prompt, int32_t n, int32_t max_tokens, int32_t n_ctx, text_t *out)
{
    const int32_t n_vocab = memra_model_n_vocab(g_model);
    float *lg = malloc((size_t)n_vocab * sizeof *lg);
    memra_cache_t *c = NULL;
    assert_non_null(lg);
    assert_int_equal(memra_cache_create(g_model, n_ctx, &c), MEMRA_OK);
    assert_int_equal(memra_forward(g_model, c, prompt, n, 0, lg), MEMRA_OK);
    memset(out, 0, sizeof *out);
    for (;;) {
        int32_t t = 0;
        for (int32_t i = 1; i < n_vocab; i++)
            if (lg[i] > lg[t])
                t = i;
        if (memra_tokenizer_is_eog(g_tok, t))
            break;
        size_t k = 0;
        assert_int_equal(memra_token_to_piece(g_tok, t, out->buf + out->n, sizeof out->buf - out->n, 0, &k),
                         MEMRA_OK);
        out->n += k;
        if (++out->n_gen >= max_tokens || memra_cache_pos(c) >= n_ctx)
            break;
        assert_int_equal(memra_decode_step(g_model, c, t, lg), MEMRA_OK);
    }
    memra_cache_free(c);
    free(lg);
}

/* A greedy request for PROMPT[0..N) (copied). */
static sched_req_t *request(const int32_t *prompt, int32_t n, int32_t max_tokens)
{
    gen_params_t p = {0};
    memra_sampler_params_t sp;
    memra_sampler_default_params(&sp);
    sp.temperature = 0;
    assert_non_null(p.prompt = malloc((size_t)n * sizeof *p.prompt));
    memcpy(p.prompt, prompt, (size_t)n * sizeof *prompt);
    p.n_prompt = n;
    p.max_tokens = max_tokens;
    assert_int_equal(memra_sampler_create(&sp, &p.sampler), MEMRA_OK);
    sched_req_t *r = sched_req_new(&p);
    assert_non_null(r);
    return r;
}

/* Queues every request of RS under one hold of the lock: the next round
 * admits them all (the slots are free). */
static void submit_together(sched_t *s, sched_req_t **rs, int n)
{
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++)
        assert_int_equal(submit_locked(s, rs[i]), 0);
    pthread_mutex_unlock(&s->mu);
}

/* Waits for R's end: its whole text, and how it ended. */
static sched_finish_t finish_of(sched_t *s, sched_req_t *r, text_t *out, char *error, size_t cap)
{
    memset(out, 0, sizeof *out);
    for (int waited = 0; waited < 120; waited++) {
        sched_update_t u;
        if (!sched_wait(s, r, 1000, &u))
            continue;
        if (u.text) {
            assert_true(out->n + u.n_text < sizeof out->buf);
            memcpy(out->buf + out->n, u.text, u.n_text);
            out->n += u.n_text;
            free(u.text);
        }
        out->n_gen = u.n_gen;
        if (u.finish != SCHED_RUNNING) {
            snprintf(error, cap, "%s", u.error);
            return u.finish;
        }
    }
    fail_msg("a request did not end within 120 s");
    return SCHED_ERROR;
}

static void assert_text(const text_t *got, const text_t *want)
{
    if (got->n != want->n || memcmp(got->buf, want->buf, got->n) || got->n_gen != want->n_gen)
        fail_msg("text %d tokens \"%.*s\", want %d tokens \"%.*s\"", got->n_gen, (int)got->n, got->buf,
                 want->n_gen, (int)want->n, want->buf);
}

/* Three requests admitted in one round: A is good; B's prompt is longer
 * than the context, so the step that would overflow its cache fails it
 * (after 8 steps shared with A); C holds a token outside the vocabulary in
 * its first chunk. Only B and C fail, with their reasons; A's text is the
 * model's greedy text, and the scheduler takes a new request afterwards. */
static void test_bad_items_fail_alone(void **state)
{
    (void)state;
    const int32_t n_ctx = 32, max_tokens = 16;
    text_t want, got;
    char err[256];
    greedy_alone(g_prompt, g_n_prompt, max_tokens, n_ctx, &want); /* first: one thread at a time per model */
    sched_t *s = sched_create(g_model, 3, n_ctx, 4, 4);
    assert_non_null(s);
    int32_t long_prompt[40], bad_prompt[12];
    for (int i = 0; i < 40; i++)
        long_prompt[i] = g_prompt[i % g_n_prompt];
    for (int i = 0; i < 12; i++)
        bad_prompt[i] = g_prompt[i % g_n_prompt];
    bad_prompt[2] = memra_model_n_vocab(g_model);
    sched_req_t *rs[3] = {request(g_prompt, g_n_prompt, max_tokens), request(long_prompt, 40, max_tokens),
                          request(bad_prompt, 12, max_tokens)};
    submit_together(s, rs, 3);
    const sched_finish_t f = finish_of(s, rs[0], &got, err, sizeof err);
    if (f == SCHED_ERROR)
        fail_msg("A: %s", err);
    assert_text(&got, &want);
    assert_int_equal(finish_of(s, rs[1], &got, err, sizeof err), SCHED_ERROR);
    if (!strstr(err, "context is full"))
        fail_msg("B: \"%s\"", err);
    assert_int_equal(finish_of(s, rs[2], &got, err, sizeof err), SCHED_ERROR);
    if (!strstr(err, "outside the vocabulary"))
        fail_msg("C: \"%s\"", err);
    for (int i = 0; i < 3; i++)
        sched_release(s, rs[i]);

    sched_stats_t st;
    sched_get_stats(s, &st);
    assert_int_equal(st.failed, 2);
    assert_int_equal(st.finished, 1);
    /* A and B shared their prompt steps: two items each */
    assert_true(st.steps > st.step_hist[0]);

    sched_req_t *again = request(g_prompt, g_n_prompt, max_tokens);
    assert_int_equal(sched_submit(s, again), 0);
    assert_int_equal(finish_of(s, again, &got, err, sizeof err), f);
    assert_text(&got, &want);
    sched_release(s, again);
    sched_free(s);
}

/* One sequence alone: every step one item, its prompt in chunks of 3 (the
 * steps are the chunks and then one per further token). */
static void test_one_sequence(void **state)
{
    (void)state;
    const int32_t n_ctx = 64, max_tokens = 12, chunk = 3;
    text_t want, got;
    char err[256];
    greedy_alone(g_prompt, g_n_prompt, max_tokens, n_ctx, &want);
    sched_t *s = sched_create(g_model, 1, n_ctx, 0, chunk);
    assert_non_null(s);
    sched_req_t *r = request(g_prompt, g_n_prompt, max_tokens);
    assert_int_equal(sched_submit(s, r), 0);
    const sched_finish_t f = finish_of(s, r, &got, err, sizeof err);
    if (f == SCHED_ERROR)
        fail_msg("%s", err);
    assert_text(&got, &want);
    sched_release(s, r);
    sched_stats_t st;
    sched_get_stats(s, &st);
    const uint64_t chunks = (uint64_t)((g_n_prompt + chunk - 1) / chunk);
    /* a stop at end-of-generation decodes the last generated token too */
    assert_int_equal(st.steps, chunks + (uint64_t)want.n_gen - (f == SCHED_LENGTH));
    assert_int_equal(st.step_hist[0], st.steps);
    assert_int_equal(st.step_items, st.steps);
    assert_int_equal(st.last_step_items, 1);
    assert_int_equal(st.prefill_tokens, (uint64_t)g_n_prompt);
    sched_free(s);
}

/* More sequences than one call takes: a round of N items runs as calls of
 * at most memra_model_max_batch, and every sequence still gets its text. */
static void test_more_than_max_batch(void **state)
{
    (void)state;
    const int32_t max_batch = memra_model_max_batch(g_model);
    const int n = max_batch + 6;
    const int32_t n_ctx = 32, max_tokens = 4;
    text_t want, got;
    char err[256];
    greedy_alone(g_prompt, g_n_prompt, max_tokens, n_ctx, &want);
    sched_t *s = sched_create(g_model, n, n_ctx, 0, 64);
    assert_non_null(s);
    sched_req_t **rs = calloc((size_t)n, sizeof *rs);
    assert_non_null(rs);
    for (int i = 0; i < n; i++)
        rs[i] = request(g_prompt, g_n_prompt, max_tokens);
    submit_together(s, rs, n);
    for (int i = 0; i < n; i++) {
        const sched_finish_t f = finish_of(s, rs[i], &got, err, sizeof err);
        if (f == SCHED_ERROR)
            fail_msg("request %d: %s", i, err);
        assert_text(&got, &want);
        sched_release(s, rs[i]);
    }
    free(rs);
    sched_stats_t st;
    sched_get_stats(s, &st);
    /* no call above the limit; the full ones in the 33..64 bucket */
    assert_int_equal(max_batch, 64);
    assert_int_equal(st.step_hist[SCHED_HIST_BUCKETS - 1], 0);
    assert_true(st.step_hist[6] >= 1);
    assert_int_equal(st.finished, (uint64_t)n);
    sched_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_items_fail_alone),
        cmocka_unit_test(test_one_sequence),
        cmocka_unit_test(test_more_than_max_batch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
