/* Every model fixture on the CPU reference backend against the Hugging
 * Face logits that ship with it (../shared/fixtures/models):
 *  - prefill (all rows) and token-by-token decode within 1e-3 max |Δ|;
 *  - prefill with chunk sizes 1, 3, 16 and 512 bit-identical;
 *  - the argmax gate: every row's top token the same in prefill and decode,
 *    or a near-tie within twice the row's max |d|;
 *  - the 16-token greedy continuation (teacher-forced with the reference
 *    tokens) matches wherever our own top-2 margin exceeds 1e-3.
 * And per KV cache type (memra_cache_create_ex): f32 bit-identical to
 * memra_cache_create; f16, bf16 (within 3e-3) and q8_0 (within Q8_TOL),
 * prefill and decode, with the argmax gate against the reference.
 * MEMRA_TEST_FIXTURE=NAME runs one fixture. Measured deltas are printed
 * (docs/ACCURACY.md quotes them). */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "internal.h"
#include "json.h"
#include "memra/memra.h"
#include "testutil.h"

typedef struct fixture {
    const char *name;  /* file stem, e.g. "q35-dense.f32" */
    const char *ref;   /* reference stem, e.g. "q35-dense" or "q35-dense.q8_0" */
    bool greedy;       /* ref.json has a greedy continuation */
} fixture;

static const fixture k_fixtures[] = {
    {"llama-dense.f32", "llama-dense", true},   {"qwen3-dense.f32", "qwen3-dense", true},
    {"q35-dense.f32", "q35-dense", true},       {"q35-dense.q8_0", "q35-dense.q8_0", false},
    {"q35-moe.f32", "q35-moe", true},           {"g4-dense.f32", "g4-dense", true},
    {"g4-dense.q8_0", "g4-dense.q8_0", false},  {"g4-e.f32", "g4-e", true},
    {"g4-keqv.f32", "g4-keqv", true},           {"g4-moe.f32", "g4-moe", true},
};

#define TOL 1e-3

/* MEMRA_TEST_PREFILL_TOL=X (X > 0): prefill is held to X instead of TOL, and
 * chunked prefills must agree within X instead of bit for bit. For the GPU
 * engine in fast mode, whose prefill matmuls take f16 inputs (so a chunk of
 * 1 or a few rows, run as f32 matvecs, differs from a larger one). Decode
 * keeps TOL. */
static double prefill_tol(void)
{
    const char *e = getenv("MEMRA_TEST_PREFILL_TOL");
    const double v = e && *e ? atof(e) : 0.0;
    return v > 0 ? v : 0.0;
}
typedef struct ref_data {
    int32_t *tokens, n_tokens;
    int32_t *greedy, n_greedy;
    float *logits;
    int32_t n_vocab;
} ref_data;

static bool load_ref(const fixture *f, ref_data *r)
{
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.ref.json", f->ref);
    const char *jp = tu_fixture_path(rel);
    snprintf(rel, sizeof rel, "models/%s.logits.f32", f->ref);
    const char *lp = tu_fixture_path(rel);
    if (!jp || !lp)
        return false;
    char err[256];
    tj_value_t *doc = tj_parse_file(jp, err, sizeof err);
    if (!doc)
        fail_msg("%s: %s", jp, err);
    size_t lsize = 0;
    r->logits = tu_read_file(lp, &lsize);
    assert_non_null(r->logits);
    r->tokens = tj_int_array(doc, "tokens", &r->n_tokens);
    r->greedy = tj_int_array(doc, "greedy_continuation", &r->n_greedy);
    tj_free(doc);
    assert_true(r->n_tokens > 0);
    r->n_vocab = (int32_t)(lsize / sizeof(float) / (size_t)r->n_tokens);
    assert_int_equal((size_t)r->n_vocab * (size_t)r->n_tokens * sizeof(float), lsize);
    return true;
}

static void free_ref(ref_data *r)
{
    free(r->tokens);
    free(r->greedy);
    free(r->logits);
}

static memra_engine_t *g_engine;

static memra_model_t *load_model(const fixture *f, int32_t chunk)
{
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", f->name);
    const char *path = tu_fixture_path(rel);
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.engine = g_engine;
    p.prefill_chunk = chunk;
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(path, &p, &m);
    if (st)
        fail_msg("%s: load failed: %s (%s)", f->name, memra_strerror(st), memra_last_error());
    return m;
}

