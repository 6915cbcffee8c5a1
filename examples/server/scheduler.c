/* memra-server: the scheduler thread (scheduler.h).
 *
 * Locking: one mutex guards the queue, every request's shared fields
 * (refs, cancelled, the text waiting for its handler, the finish) and the
 * stats. The slots (cache, logits, sampler state, text being built) belong
 * to the scheduler thread alone, so the forward passes and the sampling
 * run without the lock and handlers never wait on the model. */

#include "scheduler.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "textout.h"

struct sched_req {
    gen_params_t p;
    pthread_cond_t cv;     /* signalled when text, the finish or an error arrives */
    int refs;              /* the handler's, plus the scheduler's while queued or running */
    int cancelled;         /* the handler let go before the end */
    char *out;             /* released text its handler has not taken yet */
    size_t n_out, cap_out;
    sched_finish_t finish;
    int32_t n_gen;
    char error[256];
    sched_req_t *next;     /* in the queue */
};

/* One sequence's place: a cache of the pool and what the scheduler thread
 * keeps while a request runs there. */
typedef struct slot {
    memra_cache_t *cache;
    float *logits;         /* n_vocab */
    sched_req_t *req;      /* NULL: free */
    int32_t n_done;        /* prompt tokens in the cache */
    int32_t next;          /* the sampled token the next round decodes */
    int32_t n_gen;
    int32_t *counts;       /* per-token counts of generated tokens, when a penalty needs them */
    textout_t text;
    /* results of the round, published under the lock */
    char *emit;
    size_t n_emit;
    sched_finish_t finish;
    char error[256];
} slot_t;

/* One sequence's item of a round's batched step: tokens to run on its
 * cache, logits wanted or not. */
typedef struct sched_step {
    slot_t *slot;
    const int32_t *tokens;
    int32_t n;
    int decode;            /* one generated token (else a prefill chunk) */
    float *logits;         /* NULL: none wanted (a prefill chunk before the last) */
    memra_status_t status;
    char error[200];
} sched_step_t;

