/* Pipelined decode: one worker thread per stage, all walking the same
 * queue of deferred steps (jobs of one or more decode rows) in order. Stage s takes step q once stage s-1 has
 * finished it (its carry then sits in stage s's boundary slot q % n_slots),
 * runs its layers in place on that slot, and hands the carry to stage s+1's
 * slot as soon as stage s+1 has finished step q - n_slots, the previous user
 * of that slot. So with two slots stage s-1 can run up to two steps ahead,
 * and every stage runs the same ops on the same rows as the serial walk.
 *
 * Device ordering: with backend events the handoff is stream-ordered
 * (record after the copy, wait before the reader); without them a stage
 * synchronizes before it signals. The host side (pp->mu, done[]) only says
 * which step may be queued next. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h"

static bool has_events(const memra__backend_t *be)
{
    const memra__backend_i *o = be->iface;
    return o->event_create && o->event_destroy && o->event_record && o->event_wait;
}

/* Events on the boundary into stage s (from s-1) when both sides have them. */
static bool boundary_events(const memra_model_t *m, int32_t s)
{
    const memra__pp_t *pp = m->pp;
    return s > 0 && pp->ev_filled[s][0] != NULL;
}

/* Locks the engines of stages A and B (one lock when they share one). */
static void lock_pair(memra__pp_t *pp, int32_t a, int32_t b)
{
    int32_t ga = pp->group[a], gb = pp->group[b];
    if (ga > gb) {
        int32_t t = ga;
        ga = gb;
        gb = t;
    }
    pthread_mutex_lock(&pp->eng_mu[ga]);
    if (gb != ga)
        pthread_mutex_lock(&pp->eng_mu[gb]);
}

static void unlock_pair(memra__pp_t *pp, int32_t a, int32_t b)
{
    int32_t ga = pp->group[a], gb = pp->group[b];
    if (gb != ga)
        pthread_mutex_unlock(&pp->eng_mu[gb]);
    pthread_mutex_unlock(&pp->eng_mu[ga]);
}

static bool shares_cache(const memra__pp_job_t *a, const memra__pp_job_t *b)
{
    for (int32_t i = 0; i < a->n; i++)
        for (int32_t j = 0; j < b->n; j++)
            if (a->p[i]->c == b->p[j]->c)
                return true;
    return false;
}

/* A failed step leaves its caches undefined: fail the later queued steps
 * that share a cache with it instead of computing on them. Under pp->mu. */
static void fail_later(memra__pp_t *pp, const memra__pp_job_t *job)
{
    for (uint64_t q = job->seq + 1; q < pp->tail; q++) {
        memra__pp_job_t *o = pp->ring[q % MEMRA__PP_RING];
        if (o->status == MEMRA_OK && shares_cache(job, o)) {
            o->status = job->status;
            snprintf(o->msg, sizeof o->msg, "an earlier deferred step (queued %llu steps before) on one of its "
                     "caches failed: %.400s", (unsigned long long)(q - job->seq), job->msg);
        }
    }
}

/* Marks JOB's pendings finished with its status. Under pp->mu. */
static void finish(memra__pp_job_t *job)
{
    for (int32_t i = 0; i < job->n; i++) {
        struct memra_pending *p = job->p[i];
        p->status = job->status;
        if (job->status)
            snprintf(p->msg, sizeof p->msg, "%s", job->msg);
        p->done = true;
    }
}

