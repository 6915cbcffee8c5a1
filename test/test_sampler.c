/* Sampler: greedy, determinism, each stage of the chain on known
 * distributions, repetition penalty, and bad parameters. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "testutil.h"

/* A sampler with every filter off, at temperature T. */
static memra_sampler_t *plain(float t, uint64_t seed)
{
    memra_sampler_params_t p;
    memra_sampler_default_params(&p);
    p.temperature = t;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    memra_sampler_t *s = NULL;
    assert_int_equal(memra_sampler_create(&p, &s), MEMRA_OK);
    return s;
}

/* Draws N tokens from LOGITS and returns the frequencies in FREQ[V]. */
static void histogram(memra_sampler_t *s, const float *logits, int v, int n, double *freq)
{
    for (int i = 0; i < v; i++)
        freq[i] = 0;
    for (int i = 0; i < n; i++) {
        int32_t t = -1;
        assert_int_equal(memra_sampler_sample(s, logits, v, &t), MEMRA_OK);
        assert_true(t >= 0 && t < v);
        freq[t] += 1.0 / n;
    }
}

static void assert_near(double got, double want, double tol)
{
    if (fabs(got - want) > tol)
        fail_msg("got %.4f, want %.4f (tolerance %.4f)", got, want, tol);
}

static const float k_probs[4] = {0.1f, 0.2f, 0.3f, 0.4f};

static void log_probs(float *l)
{
    for (int i = 0; i < 4; i++)
        l[i] = logf(k_probs[i]) + 3.0f; /* shift: softmax must not care */
}

static void test_defaults(void **state)
{
    (void)state;
    memra_sampler_params_t p;
    memra_sampler_default_params(&p);
    assert_int_equal(p.size, sizeof p);
    assert_true(p.temperature > 0.0f);
    assert_int_equal(p.top_k, 40);
    assert_int_equal(p.repeat_last_n, 64);
    memra_sampler_t *s = NULL;
    assert_int_equal(memra_sampler_create(NULL, &s), MEMRA_OK);
    memra_sampler_free(s);
    memra_sampler_free(NULL);
}

static void test_greedy_is_argmax(void **state)
{
    (void)state;
    memra_sampler_t *s = plain(0.0f, 1);
    float l[1000];
    for (int i = 0; i < 1000; i++)
        l[i] = sinf((float)i * 0.37f);
    int best = 0;
    for (int i = 1; i < 1000; i++)
        if (l[i] > l[best])
            best = i;
    for (int k = 0; k < 10; k++) {
        int32_t t = -1;
        assert_int_equal(memra_sampler_sample(s, l, 1000, &t), MEMRA_OK);
        assert_int_equal(t, best);
    }
    /* ties go to the lowest id; negative temperatures are greedy too */
    float tie[5] = {0, 2, 1, 2, 0};
    memra_sampler_t *neg = plain(-1.0f, 1);
    int32_t t = -1;
    assert_int_equal(memra_sampler_sample(neg, tie, 5, &t), MEMRA_OK);
    assert_int_equal(t, 1);
    memra_sampler_free(neg);
    memra_sampler_free(s);
}

static void test_seed_determinism(void **state)
{
    (void)state;
    float l[64];
    for (int i = 0; i < 64; i++)
        l[i] = (float)(i % 7) * 0.3f;
    int32_t a[200], b[200], c[200];
    memra_sampler_t *s1 = plain(1.0f, 42), *s2 = plain(1.0f, 42), *s3 = plain(1.0f, 43);
    int differs = 0;
    for (int i = 0; i < 200; i++) {
        assert_int_equal(memra_sampler_sample(s1, l, 64, &a[i]), MEMRA_OK);
        assert_int_equal(memra_sampler_sample(s2, l, 64, &b[i]), MEMRA_OK);
        assert_int_equal(memra_sampler_sample(s3, l, 64, &c[i]), MEMRA_OK);
        assert_int_equal(a[i], b[i]);
        differs |= a[i] != c[i];
    }
    assert_true(differs);
    /* reset restarts the stream */
    memra_sampler_reset(s1);
    for (int i = 0; i < 200; i++) {
        int32_t t;
        assert_int_equal(memra_sampler_sample(s1, l, 64, &t), MEMRA_OK);
        assert_int_equal(t, a[i]);
    }
    memra_sampler_free(s1);
    memra_sampler_free(s2);
    memra_sampler_free(s3);
}