struct sched {
    memra_model_t *model;
    const memra_tokenizer_t *tok;
    int32_t n_vocab, n_ctx, chunk, n_slots, queue_cap;
    int32_t max_batch;     /* items per memra_forward_batch call */
    slot_t *slots;
    sched_step_t *steps;   /* n_slots: the round's steps */
    int *order;            /* n_slots: the steps that passed the checks */
    memra_batch_item_t *items; /* max_batch: one call's items */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t work;   /* a submit, a release or the stop */
    sched_req_t *head, *tail;
    int32_t n_queued, n_active;
    int stopping;
    sched_stats_t st;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void gen_params_clear(gen_params_t *p)
{
    free(p->prompt);
    memra_sampler_free(p->sampler);
    free(p->bias_ids);
    free(p->bias);
    for (int i = 0; i < p->n_stop; i++)
        free(p->stop[i]);
    free(p->stop);
    memset(p, 0, sizeof *p);
}

sched_req_t *sched_req_new(gen_params_t *p)
{
    sched_req_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (bad) {
        free(r);
        return NULL;
    }
    r->p = *p;
    memset(p, 0, sizeof *p);
    r->refs = 1;
    return r;
}

/* Drops one reference (under the lock, or before R is shared). */
static void req_unref(sched_req_t *r)
{
    if (--r->refs > 0)
        return;
    gen_params_clear(&r->p);
    free(r->out);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* Appends released text for the handler (under the lock). A request that
 * cannot take it (out of memory) ends with an error instead. */
static void req_put_text(sched_req_t *r, const char *s, size_t n)
{
    if (r->n_out + n + 1 > r->cap_out) {
        size_t cap = r->cap_out ? r->cap_out : 256;
        while (cap < r->n_out + n + 1)
            cap *= 2;
        char *p = realloc(r->out, cap);
        if (!p) {
            r->finish = SCHED_ERROR;
            snprintf(r->error, sizeof r->error, "out of memory");
            return;
        }
        r->out = p;
        r->cap_out = cap;
    }
    memcpy(r->out + r->n_out, s, n);
    r->n_out += n;
    r->out[r->n_out] = 0;
}

/* Frees the slot for the next request (under the lock). */
static void slot_retire(sched_t *s, slot_t *sl)
{
    textout_free(&sl->text);
    free(sl->counts);
    sl->counts = NULL;
    free(sl->emit);
    sl->emit = NULL;
    req_unref(sl->req);
    sl->req = NULL;
    s->n_active--;
}

/* Starts R on the free slot SL (under the lock). */
static int slot_start(sched_t *s, slot_t *sl, sched_req_t *r)
{
    const gen_params_t *p = &r->p;
    if (memra_cache_clear(sl->cache) != MEMRA_OK) {
        snprintf(r->error, sizeof r->error, "cache: %s", memra_last_error());
        return -1;
    }
    if (p->presence_penalty != 0 || p->frequency_penalty != 0) {
        sl->counts = calloc((size_t)s->n_vocab, sizeof *sl->counts);
        if (!sl->counts) {
            snprintf(r->error, sizeof r->error, "out of memory");
            return -1;
        }
    }
    textout_init(&sl->text, (const char *const *)p->stop, p->n_stop);
    sl->req = r;
    sl->n_done = 0;
    sl->next = -1;
    sl->n_gen = 0;
    sl->finish = SCHED_RUNNING;
    sl->error[0] = 0;
    s->n_active++;
    s->st.prompt_tokens += (uint64_t)p->n_prompt;
    return 0;
}

/* A step the library would refuse, found before the call (0, or a status
 * with the message in ST->error): memra_forward_batch checks every item
 * first and then refuses the whole call, so one bad item would fail every
 * sequence of the round. The scheduler never builds such a step (prompts
 * fit the context and hold vocabulary ids, a sequence ends when its
 * context is full), so this is a guard that keeps a bug to one request. */
static memra_status_t step_check(sched_t *s, sched_step_t *st)
{
    const int32_t pos = memra_cache_pos(st->slot->cache), cap = memra_cache_capacity(st->slot->cache);
    if (st->n > cap - pos) {
        snprintf(st->error, sizeof st->error, "the context is full (position %d + %d tokens > %d)", pos, st->n,
                 cap);
        return MEMRA_E_FULL;
    }
    for (int32_t i = 0; i < st->n; i++)
        if (st->tokens[i] < 0 || st->tokens[i] >= s->n_vocab) {
            snprintf(st->error, sizeof st->error, "token %d outside the vocabulary (%d)", st->tokens[i],
                     s->n_vocab);
            return MEMRA_E_RANGE;
        }
    return MEMRA_OK;
}

/* Errors memra_forward_batch reports before it runs anything: no cache
 * changed, so the items can be tried again one by one. */
static int refused_whole(memra_status_t st)
{
    return st == MEMRA_E_INVALID || st == MEMRA_E_MISUSE || st == MEMRA_E_FULL || st == MEMRA_E_RANGE ||
           st == MEMRA_E_BUSY;
}

static int hist_bucket(int32_t n)
{
    int b = 0;
    while (b < SCHED_HIST_BUCKETS - 1 && (1 << b) < n)
        b++;
    return b;
}

/* One memra_forward_batch call over the steps STEPS[IDX[0..K-1]]. */
static void run_call(sched_t *s, sched_step_t *steps, const int *idx, int k)
{
    int32_t rows_prefill = 0, rows_decode = 0;
    for (int j = 0; j < k; j++) {
        const sched_step_t *st = &steps[idx[j]];
        s->items[j] = (memra_batch_item_t){.cache = st->slot->cache, .tokens = st->tokens, .n_tokens = st->n,
                                           .logits = st->logits};
        *(st->decode ? &rows_decode : &rows_prefill) += st->n;
    }
    const double t0 = now_s();
    const memra_status_t status = memra_forward_batch(s->model, s->items, k, 0);
    const double dt = now_s() - t0;
    if (status != MEMRA_OK) {
        if (k > 1 && refused_whole(status)) {
            /* refused before anything ran: alone, each item fails or runs
             * on its own merits */
            for (int j = 0; j < k; j++)
                run_call(s, steps, idx + j, 1);
            return;
        }
        /* failed while running: the caches of the call are undefined, so
         * every sequence of it ends (a new request clears its cache) */
        for (int j = 0; j < k; j++) {
            steps[idx[j]].status = status;
            snprintf(steps[idx[j]].error, sizeof steps[idx[j]].error, "%s", memra_model_last_error(s->model));
        }
        return;
    }
    /* the stats are read by /metrics: a short lock per call. A mixed
     * step's time goes to prefill and decode in proportion to their rows. */
    const double rows = (double)(rows_prefill + rows_decode);
    pthread_mutex_lock(&s->mu);
    s->st.prefill_tokens += (uint64_t)rows_prefill;
    s->st.decode_tokens += (uint64_t)rows_decode;
    s->st.prefill_seconds += dt * rows_prefill / rows;
    s->st.decode_seconds += dt * rows_decode / rows;
    s->st.steps++;
    s->st.step_items += (uint64_t)k;
    s->st.step_hist[hist_bucket(k)]++;
    s->st.last_step_items = k;
    s->st.step_seconds += dt;
    pthread_mutex_unlock(&s->mu);
}

/* Runs every step of a round: the steps the library would take in one
 * batched call (several only above memra_model_max_batch items); a step
 * found bad before the call fails alone. */
static void run_steps(sched_t *s, sched_step_t *steps, int n)
{
    int n_ok = 0;
    for (int i = 0; i < n; i++)
        if ((steps[i].status = step_check(s, &steps[i])) == MEMRA_OK)
            s->order[n_ok++] = i;
    for (int off = 0; off < n_ok; off += s->max_batch)
        run_call(s, steps, s->order + off, n_ok - off < s->max_batch ? n_ok - off : s->max_batch);
}

/* The bytes of TOKEN appended to the slot's text: 1 when a stop string
 * completed, 0, -1 on failure (message in SL->error). */
static int add_piece(sched_t *s, slot_t *sl, int32_t token)
{
    char small[256], *buf = small;
    size_t n = 0;
    memra_status_t st = memra_token_to_piece(s->tok, token, small, sizeof small, 0, &n);
    if (st == MEMRA_E_RANGE && n > sizeof small) {
        if (!(buf = malloc(n)))
            st = MEMRA_E_NOMEM;
        else
            st = memra_token_to_piece(s->tok, token, buf, n, 0, &n);
    }
    int rc = -1;
    if (st != MEMRA_OK)
        snprintf(sl->error, sizeof sl->error, "token %d: %s", token, memra_last_error());
    else if ((rc = textout_add(&sl->text, buf, n)) < 0)
        snprintf(sl->error, sizeof sl->error, "out of memory");
    if (buf != small)
        free(buf);
    return rc;
}

/* After a step that gave logits: bias and penalties, a sampled token, its
 * text; sets the slot's finish when the sequence ends (the order of
 * memra-run's loop, so a greedy request continues a prompt exactly as
 * memra-run does). Runs without the lock. */
static void sample_next(sched_t *s, slot_t *sl)
{
    const gen_params_t *p = &sl->req->p;
    float *lg = sl->logits;
    for (int32_t i = 0; i < p->n_bias; i++)
        lg[p->bias_ids[i]] += p->bias[i];
    if (sl->counts)
        for (int32_t t = 0; t < s->n_vocab; t++)
            if (sl->counts[t])
                lg[t] -= p->presence_penalty + p->frequency_penalty * (float)sl->counts[t];
    int32_t t;
    if (memra_sampler_sample(p->sampler, lg, s->n_vocab, &t) != MEMRA_OK) {
        snprintf(sl->error, sizeof sl->error, "sample: %s", memra_sampler_last_error(p->sampler));
        sl->finish = SCHED_ERROR;
        return;
    }
    if (memra_tokenizer_is_eog(s->tok, t)) {
        sl->finish = SCHED_STOP;
        return;
    }
    memra_sampler_accept(p->sampler, t);
    sl->n_gen++;
    if (sl->counts)
        sl->counts[t]++;
    const int hit = add_piece(s, sl, t);
    if (hit < 0)
        sl->finish = SCHED_ERROR;
    else if (hit)
        sl->finish = SCHED_STOP;
    else if (sl->n_gen >= p->max_tokens || memra_cache_pos(sl->cache) >= s->n_ctx)
        sl->finish = SCHED_LENGTH;
    else
        sl->next = t;
}

/* One round: the steps of every active slot (one batched step), then
 * sampling each sequence that got logits. */
static void round_run(sched_t *s)
{
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) {
        slot_t *sl = &s->slots[i];
        if (!sl->req)
            continue;
        sched_step_t *st = &s->steps[n++];
        memset(st, 0, sizeof *st);
        st->slot = sl;
        const gen_params_t *p = &sl->req->p;
        if (sl->n_done < p->n_prompt) {
            const int32_t k = p->n_prompt - sl->n_done < s->chunk ? p->n_prompt - sl->n_done : s->chunk;
            st->tokens = p->prompt + sl->n_done;
            st->n = k;
            st->logits = sl->n_done + k == p->n_prompt ? sl->logits : NULL;
        } else {
            st->tokens = &sl->next;
            st->n = 1;
            st->decode = 1;
            st->logits = sl->logits;
        }
    }
    run_steps(s, s->steps, n);
    for (int i = 0; i < n; i++) {
        sched_step_t *st = &s->steps[i];
        slot_t *sl = st->slot;
        if (st->status != MEMRA_OK) {
            snprintf(sl->error, sizeof sl->error, "%s: %s", st->decode ? "decode" : "prefill", st->error);
            sl->finish = SCHED_ERROR;
            continue;
        }
        if (!st->decode)
            sl->n_done += st->n;
        if (st->logits)
            sample_next(s, sl);
        if (sl->finish != SCHED_ERROR &&
            textout_take(&sl->text, sl->finish != SCHED_RUNNING, &sl->emit, &sl->n_emit) < 0) {
            snprintf(sl->error, sizeof sl->error, "out of memory");
            sl->finish = SCHED_ERROR;
        }
    }
}

/* Hands each slot's results of the round to its request (under the lock). */
static void round_publish(sched_t *s)
{
    for (int i = 0; i < s->n_slots; i++) {
        slot_t *sl = &s->slots[i];
        sched_req_t *r = sl->req;
        if (!r)
            continue;
        if (sl->emit) {
            req_put_text(r, sl->emit, sl->n_emit);
            free(sl->emit);
            sl->emit = NULL;
        }
        s->st.generated_tokens += (uint64_t)(sl->n_gen - r->n_gen);
        r->n_gen = sl->n_gen;
        if (sl->finish != SCHED_RUNNING && r->finish == SCHED_RUNNING) {
            r->finish = sl->finish;
            if (sl->finish == SCHED_ERROR) {
                snprintf(r->error, sizeof r->error, "%s", sl->error);
                s->st.failed++;
            } else {
                s->st.finished++;
            }
        }
        pthread_cond_broadcast(&r->cv);
        if (r->finish != SCHED_RUNNING)
            slot_retire(s, sl);
    }
}

/* Ends R with an error (under the lock) and drops the scheduler's hold. */
static void req_fail(sched_t *s, sched_req_t *r, const char *msg)
{
    if (r->finish == SCHED_RUNNING) {
        r->finish = SCHED_ERROR;
        snprintf(r->error, sizeof r->error, "%s", msg);
        s->st.failed++;
    }
    pthread_cond_broadcast(&r->cv);
    req_unref(r);
}

/* Cancelled slots back to the pool, then queued requests into free slots
 * (under the lock). */
static void admit(sched_t *s)
{
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].req && s->slots[i].req->cancelled) {
            s->st.cancelled++;
            slot_retire(s, &s->slots[i]);
        }
    for (int i = 0; i < s->n_slots && s->head; i++) {
        if (s->slots[i].req)
            continue;
        sched_req_t *r = s->head;
        s->head = r->next;
        if (!s->head)
            s->tail = NULL;
        s->n_queued--;
        r->next = NULL;
        if (r->cancelled) {
            s->st.cancelled++;
            req_unref(r);
            i--; /* the slot is still free */
            continue;
        }
        if (slot_start(s, &s->slots[i], r)) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", r->error);
            r->error[0] = 0;
            req_fail(s, r, msg);
        }
    }
}

