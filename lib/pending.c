/* Deferred decode steps (one sequence, or a batch of decode items) and
 * their pending handles, one per sequence of a step. A pending is a request
 * consumed exactly once (wait or free). Live handles are kept in a
 * process-wide registry so that a second wait or free of the same handle is
 * caught as MEMRA_E_MISUSE instead of touching freed memory (best effort: a
 * new pending may reuse a freed handle's address). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h"

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct memra_pending *g_live;

static void reg_add(struct memra_pending *p)
{
    pthread_mutex_lock(&g_reg_mu);
    p->next_live = g_live;
    g_live = p;
    pthread_mutex_unlock(&g_reg_mu);
}

static bool reg_has(const struct memra_pending *p)
{
    pthread_mutex_lock(&g_reg_mu);
    const struct memra_pending *q = g_live;
    while (q && q != p)
        q = q->next_live;
    pthread_mutex_unlock(&g_reg_mu);
    return q != NULL;
}

/* Removes P; false if it was not live (so exactly one consumer wins). */
static bool reg_take(struct memra_pending *p)
{
    pthread_mutex_lock(&g_reg_mu);
    struct memra_pending **pp = &g_live;
    while (*pp && *pp != p)
        pp = &(*pp)->next_live;
    bool found = *pp != NULL;
    if (found)
        *pp = p->next_live;
    pthread_mutex_unlock(&g_reg_mu);
    return found;
}

static void release(struct memra_pending *p)
{
    atomic_fetch_sub(&p->c->in_flight, 1);
    atomic_fetch_sub(&p->m->pp->unconsumed, 1);
    p->magic = 0;
    free(p->logits);
    free(p);
}

/* Queues the decode step of N validated ITEMS (one token each) and fills
 * OUT[0..n) with their pendings; on failure nothing is queued, no cache
 * moves and OUT stays NULL. FN names the call in messages. */
static memra_status_t queue_step(memra_model_t *m, const char *fn, const memra_batch_item_t *items, int32_t n,
                                 memra_pending_t **out)
{
    memra__pp_job_t *job = memra__pp_job_new(n);
    int32_t made = 0;
    for (; job && made < n; made++) {
        struct memra_pending *p = calloc(1, sizeof *p);
        float *logits = malloc((size_t)m->n_vocab * sizeof *logits);
        if (!p || !logits) {
            free(p);
            free(logits);
            break;
        }
        memra_cache_t *c = items[made].cache;
        *p = (struct memra_pending){.magic = MEMRA__PENDING_MAGIC, .m = m, .c = c, .logits = logits};
        job->p[made] = p;
        job->io[made] = items[made].tokens[0];
        job->io[n + made] = c->pos;
        job->seg[made] = (memra__seg_t){.c = c, .row0 = made, .n = 1, .pos0 = c->pos, .out0 = 0, .n_out = 1,
                                        .host_logits = logits};
    }
    if (!job || made < n) {
        for (int32_t i = 0; job && i < made; i++) {
            free(job->p[i]->logits);
            free(job->p[i]);
        }
        free(job);
        return memra__model_fail(m, MEMRA_E_NOMEM, "%s: out of memory", fn);
    }
    job->rows_mode = memra__decode_rows_mode(m, n);
    for (int32_t i = 0; i < n; i++) {
        atomic_fetch_add(&items[i].cache->in_flight, 1);
        atomic_fetch_add(&m->pp->unconsumed, 1);
        reg_add(job->p[i]);
    }
    /* the scheduler owns JOB from here (and frees it) unless this fails */
    struct memra_pending *ps[MEMRA_MAX_BATCH];
    memcpy(ps, job->p, (size_t)n * sizeof *ps);
    memra_status_t st = memra__pp_submit(m, job);
    if (st) {
        for (int32_t i = 0; i < n; i++) {
            reg_take(ps[i]);
            release(ps[i]);
        }
        free(job);
        return st;
    }
    for (int32_t i = 0; i < n; i++) {
        items[i].cache->pos++;
        out[i] = ps[i];
    }
    return MEMRA_OK;
}

