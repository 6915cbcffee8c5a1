/* Op profiler of the CUDA backend (MEMRA_CUDA_PROFILE=1).
 *
 * Every op slot is bracketed by two events on the engine's stream; nothing
 * waits for them while the forward runs, so the GPU keeps its normal
 * back-to-back schedule. At each synchronize the finished pairs are read
 * and summed per key (op name plus the detail an op supplies, e.g. the
 * weight type and shape of a matmul). The table goes to stderr when the
 * engine is destroyed: GPU time per key, and the GPU span of the
 * synchronized windows, whose difference is idle time between ops
 * (launch gaps, host round trips). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

#define PROF_PAIRS 8192
#define PROF_KEYS 256
#define PROF_KEY_LEN 80

struct prof_rec {
    char key[PROF_KEY_LEN];
};

struct prof_stat {
    char key[PROF_KEY_LEN];
    double ms;
    long calls;
};

struct memra__cuda_prof {
    cudaEvent_t ev[2 * PROF_PAIRS];
    int n_ev;        /* events created so far */
    int used;        /* pairs recorded in this window */
    prof_rec rec[PROF_PAIRS];
    prof_stat stat[PROF_KEYS];
    int n_stat;
    double span_ms, op_ms;
    long ops, windows;
};

bool memra__cuda_prof_wanted(void)
{
    return memra__cuda_env_long("MEMRA_CUDA_PROFILE", 0) > 0;
}

memra__cuda_prof *memra__cuda_prof_create(void)
{
    return (memra__cuda_prof *)calloc(1, sizeof(memra__cuda_prof));
}

static void add_stat(memra__cuda_prof *p, const char *key, double ms)
{
    int i = 0;
    while (i < p->n_stat && strcmp(p->stat[i].key, key) != 0)
        i++;
    if (i == p->n_stat) {
        if (p->n_stat == PROF_KEYS)
            i = PROF_KEYS - 1; /* lump the overflow into the last key */
        else
            snprintf(p->stat[p->n_stat++].key, PROF_KEY_LEN, "%s", key);
    }
    p->stat[i].ms += ms;
    p->stat[i].calls++;
}

void memra__cuda_prof_flush(memra__cuda_ctx_t *c)
{
    memra__cuda_prof *p = c->prof;
    if (!p || p->used == 0)
        return;
    if (cudaEventSynchronize(p->ev[2 * p->used - 1]) != cudaSuccess) {
        cudaGetLastError();
        p->used = 0;
        return;
    }
    for (int i = 0; i < p->used; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        add_stat(p, p->rec[i].key, ms);
        p->op_ms += ms;
        p->ops++;
    }
    float span = 0.0f;
    if (cudaEventElapsedTime(&span, p->ev[0], p->ev[2 * p->used - 1]) == cudaSuccess)
        p->span_ms += span;
    else
        cudaGetLastError();
    p->windows++;
    p->used = 0;
}

int memra__cuda_prof_begin(memra__cuda_ctx_t *c)
{
    memra__cuda_prof *p = c->prof;
    if (p->used == PROF_PAIRS)
        memra__cuda_prof_flush(c);
    const int i = p->used;
    while (p->n_ev < 2 * (i + 1)) {
        if (cudaEventCreate(&p->ev[p->n_ev]) != cudaSuccess) {
            cudaGetLastError();
            return -1;
        }
        p->n_ev++;
    }
    c->prof_detail[0] = '\0';
    if (cudaEventRecord(p->ev[2 * i], c->stream) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return i;
}

void memra__cuda_prof_end(memra__cuda_ctx_t *c, int i, const char *op)
{
    memra__cuda_prof *p = c->prof;
    if (cudaEventRecord(p->ev[2 * i + 1], c->stream) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    snprintf(p->rec[i].key, PROF_KEY_LEN, "%s%s%s", op, c->prof_detail[0] ? " " : "", c->prof_detail);
    p->used = i + 1;
}

static int by_ms(const void *a, const void *b)
{
    const double x = ((const prof_stat *)a)->ms, y = ((const prof_stat *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

void memra__cuda_prof_destroy(memra__cuda_ctx_t *c)
{
    memra__cuda_prof *p = c->prof;
    if (!p)
        return;
    memra__cuda_prof_flush(c);
    qsort(p->stat, (size_t)p->n_stat, sizeof p->stat[0], by_ms);
    fprintf(stderr,
            "memra cuda profile, device %d: %ld ops in %ld synchronized windows; GPU span %.3f ms, op time %.3f ms "
            "(%.1f%%), idle between ops %.3f ms\n",
            c->device, p->ops, p->windows, p->span_ms, p->op_ms, p->span_ms > 0 ? 100.0 * p->op_ms / p->span_ms : 0.0,
            p->span_ms - p->op_ms);
    fprintf(stderr, "%10s %6s %8s %9s  %s\n", "total_ms", "share", "calls", "avg_us", "op");
    for (int i = 0; i < p->n_stat; i++)
        fprintf(stderr, "%10.3f %5.1f%% %8ld %9.2f  %s\n", p->stat[i].ms,
                p->op_ms > 0 ? 100.0 * p->stat[i].ms / p->op_ms : 0.0, p->stat[i].calls,
                1e3 * p->stat[i].ms / (double)p->stat[i].calls, p->stat[i].key);
    for (int i = 0; i < p->n_ev; i++)
        cudaEventDestroy(p->ev[i]);
    free(p);
    c->prof = NULL;
}