static double max_delta(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (!(x <= d)) /* NaN counts as infinitely wrong */
            d = isnan(x) ? INFINITY : x;
    }
    return d;
}

static int32_t argmax(const float *x, int32_t n, double *margin)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    double second = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (i != b && x[i] > second)
            second = x[i];
    *margin = (double)x[b] - second;
    return b;
}

static bool selected(const fixture *f)
{
    const char *only = getenv("MEMRA_TEST_FIXTURE");
    return !only || !*only || strcmp(only, f->name) == 0 || strcmp(only, f->ref) == 0;
}

/* All rows of one prefill, in a cache of memra_cache_create, or of
 * memra_cache_create_ex with CP when given. */
static float *prefill_cache(memra_model_t *m, const ref_data *r, const memra_cache_params_t *cp)
{
    memra_cache_t *c = NULL;
    if (cp) {
        memra_cache_params_t p = *cp;
        p.n_ctx = r->n_tokens + 32;
        assert_int_equal(memra_cache_create_ex(m, &p, &c), MEMRA_OK);
        assert_int_equal(memra_cache_type_k(c), p.type_k);
        assert_int_equal(memra_cache_type_v(c), p.type_v);
    } else {
        assert_int_equal(memra_cache_create(m, r->n_tokens + 32, &c), MEMRA_OK);
    }
    float *out = malloc((size_t)r->n_tokens * (size_t)r->n_vocab * sizeof *out);
    memra_status_t st = memra_forward(m, c, r->tokens, r->n_tokens, MEMRA_FORWARD_ALL_ROWS, out);
    if (st)
        fail_msg("forward failed: %s (%s)", memra_strerror(st), memra_model_last_error(m));
    assert_int_equal(memra_cache_pos(c), r->n_tokens);
    memra_cache_free(c);
    return out;
}

static float *prefill_all(memra_model_t *m, const ref_data *r)
{
    return prefill_cache(m, r, NULL);
}

/* Decode again into memory of memra_engine_host_alloc (which a GPU engine
 * maps, so the head writes the logits there itself instead of a download
 * after it): every row bit-identical to the malloc'd decode DEC. */
static void decode_into_host_alloc(memra_model_t *m, const ref_data *r, const float *dec)
{
    const size_t rowsz = (size_t)r->n_vocab;
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, r->n_tokens, &c), MEMRA_OK);
    float *row = memra_engine_host_alloc(g_engine, rowsz * sizeof *row);
    assert_non_null(row);
    for (int32_t t = 0; t < r->n_tokens; t++) {
        for (size_t i = 0; i < rowsz; i++)
            row[i] = NAN;
        assert_int_equal(memra_decode_step(m, c, r->tokens[t], row), MEMRA_OK);
        if (memcmp(row, dec + (size_t)t * rowsz, rowsz * sizeof *row) != 0)
            fail_msg("token %d: logits decoded into host_alloc memory differ from the malloc'd decode (max |d| %.3g)",
                     t, max_delta(row, dec + (size_t)t * rowsz, rowsz));
    }
    memra_host_free(row);
    memra_cache_free(c);
}

/* Loads F's reference data into R, or skips the test saying why (not
 * selected, files absent): false then. */
static bool open_fixture(const fixture *f, ref_data *r)
{
    if (!selected(f)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", f->name);
        return false;
    }
    if (!load_ref(f, r)) {
        TU_SKIP("%s: fixture files not found (set MEMRA_FIXTURES)", f->name);
        return false;
    }
    return true;
}

