/* Token sampler: llama.cpp's common chain (penalties, top-k, top-p, min-p,
 * temperature, draw) on the host, with a private xoshiro256** PRNG so that
 * a seed reproduces the same tokens everywhere. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "memra/sampler.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand_t;

struct memra_sampler {
    memra__err_t err;
    memra_sampler_params_t p;
    uint64_t rng[4];
    int32_t *hist;          /* ring of the last repeat_last_n accepted tokens */
    int32_t hist_n, hist_head;
    cand_t *cand;           /* scratch, cap entries */
    int32_t *win;           /* scratch copy of the ring */
    int32_t cap;
};

void memra_sampler_params_init(memra_sampler_params_t *p, uint32_t size)
{
    if (!p || size < sizeof(uint32_t))
        return;
    const memra_sampler_params_t d = {
        .size = sizeof d,
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .seed = 0x6d656d7261ull,
    };
    memra__sized_write(p, size, &d, sizeof d);
}

/* ---- PRNG ------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double uniform01(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

/* ---- lifecycle ------------------------------------------------------------- */

static memra_status_t check_params(const memra_sampler_params_t *p)
{
    if (!isfinite(p->temperature))
        return memra__fail(NULL, MEMRA_E_INVALID, "sampler: temperature %g is not finite", (double)p->temperature);
    if (p->top_k < 0)
        return memra__fail(NULL, MEMRA_E_INVALID, "sampler: top_k %d < 0 (0 = off)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return memra__fail(NULL, MEMRA_E_INVALID, "sampler: top_p %g outside (0, 1] (1 = off)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p < 1.0f))
        return memra__fail(NULL, MEMRA_E_INVALID, "sampler: min_p %g outside [0, 1) (0 = off)", (double)p->min_p);
    if (!(p->repeat_penalty >= MEMRA_SAMPLER_PENALTY_MIN && p->repeat_penalty <= MEMRA_SAMPLER_PENALTY_MAX))
        return memra__fail(NULL, MEMRA_E_INVALID, "sampler: repeat_penalty %g outside [%g, %g] (1 = off)",
                           (double)p->repeat_penalty, (double)MEMRA_SAMPLER_PENALTY_MIN,
                           (double)MEMRA_SAMPLER_PENALTY_MAX);
    if (p->repeat_last_n < 0 || p->repeat_last_n > (1 << 20))
        return memra__fail(NULL, MEMRA_E_INVALID, "sampler: repeat_last_n %d outside [0, 1048576]",
                           p->repeat_last_n);
    return MEMRA_OK;
}

