/* memra_cache_fork (prefix sharing, include/memra/model.h).
 *
 * For every fixture model ($MEMRA_FIXTURES/models/<name>.gguf, every arch)
 * and every KV cache type (f32, f16, bf16, q8_0 where the KV heads are
 * whole blocks of 32):
 *   - a prompt P is prefilled into a parent, which is forked; the fork,
 *     continued with tokens B, gives the same logits bit for bit (memcmp)
 *     as an unforked cache fed P then B; a fork of that fork (with a larger
 *     capacity) continued with A matches P, B, A unforked; the parent,
 *     continued with A afterwards, matches P, A unforked;
 *   - the parent's contents (KV rows, recurrent state, position: a digest
 *     read back from the devices) are unchanged by its forks' writes, and a
 *     fresh fork's digest is the parent's;
 *   - the same on a model split into two pipeline stages (each stage's
 *     layers copied on its own engine), and with a paged KV pool (pages of
 *     4 KiB on the CPU: the parent's whole pages shared, the partial one
 *     copied), on one stage and two;
 *   - bad input (NULL parent or out, n_ctx below the parent's position, a
 *     fork too large for the devices, deferred steps in flight) fails with
 *     its status and a message, leaves *out NULL and the parent unchanged
 *     and usable;
 *   - memra_cache_state_bytes against the recurrent shapes of the file.
 * Inputs are fixed token streams from a seeded generator.
 * MEMRA_TEST_DEVICE=cuda:0 runs it on a GPU engine (as test_batch does);
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

#include "memra/memra.h"
#include "model_impl.h" /* memra__cache_digest */
#include "testutil.h"

#define CHUNK 8  /* the model's prefill_chunk: the prompt is prefilled in two chunks */
#define N_P 11   /* prompt tokens */
#define N_A 5    /* one continuation */
#define N_B 4    /* another */
#define CAP 40   /* capacity of the parent and the unforked runs */

static memra_engine_t *g_engine;

typedef tu_fixture_case_t fixture_case_t; /* testutil.h */

static const int k_types[] = {MEMRA_TYPE_F32, MEMRA_TYPE_F16, MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0, TU_KV_Q8_Q4};

static bool selected(const char *name)
{
    const char *only = getenv("MEMRA_TEST_FIXTURE");
    return !only || !*only || strcmp(only, name) == 0;
}

static bool g_pool; /* load with a paged KV pool (test_fork_pool) */

static memra_model_t *load(const char *name, int32_t stages)
{
    return tu_load_fixture_pool(name, g_engine, CHUNK, stages, g_pool ? (int64_t)1 << 30 : 0, g_pool ? 4096 : 0);
}

/* A cache of TYPE rows (K and V), or NULL when the model cannot store it
 * (q8_0 with KV heads that are not whole blocks of 32). */
static memra_cache_t *create(memra_model_t *m, int type, int32_t n_ctx)
{
    return tu_cache_typed(m, type, n_ctx);
}

static uint64_t digest(const memra_cache_t *c)
{
    uint64_t h = 0;
    memra_status_t st = memra__cache_digest(c, &h);
    if (st)
        fail_msg("digest: %s (%s)", memra_strerror(st), memra_last_error());
    return h;
}

static void prefill(memra_model_t *m, memra_cache_t *c, const int32_t *t, int32_t n)
{
    memra_status_t st = memra_forward(m, c, t, n, 0, NULL);
    if (st)
        fail_msg("prefill: %s (%s)", memra_strerror(st), memra_model_last_error(m));
}

/* Continues C with N tokens: all rows of one forward over the first N-1,
 * then a decode step of the last (both paths); malloc'ed [N][n_vocab]. */
static float *cont(memra_model_t *m, memra_cache_t *c, const int32_t *t, int32_t n)
{
    const size_t V = (size_t)memra_model_n_vocab(m);
    float *out = malloc((size_t)n * V * sizeof *out);
    assert_non_null(out);
    memra_status_t st = memra_forward(m, c, t, n - 1, MEMRA_FORWARD_ALL_ROWS, out);
    if (!st)
        st = memra_decode_step(m, c, t[n - 1], out + (size_t)(n - 1) * V);
    if (st)
        fail_msg("continue: %s (%s)", memra_strerror(st), memra_model_last_error(m));
    return out;
}