static void test_top_k_one_is_greedy(void **state)
{
    (void)state;
    memra_sampler_params_t p;
    memra_sampler_default_params(&p);
    p.temperature = 5.0f;
    p.top_k = 1;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    memra_sampler_t *s = NULL;
    assert_int_equal(memra_sampler_create(&p, &s), MEMRA_OK);
    float l[300];
    for (int i = 0; i < 300; i++)
        l[i] = cosf((float)i);
    int best = 0;
    for (int i = 1; i < 300; i++)
        if (l[i] > l[best])
            best = i;
    for (int k = 0; k < 100; k++) {
        int32_t t;
        assert_int_equal(memra_sampler_sample(s, l, 300, &t), MEMRA_OK);
        assert_int_equal(t, best);
    }
    memra_sampler_free(s);
}

enum { N_DRAWS = 200000 };
#define TOL 0.006 /* > 4 sigma of a frequency over N_DRAWS draws */

static void test_distribution_plain(void **state)
{
    (void)state;
    float l[4];
    double f[4];
    log_probs(l);
    memra_sampler_t *s = plain(1.0f, 7);
    histogram(s, l, 4, N_DRAWS, f);
    for (int i = 0; i < 4; i++)
        assert_near(f[i], k_probs[i], TOL);
    memra_sampler_free(s);

    /* temperature 2: p ~ sqrt(p) */
    s = plain(2.0f, 8);
    histogram(s, l, 4, N_DRAWS, f);
    double z = 0;
    for (int i = 0; i < 4; i++)
        z += sqrt(k_probs[i]);
    for (int i = 0; i < 4; i++)
        assert_near(f[i], sqrt(k_probs[i]) / z, TOL);
    memra_sampler_free(s);
}

/* One filter on, the others off; WANT = expected probabilities. */
static void check_filter(int top_k, float top_p, float min_p, const double *want)
{
    memra_sampler_params_t p;
    memra_sampler_default_params(&p);
    p.temperature = 1.0f;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 99;
    memra_sampler_t *s = NULL;
    assert_int_equal(memra_sampler_create(&p, &s), MEMRA_OK);
    float l[4];
    double f[4];
    log_probs(l);
    histogram(s, l, 4, N_DRAWS, f);
    for (int i = 0; i < 4; i++) {
        if (want[i] == 0.0)
            assert_true(f[i] == 0.0);
        else
            assert_near(f[i], want[i], TOL);
    }
    memra_sampler_free(s);
}

static void test_filters(void **state)
{
    (void)state;
    const double two[4] = {0, 0, 3.0 / 7, 4.0 / 7};
    const double three[4] = {0, 2.0 / 9, 3.0 / 9, 4.0 / 9};
    check_filter(2, 1.0f, 0.0f, two);   /* top-k 2 */
    check_filter(3, 1.0f, 0.0f, three); /* top-k 3 */
    check_filter(0, 0.5f, 0.0f, two);   /* top-p: 0.4 < 0.5 <= 0.7 */
    check_filter(0, 0.75f, 0.0f, three);/* 0.7 < 0.75 <= 0.9 */
    check_filter(0, 1.0f, 0.6f, two);   /* min-p: p >= 0.24 */
    check_filter(0, 1.0f, 0.45f, three);/* p >= 0.18 */
    /* the chain: top-k 3 then top-p 0.5 over {0.2,0.3,0.4}/0.9 keeps 2 */
    check_filter(3, 0.5f, 0.0f, two);
}

