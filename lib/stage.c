/* A loaded model's stages and what runs on them: stage buffers, one
 * stage's part of a chunk (embed on the first stage, layers on their
 * owners, head on the last), the boundary copy, one chunk through all
 * stages on the calling thread, and the model's error slot. Everything
 * above (forward.c, pp_sched.c, model.c) builds on this file. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kv_pool.h"
#include "model_impl.h"

memra_status_t memra__model_fail(memra_model_t *m, memra_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    memra__vfail(m ? &m->err : NULL, st, fmt, ap);
    va_end(ap);
    return st;
}

void memra__stage_free(memra__stage_t *st)
{
    if (!st->be)
        return;
    const memra__backend_i *ops = st->be->iface;
    for (size_t i = 0; i < st->n_allocs; i++)
        ops->free(st->be, st->allocs[i]);
    free(st->allocs);
    ops->free(st->be, st->ws);
    ops->free(st->be, st->io);
    ops->free(st->be, st->carry);
    ops->free(st->be, st->logits);
    for (int i = 0; i < MEMRA__GRAPH_SLOTS; i++)
        for (int j = 0; j < MEMRA__GRAPH_PARTS; j++)
            if (st->graphs[i].graph[j])
                ops->graph_free(st->be, st->graphs[i].graph[j]);
    memra__kv_pool_free(st->kv_pool);
    if (st->engine)
        atomic_fetch_sub(&st->engine->users, 1);
    memset(st, 0, sizeof *st);
}

void *memra__ws(memra__run_t *r, size_t bytes)
{
    size_t at = (r->ws_used + 255) & ~(size_t)255;
    if (at + bytes > r->ws_cap) {
        memra__model_fail(r->m, MEMRA_E_INTERNAL,
                          "arch '%s' workspace estimate too small (%zu + %zu > %zu bytes for %d tokens)",
                          r->m->arch_name, at, bytes, r->ws_cap, r->n);
        return NULL;
    }
    r->ws_used = at + bytes;
    return r->ws + at;
}

memra_status_t memra__stage_buf(memra_model_t *m, memra__stage_t *st, void **p, size_t *cap, size_t need)
{
    if (*cap >= need && *p)
        return MEMRA_OK;
    st->be->iface->free(st->be, *p);
    *cap = 0;
    *p = st->be->iface->alloc(st->be, need ? need : 1);
    if (!*p)
        return memra__model_fail(m, MEMRA_E_NOMEM, "cannot allocate %zu bytes of activations", need);
    *cap = need;
    return MEMRA_OK;
}

memra_status_t memra__cross(memra_model_t *m, int32_t ai, const float *src, int32_t bi, float *dst, size_t bytes)
{
    memra__stage_t *a = &m->stages[ai], *b = &m->stages[bi];
    const memra__backend_i *ao = a->be->iface, *bo = b->be->iface;
    if (a->be == b->be)
        return ao->copy(a->be, dst, src, bytes);
    /* host memory on both sides (CPU engines): the boundary is a memcpy */
    if (ao->host_memory && bo->host_memory) {
        memcpy(dst, src, bytes);
        return MEMRA_OK;
    }
    if (ao->copy_peer && ao->copy_peer == bo->copy_peer)
        return ao->copy_peer(a->be, dst, b->be, src, bytes);
    void *tmp = malloc(bytes);
    if (!tmp)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory for a stage boundary");
    memra_status_t s = ao->download(a->be, tmp, src, bytes);
    if (!s)
        s = ao->synchronize(a->be);
    if (!s)
        s = bo->upload(b->be, dst, tmp, bytes);
    /* upload may be asynchronous on a device: tmp must outlive it */
    if (!s)
        s = bo->synchronize(b->be);
    free(tmp);
    return s;
}

static memra_status_t call(memra__run_t *r, int what, int32_t il)
{
    r->ws_used = 0;
    switch (what) {
    case 0: return r->m->arch->embed(r);
    case 1: return r->m->arch->layer(r, il);
    default: return r->m->arch->head(r);
    }
}

int32_t memra__segs_out(const memra__seg_t *seg, int32_t n_seg)
{
    int32_t n_out = 0;
    for (int32_t i = 0; i < n_seg; i++)
        n_out += seg[i].n_out;
    return n_out;
}

