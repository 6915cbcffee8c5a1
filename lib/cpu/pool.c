/* Worker pool: workers sleep on a condition variable between loops; each
 * loop bumps a generation counter, and every thread (caller included)
 * takes one contiguous chunk, so results never depend on scheduling.
 *
 * One engine's pool has several callers: a pipeline stage worker and the
 * application thread (a cache cleared or created while deferred steps run),
 * or two models placed on one engine, one thread each. A loop's state
 * (fn, ctx, chunking, the pending count) is one slot, so whole loops are
 * serialised by `run_mu`: a second caller waits until the first loop is
 * done, then runs its own on all workers. Running the second loop inline
 * instead would oversubscribe the cores the first loop already uses and
 * make its speed depend on timing; waiting costs at most one loop. */
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"
#include "pool.h"

struct memra__pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t run_mu; /* held by the caller for a whole loop */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation;
    int pending;
    bool quit;
    memra__pool_fn fn;
    void *ctx;
    int64_t total, chunk;
};

static void run_part(memra__pool_t *p, int part)
{
    int64_t b = (int64_t)part * p->chunk;
    int64_t e = b + p->chunk < p->total ? b + p->chunk : p->total;
    if (b < e)
        p->fn(p->ctx, b, e);
}

typedef struct worker_arg {
    memra__pool_t *pool;
    int index;
} worker_arg;

static void *worker(void *arg)
{
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    memra__pool_t *p = wa.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_part(p, wa.index);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

memra_status_t memra__pool_create(int n_threads, memra__pool_t **out)
{
    *out = NULL;
    if (n_threads < 1)
        n_threads = 1;
    memra__pool_t *p = calloc(1, sizeof *p);
    if (!p)
        return memra__fail(NULL, MEMRA_E_NOMEM, "cpu: out of memory for the thread pool");
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        memra__pool_destroy(p); /* n is still 0: no worker to join */
        return memra__fail(NULL, MEMRA_E_NOMEM, "cpu: out of memory for the thread pool");
    }
    p->n = n_threads;
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->pool = p;
            wa->index = i;
        }
        if (!wa || pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
            free(wa);
            p->n = i; /* only i-1 workers exist; destroy joins those */
            memra__pool_destroy(p);
            return memra__fail(NULL, MEMRA_E_NOMEM, "cpu: cannot start worker thread %d", i);
        }
    }
    *out = p;
    return MEMRA_OK;
}

void memra__pool_destroy(memra__pool_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->run_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

void memra__pool_for(memra__pool_t *p, int64_t n, int64_t min_chunk, memra__pool_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (min_chunk < 1)
        min_chunk = 1;
    int parts = p ? p->n : 1;
    if ((int64_t)parts * min_chunk > n)
        parts = (int)((n + min_chunk - 1) / min_chunk);
    if (parts <= 1) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&p->run_mu);
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->total = n;
    p->chunk = (n + p->n - 1) / p->n;
    if (p->chunk < min_chunk)
        p->chunk = min_chunk;
    p->pending = p->n - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_part(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->run_mu);
}
