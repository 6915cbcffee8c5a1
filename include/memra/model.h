/* memra: models, caches and the forward pass.
 *
 * A model is a GGUF file bound to an architecture (qwen35, qwen35moe,
 * gemma4, qwen3, llama) with its weights uploaded to one engine, or split
 * into pipeline stages over several (pipeline.h). A cache
 * holds one sequence's state: KV rows of the attention layers, conv and
 * delta-rule state of the recurrent layers, and the position.
 *
 * "One thread at a time per model" (forward, decode steps, cache create,
 * fork, free, clear, snapshot and restore, model free) is checked: a call made
 * while another thread is inside one of these on the same model fails at
 * once with MEMRA_E_BUSY and changes nothing (the message is in
 * memra_last_error() only). Distinct models are independent, also on one
 * engine. */
#ifndef MEMRA_MODEL_H
#define MEMRA_MODEL_H

#include "common.h"
#include "engine.h"
#include "gguf.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memra_model memra_model_t;
typedef struct memra_cache memra_cache_t;

/* Load progress in [0, 1]. Return non-zero to cancel the load (the load
 * then fails with MEMRA_E_AGAIN and frees everything). */
typedef int (*memra_progress_fn)(float progress, void *user);

#define MEMRA_MAX_PP_STAGES 16 /* pipeline stages per model */
/* Tokens per prefill chunk when neither the params nor MEMRA_PRIME_CHUNK
 * say (2048 since 2026-12-04, was 512): a GPU's fast prefill dequantizes
 * each weight once a chunk, so longer chunks spread that over more tokens
 * (docs/PERFORMANCE.md). A chunk's activations grow with it; a batched step
 * admits at most a chunk of each prompt (docs/BATCHING.md). */
#define MEMRA_PREFILL_CHUNK_DEFAULT 2048

typedef struct memra_model_params {
    uint32_t size;              /* sizeof(memra_model_params_t), set by the init macro */
    memra_engine_t *engine;     /* engine to load onto; NULL = a private CPU engine owned by the model */
    int32_t n_layers;           /* trunk layers to load and run, 0..the file's (0 = all, default 0); for tests
                                   and probes */
    int32_t load_mtp;           /* also load MTP/NextN layers (default 0: recognised and skipped) */
    int32_t prefill_chunk;      /* tokens per prefill chunk (0 = env MEMRA_PRIME_CHUNK, 1..1048576, or
                                   MEMRA_PREFILL_CHUNK_DEFAULT) */
    memra_progress_fn progress; /* optional */
    void *progress_user;
    /* Pipeline stages (include/memra/pipeline.h, docs/PIPELINE.md). A field
     * left at its default takes its env variable, then the built-in default;
     * an explicit value wins over the env. */
    int32_t n_stages;           /* stages, 1..MEMRA_MAX_PP_STAGES (0 = env MEMRA_PP_STAGES or 1, default 0) */
    const char *devices;        /* "cpu" / "cuda:N" per stage, comma-separated, or one name for all stages
                                   (NULL = env MEMRA_PP_DEVICES when split; else stage 0 on `engine`, later
                                   stages on private engines: CPU, or CUDA ordinals after stage 0's) */
    memra_engine_t *stage_engines[MEMRA_MAX_PP_STAGES]; /* caller engines per stage; non-NULL entries win over devices */
    int32_t splits[MEMRA_MAX_PP_STAGES - 1]; /* first layer of stages 2..N (all 0 = env MEMRA_PP_SPLITS, else
                                                an even split by weight bytes) */
    int32_t shard;              /* 1 = each stage uploads only its layers; 0 = every stage on stage 0's engine
                                   (-1 = env MEMRA_PP_SHARD or 1, default -1) */
    int32_t streams;            /* 1 = a worker and stream per stage (pipelined deferred steps); 0 = one stream,
                                   serial (-1 = env MEMRA_PP_STREAMS or 1, default -1) */
    int32_t overlap;            /* 1 = double-buffered boundary slots, 0 = one slot
                                   (-1 = env MEMRA_PP_OVERLAP or 1, default -1) */
    int32_t share_device;       /* 1 = allow two pipelined stages on one GPU (-1 = env MEMRA_PP_SHARE_DEVICE
                                   or 0, default -1) */
    /* The paged KV pool (docs/BATCHING.md): 0 (the default) = none, every
     * cache reserves its capacity's KV rows when created; > 0 = each stage
     * keeps a pool of this many bytes of pages from which its caches take
     * pages as they grow and to which they return them when cleared or
     * freed (forks share their parent's whole pages). */
    int64_t kv_pool_bytes;
    int64_t kv_page_bytes;      /* page size, rounded up to the device's granularity (0 = the granularity:
                                   2 MiB on CUDA devices, the host page on the CPU) */
} memra_model_params_t;

