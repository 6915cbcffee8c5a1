/* Batched decode on the fast tier (docs/BATCHING.md): a fast engine runs a
 * step of two or more decode rows on its batched kernels (CUDA: the skinny
 * tensor-core GEMM, grouped MoE GEMMs), whose rows are within a bound of
 * the sequence decoded alone instead of equal to it. On every fixture
 * model, and on $MEMRA_TEST_MODEL when set (e.g. a memra-synth file whose
 * widths are multiples of 256, which the skinny GEMM takes):
 *   - composition: 12 sequences decoded with fixed tokens, all in one step
 *     and again in random groups of 3..6 in shuffled order (steps of at
 *     least memra__batch_fast_min rows, 3 by default, take the batched
 *     kernels): every row is bit-identical between the two (a row does
 *     not depend on the rest of its step); and in pairs, which stay on
 *     the decode kernels: bit-identical to decoding alone (where two rows
 *     take the batched kernels, MEMRA_BATCH_FAST_MIN=2 or a K-quant model
 *     whose rows end in a short segment: bit-identical to the step of all);
 *   - bound: every batched row within MEMRA_TEST_BATCH_TOL (default 1e-2)
 *     times max(1, max |logit|) of the same token decoded alone. (With
 *     every Q8_0 matmul of the 64- and 128-wide fixtures on the skinny
 *     GEMM, each row's x rounded to f16 in every layer, an H100 measured
 *     4.9e-3 on q35-dense.q8_0 and 5.3e-3 on g4-dense.q8_0, where only
 *     their widths of 256 had taken it before 04a8cfe: 3.5e-4 and 0; the
 *     bound is about twice the worst.) A model with experts routes by a
 *     top-k: where two router logits nearly tie, the fast rows' roundings
 *     upstream of the router may pick the other expert, and from there the
 *     sequence's row (and its later rows: the cache holds what that step
 *     wrote) is another function, not a rounding of the same one. So on a
 *     MoE model a sequence whose row leaves the bound parts there (its
 *     later steps are not compared), and at most NS / 2 of the NS
 *     sequences may part (a 4-layer memra-synth Qwen3.6-35B-A3B, whose
 *     random routers put 256 experts' logits close together, parted 4 of
 *     12 on the H200; the MoE fixtures none); a dense model none;
 *   - greedy: 8 prompts' greedy continuations in one batch equal those
 *     alone wherever the alone run's top-2 margin exceeds twice that
 *     bound (below it a tie may break either way; on a MoE model up to
 *     GB / 2 continuations may part at an expert choice, as above).
 * On the CPU reference, and on an exact engine (MEMRA_FAST=0) or with
 * MEMRA_BATCH_FAST=0, batched rows are the decode kernels' and every
 * comparison holds exactly. test_batch checks the exact tier. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h" /* memra__batch_fast_min */
#include "memra/memra.h"
#include "testutil.h"

enum { NS = 12, STEPS = 6, GB = 8, GEN = 12 };

static memra_engine_t *g_engine;

static double batch_tol(void)
{
    const char *e = getenv("MEMRA_TEST_BATCH_TOL");
    const double v = e && *e ? atof(e) : 0.0;
    return v > 0 ? v : 1e-2;
}

static memra_model_t *load_path(const char *path)
{
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.engine = g_engine;
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(path, &p, &m);
    if (st)
        fail_msg("%s: load failed: %s (%s)", path, memra_strerror(st), memra_last_error());
    return m;
}

static int32_t argmax2(const float *x, int32_t n, float *margin)
{
    int32_t b = 0, s = -1;
    for (int32_t i = 1; i < n; i++) {
        if (x[i] > x[b]) {
            s = b;
            b = i;
        } else if (s < 0 || x[i] > x[s]) {
            s = i;
        }
    }
    *margin = s < 0 ? INFINITY : x[b] - x[s];
    return b;
}

/* Whether the model routes over experts ("<arch>.expert_count" > 0). */
static bool has_experts(const memra_model_t *m)
{
    const memra_gguf_t *g = memra_model_gguf(m);
    const char *arch = NULL;
    int64_t i = memra_gguf_find_kv(g, "general.architecture");
    if (i < 0 || memra_gguf_kv_str(g, i, &arch, NULL) != MEMRA_OK)
        return false;
    char key[96];
    snprintf(key, sizeof key, "%s.expert_count", arch);
    uint64_t n = 0;
    i = memra_gguf_find_kv(g, key);
    return i >= 0 && memra_gguf_kv_u64(g, i, &n) == MEMRA_OK && n > 0;
}

