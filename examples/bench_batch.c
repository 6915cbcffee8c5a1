/* memra-bench --batch (examples/bench_batch.h). */
#include "bench_batch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median and sample standard deviation of V[0..N) (sorts V) */
static void median_stdev(double *v, int n, double *median, double *stdev)
{
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++)
        mean += v[i] / n;
    for (int i = 0; i < n; i++)
        var += (v[i] - mean) * (v[i] - mean) / (n > 1 ? n - 1 : 1);
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    *stdev = sqrt(var);
}

/* One run at B sequences: prefill rate for P (0: none) into *PP, decode
 * rate for N steps into *TG. The caches are cleared first. */
static memra_status_t run_once(memra_model_t *m, memra_cache_t **c, memra_batch_item_t *it, int b, int p, int n,
                               const int32_t *tok, float *logits, int32_t nv, double *pp, double *tg)
{
    memra_status_t st = MEMRA_OK;
    for (int i = 0; i < b && !st; i++)
        st = memra_cache_clear(c[i]);
    for (int i = 0; i < b; i++)
        it[i] = (memra_batch_item_t){.cache = c[i], .tokens = tok, .n_tokens = p, .logits = logits + (size_t)i * nv};
    if (!st && p > 0) {
        double t0 = example_seconds();
        st = memra_forward_batch(m, it, b, 0);
        *pp = (double)b * p / (example_seconds() - t0);
    }
    double t0 = example_seconds();
    for (int s = 0; s < n && !st; s++) {
        for (int i = 0; i < b; i++) {
            it[i].tokens = tok + p + s;
            it[i].n_tokens = 1;
        }
        st = memra_forward_batch(m, it, b, 0);
    }
    *tg = n > 0 ? (double)b * n / (example_seconds() - t0) : 0;
    return st;
}

memra_status_t bench_batch(memra_engine_t *e, memra_model_t *m, const char *path, const int *bl, int n_b,
                           const int *pl, int n_p, int n, int reps, int json, const int32_t *tok)
{
    const int32_t nv = memra_model_n_vocab(m);
    int b_max = 0, p_max = 0;
    for (int i = 0; i < n_b; i++)
        b_max = bl[i] > b_max ? bl[i] : b_max;
    for (int i = 0; i < n_p; i++)
        p_max = pl[i] > p_max ? pl[i] : p_max;
    memra_cache_t **c = calloc((size_t)b_max, sizeof *c);
    memra_batch_item_t *it = calloc((size_t)b_max, sizeof *it);
    float *logits = memra_engine_host_alloc(e, (size_t)b_max * (size_t)nv * sizeof *logits);
    double *pp = calloc((size_t)reps * (size_t)n_p, sizeof *pp), *tg = calloc((size_t)reps, sizeof *tg);
    memra_status_t st = !c || !it || !logits || !pp || !tg ? MEMRA_E_NOMEM : MEMRA_OK;
    for (int i = 0; i < b_max && !st; i++)
        st = memra_cache_create(m, p_max + n + 1, &c[i]);
    memra_engine_info_t info = {.size = sizeof info};
    memra_engine_get_info(e, &info);
    for (int bi = 0; bi < n_b && !st; bi++) {
        const int b = bl[bi];
        for (int r = -1; r < reps && !st; r++) /* r = -1: warm-up */
            for (int pi = 0; pi < n_p && !st; pi++) {
                double rp = 0, rt = 0;
                /* decode after the first prompt length only */
                st = run_once(m, c, it, b, pl[pi], pi == 0 ? n : 0, tok, logits, nv, &rp, &rt);
                if (r >= 0) {
                    pp[pi * reps + r] = rp;
                    if (pi == 0)
                        tg[r] = rt;
                }
            }
        if (st)
            break;
        double tgm, tgs, ppm[16] = {0}, pps[16] = {0};
        median_stdev(tg, reps, &tgm, &tgs);
        for (int pi = 0; pi < n_p; pi++)
            median_stdev(pp + pi * reps, reps, &ppm[pi], &pps[pi]);
        if (json) {
            printf("{\"model\":\"%s\",\"arch\":\"%s\",\"device\":\"%s\",\"batch\":%d,"
                   "\"pp\":{\"n_prompt\":%d,\"tok_s\":%.2f,\"stdev\":%.2f},\"pp_all\":[",
                   path, memra_model_arch(m), info.device_name, b, pl[0], ppm[0], pps[0]);
            for (int pi = 0; pi < n_p; pi++)
                printf("%s{\"n_prompt\":%d,\"tok_s\":%.2f,\"stdev\":%.2f}", pi ? "," : "", pl[pi], ppm[pi], pps[pi]);
            printf("],\"tg\":{\"n_gen\":%d,\"n_prompt\":%d,\"tok_s\":%.2f,\"stdev\":%.2f},\"reps\":%d}\n", n, pl[0],
                   tgm, tgs, reps);
        } else {
            for (int pi = 0; pi < n_p; pi++)
                if (pl[pi] > 0)
                    printf("B %-4d pp%-5d %10.2f tok/s  ± %.2f  (aggregate)\n", b, pl[pi], ppm[pi], pps[pi]);
            if (n > 0)
                printf("B %-4d tg%-5d %10.2f tok/s  ± %.2f  (aggregate, after pp%d)\n", b, n, tgm, tgs, pl[0]);
        }
        fflush(stdout);
    }
    if (st)
        fprintf(stderr, "memra-bench: %s: %s\n", memra_strerror(st),
                st == MEMRA_E_NOMEM && !memra_model_last_error(m)[0] ? "out of memory" : memra_model_last_error(m));
    for (int i = 0; c && i < b_max; i++)
        memra_cache_free(c[i]);
    free(c);
    free(it);
    memra_host_free(logits);
    free(pp);
    free(tg);
    return st;
}
