/* Deferred decode steps and their pending handles. A pending is a request
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
    struct memra_pending *p = calloc(1, sizeof *p);
    float *logits = malloc((size_t)m->n_vocab * sizeof *logits);
    if (!p || !logits) {
        free(p);
        free(logits);
        return memra__model_fail(m, MEMRA_E_NOMEM, "memra_decode_step_deferred: out of memory");
    }
    p->magic = MEMRA__PENDING_MAGIC;
    p->m = m;
    p->c = c;
    p->logits = logits;
    p->io[0] = token;
    p->io[1] = c->pos;
    atomic_fetch_add(&c->in_flight, 1);
    atomic_fetch_add(&m->pp->unconsumed, 1);
    reg_add(p);
    memra_status_t st = memra__pp_submit(m, p);
    if (st) {
        reg_take(p);
        release(p);
        return st;
    }
    c->pos++;
    *out = p;
    return MEMRA_OK;
}

memra_status_t memra_decode_step_deferred(memra_model_t *m, memra_cache_t *c, int32_t token, memra_pending_t **out)
{
    if (!m || !out)
        return step_deferred(m, c, token, out);
    *out = NULL;
    MEMRA__MODEL_GUARDED(m, "memra_decode_step_deferred", step_deferred(m, c, token, out));
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