static double max_abs(const float *a, int32_t n)
{
    double s = 0;
    for (int32_t i = 0; i < n; i++)
        s = fabs((double)a[i]) > s ? fabs((double)a[i]) : s;
    return s;
}

/* max |a - b| over N (NaN if any), and max |a| */
static double max_diff(const float *a, const float *b, int32_t n, double *scale)
{
    double d = 0;
    for (int32_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - (double)b[i]);
        d = e > d || isnan(e) ? e : d;
    }
    *scale = max_abs(a, n);
    return d;
}

typedef struct seqs {
    memra_cache_t *c[NS];
    int32_t prompt[NS][10], n_prompt[NS];
    int32_t tok[NS][STEPS];
} seqs_t;

/* Fresh caches with each sequence's prompt prefilled alone. */
static void prefill(memra_model_t *m, seqs_t *s, float *row)
{
    for (int i = 0; i < NS; i++) {
        if (s->c[i])
            memra_cache_free(s->c[i]);
        s->c[i] = NULL;
        assert_int_equal(memra_cache_create(m, s->n_prompt[i] + STEPS + 1, &s->c[i]), MEMRA_OK);
        assert_int_equal(memra_forward(m, s->c[i], s->prompt[i], s->n_prompt[i], 0, row), MEMRA_OK);
    }
}

static void check_model(const char *what, memra_model_t *m)
{
    const int32_t V = memra_model_n_vocab(m);
    const double tol = batch_tol();
    uint64_t rng = 0x5eed0001;
    seqs_t s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < NS; i++) {
        s.n_prompt[i] = 3 + (int32_t)tu_rng_int(&rng, 8);
        for (int j = 0; j < s.n_prompt[i]; j++)
            s.prompt[i][j] = (int32_t)tu_rng_int(&rng, V);
        for (int j = 0; j < STEPS; j++)
            s.tok[i][j] = (int32_t)tu_rng_int(&rng, V);
    }
    const size_t rows = (size_t)NS * STEPS * (size_t)V;
    float *alone = malloc(rows * sizeof *alone), *one = malloc(rows * sizeof *one),
          *groups = malloc(rows * sizeof *groups), *row = malloc((size_t)V * sizeof *row);
    assert_non_null(alone);
    assert_non_null(one);
    assert_non_null(groups);
    assert_non_null(row);
