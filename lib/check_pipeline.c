/* memra_check_pipeline_parity: the unsplit model against the same model
 * split into stages, every float32 bit of every logit row. The split arms
 * are teacher-forced with the reference's greedy tokens, so a mismatch at
 * one step does not change the tokens of the next ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline_impl.h"

void memra_pp_parity_params_init(memra_pp_parity_params_t *p, uint32_t size)
{
    if (!p || size < sizeof(uint32_t))
        return;
    memra_pp_parity_params_t d = {
        .size = size < sizeof d ? size : (uint32_t)sizeof d,
        .n_stages = 2,
        .n_prompt = 16,
        .n_steps = 32,
        .window = 3,
    };
    memcpy(p, &d, d.size);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* First index of the maximum (the tie rule of every argmax in memra). */
static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

typedef struct arm_spec {
    const char *name;
    int32_t streams, overlap, shard;
    bool deferred;
} arm_spec_t;

typedef struct ctx {
    const char *path;
    const memra_pp_parity_params_t *p;
    const char *devices;          /* the split arms' spec */
    char ref_dev[16];
    int32_t P, N, V;
    int32_t *prompt;
    int32_t *greedy;              /* [N] token fed at decode step i */
    float *ref;                   /* [P + N][V] */
    float *got;                   /* [P + N][V] */
} ctx_t;

static memra_status_t load(const ctx_t *x, int32_t n_stages, const char *devices, const arm_spec_t *arm,
                           memra_model_t **out)
{
    memra_model_params_t mp;
    memra_model_default_params(&mp);
    mp.n_stages = n_stages;
    mp.devices = devices;
    if (n_stages > 1) {
        memcpy(mp.splits, x->p->splits, sizeof mp.splits);
        mp.streams = arm->streams;
        mp.overlap = arm->overlap;
        mp.shard = arm->shard;
    } else {
        mp.streams = 0;
    }
    return memra_model_load(x->path, &mp, out);
}

/* Prefill with every row's logits, then N decode steps; greedy (fills
 * x->greedy) for the reference, teacher-forced for the arms. */
static memra_status_t run(ctx_t *x, memra_model_t *m, const arm_spec_t *arm, float *rows, double *tok_s)
{
    memra_cache_t *c = NULL;
    memra_status_t st = memra_cache_create(m, x->P + x->N, &c);
    if (st)
        return st;
    st = memra_forward(m, c, x->prompt, x->P, MEMRA_FORWARD_ALL_ROWS, rows);
    const size_t V = (size_t)x->V;
    float *dec = rows + (size_t)x->P * V;
    double t0 = now_s();
    if (!st && !arm) {
        int32_t tok = argmax(rows + (size_t)(x->P - 1) * V, x->V);
        for (int32_t i = 0; i < x->N && !st; i++) {
            x->greedy[i] = tok;
            st = memra_decode_step(m, c, tok, dec + (size_t)i * V);
            tok = argmax(dec + (size_t)i * V, x->V);
        }
    } else if (!st && !arm->deferred) {
        for (int32_t i = 0; i < x->N && !st; i++)
            st = memra_decode_step(m, c, x->greedy[i], dec + (size_t)i * V);
    } else if (!st) {
        int32_t W = x->p->window > 0 ? x->p->window : 1;
        memra_pending_t **pend = calloc((size_t)x->N, sizeof *pend);
        if (!pend)
            st = memra__fail(NULL, MEMRA_E_NOMEM, "pipeline parity: out of memory");
        int32_t queued = 0, waited = 0;
        while (!st && waited < x->N) {
            if (queued < x->N && queued - waited < W) {
                st = memra_decode_step_deferred(m, c, x->greedy[queued], &pend[queued]);
                queued++;
            } else {
                st = memra_pending_wait(pend[waited], dec + (size_t)waited * V);
                pend[waited++] = NULL;
            }
        }
        /* on failure, drain what is still in flight so the cache can go */
        for (int32_t i = 0; pend && i < x->N; i++)
            memra_pending_free(pend[i]);
        free(pend);
    }
    double dt = now_s() - t0;
    *tok_s = !st && dt > 0 ? x->N / dt : 0.0;
    memra_status_t fs = memra_cache_free(c);
    return st ? st : fs;
}