memra_status_t memra_sampler_create(const memra_sampler_params_t *params, memra_sampler_t **out)
{
    if (!out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_sampler_create: out is NULL");
    *out = NULL;
    memra_sampler_params_t p;
    memra_sampler_default_params(&p);
    if (params) {
        if (params->size < sizeof(uint32_t) * 2)
            return memra__fail(NULL, MEMRA_E_INVALID,
                               "memra_sampler_create: params->size is %u; use memra_sampler_default_params()",
                               params->size);
        memra__sized_read(&p, sizeof p, params);
    }
    memra_status_t st = check_params(&p);
    if (st)
        return st;
    memra_sampler_t *s = calloc(1, sizeof *s);
    if (!s)
        return memra__fail(NULL, MEMRA_E_NOMEM, "memra_sampler_create: out of memory");
    s->p = p;
    if (p.repeat_last_n > 0) {
        s->hist = malloc((size_t)p.repeat_last_n * sizeof *s->hist);
        s->win = malloc((size_t)p.repeat_last_n * sizeof *s->win);
        if (!s->hist || !s->win) {
            memra_sampler_free(s);
            return memra__fail(NULL, MEMRA_E_NOMEM, "memra_sampler_create: out of memory");
        }
    }
    memra_sampler_reset(s);
    *out = s;
    return MEMRA_OK;
}

void memra_sampler_free(memra_sampler_t *s)
{
    if (!s)
        return;
    free(s->hist);
    free(s->win);
    free(s->cand);
    free(s);
}

void memra_sampler_reset(memra_sampler_t *s)
{
    if (!s)
        return;
    s->hist_n = s->hist_head = 0;
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
}

memra_status_t memra_sampler_accept(memra_sampler_t *s, int32_t token)
{
    if (!s)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_sampler_accept: sampler is NULL");
    if (token < 0)
        return memra__fail(&s->err, MEMRA_E_INVALID, "memra_sampler_accept: token %d < 0", token);
    const int32_t n = s->p.repeat_last_n;
    if (n == 0)
        return MEMRA_OK;
    s->hist[s->hist_head] = token;
    s->hist_head = (s->hist_head + 1) % n;
    if (s->hist_n < n)
        s->hist_n++;
    return MEMRA_OK;
}

const char *memra_sampler_last_error(const memra_sampler_t *s) { return s ? s->err.msg : ""; }

/* ---- the chain ------------------------------------------------------------- */

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Descending logit, then ascending id: a total order, so ties are stable. */
static int cand_before(const cand_t *a, const cand_t *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    return cand_before(x, y) ? -1 : cand_before(y, x) ? 1 : 0;
}

/* Each distinct token of the window is penalized once (llama.cpp). The
 * result saturates at +-FLT_MAX: a logit near FLT_MAX divided by a small
 * penalty would be +inf, and the softmax of an infinite logit NaN. */
static void apply_penalty(memra_sampler_t *s, cand_t *c, int32_t n_vocab)
{
    const float r = s->p.repeat_penalty;
    if (r == 1.0f || s->hist_n == 0)
        return;
    memcpy(s->win, s->hist, (size_t)s->hist_n * sizeof *s->win);
    qsort(s->win, (size_t)s->hist_n, sizeof *s->win, cmp_i32);
    for (int32_t i = 0; i < s->hist_n; i++) {
        int32_t t = s->win[i];
        if ((i > 0 && t == s->win[i - 1]) || t >= n_vocab)
            continue;
        double v = c[t].logit <= 0.0f ? (double)c[t].logit * r : (double)c[t].logit / r;
        c[t].logit = (float)fmax(-FLT_MAX, fmin(FLT_MAX, v));
    }
}

/* Heap of the K best candidates (the worst at the root), then sorted. */
static void sift_down(cand_t *h, int32_t k, int32_t i)
{
    for (;;) {
        int32_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && cand_before(&h[w], &h[l]))
            w = l;
        if (r < k && cand_before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        cand_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static int32_t keep_top_k(cand_t *c, int32_t n, int32_t k)
{
    if (k <= 0 || k >= n) {
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        return n;
    }
    for (int32_t i = k / 2 - 1; i >= 0; i--)
        sift_down(c, k, i);
    for (int32_t i = k; i < n; i++) {
        if (cand_before(&c[i], &c[0])) {
            c[0] = c[i];
            sift_down(c, k, 0);
        }
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
    return k;
}

/* c[0..n) sorted: the shortest prefix whose probability reaches P. */
static int32_t keep_top_p(const cand_t *c, int32_t n, float p)
{
    if (p >= 1.0f)
        return n;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)c[i].logit - c[0].logit);
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += exp((double)c[i].logit - c[0].logit) / sum;
        if (cum >= p)
            return i + 1;
    }
    return n;
}

/* c[0..n) sorted: p_i >= min_p * p_max  <=>  l_i >= l_max + log(min_p). */
static int32_t keep_min_p(const cand_t *c, int32_t n, float min_p)
{
    if (min_p <= 0.0f)
        return n;
    const double thr = (double)c[0].logit + log((double)min_p);
    int32_t m = 1;
    while (m < n && (double)c[m].logit >= thr)
        m++;
    return m;
}

memra_status_t memra_sampler_sample(memra_sampler_t *s, const float *logits, int32_t n_vocab, int32_t *token)
{
    if (!s || !logits || !token || n_vocab <= 0)
        return memra__fail(s ? &s->err : NULL, MEMRA_E_INVALID,
                           "memra_sampler_sample: NULL argument or n_vocab %d <= 0", n_vocab);
    for (int32_t i = 0; i < n_vocab; i++)
        if (!isfinite(logits[i]))
            return memra__fail(&s->err, MEMRA_E_RANGE, "memra_sampler_sample: logit %d is not finite (%g)", i,
                               (double)logits[i]);
    if (n_vocab > s->cap) {
        cand_t *nc = realloc(s->cand, (size_t)n_vocab * sizeof *nc);
        if (!nc)
            return memra__fail(&s->err, MEMRA_E_NOMEM, "memra_sampler_sample: out of memory");
        s->cand = nc;
        s->cap = n_vocab;
    }
    cand_t *c = s->cand;
    for (int32_t i = 0; i < n_vocab; i++)
        c[i] = (cand_t){logits[i], i};
    apply_penalty(s, c, n_vocab);

    if (s->p.temperature <= 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < n_vocab; i++)
            if (c[i].logit > c[best].logit)
                best = i;
        *token = best;
        return MEMRA_OK;
    }

    int32_t n = keep_top_k(c, n_vocab, s->p.top_k);
    n = keep_top_p(c, n, s->p.top_p);
    n = keep_min_p(c, n, s->p.min_p);

    /* temperature, softmax and the draw, in double */
    /* finite logits (checked, penalty saturated) times 1/T, T >= the
     * smallest float, stay far inside double's range; the terms are <= 1
     * and the first is 1, so sum is in [1, n]. The check guards that. */
    const double inv_t = 1.0 / (double)s->p.temperature, top = (double)c[0].logit * inv_t;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)c[i].logit * inv_t - top);
    if (!(sum >= 1.0 && sum <= (double)n))
        return memra__fail(&s->err, MEMRA_E_INTERNAL, "memra_sampler_sample: softmax sum %g outside [1, %d]", sum, n);
    const double u = uniform01(s->rng) * sum;
    double cum = 0.0;
    int32_t pick = n - 1;
    for (int32_t i = 0; i < n; i++) {
        cum += exp((double)c[i].logit * inv_t - top);
        if (u < cum) {
            pick = i;
            break;
        }
    }
    *token = c[pick].id;
    return MEMRA_OK;
}