#define ROW(buf, i, j) ((buf) + ((size_t)(i) * STEPS + (size_t)(j)) * (size_t)V)
    prefill(m, &s, row);
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < STEPS; j++)
            assert_int_equal(memra_decode_step(m, s.c[i], s.tok[i][j], ROW(alone, i, j)), MEMRA_OK);

    /* every sequence in one step */
    prefill(m, &s, row);
    for (int j = 0; j < STEPS; j++) {
        memra_batch_item_t it[NS];
        for (int i = 0; i < NS; i++)
            it[i] = (memra_batch_item_t){.cache = s.c[i], .tokens = &s.tok[i][j], .n_tokens = 1, .logits = ROW(one, i, j)};
        assert_int_equal(memra_forward_batch(m, it, NS, 0), MEMRA_OK);
    }
    /* random groups of 3..6, shuffled */
    prefill(m, &s, row);
    for (int j = 0; j < STEPS; j++) {
        int order[NS];
        for (int i = 0; i < NS; i++)
            order[i] = i;
        for (int i = NS - 1; i > 0; i--) {
            const int k = (int)tu_rng_int(&rng, i + 1), t = order[i];
            order[i] = order[k];
            order[k] = t;
        }
        for (int g0 = 0; g0 < NS;) {
            int n = 3 + (int)tu_rng_int(&rng, 4);
            if (NS - g0 - n < 3)
                n = NS - g0;
            memra_batch_item_t it[NS];
            for (int q = 0; q < n; q++) {
                const int i = order[g0 + q];
                it[q] = (memra_batch_item_t){.cache = s.c[i], .tokens = &s.tok[i][j], .n_tokens = 1,
                                             .logits = ROW(groups, i, j)};
            }
            assert_int_equal(memra_forward_batch(m, it, n, 0), MEMRA_OK);
            g0 += n;
        }
    }
    /* pairs: below MEMRA_BATCH_FAST_MIN rows the decode kernels, equal to
     * the decode alone; from it (MEMRA_BATCH_FAST_MIN=2) the batched
     * kernels, equal to the rows of the step of NS */
    const bool pair_batched = memra__batch_fast_min(m) <= 2;
    const float *pair_ref = pair_batched ? one : alone;
    float *pairs = malloc(rows * sizeof *pairs);
    assert_non_null(pairs);
    prefill(m, &s, row);
    for (int j = 0; j < STEPS; j++)
        for (int i = 0; i < NS; i += 2) {
            memra_batch_item_t it[2];
            for (int q = 0; q < 2; q++)
                it[q] = (memra_batch_item_t){.cache = s.c[i + q], .tokens = &s.tok[i + q][j], .n_tokens = 1,
                                             .logits = ROW(pairs, i + q, j)};
            assert_int_equal(memra_forward_batch(m, it, 2, 0), MEMRA_OK);
        }
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < STEPS; j++)
            if (memcmp(ROW(pairs, i, j), ROW(pair_ref, i, j), (size_t)V * sizeof(float)))
                fail_msg("%s: sequence %d step %d: a row of a two-row step differs from %s", what, i, j,
                         pair_batched ? "the step of all" : "the decode alone");
    free(pairs);
    double worst = 0;
    const bool moe = has_experts(m);
    int parted = 0;
    for (int i = 0; i < NS; i++) {
        bool gone = false;
        for (int j = 0; j < STEPS; j++) {
            if (memcmp(ROW(one, i, j), ROW(groups, i, j), (size_t)V * sizeof(float)))
                fail_msg("%s: sequence %d step %d: the row differs between a step of %d and a group of 3..6", what, i,
                         j, NS);
            if (gone)
                continue; /* its later rows continue another cache */
            double scale;
            const double d = max_diff(ROW(one, i, j), ROW(alone, i, j), V, &scale);
            const double lim = tol * (scale > 1 ? scale : 1);
            if (!(d <= lim) && moe && d == d && parted < NS / 2) {
                fprintf(stderr, "%s: sequence %d parts at step %d (%.3g from the decode alone, limit %.3g: an expert "
                        "choice at a near tie)\n", what, i, j, d, lim);
                parted++;
                gone = true;
                continue;
            }
            if (!(d <= lim))
                fail_msg("%s: sequence %d step %d: batched row %.3g from the decode alone (limit %.3g%s)", what, i, j, d,
                         lim, moe ? "; more than NS / 2 MoE sequences parted" : "");
            worst = d / (scale > 1 ? scale : 1) > worst ? d / (scale > 1 ? scale : 1) : worst;
        }
    }
    for (int i = 0; i < NS; i++)
        memra_cache_free(s.c[i]);

    /* greedy: alone, then the 8 together */
    int32_t want[GB][GEN], got[GB][GEN];
    float margin[GB][GEN];
    double scale_g[GB][GEN];
    float *rows8 = malloc((size_t)GB * (size_t)V * sizeof *rows8);
    assert_non_null(rows8);
    memra_cache_t *c[GB];
    for (int i = 0; i < GB; i++) {
        assert_int_equal(memra_cache_create(m, s.n_prompt[i] + GEN + 1, &c[i]), MEMRA_OK);
        assert_int_equal(memra_forward(m, c[i], s.prompt[i], s.n_prompt[i], 0, row), MEMRA_OK);
        for (int g = 0; g < GEN; g++) {
            want[i][g] = argmax2(row, V, &margin[i][g]);
            scale_g[i][g] = max_abs(row, V);
            if (g + 1 < GEN)
                assert_int_equal(memra_decode_step(m, c[i], want[i][g], row), MEMRA_OK);
        }
        memra_cache_free(c[i]);
    }
    memra_batch_item_t it[GB];
    for (int i = 0; i < GB; i++) {
        assert_int_equal(memra_cache_create(m, s.n_prompt[i] + GEN + 1, &c[i]), MEMRA_OK);
        assert_int_equal(memra_forward(m, c[i], s.prompt[i], s.n_prompt[i], 0, rows8 + (size_t)i * V), MEMRA_OK);
    }
    int compared = 0, parted_g = 0;
    bool live[GB];
    for (int i = 0; i < GB; i++)
        live[i] = true;
    for (int g = 0; g < GEN; g++) {
        for (int i = 0; i < GB; i++) {
            float mg;
            got[i][g] = argmax2(rows8 + (size_t)i * V, V, &mg);
            const double lim = 2 * tol * (scale_g[i][g] > 1 ? scale_g[i][g] : 1);
            if (live[i] && margin[i][g] > lim && got[i][g] != want[i][g] && moe && parted_g < GB / 2) {
                fprintf(stderr, "%s: greedy sequence %d parts at token %d (margin %.3g: an expert choice at a near "
                        "tie)\n", what, i, g, (double)margin[i][g]);
                parted_g++;
                live[i] = false;
            } else if (live[i] && margin[i][g] > lim) {
                if (got[i][g] != want[i][g])
                    fail_msg("%s: sequence %d: greedy token %d is %d in a batch of %d, %d alone (margin %.3g)", what, i,
                             g, got[i][g], GB, want[i][g], (double)margin[i][g]);
                compared++;
            } else if (live[i] && got[i][g] != want[i][g]) {
                live[i] = false; /* a near tie broke the other way: the continuations part here */
            }
            it[i] = (memra_batch_item_t){.cache = c[i], .tokens = &got[i][g], .n_tokens = 1,
                                         .logits = rows8 + (size_t)i * V};
        }
        if (g + 1 < GEN)
            assert_int_equal(memra_forward_batch(m, it, GB, 0), MEMRA_OK);
    }
    for (int i = 0; i < GB; i++)
        memra_cache_free(c[i]);
    fprintf(stderr,
            "%s: %d x %d batched rows, worst %.3g of scale (limit %.3g), %d sequences parted; %d greedy tokens "
            "compared\n",
            what, NS, STEPS, worst, tol, parted, compared);
    free(rows8);
    free(alone);
    free(one);
    free(groups);
    free(row);