/* Fills PARAMS with defaults for a struct of SIZE bytes (use the macro).
 * Thread-safety: any thread. */
MEMRA_API void memra_model_params_init(memra_model_params_t *params, uint32_t size);
#define memra_model_default_params(p) memra_model_params_init((p), MEMRA__SIZEOF32(*(p)))

/* Loads PATH. Errors: MEMRA_E_IO (cannot open), MEMRA_E_FORMAT (corrupt file,
 * missing or misshapen tensor, wrong key type), MEMRA_E_UNSUPPORTED (unknown
 * arch or tensor type), MEMRA_E_NOMEM / MEMRA_E_DEVICE (upload),
 * MEMRA_E_INVALID (bad stage spec in params or MEMRA_PP_* env: count,
 * device, cut, two pipelined stages on one GPU; an env knob that is not a
 * whole number in its range, e.g. MEMRA_PRIME_CHUNK=2abc: unset or empty
 * means the default, anything else fails); the message names the key,
 * tensor, spec or variable. On failure *out is NULL and nothing leaks.
 * Thread-safety: any thread (distinct models are independent). */
MEMRA_API memra_status_t memra_model_load(const char *path, const memra_model_params_t *params,
                                          memra_model_t **out);

/* Frees the model; NULL is a no-op. Fails with MEMRA_E_BUSY (and frees
 * nothing) while caches or cache snapshots of the model exist.
 * Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_model_free(memra_model_t *model);

/* Introspection of a loaded model. Thread-safety: any thread (read-only). */
MEMRA_API const char *memra_model_arch(const memra_model_t *model);
MEMRA_API int32_t memra_model_n_layers(const memra_model_t *model);   /* trunk layers that run */
MEMRA_API int32_t memra_model_n_vocab(const memra_model_t *model);
MEMRA_API int32_t memra_model_n_embd(const memra_model_t *model);
MEMRA_API int32_t memra_model_n_ctx_train(const memra_model_t *model);
MEMRA_API int32_t memra_model_n_mtp_layers(const memra_model_t *model); /* MTP layers present in the file */
MEMRA_API uint64_t memra_model_weight_bytes(const memra_model_t *model);
/* The paged KV pools (params.kv_pool_bytes) over all stages: bytes of
 * pages in use by caches and in all; both 0 without pools or for NULL.
 * Thread-safety: one thread at a time per model (the pools change with
 * steps and cache calls). */
MEMRA_API void memra_model_kv_pool_bytes(const memra_model_t *model, uint64_t *used, uint64_t *total);
/* The bytes of one page of the KV pools (params.kv_page_bytes rounded up
 * to the device's granularity; the largest over stages on different
 * devices); 0 without pools or for NULL. Thread-safety: any thread. */
MEMRA_API uint64_t memra_model_kv_page_bytes(const memra_model_t *model);

typedef enum memra_layer_kind {
    MEMRA_LAYER_ATTENTION = 0,  /* full causal attention */
    MEMRA_LAYER_SLIDING = 1,    /* sliding-window attention */
    MEMRA_LAYER_RECURRENT = 2,  /* Gated DeltaNet (linear attention) */
} memra_layer_kind_t;

/* Kind of trunk layer IL, or -1 if out of range. */
MEMRA_API int32_t memra_model_layer_kind(const memra_model_t *model, int32_t il);
/* The model's GGUF file (borrowed; lives as long as the model). */
MEMRA_API const memra_gguf_t *memra_model_gguf(const memra_model_t *model);
/* The model's tokenizer (borrowed), or NULL if the file has none. */
MEMRA_API const memra_tokenizer_t *memra_model_tokenizer(const memra_model_t *model);
/* Message of the last failed call on MODEL.
 * Thread-safety: one thread at a time per handle. */
