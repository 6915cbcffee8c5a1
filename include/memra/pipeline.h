/* memra: pipeline parallelism. A model loaded with n_stages > 1 (model.h
 * params, or env MEMRA_PP_STAGES) is split into contiguous layer ranges,
 * each on its own engine. Synchronous calls (memra_forward,
 * memra_decode_step) walk the stages one after the other; deferred decode
 * steps are queued and run by one worker per stage, so stage k works on
 * token t while stage k-1 works on token t+1. Either way every logit is
 * bit-identical to the unsplit model (memra_check_pipeline_parity proves
 * it). docs/PIPELINE.md describes the knobs. */
#ifndef MEMRA_PIPELINE_H
#define MEMRA_PIPELINE_H

#include "common.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- introspection ----------------------------------------------------- */

/* Number of stages (1 for an unsplit model, 0 for NULL). Any thread. */
MEMRA_API int32_t memra_model_n_stages(const memra_model_t *model);

typedef struct memra_stage_info {
    uint32_t size;          /* set by the caller: sizeof(memra_stage_info_t) */
    int32_t layer0, layer1; /* the stage runs trunk layers [layer0, layer1) */
    int32_t backend;        /* memra_backend_t of the stage's engine */
    int32_t device;         /* device ordinal (CPU: 0) */
    int32_t engine_index;   /* index of the first stage on the same engine (== stage when it has its own) */
    int32_t reserved;
    uint64_t weight_bytes;  /* weights placed on this stage */
} memra_stage_info_t;

/* Fills INFO for STAGE (its size field must be set). MEMRA_E_RANGE for a
 * stage outside [0, n_stages). Thread-safety: any thread. */
MEMRA_API memra_status_t memra_model_stage_info(const memra_model_t *model, int32_t stage, memra_stage_info_t *info);

typedef struct memra_pipeline_info {
    uint32_t size;          /* set by the caller: sizeof(memra_pipeline_info_t) */
    int32_t n_stages;
    int32_t shard;          /* effective knobs after params and env: 1 = each stage holds its own layers */
    int32_t streams;        /* 1 = one worker/stream per stage, 0 = serial */
    int32_t overlap;        /* 1 = two boundary slots per stage (double-buffered), 0 = one */
    int32_t share_device;   /* 1 = several stages may run on one GPU */
    int32_t fence[MEMRA_MAX_PP_STAGES + 1]; /* stage s runs layers [fence[s], fence[s+1]) */
} memra_pipeline_info_t;

/* Fills INFO (its size field must be set). Thread-safety: any thread. */
MEMRA_API memra_status_t memra_model_pipeline_info(const memra_model_t *model, memra_pipeline_info_t *info);

/* ---- deferred decode ------------------------------------------------------ */

/* A queued decode step of one sequence (memra_decode_step_deferred, or one
 * item of memra_forward_batch_deferred): a request, consumed exactly once,
 * by memra_pending_wait (which frees it) or memra_pending_free. */
typedef struct memra_pending memra_pending_t;

/* Queues one decode step of TOKEN on CACHE and returns at once with
 * *OUT, whose logits come from memra_pending_wait. The cache position
 * advances at queue time, so the next step may be queued right away;
 * several steps may be in flight (a window) and they complete in queue
 * order. While steps are in flight, memra_forward/memra_decode_step on the
 * model, and clear/snapshot/restore/free of the cache, fail with
 * MEMRA_E_BUSY. Errors at queue time (MEMRA_E_RANGE token, MEMRA_E_FULL
 * cache, MEMRA_E_MISUSE cache of another model) leave *OUT NULL and the
 * cache unchanged. With streams=0 (env MEMRA_PP_STREAMS=0) the step runs
 * before this returns. Thread-safety: one thread at a time per model. */
MEMRA_API memra_status_t memra_decode_step_deferred(memra_model_t *model, memra_cache_t *cache, int32_t token,
                                                    memra_pending_t **out);