static void check_fixture(const fixture *f)
{
    ref_data r = {0};
    if (!open_fixture(f, &r))
        return;
    size_t rowsz = (size_t)r.n_vocab;
    memra_model_t *m = load_model(f, 0);
    assert_int_equal(memra_model_n_vocab(m), r.n_vocab);

    /* prefill, one call */
    float *pre = prefill_all(m, &r);
    double d_pre = max_delta(pre, r.logits, rowsz * (size_t)r.n_tokens);

    /* decode, one token per step; also the greedy continuation */
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, r.n_tokens + r.n_greedy + 8, &c), MEMRA_OK);
    float *dec = malloc(rowsz * (size_t)r.n_tokens * sizeof *dec);
    for (int32_t t = 0; t < r.n_tokens; t++)
        assert_int_equal(memra_decode_step(m, c, r.tokens[t], dec + (size_t)t * rowsz), MEMRA_OK);
    double d_dec = max_delta(dec, r.logits, rowsz * (size_t)r.n_tokens);
    double d_dp = max_delta(dec, pre, rowsz * (size_t)r.n_tokens);
    decode_into_host_alloc(m, &r, dec);

    /* the argmax gate: each row's top token in prefill and in decode; a
     * differing pair counts as a near-tie when a top-2 margin is within
     * twice that row's max |d| (a flip needs no more) */
    int am_match = 0, am_ties = 0;
    for (int32_t t = 0; t < r.n_tokens; t++) {
        const float *rp = pre + (size_t)t * rowsz, *rd = dec + (size_t)t * rowsz;
        double mp, md;
        const int32_t ap = argmax(rp, r.n_vocab, &mp), ad = argmax(rd, r.n_vocab, &md);
        const double dr = max_delta(rp, rd, rowsz);
        if (ap == ad)
            am_match++;
        else if (mp <= 2 * dr || md <= 2 * dr)
            am_ties++;
        else
            fail_msg("%s: token %d: prefill argmax %d (margin %.3g), decode %d (margin %.3g), max |d| %.3g", f->name, t,
                     ap, mp, ad, md, dr);
    }

    int compared = 0, skipped = 0;
    if (f->greedy && r.n_greedy > 0) {
        float *row = malloc(rowsz * sizeof *row);
        memcpy(row, dec + (size_t)(r.n_tokens - 1) * rowsz, rowsz * sizeof *row);
        for (int32_t i = 0; i < r.n_greedy; i++) {
            double margin;
            int32_t top = argmax(row, r.n_vocab, &margin);
            if (margin > 1e-3) {
                if (top != r.greedy[i])
                    fail_msg("%s: greedy step %d: got %d, reference %d (our margin %.3g)", f->name, i, top,
                             r.greedy[i], margin);
                compared++;
            } else {
                skipped++;
            }
            /* teacher forcing keeps every later step comparable */
            if (i + 1 < r.n_greedy)
                assert_int_equal(memra_decode_step(m, c, r.greedy[i], row), MEMRA_OK);
        }
        free(row);
    }
    memra_cache_free(c);

    /* chunk invariance: bit-identical prefill whatever the chunk size */
    const double ptol = prefill_tol();
    double d_chunk = 0;
    int32_t bad_chunk = 0; /* reported after the ACCURACY line */
    static const int32_t chunks[] = {1, 3, 16, 512};
    for (size_t k = 0; k < MEMRA__ARRAY_LEN(chunks); k++) {
        memra_model_t *mc = load_model(f, chunks[k]);
        float *alt = prefill_all(mc, &r);
        const double dc = max_delta(alt, pre, rowsz * (size_t)r.n_tokens);
        if (!(dc <= d_chunk))
            d_chunk = dc;
        if (!bad_chunk && (ptol > 0 ? !(dc <= ptol) : memcmp(alt, pre, rowsz * (size_t)r.n_tokens * sizeof *alt) != 0))
            bad_chunk = chunks[k];
        free(alt);
        assert_int_equal(memra_model_free(mc), MEMRA_OK);
    }

    printf("ACCURACY %-16s prefill %.3e  decode %.3e  decode-vs-prefill %.3e  greedy %d compared, %d near-ties"
           "  chunks %.3e  argmax %d/%d (%d near-ties)\n",
           f->name, d_pre, d_dec, d_dp, compared, skipped, d_chunk, am_match, r.n_tokens, am_ties);
    if (bad_chunk)
        fail_msg("%s: prefill with chunk %d differs from one-shot prefill (max |d| over chunks %.3g)", f->name,
                 bad_chunk, d_chunk);
    if (!(d_pre <= (ptol > 0 ? ptol : TOL)) || !(d_dec <= TOL))
        fail_msg("%s: max |d| prefill %.3g, decode %.3g (limits %.0e, %.0e)", f->name, d_pre, d_dec,
                 ptol > 0 ? ptol : TOL, TOL);
    free(pre);
    free(dec);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    free_ref(&r);
}

