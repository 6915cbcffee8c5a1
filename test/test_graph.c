/* Decode steps replayed from recordings (CUDA graphs, lib/stage.c): the
 * logits of every step are the bits of the same step run directly.
 *
 * For every fixture model and KV cache type (f32, f16, q8_0 where the KV
 * heads are whole blocks of 32), a prompt and 300 decode steps (across a
 * 256-key recording bound) run directly (MEMRA_GRAPH=0), then with
 * recordings on two caches interleaved (the second's cut in parts of two
 * layers after a first of one), with the logits buffer changing
 * for a few steps and a prefill on a third cache between steps (its
 * scratch may grow: recordings made before are stale then); every logits
 * row is compared bit for bit (memcmp), and the stage must have replayed
 * steps; then batched decode steps of 3 and of 5 sequences (memra_forward_batch:
 * one row each; from 4 rows a fast engine takes its batched kernels), each
 * step run directly on one set of caches and replayed on another, compared
 * bit for bit. A backend without recordings (the CPU) skips, saying so.
 * MEMRA_TEST_DEVICE=cuda:0 runs it on a GPU engine; MEMRA_TEST_FIXTURE=NAME
 * runs one fixture. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "memra/memra.h"
#include "model_impl.h" /* the stage's replay count */
#include "testutil.h"

#define N_P 11  /* prompt tokens */
#define N_D 300 /* decode steps: positions 11..310 cross the 256-key bound */
#define N_LONG 40 /* the third cache's prefill */

static memra_engine_t *g_engine;

static const int k_types[] = {MEMRA_TYPE_F32, MEMRA_TYPE_F16, MEMRA_TYPE_Q8_0, TU_KV_Q8_Q4};

static memra_model_t *load(const char *name)
{
    return tu_load_fixture(name, g_engine, 0, 0);
}

static memra_cache_t *create(memra_model_t *m, int type, int32_t n_ctx)
{
    return tu_cache_typed(m, type, n_ctx);
}

/* Fixture FC's model, or a skip saying why when its backend cannot record. */
static memra_model_t *load_recording(const tu_fixture_case_t *fc)
{
    memra_model_t *m = load(fc->name);
    if (!m->stages[0].be->iface->graph_begin) {
        memra_model_free(m);
        TU_SKIP("%s: the engine's backend does not record steps (MEMRA_TEST_DEVICE=cuda:0 runs this)", fc->name);
    }
    return m;
}

static void step(memra_model_t *m, memra_cache_t *c, const int32_t *t, int32_t n, float *logits)
{
    memra_status_t st = n == 1 ? memra_decode_step(m, c, t[0], logits) : memra_forward(m, c, t, n, 0, logits);
    if (st)
        fail_msg("forward of %d token(s): %s (%s)", n, memra_strerror(st), memra_model_last_error(m));
}

static void test_replay(void **state)
{
    const tu_fixture_case_t *fc = *state;
    memra_model_t *m = load_recording(fc);
    const size_t V = (size_t)memra_model_n_vocab(m);
    int32_t tok[N_P + N_D + N_LONG];
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N_P + N_D + N_LONG; i++)
        tok[i] = (int32_t)tu_rng_int(&rng, (int64_t)V);
    float *ref = malloc((N_D + 1) * V * sizeof *ref), *got = malloc(2 * V * sizeof *got);
    float *alt = malloc(V * sizeof *alt);
    assert_true(ref && got && alt);
    const uint64_t replays0 = m->stages[0].graph_replays;
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        const int type = k_types[ti];
        memra_cache_t *a = create(m, type, N_P + N_D + 1);
        if (!a)
            continue;
        setenv("MEMRA_GRAPH", "0", 1);
        step(m, a, tok, N_P, ref);
        for (int i = 0; i < N_D; i++)
            step(m, a, tok + N_P + i, 1, ref + (size_t)(i + 1) * V);
        memra_cache_free(a);

        setenv("MEMRA_GRAPH", "1", 1);
        memra_cache_t *c[2] = {create(m, type, N_P + N_D + 1), create(m, type, N_P + N_D + 1)};
        memra_cache_t *far = create(m, type, N_LONG);
        for (int k = 0; k < 2; k++)
            step(m, c[k], tok, N_P, got + k * V);
        for (int i = 0; i < N_D; i++) {
            if (i == 150)
                step(m, far, tok + N_P + N_D, N_LONG, NULL); /* its scratch may move */
            for (int k = 0; k < 2; k++) {
                /* the second cache's recordings cut in parts of two
                 * layers after a first part of one (lib/stage.c record) */
                setenv("MEMRA_GRAPH_FIRST", k ? "1" : "0", 1);
                setenv("MEMRA_GRAPH_LAYERS", k ? "2" : "4", 1);
                /* steps 100..104 of the first cache write another buffer */
                float *out = k == 0 && i >= 100 && i < 105 ? alt : got + k * V;
                step(m, c[k], tok + N_P + i, 1, out);
                if (memcmp(out, ref + (size_t)(i + 1) * V, V * sizeof *out) != 0)
                    fail_msg("%s, %s cache %d: logits of decode step %d (position %d) differ from the direct run",
                             fc->name, tu_kv_name(type), k, i, N_P + i);
            }
        }
        memra_cache_free(c[0]);
        memra_cache_free(c[1]);
        memra_cache_free(far);
    }
    const uint64_t replays = m->stages[0].graph_replays - replays0;
    const bool off = m->stages[0].graph_off[0];
    free(ref);
    free(got);
    free(alt);
    memra_model_free(m);
    unsetenv("MEMRA_GRAPH");
    unsetenv("MEMRA_GRAPH_FIRST");
    unsetenv("MEMRA_GRAPH_LAYERS");
    if (off || replays < N_D)
        fail_msg("%s: %llu steps replayed%s", fc->name, (unsigned long long)replays,
                 off ? " (recording failed: replays off)" : "");
}