static memra_status_t step_deferred(memra_model_t *m, memra_cache_t *c, int32_t token, memra_pending_t **out)
{
    if (!out)
        return memra__fail(m ? &m->err : NULL, MEMRA_E_INVALID, "memra_decode_step_deferred: out is NULL");
    *out = NULL;
    if (!m || !c)
        return memra__fail(m ? &m->err : NULL, MEMRA_E_INVALID, "memra_decode_step_deferred: NULL model or cache");
    if (c->model != m)
        return memra__model_fail(m, MEMRA_E_MISUSE, "memra_decode_step_deferred: the cache belongs to another model");
    if (token < 0 || token >= m->n_vocab)
        return memra__model_fail(m, MEMRA_E_RANGE,
                                 "memra_decode_step_deferred: token %d is outside the vocabulary [0, %d)", token,
                                 m->n_vocab);
    if (c->pos >= c->n_ctx)
        return memra__model_fail(m, MEMRA_E_FULL,
                                 "memra_decode_step_deferred: position %d is beyond the cache capacity %d", c->pos,
                                 c->n_ctx);
    memra_status_t st = memra__cache_ensure(c, 1); /* the row's page (paged KV pool) */
    if (st)
        return memra__model_fail(m, st, "memra_decode_step_deferred: %s", c->err.msg);
    const memra_batch_item_t it = {.cache = c, .tokens = &token, .n_tokens = 1};
    return queue_step(m, "memra_decode_step_deferred", &it, 1, out);
}

memra_status_t memra_decode_step_deferred(memra_model_t *m, memra_cache_t *c, int32_t token, memra_pending_t **out)
{
    if (!m || !out)
        return step_deferred(m, c, token, out);
    *out = NULL;
    MEMRA__MODEL_GUARDED(m, "memra_decode_step_deferred", step_deferred(m, c, token, out));
}

static memra_status_t batch_deferred(memra_model_t *m, const memra_batch_item_t *items, int32_t n_items,
                                     uint32_t flags, memra_pending_t **out)
{
    static const char fn[] = "memra_forward_batch_deferred";
    if (!m || !out)
        return memra__fail(m ? &m->err : NULL, MEMRA_E_INVALID, "%s: NULL %s", fn, !m ? "model" : "out");
    memra_status_t st = memra__check_batch(m, fn, items, n_items, flags, true);
    if (st)
        return st;
    memra__err_clear(&m->err);
    return queue_step(m, fn, items, n_items, out);
}

memra_status_t memra_forward_batch_deferred(memra_model_t *m, const memra_batch_item_t *items, int32_t n_items,
                                            uint32_t flags, memra_pending_t **out)
{
    /* every OUT[i] NULL on failure: clear what a valid count says is
     * there (a count outside 1..max is refused and OUT left as it is: an
     * array of that size need not exist) */
    if (out && n_items > 0 && n_items <= MEMRA_MAX_BATCH)
        memset(out, 0, (size_t)n_items * sizeof *out);
    if (!m || !out)
        return batch_deferred(m, items, n_items, flags, out);
    MEMRA__MODEL_GUARDED(m, "memra_forward_batch_deferred", batch_deferred(m, items, n_items, flags, out));
}

static memra_status_t not_live(const char *fn)
{
    return memra__fail(NULL, MEMRA_E_MISUSE,
                       "%s: not a live pending handle (already consumed by memra_pending_wait or memra_pending_free?)",
                       fn);
}

memra_status_t memra_pending_poll(const memra_pending_t *p)
{
    if (!p)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_pending_poll: pending is NULL");
    if (!reg_has(p))
        return not_live("memra_pending_poll");
    return memra__pp_is_done(p->m, p) ? MEMRA_OK : MEMRA_E_AGAIN;
}

memra_status_t memra_pending_wait(memra_pending_t *p, float *logits)
{
    if (!p)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_pending_wait: pending is NULL");
    if (!reg_take(p))
        return not_live("memra_pending_wait");
    memra__pp_wait_done(p->m, p);
    memra_status_t st = p->status;
    if (st)
        memra__fail(&p->c->err, st, "%s", p->msg);
    else if (logits)
        memcpy(logits, p->logits, (size_t)p->m->n_vocab * sizeof *logits);
    release(p);
    return st;
}

memra_status_t memra_pending_free(memra_pending_t *p)
{
    if (!p)
        return MEMRA_OK;
    if (!reg_take(p))
        return not_live("memra_pending_free");
    memra__pp_wait_done(p->m, p);
    release(p);
    return MEMRA_OK;
}