#undef ROW
}

static void test_fixture(void **state)
{
    const char *name = ((const tu_fixture_case_t *)*state)->name;
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    const char *path = tu_fixture_path(rel);
    assert_non_null(path);
    memra_model_t *m = load_path(path);
    check_model(name, m);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* $MEMRA_TEST_MODEL, on an engine of its own */
static void test_model_file(void **state)
{
    (void)state;
    const char *path = getenv("MEMRA_TEST_MODEL");
    if (!path || !*path) {
        TU_SKIP("MEMRA_TEST_MODEL is not set (a model file to check besides the fixtures)");
        return;
    }
    memra_engine_t *e = tu_test_engine("test_batch_fast");
    assert_non_null(e);
    g_engine = e;
    memra_model_t *m = load_path(path);
    check_model(path, m);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    g_engine = NULL;
    memra_engine_destroy(e);
}

/* The two-row rule of memra__batch_fast_min (lib/forward.c, lib/model.c's
 * fast_min2) on one-layer memra-synth files: a K-quant trunk whose rows
 * end in a short segment (Qwen3.5-0.8B, n_embd 1024) runs two rows on the
 * batched kernels, the same model in Q8_0 and a 2048-wide K-quant one
 * (Qwen3.5-2B) from three; MEMRA_BATCH_FAST_MIN, when set, wins. */
static void test_fast_min_rule(void **state)
{
    (void)state;
    const char *tool = getenv("MEMRA_SYNTH");
    if (!tool || access(tool, X_OK) != 0) {
        TU_SKIP("memra-synth not available (set MEMRA_SYNTH to the memra-synth tool)");
        return;
    }
    const char *env = getenv("MEMRA_BATCH_FAST_MIN");
    const int32_t forced = env && *env ? (int32_t)atoi(env) : 0;
    static const struct {
        const char *model, *type;
        int32_t want;
    } cases[] = {{"qwen3.5-0.8b", "q4_k", 2}, {"qwen3.5-0.8b", "q6_k", 2}, {"qwen3.5-0.8b", "q8_0", 3},
                 {"qwen3.5-2b", "q4_k", 3}};
    memra_engine_t *e = tu_test_engine("test_batch_fast");
    assert_non_null(e);
    g_engine = e;
    const char *tmp = getenv("TMPDIR");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256], cmd[1024];
        snprintf(path, sizeof path, "%s/memra-test-fastmin-%d-%zu.gguf", tmp ? tmp : "/tmp", (int)getpid(), i);
        snprintf(cmd, sizeof cmd, "'%s' --model %s --type %s --layers 1 --vocab 512 --out '%s' >/dev/null", tool,
                 cases[i].model, cases[i].type, path);
        assert_int_equal(system(cmd), 0);
        memra_model_t *m = load_path(path);
        const int32_t got = memra__batch_fast_min(m);
        if (got != (forced ? forced : cases[i].want))
            fail_msg("%s %s: memra__batch_fast_min %d, want %d", cases[i].model, cases[i].type, got,
                     forced ? forced : cases[i].want);
        assert_int_equal(memra_model_free(m), MEMRA_OK);
        remove(path);
    }
    g_engine = NULL;
    memra_engine_destroy(e);
}

int main(void)
{
    static const tu_kind_t kinds[] = {{"fast_rows", test_fixture, 0, 0}};
    int rc = tu_run_fixture_kinds("batch_fast", kinds, 1, &g_engine);
    const struct CMUnitTest t[] = {cmocka_unit_test(test_model_file), cmocka_unit_test(test_fast_min_rule)};
    return rc | cmocka_run_group_tests_name("batch_fast_model", t, NULL, NULL);
}