/* Stage s's part of JOB; IN is its input carry (slot k for s > 0). */
static memra_status_t run_part(memra_model_t *m, int32_t s, memra__pp_job_t *job, float *in, int32_t k)
{
    memra__pp_t *pp = m->pp;
    memra__stage_t *st = &m->stages[s];
    const memra__backend_i *o = st->be->iface;
    bool last = s == m->n_stages - 1;
    memra_status_t e = MEMRA_OK;
    lock_pair(pp, s, s);
    if (boundary_events(m, s))
        e = o->event_wait(st->be, pp->ev_filled[s][k]);
    memra__set_rows_mode(job->rows_mode);
    if (!e)
        e = memra__stage_run(m, s, job->seg, job->n, job->io, job->n, in, NULL);
    memra__set_rows_mode(MEMRA__ROWS_ANY);
    const size_t row = (size_t)m->n_vocab;
    for (int32_t i = 0; last && !e && i < job->n; i++)
        e = o->download(st->be, job->p[i]->logits, st->logits + (size_t)i * row, row * sizeof(float));
    if (!e && last)
        e = o->synchronize(st->be);
    unlock_pair(pp, s, s);
    return e;
}

/* Hands the carry IN of an N-row step (stage s, slot k) to stage s+1's
 * slot k2. */
static memra_status_t hand_over(memra_model_t *m, int32_t s, int32_t n, float *in, int32_t k, int32_t k2)
{
    memra__pp_t *pp = m->pp;
    memra__stage_t *st = &m->stages[s];
    const memra__backend_i *o = st->be->iface;
    size_t bytes = (size_t)n * (size_t)m->carry_floats * sizeof(float);
    bool ev = boundary_events(m, s + 1);
    memra_status_t e = MEMRA_OK;
    lock_pair(pp, s, s + 1);
    if (ev)
        e = o->event_wait(st->be, pp->ev_freed[s + 1][k2]);
    if (!e)
        e = memra__cross(m, s, in, s + 1, pp->slot[s + 1][k2], bytes);
    if (!e && ev)
        e = o->event_record(st->be, pp->ev_filled[s + 1][k2]);
    /* our input slot is read for the last time by the copy above */
    if (!e && s > 0 && boundary_events(m, s))
        e = o->event_record(st->be, pp->ev_freed[s][k]);
    if (!e && (!ev || (s > 0 && !boundary_events(m, s))))
        e = o->synchronize(st->be);
    unlock_pair(pp, s, s + 1);
    return e;
}

typedef struct worker_arg {
    memra_model_t *m;
    int32_t s;
} worker_arg;

static void *worker(void *arg)
{
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    memra_model_t *m = wa.m;
    memra__pp_t *pp = m->pp;
    const int32_t s = wa.s, last = m->n_stages - 1;
    const uint64_t n_slots = (uint64_t)pp->n_slots;
    pthread_mutex_lock(&pp->mu);
    for (;;) {
        uint64_t q = pp->done[s];
        while (!pp->quit && !(q < pp->tail && (s == 0 || pp->done[s - 1] > q)))
            pthread_cond_wait(&pp->cv, &pp->mu);
        if (pp->quit)
            break;
        memra__pp_job_t *job = pp->ring[q % MEMRA__PP_RING];
        bool ok = job->status == MEMRA_OK;
        int32_t k = (int32_t)(q % n_slots);
        /* stage 0 reads st->carry fresh per step: a prefill may have regrown it */
        float *in = s == 0 ? m->stages[0].carry : pp->slot[s][k];
        pthread_mutex_unlock(&pp->mu);

        memra_status_t e = ok ? run_part(m, s, job, in, k) : MEMRA_OK;
        if (s < last) {
            pthread_mutex_lock(&pp->mu);
            while (!pp->quit && pp->done[s + 1] + n_slots <= q)
                pthread_cond_wait(&pp->cv, &pp->mu);
            bool quit = pp->quit;
            pthread_mutex_unlock(&pp->mu);
            if (quit) {
                pthread_mutex_lock(&pp->mu);
                break;
            }
            if (ok && !e)
                e = hand_over(m, s, job->n, in, k, (int32_t)(q % n_slots));
        }
        pthread_mutex_lock(&pp->mu);
        if (e && job->status == MEMRA_OK) {
            job->status = e;
            snprintf(job->msg, sizeof job->msg, "pipeline stage %d: %s", s, memra_last_error());
            fail_later(pp, job);
        }
        pp->done[s] = q + 1;
        if (s == last) {
            /* every stage is past it: the job is ours to free */
            finish(job);
            pp->ring[q % MEMRA__PP_RING] = NULL;
            free(job);
        }
        pthread_cond_broadcast(&pp->cv);
    }
    pthread_mutex_unlock(&pp->mu);
    return NULL;
}