MEMRA_API const char *memra_model_last_error(const memra_model_t *model);

/* ---- caches ---------------------------------------------------------- */

/* Creates a cache for up to N_CTX tokens of one sequence (0 = the model's
 * training context, capped at 4096). The cache lives on the model's
 * engine(s); the model must outlive it. A cache larger than the memory of
 * the model's devices is MEMRA_E_NOMEM before anything is allocated. Thread-safety: one thread at a time
 * per model. */
MEMRA_API memra_status_t memra_cache_create(memra_model_t *model, int32_t n_ctx, memra_cache_t **out);

/* KV storage of a cache (memra_cache_create_ex). A row is one token's K
 * (or V) of one attention layer; recurrent state stays float32. Types:
 *   MEMRA_TYPE_F32   4 bytes an element: the reference (memra_cache_create)
 *   MEMRA_TYPE_F16   2 bytes, round to nearest even (the default, as
 *                    llama.cpp's; the same on every engine, so a CPU and a
 *                    CUDA engine give the same results for the same params)
 *   MEMRA_TYPE_BF16  2 bytes, round to nearest even
 *   MEMRA_TYPE_Q8_0  34 bytes per 32 elements: ggml's block_q8_0 as
 *                    quantize_row_q8_0_ref makes it; needs KV heads of a
 *                    multiple of 32 elements
 *   MEMRA_TYPE_Q4_0  V rows only: 18 bytes per 32 elements, ggml's
 *                    block_q4_0 as quantize_row_q4_0_ref makes it; the
 *                    same head rule. With q8_0 K the most sequences a
 *                    device holds (docs/BATCHING.md)
 * Every engine stores the same bits and attends over the exactly
 * dequantized rows. K and V may differ. Measured accuracy per type:
 * docs/ACCURACY.md. */
typedef struct memra_cache_params {
    uint32_t size;              /* sizeof(memra_cache_params_t), set by the init macro */
    int32_t n_ctx;              /* tokens (0 = the model's training context, capped at 4096; default 0) */
    memra_type_t type_k;        /* K rows (default MEMRA_TYPE_F16) */
    memra_type_t type_v;        /* V rows (default MEMRA_TYPE_F16) */
} memra_cache_params_t;

/* Fills PARAMS with defaults for a struct of SIZE bytes (use the macro).
 * Thread-safety: any thread. */
MEMRA_API void memra_cache_params_init(memra_cache_params_t *params, uint32_t size);
#define memra_cache_default_params(p) memra_cache_params_init((p), MEMRA__SIZEOF32(*(p)))

/* memra_cache_create with PARAMS (required: start from
 * memra_cache_default_params). Errors as memra_cache_create's, and
 * MEMRA_E_INVALID for a NULL or unsized PARAMS, MEMRA_E_UNSUPPORTED for a
 * type that is none of the above (Q4_0 for K) or Q8_0/Q4_0 on a model whose
 * KV heads are not whole blocks of 32; the message names the field. On
 * failure *out is NULL and nothing leaks. Thread-safety: one thread at a time per model. */
MEMRA_API memra_status_t memra_cache_create_ex(memra_model_t *model, const memra_cache_params_t *params,
                                               memra_cache_t **out);
/* The storage types of the cache's K and V rows (MEMRA_TYPE_COUNT for
 * NULL). Thread-safety: any thread. */
MEMRA_API memra_type_t memra_cache_type_k(const memra_cache_t *cache);
MEMRA_API memra_type_t memra_cache_type_v(const memra_cache_t *cache);
/* Bytes of KV rows one token takes in the cache, over all layers (what a
 * token of context costs; recurrent state is per cache, not per token).
 * 0 for NULL. Thread-safety: any thread. */
MEMRA_API uint64_t memra_cache_kv_bytes_per_token(const memra_cache_t *cache);
/* Bytes of KV rows the cache holds once it is at N_TOKENS tokens, over all
 * layers: N_TOKENS * memra_cache_kv_bytes_per_token, or with a paged KV
 * pool (docs/BATCHING.md) the pages those rows take, sliding-window layers
 * holding only their window's (an upper bound: whole pages). 0 for NULL or
 * N_TOKENS <= 0. Thread-safety: any thread. */
