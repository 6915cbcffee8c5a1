/* Internal model framework: what an architecture binder (lib/arch_*.c)
 * provides and what it may call.
 *
 * A forward pass is split into three arch callbacks so that the same code
 * runs unsplit and as pipeline stages (each stage a contiguous range of
 * layers on its own engine):
 *   embed:  tokens -> carry rows            (on the first stage)
 *   layer:  carry rows -> carry rows        (layer il, on the stage owning it)
 *   head:   carry rows -> logits rows       (on the last stage)
 * The "carry" is everything that must cross a stage boundary per token:
 * the hidden state (n_embd floats) plus any arch extras (gemma4's
 * per-layer inputs, and the K/V rows of a KV-shared source layer whose
 * reader sits on a later stage). Its width is m->carry_floats, set by bind
 * (which knows the stages).
 */
#ifndef MEMRA_MODEL_IMPL_H
#define MEMRA_MODEL_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "backend.h"
#include "engine_impl.h"
#include "kv_pool.h"
#include "memra/model.h"
#include "stage.h"

#define MEMRA_MAX_STAGES MEMRA_MAX_PP_STAGES
#define MEMRA_MAX_LAYERS 512

/* Per-layer cache geometry, filled by bind. Zero means "none". */
typedef struct memra__layer_cache {
    int64_t k_floats, v_floats; /* KV row widths per token (this layer holds KV rows) */
    int64_t kv_head_dim;        /* elements of one KV head (K and V), with k_floats */
    int64_t conv_floats;        /* recurrent conv state */
    int64_t ssm_floats;         /* recurrent delta-rule state */
    int64_t swa;                /* sliding window: the layer's queries at p read keys p - k < swa (0: all) */
} memra__layer_cache_t;

/* Rows below a sliding window that a paged cache keeps mapped: kernels may
 * read a tile of keys from below the window's first row (the tensor-core
 * prefill starts at a multiple of its 64- or 128-key tile) and mask them. */
#define MEMRA__SWA_MARGIN 256

typedef struct memra__arch {
    const char *name;
    /* Reads config, checks and uploads every tensor (memra__w_*), fills
     * n_layer/n_vocab/n_embd/carry_floats/layer_kind/layer_cache and
     * m->arch_data. On failure it returns the status; the framework then
     * calls unbind and frees all stage allocations. */
    memra_status_t (*bind)(memra_model_t *m);
    void (*unbind)(memra_model_t *m); /* frees arch_data (not device memory) */
    /* Upper bound of workspace bytes one layer/embed/head call needs for
     * n tokens on any stage. */
    size_t (*workspace_bytes)(const memra_model_t *m, int32_t n_tokens);
    memra_status_t (*embed)(memra__run_t *r);
    memra_status_t (*layer)(memra__run_t *r, int32_t il);
    /* writes r->logits and never reads them back: a decode step's logits
     * may be mapped host memory (backend host_map; stage.c), which reads
     * would cross PCIe for (gemma4's softcap is the head matmul's post op) */
    memra_status_t (*head)(memra__run_t *r);
    /* (optional) false when no pipeline stage may start at trunk layer IL
     * (e.g. state a layer needs that cannot cross a stage boundary).
     * Called before bind, with only the GGUF open (read keys with
     * memra__cfg_*); the default split skips such cuts, explicit ones are
     * refused. NULL = any cut. */
    bool (*cut_ok)(memra_model_t *m, int32_t il);
} memra__arch_t;

struct memra_model {
    memra__err_t err;
    const memra__arch_t *arch;
    void *arch_data;
    memra_gguf_t *gguf;
    memra_tokenizer_t *tok;
    memra_model_params_t params;
    char arch_name[32];

    int32_t n_layer;             /* trunk layers that run */
    int32_t n_layer_file;        /* trunk layers in the file */
    int32_t n_mtp;               /* MTP layers in the file */
    int32_t n_vocab, n_embd, n_ctx_train;
    int64_t carry_floats;
    int32_t prefill_chunk;
    int8_t layer_kind[MEMRA_MAX_LAYERS];     /* memra_layer_kind_t */
    bool fast_min2;              /* two-row decode steps on the fast tier's batched kernels (memra__batch_fast_min) */
    memra__layer_cache_t layer_cache[MEMRA_MAX_LAYERS];

    int32_t n_stages;
    memra__stage_t stages[MEMRA_MAX_STAGES];
    struct memra__pp *pp;        /* stage plan, private engines, workers (lib/pipeline.c) */

    bool *tensor_used;           /* one flag per GGUF tensor */
    atomic_int n_caches;
    atomic_int n_snapshots;      /* both keep the model alive: memra_model_free refuses while either is > 0 */
    atomic_bool in_call;         /* a thread is inside a call documented "one thread at a time per model" */
};

struct memra_cache {
    memra__err_t err;
    memra_model_t *model;
    uint64_t id;                 /* unique in the process, never reused (a freed cache's address may be) */
    int32_t n_ctx;
    int32_t pos;
    memra_type_t type_k, type_v; /* KV storage (lib/kv_rows.h) */
    void *k[MEMRA_MAX_LAYERS], *v[MEMRA_MAX_LAYERS];
    float *conv[MEMRA_MAX_LAYERS], *ssm[MEMRA_MAX_LAYERS];
    atomic_int in_flight;        /* pipelined steps not yet consumed */
    memra__kv_area_t area[MEMRA_MAX_LAYERS][2]; /* with a paged KV pool: k[il] and v[il]'s pages */
};

/* Makes the KV rows [pos, pos + n) of every layer of C writable (paged KV
 * pool: pages mapped, shared pages copied; a no-op without a pool).
 * MEMRA_E_FULL when a stage's pool runs out, MEMRA_E_BUSY when a shared
 * page would be copied under pipelined steps in flight; C is unchanged on
 * failure. */