#define N_B 5   /* sequences of a batched step, at most */
#define N_DB 270 /* batched decode steps: across the 256-key bound */

/* N_SEQ sequences decoded together, each step run directly (MEMRA_GRAPH=0)
 * on caches A and through recordings on caches B. */
static void batched(memra_model_t *m, const char *name, int n_seq, const int32_t *tok)
{
    const size_t V = (size_t)memra_model_n_vocab(m);
    float *ref = malloc((size_t)n_seq * V * sizeof *ref), *got = malloc((size_t)n_seq * V * sizeof *got);
    assert_true(ref && got);
    memra_cache_t *ca[N_B], *cb[N_B];
    for (int k = 0; k < n_seq; k++) {
        ca[k] = create(m, MEMRA_TYPE_F16, N_P + N_DB + 1);
        cb[k] = create(m, MEMRA_TYPE_F16, N_P + N_DB + 1);
        step(m, ca[k], tok + k, N_P, NULL);
        step(m, cb[k], tok + k, N_P, NULL);
    }
    const uint64_t replays0 = m->stages[0].graph_replays;
    for (int i = 0; i < N_DB; i++) {
        for (int pass = 0; pass < 2; pass++) {
            memra_batch_item_t it[N_B];
            for (int k = 0; k < n_seq; k++)
                it[k] = (memra_batch_item_t){.cache = pass ? cb[k] : ca[k], .tokens = tok + N_P + i + k,
                                             .n_tokens = 1, .logits = (pass ? got : ref) + (size_t)k * V};
            setenv("MEMRA_GRAPH", pass ? "1" : "0", 1);
            memra_status_t st = memra_forward_batch(m, it, n_seq, 0);
            if (st)
                fail_msg("%s: batched step %d of %d: %s (%s)", name, i, n_seq, memra_strerror(st),
                         memra_model_last_error(m));
        }
        for (int k = 0; k < n_seq; k++)
            if (memcmp(got + (size_t)k * V, ref + (size_t)k * V, V * sizeof *got) != 0)
                fail_msg("%s: %d sequences, step %d: sequence %d's logits differ from the direct run", name, n_seq,
                         i, k);
    }
    const uint64_t replays = m->stages[0].graph_replays - replays0;
    for (int k = 0; k < n_seq; k++) {
        memra_cache_free(ca[k]);
        memra_cache_free(cb[k]);
    }
    free(ref);
    free(got);
    unsetenv("MEMRA_GRAPH");
    if (m->stages[0].graph_off[1] || replays < N_DB / 2)
        fail_msg("%s: %d sequences: %llu steps replayed%s", name, n_seq, (unsigned long long)replays,
                 m->stages[0].graph_off[1] ? " (recording failed: replays off)" : "");
}

static void test_batched(void **state)
{
    const tu_fixture_case_t *fc = *state;
    memra_model_t *m = load_recording(fc);
    const int64_t V = memra_model_n_vocab(m);
    int32_t tok[N_P + N_DB + N_B];
    uint64_t rng = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < N_P + N_DB + N_B; i++)
        tok[i] = (int32_t)tu_rng_int(&rng, V);
    batched(m, fc->name, 3, tok);
    batched(m, fc->name, N_B, tok);
    memra_model_free(m);
}

int main(void)
{
    static const tu_kind_t kinds[] = {
        {"replay", test_replay, 0, 0},
        {"batched", test_batched, 0, 0},
    };
    return tu_run_fixture_kinds("graph", kinds, sizeof kinds / sizeof kinds[0], &g_engine);
}
