/* memra-server: the scheduler. One thread owns the model (a model runs one
 * forward at a time) and up to N_PARALLEL active sequences, each on its own
 * cache from a fixed pool. Requests wait in a bounded queue; every round
 * admits what fits and advances every active sequence at once through one
 * batched step (memra_forward_batch, docs/BATCHING.md): a prefill chunk for
 * a new sequence, one decode token for a running one.
 *
 * HTTP handler threads submit requests and wait on them (sched_wait); the
 * generated text reaches them through the request, released by textout.h's
 * rules (no partial stop strings, whole UTF-8 characters). */
#ifndef MEMRA_SERVER_SCHEDULER_H
#define MEMRA_SERVER_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include <memra/memra.h>

typedef struct sched sched_t;

/* What a request asks for, filled by the HTTP side before submitting and
 * read-only after. The request owns every pointer here. */
typedef struct gen_params {
    int32_t *prompt;              /* prompt token ids */
    int32_t n_prompt;             /* 1..n_ctx */
    int32_t max_tokens;           /* generated tokens at most (>= 1); the context bounds them too */
    memra_sampler_t *sampler;     /* created from the request's sampling parameters */
    float presence_penalty;       /* subtracted once from a generated token's logit */
    float frequency_penalty;      /* subtracted per occurrence of a generated token */
    int32_t n_bias;               /* logit_bias entries */
    int32_t *bias_ids;
    float *bias;
    char **stop;                  /* stop strings, none empty */
    int n_stop;
} gen_params_t;

/* Frees what P holds and zeroes it. */
void gen_params_clear(gen_params_t *p);

typedef struct sched_req sched_req_t;

/* How a request ended. */
typedef enum sched_finish {
    SCHED_RUNNING = 0,
    SCHED_STOP,       /* end-of-generation token or stop string */
    SCHED_LENGTH,     /* max_tokens or the context is full */
    SCHED_ERROR,      /* the forward or sampling failed: see the message */
} sched_finish_t;

/* Buckets of the step size histogram: 1, 2, 4, ..., 64 (MEMRA_MAX_BATCH)
 * items, and more. */
#define SCHED_HIST_BUCKETS 8

/* Counters and gauges for /metrics. */
typedef struct sched_stats {
    int32_t n_parallel, n_ctx, queue_cap;
    int32_t queued, active;
    uint64_t prompt_tokens, generated_tokens;   /* of finished and running sequences */
    uint64_t prefill_tokens, decode_tokens;     /* through the model */
    double prefill_seconds, decode_seconds;     /* a mixed step's time shared by rows */
    /* batched steps (memra_forward_batch calls): STEP_HIST[i] counts the
     * steps of 2^(i-1) < items <= 2^i items (i = 0: one item) */
    uint64_t steps, step_items;
    uint64_t step_hist[SCHED_HIST_BUCKETS];
    int32_t last_step_items;
    double step_seconds;
    uint64_t cancelled, finished, failed;       /* sequences */
} sched_stats_t;

/* Creates N_PARALLEL caches of N_CTX tokens on MODEL (borrowed; it must
 * outlive the scheduler) and starts the scheduler thread. QUEUE_CAP
 * requests may wait; CHUNK (>= 1) is the most prompt tokens a round gives a
 * sequence, so that one new long prompt does not stall the decodes of the
 * others for long. Returns NULL after printing why on stderr. */
sched_t *sched_create(memra_model_t *model, int32_t n_parallel, int32_t n_ctx, int32_t queue_cap, int32_t chunk);

/* Stops the thread: running and queued requests end with SCHED_ERROR
 * ("server shutting down"), waking their handlers, and later submits
 * fail. The other calls stay valid until sched_free. NULL is a no-op. */
void sched_stop(sched_t *s);

/* Stops the scheduler if running and frees it and the caches. Every
 * request must have been released. NULL is a no-op. */
void sched_free(sched_t *s);

/* A new request taking over P's contents (P is zeroed); NULL when out of
 * memory (P is then left to the caller). */
sched_req_t *sched_req_new(gen_params_t *p);

/* Queues R. 0, or -1 when every slot is busy and QUEUE_CAP requests wait
 * already, or the scheduler stopped
 * (R is then still the caller's: release it). */
int sched_submit(sched_t *s, sched_req_t *r);

/* What a handler learns from sched_wait. */
typedef struct sched_update {
    char *text;          /* new text (malloc'ed, valid UTF-8), or NULL */
    size_t n_text;
    sched_finish_t finish;
    int32_t n_prompt, n_gen;
    char error[256];     /* with SCHED_ERROR */
} sched_update_t;

/* Waits at most TIMEOUT_MS for text past what earlier calls returned, or
 * for the end. Returns 1 with news in *U (free U->text), 0 on timeout. */
int sched_wait(sched_t *s, sched_req_t *r, int timeout_ms, sched_update_t *u);

/* The handler is done with R: a request still queued or running is
 * cancelled (its cache goes back to the pool at the next round). R must
 * not be used after. NULL is a no-op. */
void sched_release(sched_t *s, sched_req_t *r);

void sched_get_stats(sched_t *s, sched_stats_t *out);

#endif