static void *sched_main(void *arg)
{
    sched_t *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        admit(s);
        if (s->stopping)
            break;
        if (!s->n_active) {
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        round_run(s);
        pthread_mutex_lock(&s->mu);
        round_publish(s);
    }
    /* shutting down: everything still queued or running ends here */
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].req) {
            s->slots[i].finish = SCHED_ERROR;
            snprintf(s->slots[i].error, sizeof s->slots[i].error, "server shutting down");
        }
    round_publish(s);
    while (s->head) {
        sched_req_t *r = s->head;
        s->head = r->next;
        s->n_queued--;
        req_fail(s, r, "server shutting down");
    }
    s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

sched_t *sched_create(memra_model_t *model, int32_t n_parallel, int32_t n_ctx, int32_t queue_cap, int32_t chunk)
{
    sched_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->model = model;
    s->tok = memra_model_tokenizer(model);
    s->n_vocab = memra_model_n_vocab(model);
    s->n_ctx = n_ctx;
    s->chunk = chunk > 0 ? chunk : 256;
    s->max_batch = memra_model_max_batch(model);
    if (s->max_batch < 1) {
        fprintf(stderr, "memra-server: the model takes no batched steps\n");
        free(s);
        return NULL;
    }
    s->n_slots = n_parallel;
    s->queue_cap = queue_cap;
    s->st.n_parallel = n_parallel;
    s->st.n_ctx = n_ctx;
    s->st.queue_cap = queue_cap;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    s->slots = calloc((size_t)n_parallel, sizeof *s->slots);
    s->steps = calloc((size_t)n_parallel, sizeof *s->steps);
    s->order = calloc((size_t)n_parallel, sizeof *s->order);
    s->items = calloc((size_t)s->max_batch, sizeof *s->items);
    if (!s->slots || !s->steps || !s->order || !s->items) {
        fprintf(stderr, "memra-server: out of memory\n");
        goto fail;
    }
    for (int i = 0; i < n_parallel; i++) {
        slot_t *sl = &s->slots[i];
        if (memra_cache_create(model, n_ctx, &sl->cache) != MEMRA_OK) {
            fprintf(stderr, "memra-server: cache %d of %d (%d tokens): %s\n", i + 1, n_parallel, n_ctx,
                    memra_last_error());
            goto fail;
        }
        if (!(sl->logits = malloc((size_t)s->n_vocab * sizeof *sl->logits))) {
            fprintf(stderr, "memra-server: out of memory\n");
            goto fail;
        }
    }
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        fprintf(stderr, "memra-server: cannot start the scheduler thread\n");
        goto fail;
    }
    s->started = 1;
    return s;