/* The heap selection of top-k over a large vocabulary keeps exactly the K best. */
static void test_top_k_large_vocab(void **state)
{
    (void)state;
    enum { V = 5000, K = 7 };
    static float l[V];
    for (int i = 0; i < V; i++)
        l[i] = sinf((float)i * 12.9898f) * 0.5f;
    int best[K];
    for (int j = 0; j < K; j++) {
        int b = -1;
        for (int i = 0; i < V; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++)
                taken |= best[q] == i;
            if (!taken && (b < 0 || l[i] > l[b]))
                b = i;
        }
        best[j] = b;
    }
    memra_sampler_params_t p;
    memra_sampler_default_params(&p);
    p.temperature = 1.0f;
    p.top_k = K;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    memra_sampler_t *s = NULL;
    assert_int_equal(memra_sampler_create(&p, &s), MEMRA_OK);
    int seen[K] = {0};
    for (int n = 0; n < 2000; n++) {
        int32_t t;
        assert_int_equal(memra_sampler_sample(s, l, V, &t), MEMRA_OK);
        int j = 0;
        while (j < K && best[j] != t)
            j++;
        assert_true(j < K);
        seen[j] = 1;
    }
    for (int j = 0; j < K; j++)
        assert_true(seen[j]);
    memra_sampler_free(s);
}

static void test_repeat_penalty(void **state)
{
    (void)state;
    memra_sampler_params_t p;
    memra_sampler_default_params(&p);
    p.temperature = 0.0f;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 3;
    memra_sampler_t *s = NULL;
    assert_int_equal(memra_sampler_create(&p, &s), MEMRA_OK);
    /* positive logits are divided, negative ones multiplied */
    float l[4] = {3.0f, 2.0f, -1.0f, -1.5f};
    int32_t t;
    assert_int_equal(memra_sampler_sample(s, l, 4, &t), MEMRA_OK);
    assert_int_equal(t, 0);
    assert_int_equal(memra_sampler_accept(s, 0), MEMRA_OK); /* 3 -> 1.5 < 2 */
    assert_int_equal(memra_sampler_sample(s, l, 4, &t), MEMRA_OK);
    assert_int_equal(t, 1);
    /* once per distinct token: 0 accepted twice is still 3/2, not 3/4 */
    assert_int_equal(memra_sampler_accept(s, 0), MEMRA_OK);
    assert_int_equal(memra_sampler_accept(s, 1), MEMRA_OK); /* 2 -> 1 */
    assert_int_equal(memra_sampler_sample(s, l, 4, &t), MEMRA_OK);
    assert_int_equal(t, 0);
    assert_true(l[0] == 3.0f); /* the caller's logits are untouched */
    /* the window forgets: after 3 more tokens neither 0 nor 1 is penalized */
    for (int i = 0; i < 3; i++)
        assert_int_equal(memra_sampler_accept(s, 2), MEMRA_OK);
    /* 2 (-0.6 -> -1.2) loses to 0 (-1.0, no longer penalized; else -2.0) */
    float neg[4] = {-1.0f, -2.5f, -0.6f, -2.0f};
    assert_int_equal(memra_sampler_sample(s, neg, 4, &t), MEMRA_OK);
    assert_int_equal(t, 0);
    memra_sampler_free(s);
}

/* The strongest penalty allowed on logits near FLT_MAX: the penalized
 * logits saturate instead of becoming infinite, and the draw still
 * follows the distribution (here all mass on one token) with MEMRA_OK. */