static void compare(const ctx_t *x, memra_pp_parity_arm_t *a)
{
    const size_t V = (size_t)x->V;
    a->steps_compared = x->P + x->N;
    a->first_step = -1;
    for (int32_t r = 0; r < x->P + x->N; r++) {
        const uint32_t *u = (const uint32_t *)(x->ref + (size_t)r * V);
        const uint32_t *v = (const uint32_t *)(x->got + (size_t)r * V);
        if (memcmp(u, v, V * sizeof *u) == 0)
            continue;
        if (a->steps_mismatched++ == 0) {
            size_t i = 0;
            while (u[i] == v[i])
                i++;
            a->first_step = r;
            a->first_index = (int32_t)i;
            a->first_ref_bits = u[i];
            a->first_got_bits = v[i];
            memcpy(&a->first_ref, &u[i], sizeof(float));
            memcpy(&a->first_got, &v[i], sizeof(float));
        }
    }
}

/* Reproducible prompt: an LCG over the vocabulary. */
static void fixed_prompt(int32_t *t, int32_t n, int32_t vocab)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int32_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
}

static const char *dev_str(const memra_model_t *m, int32_t s, char *buf, size_t cap)
{
    memra_stage_info_t si = {.size = sizeof si};
    memra_model_stage_info(m, s, &si);
    if (si.backend == MEMRA_BACKEND_CUDA)
        snprintf(buf, cap, "cuda:%d", si.device);
    else
        snprintf(buf, cap, "cpu");
    return buf;
}

static memra_status_t check(ctx_t *x, memra_pp_parity_report_t *r)
{
    const memra_pp_parity_params_t *p = x->p;
    int32_t S = p->n_stages;
    if (S < 2 || S > MEMRA_MAX_PP_STAGES || x->P < 1 || x->N < 1 || p->window < 1)
        return memra__fail(NULL, MEMRA_E_INVALID,
                           "pipeline parity: stages %d (2..%d), P %d, N %d, window %d (each >= 1)", S,
                           MEMRA_MAX_PP_STAGES, x->P, x->N, p->window);
    /* one cache holds both, and the logits buffers take (P + N) rows */
    if ((int64_t)x->P + x->N > INT32_MAX)
        return memra__fail(NULL, MEMRA_E_INVALID, "pipeline parity: n_prompt + n_steps = %lld exceeds %d",
                           (long long)x->P + x->N, INT32_MAX);
    /* the reference runs on the first stage's device */
    memra_engine_params_t dev[MEMRA_MAX_PP_STAGES];
    if (memra__pp_parse_devices(p->devices ? "params.devices" : "MEMRA_PP_DEVICES", x->devices, S, dev))
        return memra__relay(NULL, MEMRA_E_INVALID, "pipeline parity: ");
    snprintf(x->ref_dev, sizeof x->ref_dev, dev[0].backend == MEMRA_BACKEND_CUDA ? "cuda:%d" : "cpu",
             dev[0].device);
    snprintf(r->ref_device, sizeof r->ref_device, "%s", x->ref_dev);
    r->n_stages = S;
    r->n_prompt = x->P;
    r->n_steps = x->N;

    memra_model_t *m = NULL;
    memra_status_t st = load(x, 1, x->ref_dev, NULL, &m);
    if (st)
        return memra__relay(NULL, st, "pipeline parity: unsplit load: ");
    x->V = memra_model_n_vocab(m);
    snprintf(r->arch, sizeof r->arch, "%s", memra_model_arch(m));
    r->n_layers = memra_model_n_layers(m);
    r->n_vocab = x->V;
    uint64_t rows64 = 0, bytes = 0;
    if (!memra__mul_ok((uint64_t)(x->P + x->N), (uint64_t)x->V, &rows64) ||
        !memra__mul_ok(rows64, sizeof(float), &bytes) || bytes > SIZE_MAX) {
        memra_model_free(m);
        return memra__fail(NULL, MEMRA_E_INVALID, "pipeline parity: n_prompt + n_steps = %d rows of %d logits do not fit in memory",
                           x->P + x->N, x->V);
    }
    size_t rows = (size_t)rows64;
    x->ref = malloc(rows * sizeof(float));
    x->got = malloc(rows * sizeof(float));
    x->greedy = malloc((size_t)x->N * sizeof(int32_t));
    if (!x->prompt)
        x->prompt = malloc((size_t)x->P * sizeof(int32_t));
    if (!x->ref || !x->got || !x->greedy || !x->prompt) {
        memra_model_free(m);
        return memra__fail(NULL, MEMRA_E_NOMEM, "pipeline parity: out of memory for %zu logits", rows);
    }
    if (p->prompt)
        memcpy(x->prompt, p->prompt, (size_t)x->P * sizeof(int32_t));
    else
        fixed_prompt(x->prompt, x->P, x->V);
    st = run(x, m, NULL, x->ref, &r->ref_decode_tok_s);
    memra_model_free(m);
    if (st)
        return memra__relay(NULL, st, "pipeline parity: unsplit run: ");

    static const arm_spec_t arms[] = {
        {"serial", 0, 1, 1, false},
        {"pipelined", 1, 1, 1, true},
        {"single-slot", 1, 0, 1, true},
        {"unsharded", 1, 1, 0, true},
    };
    int32_t n_arms = p->extra_arms ? 4 : 2;
    bool fenced = false;
    for (int32_t i = 0; i < n_arms; i++) {
        const arm_spec_t *a = &arms[i];
        memra_pp_parity_arm_t *ra = &r->arms[i];
        snprintf(ra->name, sizeof ra->name, "%s", a->name);
        ra->streams = a->streams;
        ra->overlap = a->overlap;
        ra->shard = a->shard;
        ra->window = a->deferred ? p->window : 0;
        r->n_arms = i + 1;
        if ((st = load(x, S, x->devices, a, &m)))
            return memra__relay(NULL, st, "pipeline parity: %d-stage load (%s arm): ", S, a->name);
        if (!fenced && a->shard) {
            memra_pipeline_info_t pi = {.size = sizeof pi};
            memra_model_pipeline_info(m, &pi);
            memcpy(r->fence, pi.fence, sizeof r->fence);
            size_t o = 0;
            for (int32_t s = 0; s < S; s++) {
                memra_stage_info_t si = {.size = sizeof si};
                memra_model_stage_info(m, s, &si);
                r->stage_bytes[s] = si.weight_bytes;
                char d[16];
                o += (size_t)snprintf(r->devices + o, sizeof r->devices - o, "%s%s", s ? "," : "",
                                      dev_str(m, s, d, sizeof d));
                if (o >= sizeof r->devices)
                    o = sizeof r->devices - 1;
            }
            fenced = true;
        }
        memset(x->got, 0xff, rows * sizeof(float)); /* NaN poison: an unwritten row cannot match */
        st = run(x, m, a, x->got, &ra->decode_tok_s);
        memra_model_free(m);
        if (st)
            return memra__relay(NULL, st, "pipeline parity: %s arm: ", a->name);
        compare(x, ra);
    }
    r->pass = 1;
    for (int32_t i = 0; i < r->n_arms; i++)
        r->pass &= r->arms[i].steps_mismatched == 0;
    return r->pass ? MEMRA_OK : memra__fail(NULL, MEMRA_E_MISMATCH, "pipeline parity: split logits differ from the unsplit ones");
}

