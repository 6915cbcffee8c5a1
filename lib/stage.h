/* A loaded model's stages and what runs on them (lib/stage.c): the stage
 * type, the per-callback run state an arch's embed/layer/head receive, the
 * stage buffers, running one stage's part of a chunk, the boundary copy
 * between stages, one chunk walked through all stages, and the model's
 * error slot. The forward driver (lib/forward.c), the pipeline workers
 * (lib/pp_sched.c) and model loading (lib/model.c) all build on this; it
 * calls none of them. */
#ifndef MEMRA_STAGE_H
#define MEMRA_STAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "engine_impl.h"
#include "memra/model.h"

/* What a recorded decode step (backend graph_*) was recorded for: a
 * replay is valid for a step with the same key. Everything else that a
 * step's launches take is the same for every decode step of its caches,
 * or read on the device (the tokens, the positions: memra_attn_args_t's
 * and memra_kv_store_args_t's pos_dev). */
typedef struct memra__graph_key {
    int32_t n_seg;                          /* one-row segments, in order */
    uint64_t cache_id[MEMRA_MAX_BATCH];     /* each one's cache (its rows and states) */
    int64_t keys[MEMRA_MAX_BATCH];          /* each one's attention launch bound (memra__graph_keys) */
    uint64_t epoch;                         /* the backend's scratch (graph_epoch) */
    const void *ws, *io, *carry, *logits;
    int32_t n_out, rows_mode;
} memra__graph_key_t;

/* The attention launch bound of a recorded step's segment at POS0: its
 * key count rounded up to a multiple of 256 (one recording per 256 tokens
 * of a sequence; the spare key splits of a replay idle). */
static inline int64_t memra__graph_keys(int32_t pos0)
{
    return ((int64_t)pos0 + 256) / 256 * 256;
}

/* A stage's recording for one cache: the recording (in parts of a few
 * layers: the device starts on the first part while the host queues the
 * next) and its key, and the key of that cache's last step run directly
 * in the recorded form (a step is recorded only after one such run: the
 * scratch it uses has grown by then). */
#define MEMRA__GRAPH_PARTS 16 /* recordings a step is cut into, at most */

typedef struct memra__graph_slot {
    void *graph[MEMRA__GRAPH_PARTS]; /* the step's parts, replayed in order */
    int32_t n_graph;
    memra__graph_key_t key, plain_key; /* n_seg 0: none */
    uint64_t used;                     /* the stage's graph_tick when last used */
} memra__graph_slot_t;

#define MEMRA__GRAPH_SLOTS 4 /* cache sets a stage keeps recordings for (least recently used goes) */

typedef struct memra__stage {
    memra_engine_t *engine;
    memra__backend_t *be;
    int32_t layer0, layer1;     /* owns trunk layers [layer0, layer1) */
    void **allocs;              /* device allocations owned by the stage */
    size_t n_allocs, cap_allocs;
    uint64_t weight_bytes;
    void *ws;                   /* workspace for one chunk */
    size_t ws_cap;
    int32_t *io;                /* device: tokens then positions of a chunk */
    size_t io_cap;
    float *carry;               /* device: [n][carry_floats] */
    size_t carry_cap;
    float *logits;              /* device (last stage): [n_out][n_vocab] */
    size_t logits_cap;
    /* decode steps replayed from recordings (lib/stage.c); graph_off[0]
     * (one sequence) or [1] (several) once recording such a step failed
     * on this stage */
    memra__graph_slot_t graphs[MEMRA__GRAPH_SLOTS];
    uint64_t graph_tick;
    uint64_t graph_replays;    /* steps run as replays (tests, diagnostics) */
    bool graph_off[2];
    struct memra__kv_pool *kv_pool; /* the paged KV pool (lib/kv_pool.h), or NULL */
} memra__stage_t;

/* One sequence's rows in a step (docs/BATCHING.md). A step's rows are
 * the segments' rows back to back: a decode item is one row, a prefill
 * chunk several. Everything that reads or writes per-sequence state (the KV
 * rows, attention, the conv and delta-rule state) runs once per segment;
 * everything else runs once over all rows. */