MEMRA_API uint64_t memra_cache_kv_bytes(const memra_cache_t *cache, int64_t n_tokens);
/* Bytes of recurrent (conv and delta-rule) state the cache holds, over all
 * layers: the same whatever its capacity (0 for models without recurrent
 * layers, and for NULL). A cache of N tokens takes N *
 * memra_cache_kv_bytes_per_token + this much device memory.
 * Thread-safety: any thread. */
MEMRA_API uint64_t memra_cache_state_bytes(const memra_cache_t *cache);
/* NULL is a no-op. MEMRA_E_BUSY while pipelined steps are in flight.
 * Thread-safety: one thread at a time per model. */
MEMRA_API memra_status_t memra_cache_free(memra_cache_t *cache);
/* Tokens consumed so far, and the capacity. Thread-safety: any thread. */
MEMRA_API int32_t memra_cache_pos(const memra_cache_t *cache);
MEMRA_API int32_t memra_cache_capacity(const memra_cache_t *cache);
/* Forgets everything (position 0, recurrent state zeroed).
 * Thread-safety: one thread at a time per model. */
MEMRA_API memra_status_t memra_cache_clear(memra_cache_t *cache);

/* A saved cache state: the position plus all recurrent (conv, delta-rule)
 * state, which cannot be rolled back by trimming. KV rows are not copied:
 * rows below the snapshot position stay valid in the cache as long as the
 * cache was not rolled back below that position since the snapshot (the
 * speculative-decoding pattern: snapshot, decode drafts, restore).
 * Thread-safety: one thread at a time per model. */
typedef struct memra_cache_snapshot memra_cache_snapshot_t;
MEMRA_API memra_status_t memra_cache_snapshot(memra_cache_t *cache, memra_cache_snapshot_t **out);
/* Restores SNAP into CACHE. MEMRA_E_MISUSE (CACHE unchanged) if SNAP was
 * taken from another cache, even one of the same model and capacity: the
 * KV rows below the snapshot position live only in the cache it was taken
 * from. A snapshot keeps its model alive (memra_model_free refuses while it
 * exists) but not its cache; it may outlive the cache, and then restores
 * nowhere. Snapshot, restore and free: Thread-safety: one thread at a time
 * per model. */
MEMRA_API memra_status_t memra_cache_restore(memra_cache_t *cache, const memra_cache_snapshot_t *snap);
MEMRA_API void memra_cache_snapshot_free(memra_cache_snapshot_t *snap);

/* Prefix sharing (docs/BATCHING.md): creates *OUT, a new cache of
 * PARENT's model and KV types holding a copy of PARENT's contents at its
 * current position: the KV rows [0, pos) of every attention layer and the
 * recurrent (conv and delta-rule) state, with the same position. A system
 * prompt or chat history is prefilled once and forked per request; each
 * fork then continues on its own, and the logits of a fork continued with
 * some tokens are bit-identical to those of PARENT continued with the same
 * tokens. Writes into either cache never change the other. N_CTX is the
 * fork's capacity (<= 0: PARENT's), at least PARENT's position.
 * For hybrid models (recurrent layers) the fork point is PARENT's current
 * position, the only point where its recurrent state exists; to fork at an
 * earlier point, fork before going on (or restore a snapshot first).
 * The rows are copied on the devices (each pipeline stage's layers on its
 * own engine), so a fork costs the memory of its capacity and a copy of
 * pos tokens of rows; with a paged KV pool (params.kv_pool_bytes) it
 * shares the parent's whole pages copy-on-write and copies one page a
 * layer. A snapshot of PARENT does not restore into the fork.
 * Errors: NULL PARENT or OUT, N_CTX below PARENT's position:
 * MEMRA_E_INVALID; deferred steps of the model in flight (pipeline.h):
 * MEMRA_E_BUSY; no memory for the fork: MEMRA_E_NOMEM (errors of
 * memra_cache_create). On failure *OUT is NULL, nothing leaks and PARENT
 * is unchanged and usable. Thread-safety: one thread at a time per model. */
MEMRA_API memra_status_t memra_cache_fork(memra_cache_t *parent, int32_t n_ctx, memra_cache_t **out);