static void free_slots(memra_model_t *m)
{
    memra__pp_t *pp = m->pp;
    for (int32_t s = 1; s < m->n_stages; s++) {
        memra__backend_t *src = m->stages[s - 1].be, *dst = m->stages[s].be;
        for (int k = 0; k < 2; k++) {
            if (pp->slot[s][k])
                dst->iface->free(dst, pp->slot[s][k]);
            if (pp->ev_filled[s][k])
                src->iface->event_destroy(src, pp->ev_filled[s][k]);
            if (pp->ev_freed[s][k])
                dst->iface->event_destroy(dst, pp->ev_freed[s][k]);
            pp->slot[s][k] = pp->ev_filled[s][k] = pp->ev_freed[s][k] = NULL;
        }
    }
}

/* Boundary slots (and stage 0's carry) for steps of pp->slot_rows rows. */
static memra_status_t alloc_slots(memra_model_t *m)
{
    memra__pp_t *pp = m->pp;
    size_t bytes = (size_t)pp->slot_rows * (size_t)m->carry_floats * sizeof(float);
    memra__stage_t *s0 = &m->stages[0];
    memra_status_t st = memra__stage_buf(m, s0, (void **)&s0->carry, &s0->carry_cap, bytes);
    if (st)
        return st;
    for (int32_t s = 1; s < m->n_stages; s++) {
        memra__backend_t *src = m->stages[s - 1].be, *dst = m->stages[s].be;
        bool ev = has_events(src) && has_events(dst);
        for (int k = 0; k < pp->n_slots; k++) {
            if (!(pp->slot[s][k] = dst->iface->alloc(dst, bytes)))
                return memra__model_fail(m, MEMRA_E_NOMEM, "cannot allocate a boundary slot on stage %d", s);
            if (ev && (!(pp->ev_filled[s][k] = src->iface->event_create(src)) ||
                       !(pp->ev_freed[s][k] = dst->iface->event_create(dst))))
                return memra__model_fail(m, MEMRA_E_DEVICE, "cannot create the boundary events of stage %d", s);
        }
        /* events on every slot of a boundary, or on none */
        if (ev && pp->n_slots == 1) {
            pp->ev_filled[s][1] = NULL;
            pp->ev_freed[s][1] = NULL;
        }
    }
    return MEMRA_OK;
}

static memra_status_t start(memra_model_t *m, int32_t rows)
{
    memra__pp_t *pp = m->pp;
    pp->n_slots = pp->overlap ? 2 : 1;
    pp->slot_rows = rows;
    memra_status_t st = alloc_slots(m);
    if (st) {
        free_slots(m);
        return st;
    }
    pp->quit = false;
    for (int32_t s = 0; s < m->n_stages; s++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->m = m;
            wa->s = s;
        }
        if (!wa || pthread_create(&pp->threads[s], NULL, worker, wa) != 0) {
            free(wa);
            pp->started = true; /* memra__pp_stop joins the n_threads started */
            memra__pp_stop(m);
            return memra__model_fail(m, MEMRA_E_NOMEM, "cannot start the worker of pipeline stage %d", s);
        }
        pp->n_threads = s + 1;
    }
    pp->started = true;
    return MEMRA_OK;
}

void memra__pp_stop(memra_model_t *m)
{
    memra__pp_t *pp = m->pp;
    if (!pp || !pp->started)
        return;
    pthread_mutex_lock(&pp->mu);
    pp->quit = true;
    pthread_cond_broadcast(&pp->cv);
    pthread_mutex_unlock(&pp->mu);
    for (int32_t s = 0; s < pp->n_threads; s++)
        pthread_join(pp->threads[s], NULL);
    pp->n_threads = 0;
    free_slots(m);
    pp->started = false;
}