/* Layers [l0, l1) of stage SI's part of the step R, with the embed on
 * the first stage when l0 is the stage's first layer and the head on the
 * last stage (when the step wants logits) when l1 is its end. */
static memra_status_t run_layers(memra__run_t *r, int32_t si, int32_t l0, int32_t l1)
{
    const memra__stage_t *st = r->st;
    memra_status_t s = MEMRA_OK;
    if (si == 0 && l0 == st->layer0)
        s = call(r, 0, 0);
    for (int32_t il = l0; il < l1 && !s; il++)
        s = call(r, 1, il);
    if (!s && l1 == st->layer1 && si == r->m->n_stages - 1 && r->n_out > 0)
        s = call(r, 2, 0);
    return s;
}

/* Stage SI's whole part of the step R. */
static memra_status_t run_parts(memra__run_t *r, int32_t si)
{
    return run_layers(r, si, r->st->layer0, r->st->layer1);
}

/* ---- decode steps replayed from a recording ---------------------------------- */

/* MEMRA_GRAPH=0 runs every step directly (read at each step, so a test
 * can compare both in one process). */
static bool graph_on(void)
{
    const char *e = getenv("MEMRA_GRAPH");
    return !(e && e[0] == '0' && e[1] == 0);
}

static bool same_set(const memra__graph_key_t *a, const memra__graph_key_t *b)
{
    return a->n_seg == b->n_seg && memcmp(a->cache_id, b->cache_id, (size_t)a->n_seg * sizeof a->cache_id[0]) == 0;
}

static bool key_eq(const memra__graph_key_t *a, const memra__graph_key_t *b)
{
    return same_set(a, b) && memcmp(a->keys, b->keys, (size_t)a->n_seg * sizeof a->keys[0]) == 0 &&
           a->epoch == b->epoch && a->ws == b->ws && a->io == b->io && a->carry == b->carry &&
           a->logits == b->logits && a->n_out == b->n_out && a->rows_mode == b->rows_mode;
}

/* The slot of stage ST for the caches of KEY: their own, else the least
 * recently used one, given over to them (its recording is kept: a
 * recording of the same shape is updated in place). */
static memra__graph_slot_t *graph_slot(memra__stage_t *st, const memra__graph_key_t *key)
{
    memra__graph_slot_t *lru = &st->graphs[0];
    bool own = false;
    for (int i = 0; i < MEMRA__GRAPH_SLOTS && !own; i++) {
        memra__graph_slot_t *g = &st->graphs[i];
        own = same_set(&g->key, key) || same_set(&g->plain_key, key);
        if (own || g->used < lru->used)
            lru = g;
    }
    if (!own)
        lru->key.n_seg = lru->plain_key.n_seg = 0;
    lru->used = ++st->graph_tick;
    return lru;
}

/* Records stage SI's part of the step R into G's parts: MEMRA_GRAPH_LAYERS
 * layers a part (default 4; 0: the whole step in one), the first part
 * MEMRA_GRAPH_FIRST layers where fewer (default: as the others), at most
 * MEMRA__GRAPH_PARTS parts. Replaying one recording of a whole step
 * makes the device wait until the host has queued every launch of it;
 * in parts, the first part runs while the host queues the next, and the
 * device waits for the first part's launch alone. */