static void test_penalty_saturates(void **state)
{
    (void)state;
    memra_sampler_params_t p;
    memra_sampler_default_params(&p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1e-4f;
    p.repeat_last_n = 4;
    memra_sampler_t *s = NULL;
    assert_int_equal(memra_sampler_create(&p, &s), MEMRA_OK);
    assert_int_equal(memra_sampler_accept(s, 1), MEMRA_OK);
    assert_int_equal(memra_sampler_accept(s, 3), MEMRA_OK);
    /* token 1: 1e36 / 1e-4 overflows float; token 3: -1e36 * 1e-4 does not */
    const float l[4] = {0.0f, 1e36f, 1.0f, -1e36f};
    for (int i = 0; i < 200; i++) {
        int32_t t = -1;
        assert_int_equal(memra_sampler_sample(s, l, 4, &t), MEMRA_OK);
        assert_int_equal(t, 1);
    }
    memra_sampler_free(s);
    /* a penalty > 1 pushing a negative logit below -FLT_MAX */
    p.repeat_penalty = 1e4f;
    assert_int_equal(memra_sampler_create(&p, &s), MEMRA_OK);
    assert_int_equal(memra_sampler_accept(s, 0), MEMRA_OK);
    const float n[3] = {-3e38f, 0.5f, 0.0f};
    double freq[3];
    histogram(s, n, 3, 4000, freq);
    assert_int_equal(freq[0], 0.0);
    assert_near(freq[1], 1.0 / (1.0 + exp(-0.5)), 0.03);
    memra_sampler_free(s);
}

static void test_bad_params(void **state)
{
    (void)state;
    memra_sampler_t *s = (memra_sampler_t *)1;
    memra_sampler_params_t p;
#define BAD(field, value)                                                                          \
    do {                                                                                           \
        memra_sampler_default_params(&p);                                                          \
        p.field = value;                                                                           \
        assert_int_equal(memra_sampler_create(&p, &s), MEMRA_E_INVALID);                           \
        assert_null(s);                                                                            \
        assert_non_null(strstr(memra_last_error(), #field));                                       \
    } while (0)
    BAD(temperature, NAN);
    BAD(top_k, -1);
    BAD(top_p, 0.0f);
    BAD(top_p, 1.5f);
    BAD(min_p, -0.1f);
    BAD(min_p, 1.0f);
    BAD(repeat_penalty, 0.0f);
    BAD(repeat_penalty, -1.0f);
    BAD(repeat_penalty, 1e-38f); /* turned a logit into +inf, the softmax into NaN */
    BAD(repeat_penalty, 1e5f);
    BAD(repeat_penalty, NAN);
    BAD(temperature, INFINITY);
    BAD(repeat_last_n, -1);
#undef BAD
    memra_sampler_default_params(&p);
    p.size = 2;
    assert_int_equal(memra_sampler_create(&p, &s), MEMRA_E_INVALID);
    assert_int_equal(memra_sampler_create(NULL, NULL), MEMRA_E_INVALID);

    assert_int_equal(memra_sampler_create(NULL, &s), MEMRA_OK);
    float l[3] = {0, 1, 2};
    int32_t t;
    assert_int_equal(memra_sampler_sample(s, NULL, 3, &t), MEMRA_E_INVALID);
    assert_int_equal(memra_sampler_sample(s, l, 0, &t), MEMRA_E_INVALID);
    assert_int_equal(memra_sampler_sample(s, l, 3, NULL), MEMRA_E_INVALID);
    l[1] = NAN;
    assert_int_equal(memra_sampler_sample(s, l, 3, &t), MEMRA_E_RANGE);
    assert_non_null(strstr(memra_sampler_last_error(s), "logit 1"));
    l[1] = INFINITY;
    assert_int_equal(memra_sampler_sample(s, l, 3, &t), MEMRA_E_RANGE);
    assert_int_equal(memra_sampler_accept(s, -1), MEMRA_E_INVALID);
    assert_int_equal(memra_sampler_accept(NULL, 1), MEMRA_E_INVALID);
    memra_sampler_free(s);
}

/* An older caller's smaller params struct: the rest keeps its defaults. */
static void test_short_params(void **state)
{
    (void)state;
    memra_sampler_params_t p;
    memra_sampler_params_init(&p, (uint32_t)offsetof(memra_sampler_params_t, top_k));
    assert_int_equal(p.size, offsetof(memra_sampler_params_t, top_k));
    p.temperature = 0.0f;
    memra_sampler_t *s = NULL;
    assert_int_equal(memra_sampler_create(&p, &s), MEMRA_OK);
    float l[3] = {0, 5, 1};
    int32_t t;
    assert_int_equal(memra_sampler_sample(s, l, 3, &t), MEMRA_OK);
    assert_int_equal(t, 1);
    memra_sampler_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_greedy_is_argmax),
        cmocka_unit_test(test_seed_determinism),
        cmocka_unit_test(test_top_k_one_is_greedy),
        cmocka_unit_test(test_distribution_plain),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_top_k_large_vocab),
        cmocka_unit_test(test_repeat_penalty),
        cmocka_unit_test(test_penalty_saturates),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_short_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