fail:
    sched_free(s);
    return NULL;
}

void sched_stop(sched_t *s)
{
    if (!s || !s->started)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->started = 0;
}

void sched_free(sched_t *s)
{
    if (!s)
        return;
    sched_stop(s);
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        memra_cache_free(s->slots[i].cache);
        free(s->slots[i].logits);
    }
    free(s->slots);
    free(s->steps);
    free(s->order);
    free(s->items);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* sched_submit under the lock (test/test_server_sched.c queues several
 * requests under one hold, so that one round admits them all). */
static int submit_locked(sched_t *s, sched_req_t *r)
{
    /* a free slot takes the request at once, so it does not use up the
     * queue (with --queue 0, requests run only while slots are free) */
    if (s->stopping || s->n_queued + s->n_active >= s->queue_cap + s->n_slots)
        return -1;
    r->refs++;
    if (s->tail)
        s->tail->next = r;
    else
        s->head = r;
    s->tail = r;
    s->n_queued++;
    pthread_cond_signal(&s->work);
    return 0;
}

int sched_submit(sched_t *s, sched_req_t *r)
{
    pthread_mutex_lock(&s->mu);
    const int rc = submit_locked(s, r);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int sched_wait(sched_t *s, sched_req_t *r, int timeout_ms, sched_update_t *u)
{
    memset(u, 0, sizeof *u);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    while (!r->n_out && r->finish == SCHED_RUNNING)
        if (pthread_cond_timedwait(&r->cv, &s->mu, &until) == ETIMEDOUT)
            break;
    int news = r->n_out > 0 || r->finish != SCHED_RUNNING;
    if (r->n_out) {
        u->text = r->out;
        u->n_text = r->n_out;
        r->out = NULL;
        r->n_out = r->cap_out = 0;
    }
    u->finish = r->finish;
    u->n_prompt = r->p.n_prompt;
    u->n_gen = r->n_gen;
    if (r->finish == SCHED_ERROR)
        snprintf(u->error, sizeof u->error, "%s", r->error);
    pthread_mutex_unlock(&s->mu);
    return news;
}

void sched_release(sched_t *s, sched_req_t *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&s->mu);
    if (r->finish == SCHED_RUNNING)
        r->cancelled = 1;
    req_unref(r);
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

void sched_get_stats(sched_t *s, sched_stats_t *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->queued = s->n_queued;
    out->active = s->n_active;
    pthread_mutex_unlock(&s->mu);
}