static int32_t env_layers(const char *name, int32_t dflt)
{
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

static memra_status_t record(memra__run_t *r, int32_t si, memra__graph_slot_t *g)
{
    const memra__backend_i *ops = r->ops;
    const int32_t l0 = r->st->layer0, l1 = r->st->layer1, nl = l1 - l0;
    int32_t per = env_layers("MEMRA_GRAPH_LAYERS", 4), first = env_layers("MEMRA_GRAPH_FIRST", 0);
    if (per <= 0 || per > nl)
        per = nl > 0 ? nl : 1;
    if ((nl + per - 1) / per > MEMRA__GRAPH_PARTS)
        per = (nl + MEMRA__GRAPH_PARTS - 1) / MEMRA__GRAPH_PARTS;
    if (first <= 0 || first >= per || 1 + (nl - first + per - 1) / per > MEMRA__GRAPH_PARTS)
        first = per;
    g->n_graph = 0;
    int32_t n = 0;
    memra_status_t s = MEMRA_OK;
    for (int32_t a = l0; !s && (a < l1 || n == 0); n++) {
        const int32_t len = n == 0 ? first : per, b = a + len < l1 ? a + len : l1;
        if ((s = ops->graph_begin(r->be)))
            break;
        s = run_layers(r, si, a, b);
        const memra_status_t ee = ops->graph_end(r->be, &g->graph[n]); /* ends the recording whatever happened */
        s = s ? s : ee;
        a = b;
    }
    if (!s)
        g->n_graph = n;
    return s;
}

static memra_status_t replay(memra__run_t *r, memra__graph_slot_t *g)
{
    r->st->graph_replays++;
    for (int32_t i = 0; i < g->n_graph; i++)
        MEMRA__TRY(r->ops->graph_launch(r->be, g->graph[i]));
    return MEMRA_OK;
}

/* Runs R (a decode step: one-row segments) through a recording when the
 * stage's backend can record: a replay when the slot of its caches holds
 * one for the step's key, else a recording made and replayed when their
 * previous step ran this key directly, else directly in the recorded form
 * (which grows the scratch the recording will use). A recording that
 * fails (an op that cannot be recorded) turns replays off on this stage
 * for steps of one sequence, or of several, and the step runs directly.
 * *RAN: the step ran (false: run it plainly). */
static memra_status_t run_graphed(memra__run_t *r, int32_t si, bool *ran)
{
    memra__stage_t *st = r->st;
    const memra__backend_i *ops = r->ops;
    const int kind = r->n_seg > 1;
    *ran = false;
    if (st->graph_off[kind] || !ops->graph_begin || r->n != r->n_seg || r->n_seg > MEMRA_MAX_BATCH || !graph_on())
        return MEMRA_OK;
    memra__graph_key_t key = {
        .n_seg = r->n_seg, .epoch = ops->graph_epoch(r->be), .ws = st->ws, .io = st->io, .carry = r->carry,
        .logits = r->n_out > 0 ? r->logits : NULL, .n_out = r->n_out,
        .rows_mode = memra__rows_exact() ? 1 : memra__rows_batch() ? 2 : 0,
    };
    for (int32_t i = 0; i < r->n_seg; i++) {
        key.cache_id[i] = r->seg[i].c->id;
        key.keys[i] = memra__graph_keys(r->seg[i].pos0);
    }
    memra__graph_slot_t *g = graph_slot(st, &key);
    r->recorded = true;
    *ran = true;
    if (g->n_graph > 0 && key_eq(&g->key, &key))
        return replay(r, g);
    if (!key_eq(&g->plain_key, &key)) {
        /* directly, in the recorded form; the key as the scratch is after it */
        memra_status_t s = run_parts(r, si);
        key.epoch = ops->graph_epoch(r->be);
        g->plain_key = key;
        if (s)
            g->plain_key.n_seg = 0;
        return s;
    }
    g->key.n_seg = 0; /* its recording is replaced, or fails */
    memra_status_t s = record(r, si, g);
    if (!s && ops->graph_epoch(r->be) != key.epoch)
        s = MEMRA_E_INTERNAL; /* scratch moved while recording: the recording is stale */
    if (s) {
        /* nothing ran: the step runs directly, and so do the next ones of its kind */
        st->graph_off[kind] = true;
        memra__err_clear(&r->m->err);
        if (r->be->err)
            memra__err_clear(r->be->err);
        r->recorded = false;
        *ran = false;
        return MEMRA_OK;
    }
    g->key = key;
    return replay(r, g);
}

memra_status_t memra__stage_run(memra_model_t *m, int32_t si, const memra__seg_t *seg, int32_t n_seg,
                                const int32_t *io_host, int32_t n, float *carry, float *logits_to)
{
    memra__stage_t *st = &m->stages[si];
    bool last = si == m->n_stages - 1;
    const int32_t n_out = memra__segs_out(seg, n_seg);
    size_t ws = m->arch->workspace_bytes(m, n) + 256;
    memra_status_t s = memra__stage_buf(m, st, &st->ws, &st->ws_cap, ws);
    if (!s)
        s = memra__stage_buf(m, st, (void **)&st->io, &st->io_cap, 2 * (size_t)n * sizeof(int32_t));
    if (!s && last && n_out > 0 && !logits_to)
        s = memra__stage_buf(m, st, (void **)&st->logits, &st->logits_cap,
                             (size_t)n_out * (size_t)m->n_vocab * sizeof(float));
    if (s)
        return s;
    if ((s = st->be->iface->upload(st->be, st->io, io_host, 2 * (size_t)n * sizeof(int32_t))))
        return memra__relay(NULL, s, "token upload failed: ");
    memra__run_t r = {
        .m = m, .st = st, .be = st->be, .ops = st->be->iface, .seg = seg, .n_seg = n_seg,
        .n = n, .tokens = st->io, .pos = st->io + n, .carry = carry, .n_out = n_out,
        .logits = logits_to ? logits_to : st->logits, .ws = st->ws, .ws_cap = st->ws_cap,
    };
    bool ran;
    s = run_graphed(&r, si, &ran);
    return s || ran ? s : run_parts(&r, si);
}

memra_status_t memra__run_step(memra_model_t *m, const memra__seg_t *seg, int32_t n_seg, const int32_t *tokens,
                               int32_t n)
{
    int32_t *io = malloc(2 * (size_t)n * sizeof *io);
    if (!io)
        return memra__model_fail(m, MEMRA_E_NOMEM, "out of memory");
    memcpy(io, tokens, (size_t)n * sizeof *io);
    for (int32_t i = 0; i < n_seg; i++)
        for (int32_t j = 0; j < seg[i].n; j++)
            io[n + seg[i].row0 + j] = seg[i].pos0 + j;
    const int32_t n_out = memra__segs_out(seg, n_seg);
    const size_t row_bytes = (size_t)m->n_vocab * sizeof(float);
    size_t carry_bytes = (size_t)n * (size_t)m->carry_floats * sizeof(float);
    memra_status_t s = MEMRA_OK;
    for (int32_t si = 0; si < m->n_stages && !s; si++) {
        memra__stage_t *st = &m->stages[si];
        const bool last = si == m->n_stages - 1;
        if ((s = memra__stage_buf(m, st, (void **)&st->carry, &st->carry_cap, carry_bytes)))
            break;
        /* the boundary copy is queued on the previous stage's stream: wait
         * for it before this stage's stream reads the carry */
        if (si > 0 && ((s = memra__cross(m, si - 1, m->stages[si - 1].carry, si, st->carry, carry_bytes)) ||
                       (s = m->stages[si - 1].be->iface->synchronize(m->stages[si - 1].be))))
            break;
        /* one sequence's one row (a decode step): the head may write it
         * straight into the caller's memory */
        float *mapped = NULL;
        if (last && n_seg == 1 && n_out == 1 && st->be->iface->host_map)
            mapped = st->be->iface->host_map(st->be, seg[0].host_logits, row_bytes);
        if ((s = memra__stage_run(m, si, seg, n_seg, io, n, st->carry, mapped)))
            break;
        for (int32_t i = 0, off = 0; last && !mapped && i < n_seg && !s; off += seg[i].n_out, i++)
            if (seg[i].n_out > 0)
                s = st->be->iface->download(st->be, seg[i].host_logits, st->logits + (size_t)off * m->n_vocab,
                                            (size_t)seg[i].n_out * row_bytes);
        if (!s)
            s = st->be->iface->synchronize(st->be);
    }
    free(io);
    if (s && m->err.status != s)
        memra__relay(&m->err, s, "forward failed: ");
    return s;
}

/* One chunk of one sequence: N tokens at the cache position; logits rows
 * [out_row0, out_row0+n_out) go to HOST_LOGITS (n_out may be 0). */
memra_status_t memra__run_chunk(memra_model_t *m, memra_cache_t *c, const int32_t *tokens, int32_t n,
                                int32_t out_row0, int32_t n_out, float *host_logits)
{
    const memra__seg_t seg = {.c = c, .row0 = 0, .n = n, .pos0 = c->pos, .out0 = out_row0, .n_out = n_out,
                              .host_logits = host_logits};
    return memra__run_step(m, &seg, 1, tokens, n);
}