memra_status_t memra_check_pipeline_parity(const char *path, const memra_pp_parity_params_t *params,
                                           memra_pp_parity_report_t *report)
{
    if (!path || !report || report->size < sizeof(uint32_t))
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_check_pipeline_parity: NULL path/report or report->size unset");
    memra_pp_parity_params_t p;
    memra_pp_parity_default_params(&p);
    if (params) {
        if (params->size < sizeof(uint32_t))
            return memra__fail(NULL, MEMRA_E_INVALID, "memra_check_pipeline_parity: params->size unset");
        memcpy(&p, params, params->size < sizeof p ? params->size : sizeof p);
        p.size = sizeof p;
    }
    memra_pp_parity_report_t *r = calloc(1, sizeof *r);
    if (!r)
        return memra__fail(NULL, MEMRA_E_NOMEM, "memra_check_pipeline_parity: out of memory");
    r->size = sizeof *r;
    const char *devices = p.devices;
    if (!devices || !*devices)
        devices = getenv("MEMRA_PP_DEVICES");
    if (!devices || !*devices)
        devices = "cpu";
    ctx_t x = {.path = path, .p = &p, .devices = devices, .P = p.n_prompt, .N = p.n_steps};
    if (p.prompt && p.n_prompt > 0) {
        x.prompt = malloc((size_t)p.n_prompt * sizeof(int32_t));
        if (!x.prompt) {
            free(r);
            return memra__fail(NULL, MEMRA_E_NOMEM, "memra_check_pipeline_parity: out of memory");
        }
    }
    memra_status_t st = check(&x, r);
    uint32_t n = report->size < sizeof *r ? report->size : (uint32_t)sizeof *r;
    memcpy(report, r, n);
    report->size = n;
    free(x.prompt);
    free(x.greedy);
    free(x.ref);
    free(x.got);
    free(r);
    return st;
}