/* Queues one batched decode step: N_ITEMS sequences, each item one token
 * (n_tokens == 1) on its own cache, run as memra_forward_batch runs them
 * (one pass over the weights, each row bit-identical to the same step run
 * synchronously, and to decoding alone under memra_forward_batch's exact
 * contract: docs/BATCHING.md), and returns at once with OUT[i], a pending per item
 * (OUT: an array of N_ITEMS). Each pending is consumed on its own
 * (memra_pending_wait gives that item's n_vocab logits, or
 * memra_pending_free); all of a step's pendings finish together. The
 * caches' positions advance at queue time, so the host may sample step t
 * while step t+1 is queued; on a model split into pipeline stages step t+1
 * then runs on the first stages while step t finishes on the last. Single
 * deferred decode steps and batched ones share one queue and complete in
 * queue order; a cache may have several steps in flight. On every model
 * the step runs on the stage workers (a one-stage model has one), so the
 * call returns before the step finishes (it waits for earlier steps only
 * when 64 are unfinished, or once when a step has more items than any
 * before: the boundary buffers grow while the queue is empty); with
 * streams=0 it runs before this returns and the pendings come back
 * finished.
 * Errors, checked before anything is queued (then every OUT[i] is NULL,
 * except with N_ITEMS outside 1..memra_model_max_batch, where OUT is not
 * written, and no cache changes), with memra_forward_batch's statuses (the message
 * names this call and the item):
 * NULL ITEMS or OUT, N_ITEMS outside 1..memra_model_max_batch, FLAGS not
 * 0, an item's NULL cache or tokens, unknown item flags, one cache in two
 * items: MEMRA_E_INVALID; n_tokens other than 1 (prompts go through
 * memra_forward_batch) or an item's logits not NULL (they come from
 * memra_pending_wait): MEMRA_E_INVALID; a cache of another model
 * MEMRA_E_MISUSE; a full cache MEMRA_E_FULL; a token outside [0, n_vocab)
 * MEMRA_E_RANGE. While steps are in flight the synchronous forward calls
 * on the model (memra_forward, memra_decode_step, memra_forward_batch),
 * and clear/snapshot/restore/free of a cache in flight, fail with
 * MEMRA_E_BUSY, as for memra_decode_step_deferred. A failed step fails
 * every pending of it and the later steps that share a cache with it.
 * Thread-safety: one thread at a time per model. */
MEMRA_API memra_status_t memra_forward_batch_deferred(memra_model_t *model, const memra_batch_item_t *items,
                                                      int32_t n_items, uint32_t flags, memra_pending_t **out);

/* MEMRA_OK when the step has finished (memra_pending_wait will not block),
 * MEMRA_E_AGAIN while it has not; MEMRA_E_MISUSE for a handle that is not a
 * live pending (already consumed). Does not consume the pending.
 * Thread-safety: any thread, one at a time per pending. */
MEMRA_API memra_status_t memra_pending_poll(const memra_pending_t *pending);

/* Blocks until the step has finished, writes its n_vocab logits to LOGITS
 * (NULL = discard) and frees the pending. Returns the step's status: a
 * failed step (device error, or an earlier failed step on the same cache)
 * leaves the cache undefined (clear it). MEMRA_E_MISUSE (nothing freed) for
 * a handle that is not a live pending. Thread-safety: any thread, one at a
 * time per pending. */
MEMRA_API memra_status_t memra_pending_wait(memra_pending_t *pending, float *logits);

/* Cancels a pending: the step cannot be taken back (later steps depend on
 * its cache writes), so this drains it and discards its logits, then frees
 * it. NULL is a no-op; MEMRA_E_MISUSE for a handle that is not a live
 * pending. Thread-safety: any thread, one at a time per pending. */
MEMRA_API memra_status_t memra_pending_free(memra_pending_t *pending);

#ifdef __cplusplus
}
#endif
#endif