memra_status_t memra__cache_ensure(memra_cache_t *c, int32_t n);

/* For tests: a 64-bit digest (FNV-1a) of cache C's KV rows [0, pos) (a
 * sliding-window layer's last swa rows) of
 * every layer, its recurrent state and its position, read back from the
 * devices of the stages owning the layers (lib/cache_digest.c). Two caches
 * with the same contents have the same digest; writes into a cache change
 * it. Not thread-safe against steps running on C. */
memra_status_t memra__cache_digest(const memra_cache_t *c, uint64_t *out);

/* Per-model try-lock of the calls documented "one thread at a time per
 * model" (forward, decode steps, cache create/fork/free/clear/snapshot/restore,
 * model free): a second thread gets MEMRA_E_BUSY instead of racing on the
 * stage buffers. One atomic exchange per call; the message goes to the
 * thread's last error only, since the model's slot belongs to the thread
 * inside. */
memra_status_t memra__model_enter(memra_model_t *m, const char *fn);
static inline void memra__model_leave(memra_model_t *m)
{
    atomic_store_explicit(&m->in_call, false, memory_order_release);
}
/* return CALL run under M's try-lock (M: a non-NULL variable, read again
 * after CALL, so not an expression CALL may free) */
#define MEMRA__MODEL_GUARDED(m, fn, call)                      \
    do {                                                        \
        memra_status_t guarded_st_ = memra__model_enter(m, fn); \
        if (guarded_st_)                                        \
            return guarded_st_;                                 \
        guarded_st_ = (call);                                   \
        memra__model_leave(m);                                  \
        return guarded_st_;                                     \
    } while (0)

/* ---- config keys (llama.cpp's strict typing: a u32 key must be UINT32,
 * a float FLOAT32, a flag BOOL). KEY is the part after "<arch>.", unless it
 * starts with "general." or "tokenizer.". ---------------------------------- */
memra_status_t memra__cfg_u32(memra_model_t *m, const char *key, uint32_t *out);
memra_status_t memra__cfg_u32_or(memra_model_t *m, const char *key, uint32_t def, uint32_t *out);
/* Float keys must be finite (MEMRA_E_FORMAT naming the key otherwise); the
 * _pos variants also > 0 (epsilons, rope bases), _nonneg >= 0. */
memra_status_t memra__cfg_f32(memra_model_t *m, const char *key, float *out);
memra_status_t memra__cfg_f32_or(memra_model_t *m, const char *key, float def, float *out);
memra_status_t memra__cfg_f32_pos(memra_model_t *m, const char *key, float *out);
memra_status_t memra__cfg_f32_pos_or(memra_model_t *m, const char *key, float def, float *out);
memra_status_t memra__cfg_f32_nonneg_or(memra_model_t *m, const char *key, float def, float *out);
bool memra__cfg_has(const memra_model_t *m, const char *key);
/* get_key_or_arr: a UINT32 scalar (same for all N entries) or an array of
 * exactly N INT32/UINT32/BOOL entries. Missing key: error if REQUIRED,
 * else every entry = DEF. */
memra_status_t memra__cfg_u32_per_layer(memra_model_t *m, const char *key, int32_t n, bool required,
                                        uint32_t def, uint32_t *out);
/* An integer array of exactly N entries (INT32/UINT32). */
memra_status_t memra__cfg_i32_array(memra_model_t *m, const char *key, int32_t n, int32_t *out);

/* ---- weights ------------------------------------------------------------
 * The name is printf-formatted (e.g. "blk.%d.attn_q.weight"). SHAPE lists
 * the expected ne (n_dims entries; trailing 1s are ignored on both sides,
 * so {64} accepts a stored {64,1}); an entry of -1 accepts any value.
 * The tensor is uploaded to STAGE's device (zero-copy on the CPU backend)
 * and marked used. Optional tensors that are absent leave w->data NULL and
 * return MEMRA_OK. A type the backend cannot compute is MEMRA_E_UNSUPPORTED. */
#define MEMRA_W_REQUIRED 1u
#define MEMRA_W_OPTIONAL 0u
memra_status_t memra__w_get(memra_model_t *m, int32_t stage, memra_weight_t *w, unsigned flags,
                            int n_dims, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* A 1-D (or {n,1}) parameter as float32 on STAGE's device (converted from
 * F16/BF16 if stored so); *out NULL when optional and absent. */
memra_status_t memra__w_vec(memra_model_t *m, int32_t stage, const float **out, unsigned flags, int64_t n,
                            const char *fmt, ...) __attribute__((format(printf, 6, 7)));
bool memra__w_exists(const memra_model_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Marks every "blk.IL.*" tensor used without loading it (MTP layers and
 * layers beyond params.n_layers). */
void memra__w_skip_layer(memra_model_t *m, int32_t il);
/* Stage that owns trunk layer IL; the first and last stages. */
int32_t memra__stage_of_layer(const memra_model_t *m, int32_t il);
static inline int32_t memra__first_stage(const memra_model_t *m) { (void)m; return 0; }
static inline int32_t memra__last_stage(const memra_model_t *m) { return m->n_stages - 1; }

/* Architectures (lib/arch_*.c). */
extern const memra__arch_t memra__arch_llama;    /* "llama" */
extern const memra__arch_t memra__arch_qwen3;    /* "qwen3" */
extern const memra__arch_t memra__arch_qwen35;   /* "qwen35" */
extern const memra__arch_t memra__arch_qwen35moe;/* "qwen35moe" */
extern const memra__arch_t memra__arch_gemma4;   /* "gemma4" */

#endif