static void test_fixture(void **state)
{
    check_fixture((const fixture *)*state);
}

/* ---- KV cache types ---------------------------------------------------- */

/* Bounds of the max |d| from the reference: the largest deviation
 * measured over the fixtures on the CPU (docs/ACCURACY.md) with about 1.5x
 * headroom, and the 3e-3 for f16 where it holds. gemma4's
 * attention has no 1/sqrt(head_dim) (RMS-normed q and k, scale 1), so its
 * scores, and the logits through them, move far more per rounding of K:
 * its fixtures get their own bounds. */
typedef struct kv_case {
    const char *name;
    memra_type_t k, v;
    double tol, tol_g4;
} kv_case;

static const kv_case k_kv_cases[] = {
    {"f16", MEMRA_TYPE_F16, MEMRA_TYPE_F16, 3e-3, 8e-2},
    {"bf16", MEMRA_TYPE_BF16, MEMRA_TYPE_BF16, 2.5e-2, 2.5},
    {"q8_0", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 5e-2, 2.0},
    {"q8_0/f16", MEMRA_TYPE_Q8_0, MEMRA_TYPE_F16, 3e-2, 2.0},
    {"q8_0/q4_0", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, 0.8, 4.0},
};

/* Q8_0 rows need KV heads of whole 32-element blocks (llama-dense's are 16). */
static bool kv_heads_q8_ok(const memra_model_t *m)
{
    const memra_gguf_t *g = memra_model_gguf(m);
    char key[96];
    snprintf(key, sizeof key, "%s.attention.key_length", memra_model_arch(m));
    uint64_t hd = 0;
    int64_t ki = memra_gguf_find_kv(g, key);
    if (ki < 0) { /* no key_length: n_embd / n_head */
        uint64_t nh = 0;
        snprintf(key, sizeof key, "%s.attention.head_count", memra_model_arch(m));
        memra_gguf_kv_u64(g, memra_gguf_find_kv(g, key), &nh);
        hd = nh ? (uint64_t)memra_model_n_embd(m) / nh : 0;
    } else {
        memra_gguf_kv_u64(g, ki, &hd);
    }
    return hd % 32 == 0;
}

/* The argmax gate against the reference REF: each row's top token is the
 * reference's, or the reference's top-2 margin is within twice the row's
 * max |d| (a flip needs no more). Returns the rows that match. */
static int gate_vs_ref(const char *what, const float *got, const ref_data *r, int *ties)
{
    const size_t rowsz = (size_t)r->n_vocab;
    int match = 0;
    for (int32_t t = 0; t < r->n_tokens; t++) {
        const float *g = got + (size_t)t * rowsz, *w = r->logits + (size_t)t * rowsz;
        double mg, mw;
        const int32_t ag = argmax(g, r->n_vocab, &mg), aw = argmax(w, r->n_vocab, &mw);
        const double dr = max_delta(g, w, rowsz);
        if (ag == aw)
            match++;
        else if (mw <= 2 * dr || mg <= 2 * dr)
            (*ties)++;
        else
            fail_msg("%s: token %d: argmax %d (margin %.3g), reference %d (margin %.3g), max |d| %.3g", what, t, ag, mg,
                     aw, mw, dr);
    }
    return match;
}