/* ---- forward --------------------------------------------------------- */

#define MEMRA_FORWARD_ALL_ROWS 1u /* logits for every token, [n][n_vocab]; else only the last row */

/* Runs N tokens at the cache's position (prefill, split into chunks of the
 * model's prefill_chunk) and writes logits (NULL = none). Errors: a token
 * outside [0, n_vocab) gives MEMRA_E_RANGE, pos + N beyond the capacity
 * MEMRA_E_FULL (checked first, before TOKENS is read); both leave the cache
 * unchanged; MEMRA_E_BUSY while deferred steps of the model are in flight
 * (pipeline.h). A device error leaves the
 * cache in an undefined state (clear it). One thread at a time per model. */
MEMRA_API memra_status_t memra_forward(memra_model_t *model, memra_cache_t *cache, const int32_t *tokens,
                                       int32_t n, uint32_t flags, float *logits);

/* One token (decode): logits of n_vocab floats (NULL = none). Same errors
 * and state rules as memra_forward. Thread-safety: one thread at a time per
 * model. */
MEMRA_API memra_status_t memra_decode_step(memra_model_t *model, memra_cache_t *cache, int32_t token,
                                           float *logits);

/* ---- batched steps (docs/BATCHING.md) --------------------------------- */

#define MEMRA_MAX_BATCH 64 /* items per memra_forward_batch call */

/* One sequence's part of a batched step. The item is read during the call
 * only; TOKENS and LOGITS stay the caller's. */
typedef struct memra_batch_item {
    memra_cache_t *cache;       /* the sequence; at most one item per cache in a call */
    const int32_t *tokens;      /* n_tokens tokens at the cache's position: 1 for a decode, more for a prompt */
    int32_t n_tokens;
    uint32_t flags;             /* MEMRA_FORWARD_ALL_ROWS: logits of every token ([n_tokens][n_vocab]);
                                   0: of the last token only ([n_vocab]) */
    float *logits;              /* NULL = none */
} memra_batch_item_t;

/* Items one memra_forward_batch call takes (MEMRA_MAX_BATCH; 0 for NULL).
 * Thread-safety: any thread. */
MEMRA_API int32_t memra_model_max_batch(const memra_model_t *model);

/* Advances N_ITEMS sequences of MODEL in one pass over the weights per
 * step: each item's tokens run at its cache's position as memra_forward
 * would run them. On an exact engine the logits of each item are
 * bit-identical to running it alone through memra_forward, whatever else is
 * in the batch; a fast engine (the CUDA default) runs steps of 3 or more
 * decodes (2 or more on some K-quant models, MEMRA_BATCH_FAST_MIN to set
 * it) on tensor cores, within the fast tier's bound of decoding alone
 * and independent of the other items (MEMRA_BATCH_FAST=0: bit-identical
 * there too). docs/BATCHING.md has both contracts.
 * Items longer than the model's prefill_chunk are split into chunks; each
 * step takes every item's next chunk, so prompts mix with decodes
 * (continuous batching: pass a prompt in chunks over several calls to keep
 * the decodes' steps short). Sequences join or leave between calls: the
 * caches are independent handles. FLAGS: 0 (reserved).
 * Errors, checked before anything runs (then no cache changes): NULL ITEMS
 * or N_ITEMS outside 1..memra_model_max_batch, an item's NULL cache or
 * tokens, n_tokens < 1 or unknown flags, or one cache in two items:
 * MEMRA_E_INVALID; a cache of another model MEMRA_E_MISUSE; pos + n_tokens
 * beyond a cache's capacity MEMRA_E_FULL; a token outside [0, n_vocab)
 * MEMRA_E_RANGE; deferred steps in flight MEMRA_E_BUSY. The message names
 * the item. A device error leaves the caches of the batch in an undefined
 * state (clear them). memra_forward_batch_deferred (pipeline.h) queues a
 * step of decodes and returns pendings instead. Thread-safety: one thread
 * at a time per model. */
MEMRA_API memra_status_t memra_forward_batch(memra_model_t *model, const memra_batch_item_t *items,
                                             int32_t n_items, uint32_t flags);

#ifdef __cplusplus
}
#endif
#endif