/* Regrows the boundary slots for steps of ROWS rows once the queue has
 * drained (the workers then wait for a new step and read no slot). */
static memra_status_t grow_slots(memra_model_t *m, int32_t rows)
{
    memra__pp_t *pp = m->pp;
    pthread_mutex_lock(&pp->mu);
    while (pp->done[m->n_stages - 1] < pp->tail)
        pthread_cond_wait(&pp->cv, &pp->mu);
    free_slots(m);
    pp->slot_rows = rows;
    memra_status_t st = alloc_slots(m);
    pthread_mutex_unlock(&pp->mu);
    if (st) {
        /* no slots: stop the idle workers, the next step starts them again */
        memra__pp_stop(m);
    }
    return st;
}

memra_status_t memra__pp_submit(memra_model_t *m, memra__pp_job_t *job)
{
    memra__pp_t *pp = m->pp;
    if (!pp->streams) {
        /* one stream, serial: the step runs now, on this thread */
        memra__err_clear(&m->err);
        memra__set_rows_mode(job->rows_mode);
        memra_status_t e = memra__run_step(m, job->seg, job->n, job->io, job->n);
        memra__set_rows_mode(MEMRA__ROWS_ANY);
        pthread_mutex_lock(&pp->mu);
        if (e) {
            job->status = e;
            snprintf(job->msg, sizeof job->msg, "%s", m->err.msg[0] ? m->err.msg : memra_last_error());
        }
        finish(job);
        pthread_mutex_unlock(&pp->mu);
        free(job);
        return MEMRA_OK;
    }
    memra_status_t st = MEMRA_OK;
    if (!pp->started)
        st = start(m, job->n);
    else if (job->n > pp->slot_rows)
        st = grow_slots(m, job->n);
    if (st)
        return st;
    pthread_mutex_lock(&pp->mu);
    while (pp->tail - pp->done[m->n_stages - 1] >= MEMRA__PP_RING)
        pthread_cond_wait(&pp->cv, &pp->mu);
    job->seq = pp->tail;
    pp->ring[pp->tail % MEMRA__PP_RING] = job;
    pp->tail++;
    pthread_cond_broadcast(&pp->cv);
    pthread_mutex_unlock(&pp->mu);
    return MEMRA_OK;
}

memra__pp_job_t *memra__pp_job_new(int32_t n)
{
    /* the arrays after the struct, each aligned for its type */
    size_t at_seg = (sizeof(memra__pp_job_t) + 2 * (size_t)n * sizeof(int32_t) + 15) & ~(size_t)15;
    size_t at_p = at_seg + (size_t)n * sizeof(memra__seg_t);
    uint8_t *b = calloc(1, at_p + (size_t)n * sizeof(struct memra_pending *));
    if (!b)
        return NULL;
    memra__pp_job_t *job = (memra__pp_job_t *)b;
    job->n = n;
    job->io = (int32_t *)(b + sizeof *job);
    job->seg = (memra__seg_t *)(b + at_seg);
    job->p = (struct memra_pending **)(b + at_p);
    return job;
}

void memra__pp_wait_done(memra_model_t *m, struct memra_pending *p)
{
    memra__pp_t *pp = m->pp;
    pthread_mutex_lock(&pp->mu);
    while (!p->done)
        pthread_cond_wait(&pp->cv, &pp->mu);
    pthread_mutex_unlock(&pp->mu);
}

bool memra__pp_is_done(memra_model_t *m, const struct memra_pending *p)
{
    memra__pp_t *pp = m->pp;
    pthread_mutex_lock(&pp->mu);
    bool d = p->done;
    pthread_mutex_unlock(&pp->mu);
    return d;
}