static void check_fixture_kv(const fixture *f)
{
    ref_data r = {0};
    if (!open_fixture(f, &r))
        return;
    const size_t rowsz = (size_t)r.n_vocab, n_all = rowsz * (size_t)r.n_tokens;
    memra_model_t *m = load_model(f, 0);

    /* f32 through memra_cache_create_ex: the bits of memra_cache_create */
    memra_cache_params_t cp;
    memra_cache_default_params(&cp);
    cp.type_k = cp.type_v = MEMRA_TYPE_F32;
    float *ref32 = prefill_all(m, &r), *f32 = prefill_cache(m, &r, &cp);
    if (memcmp(ref32, f32, n_all * sizeof *f32) != 0)
        fail_msg("%s: an f32 cache of memra_cache_create_ex differs from memra_cache_create's (max |d| %.3g)", f->name,
                 max_delta(ref32, f32, n_all));
    free(ref32);
    free(f32);

    float *dec = malloc(n_all * sizeof *dec);
    assert_non_null(dec);
    const bool g4 = strncmp(f->name, "g4-", 3) == 0;
    for (size_t i = 0; i < MEMRA__ARRAY_LEN(k_kv_cases); i++) {
        const kv_case *kc = &k_kv_cases[i];
        char what[96];
        snprintf(what, sizeof what, "%s kv %s", f->name, kc->name);
        cp.type_k = kc->k;
        cp.type_v = kc->v;
        if ((kc->k == MEMRA_TYPE_Q8_0 || kc->v == MEMRA_TYPE_Q8_0 || kc->v == MEMRA_TYPE_Q4_0) && !kv_heads_q8_ok(m)) {
            /* refused up front, naming the layer, and the model stays usable */
            memra_cache_t *c = (memra_cache_t *)&cp;
            cp.n_ctx = 8;
            assert_int_equal(memra_cache_create_ex(m, &cp, &c), MEMRA_E_UNSUPPORTED);
            assert_null(c);
            assert_non_null(strstr(memra_last_error(), "multiple of 32"));
            printf("ACCURACY-KV %-16s %-8s refused: KV heads not a multiple of 32 elements\n", f->name, kc->name);
            continue;
        }
        const double tol = g4 ? kc->tol_g4 : kc->tol;
        float *pre = prefill_cache(m, &r, &cp);
        memra_cache_t *c = NULL;
        cp.n_ctx = r.n_tokens;
        assert_int_equal(memra_cache_create_ex(m, &cp, &c), MEMRA_OK);
        for (int32_t t = 0; t < r.n_tokens; t++)
            assert_int_equal(memra_decode_step(m, c, r.tokens[t], dec + (size_t)t * rowsz), MEMRA_OK);
        memra_cache_free(c);
        const double d_pre = max_delta(pre, r.logits, n_all), d_dec = max_delta(dec, r.logits, n_all);
        const double d_dp = max_delta(dec, pre, n_all);
        int ties = 0;
        const int am_pre = gate_vs_ref(what, pre, &r, &ties), am_dec = gate_vs_ref(what, dec, &r, &ties);
        printf("ACCURACY-KV %-16s %-8s prefill %.3e  decode %.3e  decode-vs-prefill %.3e  argmax vs HF %d+%d/%d "
               "(%d near-ties)\n", f->name, kc->name, d_pre, d_dec, d_dp, am_pre, am_dec, 2 * r.n_tokens, ties);
        if (!(d_pre <= tol) || !(d_dec <= tol))
            fail_msg("%s: max |d| prefill %.3g, decode %.3g (limit %.1e)", what, d_pre, d_dec, tol);
        free(pre);
    }
    free(dec);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    free_ref(&r);
}

static void test_fixture_kv(void **state)
{
    check_fixture_kv((const fixture *)*state);
}

static int setup(void **state)
{
    (void)state;
    g_engine = tu_test_engine("test_models");
    return g_engine ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return memra_engine_destroy(g_engine) == MEMRA_OK ? 0 : -1;
}

int main(void)
{
    enum { N = MEMRA__ARRAY_LEN(k_fixtures) };
    struct CMUnitTest tests[2 * N];
    static char kv_names[N][64];
    for (size_t i = 0; i < N; i++) {
        tests[i] = (struct CMUnitTest)cmocka_unit_test_prestate(test_fixture, (void *)&k_fixtures[i]);
        tests[i].name = k_fixtures[i].name;
        snprintf(kv_names[i], sizeof kv_names[i], "%s kv types", k_fixtures[i].name);
        tests[N + i] = (struct CMUnitTest)cmocka_unit_test_prestate(test_fixture_kv, (void *)&k_fixtures[i]);
        tests[N + i].name = kv_names[i];
    }
    if (!tu_fixtures())
        fprintf(stderr, "test_models: fixture folder not found (set MEMRA_FIXTURES); every case skips\n");
    return _cmocka_run_group_tests("models", tests, 2 * N, setup, teardown);
}