typedef struct memra__seg {
    memra_cache_t *c;
    int32_t row0, n;             /* rows [row0, row0+n) of the step */
    int32_t pos0;                /* cache position of row row0 */
    int32_t out0, n_out;         /* logits of its rows [out0, out0+n_out) (n_out 0: none) */
    float *host_logits;          /* where memra__run_step puts them ([n_out][n_vocab], host) */
} memra__seg_t;

/* One step of one forward on one stage. */
typedef struct memra__run {
    memra_model_t *m;
    memra__stage_t *st;
    memra__backend_t *be;
    const memra__backend_i *ops; /* == be->iface */
    const memra__seg_t *seg;     /* host [n_seg], rows in order */
    int32_t n_seg;
    int32_t n;                   /* rows in this step (all segments) */
    const int32_t *tokens;       /* device [n] */
    const int32_t *pos;          /* device [n]: each row's cache position */
    float *carry;                /* device [n][m->carry_floats] */
    int32_t n_out;               /* head: logits rows (the segments' out rows, in order) */
    float *logits;               /* device [n_out][n_vocab] */
    uint8_t *ws;                 /* workspace, bump-allocated, reset per callback */
    size_t ws_used, ws_cap;
    /* the step is recorded for replays at later positions (one-row
     * segments): each segment's attention launch is sized for
     * memra__graph_keys of its position and reads the position on the
     * device, its KV rows are stored by kv_store at the device's position
     * (lib/kv_rows.c) */
    bool recorded;
} memra__run_t;

/* Workspace: NULL (and an error on the model) if the arch's
 * workspace_bytes under-estimated. 256-byte aligned. */
void *memra__ws(memra__run_t *r, size_t bytes);
static inline float *memra__wsf(memra__run_t *r, int64_t n_floats)
{
    return (float *)memra__ws(r, (size_t)n_floats * sizeof(float));
}

/* Fails the model with a formatted message (returns STATUS). */
memra_status_t memra__model_fail(memra_model_t *m, memra_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Frees a stage's buffers and allocations and releases its engine. */
void memra__stage_free(memra__stage_t *st);

/* Logits rows the head of a step over SEG computes (the sum of n_out). */
int32_t memra__segs_out(const memra__seg_t *seg, int32_t n_seg);

/* Runs stage SI's part of a step of N rows (the segments SEG, N_SEG of
 * them) at IO_HOST (tokens then positions) on CARRY (device,
 * [n][carry_floats]): embed on the first stage, its layers, and the head
 * on the last when a segment wants logits, into LOGITS_TO (a device
 * address, e.g. mapped host memory) or, when NULL, st->logits. Queues work
 * and does not synchronize. */
memra_status_t memra__stage_run(memra_model_t *m, int32_t si, const memra__seg_t *seg, int32_t n_seg,
                                const int32_t *io_host, int32_t n, float *carry, float *logits_to);
/* Copies BYTES of carry from stage A's buffer SRC to stage B's DST
 * (memcpy on host memory, copy on one device, copy_peer, else a host
 * bounce). Queued on A; a host bounce synchronizes A. */
memra_status_t memra__cross(memra_model_t *m, int32_t a, const float *src, int32_t b, float *dst, size_t bytes);
/* One step walked stage by stage on the calling thread (memra_forward,
 * memra_forward_batch, and deferred steps with streams=0): the segments'
 * TOKENS (host, [n], the segments' rows back to back) at their positions;
 * each segment's logits rows to its host_logits. Does not advance the
 * caches. Synchronizes. A failure is also recorded on the model's error
 * slot. */
memra_status_t memra__run_step(memra_model_t *m, const memra__seg_t *seg, int32_t n_seg, const int32_t *tokens,
                               int32_t n);
/* One chunk of one sequence (a one-segment step): N tokens at the cache
 * position; logits rows [out_row0, out_row0+n_out) to HOST_LOGITS. */
memra_status_t memra__run_chunk(memra_model_t *m, memra_cache_t *c, const int32_t *tokens, int32_t n,
                                int32_t out_row0, int32_t n_out, float *host_logits);
/* Grows a device buffer of stage ST to at least NEED bytes. */
memra_status_t memra__stage_buf(memra_model_t *m, memra__stage_t *st, void **p, size_t *cap, size_t need);

#endif