static void same_logits(const memra_model_t *m, const char *what, const float *got, const float *want, int32_t n)
{
    tu_same_rows(what, got, want, n, (size_t)memra_model_n_vocab(m)); /* against the unforked run */
}

/* Seeded tokens: P, then A, then B. */
static void make_tokens(memra_model_t *m, const char *name, int32_t *t)
{
    uint64_t rng = 0x2545f4914f6cdd1dull;
    for (const char *p = name; *p; p++)
        rng = rng * 1099511628211ull + (unsigned char)*p;
    if (!rng)
        rng = 1;
    for (int32_t i = 0; i < N_P + N_A + N_B; i++)
        t[i] = (int32_t)tu_rng_int(&rng, memra_model_n_vocab(m));
}

static void fork_type(memra_model_t *m, const char *name, int type, const int32_t *tok)
{
    const int32_t *P = tok, *A = tok + N_P, *B = tok + N_P + N_A;
    memra_cache_t *parent = create(m, type, CAP);
    if (!parent) {
        fprintf(stderr, "[   NOTE   ] %s: no %s cache (KV heads not whole blocks of 32)\n", name, tu_kv_name(type));
        return;
    }
    /* the unforked runs: P A, and P B A */
    memra_cache_t *ra = create(m, type, CAP), *rb = create(m, type, CAP);
    prefill(m, ra, P, N_P);
    float *la = cont(m, ra, A, N_A);
    prefill(m, rb, P, N_P);
    float *lb = cont(m, rb, B, N_B);
    float *lba = cont(m, rb, A, N_A);

    prefill(m, parent, P, N_P);
    const uint64_t d0 = digest(parent);
    memra_cache_t *child = NULL, *grand = NULL;
    memra_status_t st = memra_cache_fork(parent, 0, &child);
    if (st)
        fail_msg("%s %s: fork: %s (%s)", name, tu_kv_name(type), memra_strerror(st), memra_last_error());
    assert_int_equal(memra_cache_pos(child), N_P);
    assert_int_equal(memra_cache_capacity(child), CAP);
    assert_int_equal(memra_cache_type_k(child), type == TU_KV_Q8_Q4 ? MEMRA_TYPE_Q8_0 : type);
    assert_int_equal(memra_cache_type_v(child), type == TU_KV_Q8_Q4 ? MEMRA_TYPE_Q4_0 : type);
    if (digest(child) != d0)
        fail_msg("%s %s: a fresh fork's contents differ from its parent's", name, tu_kv_name(type));

    float *got = cont(m, child, B, N_B);
    same_logits(m, "fork + B", got, lb, N_B);
    free(got);
    if (digest(parent) != d0)
        fail_msg("%s %s: the fork's writes changed the parent", name, tu_kv_name(type));

    /* a fork of the fork, larger than its parent */
    st = memra_cache_fork(child, CAP + 16, &grand);
    if (st)
        fail_msg("%s %s: fork of a fork: %s (%s)", name, tu_kv_name(type), memra_strerror(st),
                 memra_last_error());
    assert_int_equal(memra_cache_pos(grand), N_P + N_B);
    assert_int_equal(memra_cache_capacity(grand), CAP + 16);
    const uint64_t dc = digest(child);
    got = cont(m, grand, A, N_A);
    same_logits(m, "fork of a fork + A", got, lba, N_A);
    free(got);
    if (digest(child) != dc || digest(parent) != d0)
        fail_msg("%s %s: the second fork's writes changed a parent", name, tu_kv_name(type));

    /* the parent continues as if it had never been forked */
    got = cont(m, parent, A, N_A);
    same_logits(m, "parent + A after its forks ran", got, la, N_A);
    free(got);

    free(la);
    free(lb);
    free(lba);
    memra_cache_t *all[] = {grand, child, parent, ra, rb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        assert_int_equal(memra_cache_free(all[i]), MEMRA_OK);
}

static void test_fork(void **state)
{
    const fixture_case_t *fc = *state;
    if (!selected(fc->name)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", fc->name);
        return;
    }
    if (tu_skip_stages_on_gpu(fc->name, fc->stages))
        return;
    memra_model_t *m = load(fc->name, fc->stages);
    int32_t tok[N_P + N_A + N_B];
    make_tokens(m, fc->name, tok);
    for (size_t i = 0; i < sizeof k_types / sizeof *k_types; i++)
        fork_type(m, fc->name, k_types[i], tok);
    assert_int_equal(memra_model_free(m), MEMRA_OK); /* every cache, forks included, was freed */
}

static void test_fork_plain(void **state)
{
    g_pool = false;
    test_fork(state);
}

static void test_fork_pool(void **state)
{
    g_pool = true; /* (every kind sets it: a failed test leaves it as it was) */
    test_fork(state);
}

/* A failed fork: STATUS, a message, *out NULL, the parent's digest D0. */
static void refused(memra_status_t st, memra_status_t want, memra_cache_t *out, const memra_cache_t *parent,
                    uint64_t d0, const char *what)
{
    if (st != want)
        fail_msg("%s: %s, want %s (%s)", what, memra_status_name(st), memra_status_name(want), memra_last_error());
    if (strlen(memra_last_error()) == 0)
        fail_msg("%s: no message", what);
    if (out)
        fail_msg("%s: *out is not NULL", what);
    if (parent && digest(parent) != d0)
        fail_msg("%s: the parent changed", what);
}

static void test_bad_input(void **state)
{
    g_pool = false;
    const fixture_case_t *fc = *state;
    if (!selected(fc->name)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", fc->name);
        return;
    }
    memra_model_t *m = load(fc->name, 0);
    int32_t tok[N_P + N_A + N_B];
    make_tokens(m, fc->name, tok);
    const int32_t *P = tok, *A = tok + N_P;
    memra_cache_t *ref = create(m, MEMRA_TYPE_F16, CAP), *parent = create(m, MEMRA_TYPE_F16, CAP);
    memra_cache_t *other = create(m, MEMRA_TYPE_F16, CAP);
    prefill(m, ref, P, N_P);
    float *la = cont(m, ref, A, N_A);
    prefill(m, parent, P, N_P);
    const uint64_t d0 = digest(parent);
    memra_cache_t *out = (memra_cache_t *)&out; /* not NULL: a failure must clear it */
    memra_status_t st;

    st = memra_cache_fork(NULL, 0, &out);
    refused(st, MEMRA_E_INVALID, out, NULL, 0, "NULL parent");
    st = memra_cache_fork(parent, 0, NULL);
    refused(st, MEMRA_E_INVALID, NULL, parent, d0, "NULL out");
    out = (memra_cache_t *)&out;
    st = memra_cache_fork(parent, N_P - 1, &out);
    refused(st, MEMRA_E_INVALID, out, parent, d0, "n_ctx below the position");
    assert_non_null(strstr(memra_last_error(), "n_ctx"));
    out = (memra_cache_t *)&out;
    st = memra_cache_fork(parent, INT32_MAX, &out);
    refused(st, MEMRA_E_NOMEM, out, parent, d0, "a fork beyond the devices");
    assert_non_null(strstr(memra_last_error(), "memra_cache_fork"));

    /* deferred steps in flight, on the parent or on another cache of the model */
    memra_pending_t *pend = NULL;
    prefill(m, other, P, 2);
    assert_int_equal(memra_decode_step_deferred(m, other, A[0], &pend), MEMRA_OK);
    out = (memra_cache_t *)&out;
    st = memra_cache_fork(parent, 0, &out);
    refused(st, MEMRA_E_BUSY, out, NULL, 0, "a step of another cache in flight");
    assert_int_equal(memra_pending_wait(pend, NULL), MEMRA_OK);
    assert_int_equal(memra_decode_step_deferred(m, parent, A[0], &pend), MEMRA_OK);
    out = (memra_cache_t *)&out;
    st = memra_cache_fork(parent, 0, &out);
    refused(st, MEMRA_E_BUSY, out, NULL, 0, "a step of the parent in flight");
    assert_int_equal(memra_pending_free(pend), MEMRA_OK); /* drained: the parent is at N_P + 1 */
    assert_int_equal(memra_cache_clear(parent), MEMRA_OK);
    prefill(m, parent, P, N_P);
    if (digest(parent) != d0)
        fail_msg("the parent prefilled again differs from its first prefill");

    /* a fork of exactly the parent's position is full */
    assert_int_equal(memra_cache_fork(parent, N_P, &out), MEMRA_OK);
    assert_int_equal(memra_cache_capacity(out), N_P);
    assert_int_equal(memra_decode_step(m, out, A[0], NULL), MEMRA_E_FULL);
    assert_int_equal(memra_cache_free(out), MEMRA_OK);

    /* after all that the parent continues exactly */
    float *got = cont(m, parent, A, N_A);
    same_logits(m, "parent + A after the refused forks", got, la, N_A);
    free(got);
    free(la);
    assert_int_equal(memra_cache_free(ref), MEMRA_OK);
    assert_int_equal(memra_cache_free(parent), MEMRA_OK);
    assert_int_equal(memra_cache_free(other), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

static uint64_t gguf_u64(const memra_model_t *m, const char *key)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", memra_model_arch(m), key);
    uint64_t v = 0;
    const memra_gguf_t *g = memra_model_gguf(m);
    if (memra_gguf_kv_u64(g, memra_gguf_find_kv(g, full), &v) != MEMRA_OK)
        fail_msg("%s: no %s", memra_model_arch(m), full);
    return v;
}

/* memra_cache_state_bytes against the Gated-DeltaNet shapes of the file:
 * per recurrent layer, (conv_kernel - 1) x (2 key heads + value heads) x
 * head dim of conv state, and value heads x head dim^2 of delta-rule
 * state, float32 (docs/MODELS.md); any capacity, forks alike. */
static void test_state_bytes(void **state)
{
    const fixture_case_t *fc = *state;
    if (!selected(fc->name)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", fc->name);
        return;
    }
    memra_model_t *m = load(fc->name, 0);
    int32_t n_rec = 0;
    for (int32_t il = 0; il < memra_model_n_layers(m); il++)
        n_rec += memra_model_layer_kind(m, il) == MEMRA_LAYER_RECURRENT;
    uint64_t want = 0;
    if (n_rec > 0) {
        const uint64_t d_conv = gguf_u64(m, "ssm.conv_kernel"), d_k = gguf_u64(m, "ssm.state_size");
        const uint64_t n_k = gguf_u64(m, "ssm.group_count"), n_v = gguf_u64(m, "ssm.time_step_rank");
        want = (uint64_t)n_rec * 4 * ((d_conv - 1) * (2 * n_k + n_v) * d_k + n_v * d_k * d_k);
    }
    memra_cache_t *a = create(m, MEMRA_TYPE_F16, 8), *b = create(m, MEMRA_TYPE_F32, 64), *f = NULL;
    assert_int_equal(memra_cache_fork(a, 32, &f), MEMRA_OK);
    assert_int_equal(memra_cache_state_bytes(a), want);
    assert_int_equal(memra_cache_state_bytes(b), want);
    assert_int_equal(memra_cache_state_bytes(f), want);
    assert_int_equal(memra_cache_state_bytes(NULL), 0);
    memra_cache_free(f);
    memra_cache_free(b);
    memra_cache_free(a);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* ---- runner ------------------------------------------------------------- */

int main(void)
{
    /* the exact tier: batched rows on the decode kernels, bit for bit
     * (test_batch_fast checks the fast tier's batched kernels) */
    setenv("MEMRA_BATCH_FAST", "0", 1);
    static const tu_kind_t kinds[] = {
        {"fork", test_fork_plain, 0, 0},
        {"fork_2_stages", test_fork_plain, 2, 0},
        {"fork_pool", test_fork_pool, 0, 0},
        {"fork_pool_2_stages", test_fork_pool, 2, 0},
        {"bad_input", test_bad_input, 0, 0},
        {"state_bytes", test_state_bytes, 0, 0},
    };
    return tu_run_fixture_kinds("cache_fork", kinds, sizeof kinds / sizeof kinds[0], &g_engine);
}
