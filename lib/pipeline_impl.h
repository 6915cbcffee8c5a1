/* Internal pipeline state: the stage plan made at load (lib/pipeline.c),
 * the per-stage workers that run deferred decode steps (lib/pp_sched.c)
 * and the pending handles (lib/pending.c). */
#ifndef MEMRA_PIPELINE_IMPL_H
#define MEMRA_PIPELINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "memra/check.h"
#include "memra/pipeline.h"
#include "model_impl.h"

/* Deferred steps queued and not finished by the last stage; queueing one
 * more waits for the oldest to finish (back-pressure, never an error). */
#define MEMRA__PP_RING 64

/* One sequence's part of a deferred step: what memra_pending_t points to.
 * Owned by the caller from queue time until wait or free. */
struct memra_pending {
    uint32_t magic;              /* MEMRA__PENDING_MAGIC while live */
    memra_model_t *m;
    memra_cache_t *c;
    bool done;                   /* the last stage finished its step (under pp->mu) */
    memra_status_t status;       /* its step's first failure on any stage (under pp->mu) */
    char msg[MEMRA__ERRMSG_MAX];
    float *logits;               /* host, n_vocab floats */
    struct memra_pending *next_live; /* registry of live handles (lib/pending.c) */
};
#define MEMRA__PENDING_MAGIC 0x70656e64u

/* One queued step: N decode rows, one per pending (a single deferred
 * decode is a one-row job). Owned by the scheduler from memra__pp_submit
 * until the last stage finishes it; the pendings outlive it. */
typedef struct memra__pp_job {
    uint64_t seq;                /* queue order on the model */
    int32_t n;                   /* rows */
    int rows_mode;               /* MEMRA__ROWS_* to run it with (backend.h) */
    memra_status_t status;       /* first failure on any stage (under pp->mu) */
    char msg[MEMRA__ERRMSG_MAX];
    int32_t *io;                 /* [2n]: tokens, then positions */
    memra__seg_t *seg;           /* [n]: row i is pending i's sequence */
    struct memra_pending **p;    /* [n] */
} memra__pp_job_t;

/* A job of N rows in one allocation (io, seg and p point into it); NULL
 * when out of memory. Free it with free(). */
memra__pp_job_t *memra__pp_job_new(int32_t n);

typedef struct memra__pp {
    /* plan (effective knobs after params and env) */
    int32_t shard, streams, overlap, share_device;
    int32_t n_est;                             /* trunk layers the cuts assumed */
    memra_engine_t *own[MEMRA_MAX_STAGES];     /* private engines, destroyed with the model */
    int32_t group[MEMRA_MAX_STAGES];           /* first stage on the same engine */

    /* scheduler (lib/pp_sched.c); everything below is guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool sync_init;
    bool started, quit;
    int32_t n_threads;                         /* workers started (one per stage) */
    pthread_t threads[MEMRA_MAX_STAGES];
    pthread_mutex_t eng_mu[MEMRA_MAX_STAGES];  /* per engine group: one stage at a time on an engine */
    int32_t n_slots;                           /* boundary slots per stage: 2 = double-buffered */
    int32_t slot_rows;                         /* rows of carry each slot (and stage 0's carry) holds */
    float *slot[MEMRA_MAX_STAGES][2];          /* on stage s's device: its input carry (s >= 1) */
    void *ev_filled[MEMRA_MAX_STAGES][2];      /* recorded by stage s-1 after filling slot (optional) */
    void *ev_freed[MEMRA_MAX_STAGES][2];       /* recorded by stage s after reading slot (optional) */
    memra__pp_job_t *ring[MEMRA__PP_RING];
    uint64_t tail;                             /* next sequence number */
    uint64_t done[MEMRA_MAX_STAGES];           /* jobs stage s has finished */
    atomic_int unconsumed;                     /* pendings not yet waited on or freed */
} memra__pp_t;

/* ---- plan (lib/pipeline.c) ------------------------------------------------ */

/* Before bind: resolves stage count, engines (ENGINE = params.engine) and
 * cuts from params and MEMRA_PP_* env; sets m->n_stages and each stage's
 * engine and layer range. */
memra_status_t memra__pp_setup(memra_model_t *m);
/* After bind: checks the bound layer count against the plan. */
memra_status_t memra__pp_finish(memra_model_t *m);
/* Destroys the private engines and the plan (after the stages are freed). */
void memra__pp_free(memra_model_t *m);

/* Spec parsers, exposed for tests. Devices: one name for every stage or
 * exactly N comma-separated names ("cpu", "cuda", "cuda:K"). Splits:
 * exactly N-1 comma-separated first layers of stages 2..N. WHAT names the
 * source in messages. */
memra_status_t memra__pp_parse_devices(const char *what, const char *spec, int32_t n,
                                       memra_engine_params_t *out);
memra_status_t memra__pp_parse_splits(const char *what, const char *spec, int32_t n_stages, int32_t *cuts);
/* Checks N-1 cuts: strictly increasing in [1, n_layer) and accepted by OK
 * (NULL = all). */
memra_status_t memra__pp_check_cuts(const char *what, const int32_t *cuts, int32_t n_stages, int32_t n_layer,
                                    const bool *ok);
/* Default cuts: contiguous ranges minimizing the largest stage's bytes
 * (FIRST_EXTRA on stage 0: embeddings; LAST_EXTRA on the last: head);
 * cut before layer il only where OK[il] (NULL = anywhere). */
memra_status_t memra__pp_even_cuts(const uint64_t *layer_bytes, int32_t n_layer, uint64_t first_extra,
                                   uint64_t last_extra, int32_t n_stages, const bool *ok, int32_t *cuts);

/* ---- scheduler (lib/pp_sched.c) ------------------------------------------ */

/* Stops the workers and frees the boundary slots (before the stages). */
void memra__pp_stop(memra_model_t *m);
/* Queues JOB (rows, pendings and segments filled in) on M's workers, which
 * then own it; with streams=0 runs it now and frees it. On failure (the
 * workers cannot start) JOB stays the caller's and nothing ran. */
memra_status_t memra__pp_submit(memra_model_t *m, memra__pp_job_t *job);
/* Blocks until P is done (under the workers' lock). */
void memra__pp_wait_done(memra_model_t *m, struct memra_pending *p);
bool memra__pp_is_done(memra_model_t *m, const struct memra_pending *p);

/* ---- forward driver (lib/forward.c) -------------------------------------- */

/* Checks the ITEMS of a batched call as memra_forward_batch does, naming FN
 * in messages; DEFERRED: memra_forward_batch_deferred's rules (steps in
 * flight allowed, one token an item, no logits buffer). */
memra_status_t memra__check_batch(memra_model_t *m, const char *fn, const memra_batch_item_t *items, int32_t n_items,
                                  uint32_t flags, bool deferred);
/* Whether any stage runs a fast engine: decode rows then run in the mode
 * of memra__decode_rows_mode. */
bool memra__model_fast(const memra_model_t *m);
/* The MEMRA__ROWS_* mode of a step of N_ROWS one-row items (backend.h). */
int memra__decode_rows_mode(const memra_model_t *m, int32_t n_rows);
/* Sets the rows mode of the calling thread (backend.h). */
void memra__set_rows_mode(int mode);

/* ---- checks (lib/check_margin.c) ------------------------------------------ */

/* Fills the rows, summary and verdict of R from the window's logits, DEC
 * (decode) and PRE (prefill), [window][n_vocab] each; R's n_tokens, n_vocab,
 * window and budget must be set. Exposed for tests. */
void memra__margin_fill(memra_margin_report_t *r, const float *dec, const float *pre);

#endif
