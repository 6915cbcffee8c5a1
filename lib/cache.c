/* Per-sequence caches: KV rows for attention layers, conv and delta-rule
 * state for recurrent layers, each on the device of the stage that owns
 * the layer. */
#include <stdlib.h>
#include <string.h>

#include "kv_rows.h"
#include "model_impl.h"
#include "pipeline_impl.h" /* struct memra__pp: deferred steps in flight */
#include "quant.h"

struct memra_cache_snapshot {
    memra_model_t *model;        /* counted in model->n_snapshots */
    uint64_t cache_id;           /* the cache it was taken from: KV rows below pos live only there */
    int32_t n_ctx;
    int32_t pos;
    float *conv[MEMRA_MAX_LAYERS], *ssm[MEMRA_MAX_LAYERS];
};

static memra__backend_t *layer_be(const memra_model_t *m, int32_t il)
{
    return m->stages[memra__stage_of_layer(m, il)].be;
}

/* The paged KV pool of layer IL's stage, or NULL (model.h: kv_pool_bytes) */
static memra__kv_pool_t *layer_pool(const memra_model_t *m, int32_t il)
{
    return m->stages[memra__stage_of_layer(m, il)].kv_pool;
}

/* Bytes of one row of layer IL's K (KV 0) or V (KV 1). */
static size_t kv_rb(const memra_cache_t *c, int32_t il, int kv)
{
    return memra__kv_row_bytes(c, il, kv ? MEMRA__KV_V : MEMRA__KV_K);
}

/* The first row of layer IL a paged cache keeps at position POS: a
 * sliding window's rows from its window and margin on, every row
 * otherwise (0). */
static int64_t kept_from(const memra_model_t *m, int32_t il, int64_t pos)
{
    const int64_t swa = m->layer_cache[il].swa, lo = pos - swa - MEMRA__SWA_MARGIN;
    return swa > 0 && lo > 0 ? lo : 0;
}

static memra_status_t zero(memra__backend_t *be, float *p, int64_t n)
{
    if (!p || n <= 0)
        return MEMRA_OK;
    memra_ew_args_t a = {.op = MEMRA_EW_FILL, .y = p, .rows = 1, .cols = n, .s = 0.0f};
    return be->iface->elementwise(be, &a);
}

/* Zeroes layer IL's recurrent state (conv and delta-rule), if it has any. */
static memra_status_t zero_state(memra_cache_t *c, int32_t il)
{
    const memra_model_t *m = c->model;
    memra__backend_t *be = layer_be(m, il);
    memra_status_t st = zero(be, c->conv[il], m->layer_cache[il].conv_floats);
    return st ? st : zero(be, c->ssm[il], m->layer_cache[il].ssm_floats);
}

static memra_status_t sync_stages(const memra_model_t *m)
{
    memra_status_t st = MEMRA_OK;
    for (int32_t s = 0; s < m->n_stages && !st; s++)
        st = m->stages[s].be->iface->synchronize(m->stages[s].be);
    return st;
}

static void release(memra_cache_t *c)
{
    const memra_model_t *m = c->model;
    if (m->stages[0].kv_pool)
        sync_stages(m); /* unmapped pages must not be read by a step still running */
    for (int32_t il = 0; il < m->n_layer; il++) {
        memra__backend_t *be = layer_be(m, il);
        memra__kv_pool_t *pool = layer_pool(m, il);
        if (pool) {
            memra__kv_area_free(pool, &c->area[il][0]);
            memra__kv_area_free(pool, &c->area[il][1]);
        } else {
            be->iface->free(be, c->k[il]);
            be->iface->free(be, c->v[il]);
        }
        be->iface->free(be, c->conv[il]);
        be->iface->free(be, c->ssm[il]);
    }
}

static memra_status_t alloc_layer(memra_cache_t *c, int32_t il)
{
    memra_model_t *m = c->model;
    const memra__layer_cache_t *lc = &m->layer_cache[il];
    memra__backend_t *be = layer_be(m, il);
    void *conv = NULL, *ssm = NULL;
    struct {
        void **dst;
        size_t n;
        const char *what;
    } parts[] = {
        {&c->k[il], lc->k_floats ? memra__kv_row_bytes(c, il, MEMRA__KV_K) * (size_t)c->n_ctx : 0, "K"},
        {&c->v[il], lc->v_floats ? memra__kv_row_bytes(c, il, MEMRA__KV_V) * (size_t)c->n_ctx : 0, "V"},
        {&conv, (size_t)lc->conv_floats * sizeof(float), "conv state"},
        {&ssm, (size_t)lc->ssm_floats * sizeof(float), "delta-rule state"},
    };
    memra_status_t st = MEMRA_OK;
    memra__kv_pool_t *pool = layer_pool(m, il);
    for (size_t i = 0; i < MEMRA__ARRAY_LEN(parts) && !st; i++) {
        if (parts[i].n == 0)
            continue;
        if (pool && i < 2) { /* K and V: address space only, pages as the cache grows */
            if ((st = memra__kv_area_reserve(pool, &c->area[il][i], parts[i].n)))
                memra__fail(&c->err, st, "cache: layer %d's %s rows: %s", il, parts[i].what, be->err->msg);
            *parts[i].dst = c->area[il][i].va;
            continue;
        }
        *parts[i].dst = be->iface->alloc(be, parts[i].n);
        if (!*parts[i].dst)
            st = memra__fail(&c->err, MEMRA_E_NOMEM, "cache: cannot allocate %zu bytes of %s for layer %d",
                             parts[i].n, parts[i].what, il);
    }
    c->conv[il] = conv;
    c->ssm[il] = ssm;
    return st ? st : zero_state(c, il);
}

/* Bytes of KV rows per token over all layers of a cache of these types. */
static uint64_t kv_bytes_per_token(const memra_model_t *m, memra_type_t type_k, memra_type_t type_v)
{
    uint64_t n = 0;
    for (int32_t il = 0; il < m->n_layer; il++) {
        const memra__layer_cache_t *lc = &m->layer_cache[il];
        n += memra__row_bytes(type_k, lc->k_floats) + memra__row_bytes(type_v, lc->v_floats);
    }
    return n;
}

/* A cache larger than the memory of all the model's stages together is
 * refused before anything is allocated (n_ctx = INT32_MAX asked the CPU
 * engine for hundreds of GB). Stages sharing an engine count it twice: this
 * only rules out what cannot fit anywhere. */
static memra_status_t fits(memra_model_t *m, const char *fn, int32_t n_ctx, memra_type_t type_k, memra_type_t type_v)
{
    if (m->stages[0].kv_pool)
        return MEMRA_OK; /* rows take pages as they are written (memra__cache_ensure) */
    double need = (double)kv_bytes_per_token(m, type_k, type_v) * n_ctx, have = 0;
    for (int32_t il = 0; il < m->n_layer; il++) {
        const memra__layer_cache_t *lc = &m->layer_cache[il];
        need += ((double)lc->conv_floats + (double)lc->ssm_floats) * sizeof(float);
    }
    for (int32_t s = 0; s < m->n_stages; s++) {
        memra_engine_info_t info = {.size = sizeof info};
        if (memra_engine_get_info(m->stages[s].engine, &info) != MEMRA_OK)
            return MEMRA_OK; /* unknown: let the allocation decide */
        have += (double)info.mem_total;
    }
    if (need > have)
        return memra__model_fail(m, MEMRA_E_NOMEM, "%s: n_ctx %d needs %.0f bytes, more than the %.0f bytes of the "
                                 "model's device(s)", fn, n_ctx, need, have);
    return MEMRA_OK;
}

/* A storage type every layer of M can hold: one of the four (q4_0 too
 * for V), and for the block types heads of whole 32-element blocks. */
static memra_status_t check_kv_type(memra_model_t *m, const char *fn, const char *which, memra_type_t type, bool v)
{
    if (!memra__kv_type_ok(type, v))
        return memra__model_fail(m, MEMRA_E_UNSUPPORTED, "%s: %s %d (%s) is not a KV cache type of %s rows (f32, f16, "
                                 "bf16, q8_0%s)", fn, which, (int)type, memra_type_name(type), v ? "V" : "K",
                                 v ? ", q4_0" : "");
    for (int32_t il = 0; il < m->n_layer && memra__kv_type_blocks(type); il++) {
        const memra__layer_cache_t *lc = &m->layer_cache[il];
        if (lc->k_floats && lc->kv_head_dim % 32)
            return memra__model_fail(m, MEMRA_E_UNSUPPORTED, "%s: %s %s needs KV heads of a multiple of 32 "
                                     "elements; layer %d's have %lld", fn, which, memra_type_name(type), il,
                                     (long long)lc->kv_head_dim);
    }
    return MEMRA_OK;
}

static memra_status_t cache_create(memra_model_t *m, const char *fn, int32_t n_ctx, memra_type_t type_k,
                                   memra_type_t type_v, memra_cache_t **out)
{
    if (!out)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s: out is NULL", fn);
    *out = NULL;
    if (!m)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s: model is NULL", fn);
    if (n_ctx < 0)
        return memra__model_fail(m, MEMRA_E_INVALID, "%s: n_ctx %d < 0", fn, n_ctx);
    if (n_ctx == 0)
        n_ctx = m->n_ctx_train > 0 && m->n_ctx_train < 4096 ? m->n_ctx_train : 4096;
    memra_status_t st = check_kv_type(m, fn, "type_k", type_k, false);
    if (!st)
        st = check_kv_type(m, fn, "type_v", type_v, true);
    if (!st)
        st = fits(m, fn, n_ctx, type_k, type_v);
    if (st)
        return st;
    memra_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        return memra__model_fail(m, MEMRA_E_NOMEM, "%s: out of memory", fn);
    static atomic_uint_fast64_t next_id = 1;
    c->model = m;
    c->id = atomic_fetch_add(&next_id, 1);
    c->n_ctx = n_ctx;
    c->type_k = type_k;
    c->type_v = type_v;
    for (int32_t il = 0; il < m->n_layer && !st; il++)
        st = alloc_layer(c, il);
    if (!st)
        st = sync_stages(m);
    if (st) {
        memra__model_fail(m, st, "%s", c->err.msg[0] ? c->err.msg : memra_last_error());
        release(c);
        free(c);
        return st;
    }
    atomic_fetch_add(&m->n_caches, 1);
    *out = c;
    return MEMRA_OK;
}

static memra_status_t cache_free(memra_cache_t *c)
{
    if (!c)
        return MEMRA_OK;
    int inflight = atomic_load(&c->in_flight);
    if (inflight > 0)
        return memra__fail(&c->err, MEMRA_E_BUSY, "memra_cache_free: %d pipelined step(s) still in flight", inflight);
    memra_model_t *m = c->model;
    release(c);
    atomic_fetch_sub(&m->n_caches, 1);
    free(c);
    return MEMRA_OK;
}

int32_t memra_cache_pos(const memra_cache_t *c) { return c ? c->pos : 0; }
int32_t memra_cache_capacity(const memra_cache_t *c) { return c ? c->n_ctx : 0; }
memra_type_t memra_cache_type_k(const memra_cache_t *c) { return c ? c->type_k : MEMRA_TYPE_COUNT; }
memra_type_t memra_cache_type_v(const memra_cache_t *c) { return c ? c->type_v : MEMRA_TYPE_COUNT; }
uint64_t memra_cache_kv_bytes_per_token(const memra_cache_t *c)
{
    return c ? kv_bytes_per_token(c->model, c->type_k, c->type_v) : 0;
}

uint64_t memra_cache_kv_bytes(const memra_cache_t *c, int64_t n)
{
    uint64_t bytes = 0;
    for (int32_t il = 0; c && n > 0 && il < c->model->n_layer; il++)
        for (int kv = 0; kv < 2; kv++) {
            const uint64_t rb = kv_rb(c, il, kv);
            const memra__kv_pool_t *pool = layer_pool(c->model, il);
            if (!pool || rb == 0) {
                bytes += rb * (uint64_t)n;
                continue;
            }
            /* the rows kept after the last step at n - 1 (memra__cache_ensure), over at most one more page
             * than they fill */
            const int64_t keep = n - kept_from(c->model, il, n - 1);
            const uint64_t pages = (rb * (uint64_t)keep + pool->page - 1) / pool->page + (keep < n ? 1 : 0);
            bytes += pages * pool->page;
        }
    return bytes;
}

uint64_t memra_cache_state_bytes(const memra_cache_t *c)
{
    uint64_t n = 0;
    for (int32_t il = 0; c && il < c->model->n_layer; il++) {
        const memra__layer_cache_t *lc = &c->model->layer_cache[il];
        n += ((uint64_t)lc->conv_floats + (uint64_t)lc->ssm_floats) * sizeof(float);
    }
    return n;
}

void memra_cache_params_init(memra_cache_params_t *p, uint32_t size)
{
    if (!p || size < sizeof(uint32_t))
        return;
    const memra_cache_params_t d = {
        .size = (uint32_t)sizeof d,
        .n_ctx = 0,
        .type_k = MEMRA_TYPE_F16,
        .type_v = MEMRA_TYPE_F16,
    };
    memra__sized_write(p, size, &d, sizeof d);
}

static memra_status_t cache_clear(memra_cache_t *c)
{
    if (!c)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_cache_clear: cache is NULL");
    if (atomic_load(&c->in_flight) > 0)
        return memra__fail(&c->err, MEMRA_E_BUSY, "memra_cache_clear: pipelined steps in flight");
    memra_status_t st = MEMRA_OK;
    for (int32_t il = 0; il < c->model->n_layer && !st; il++)
        st = zero_state(c, il);
    if (st)
        return memra__fail(&c->err, st, "memra_cache_clear: %s", memra_last_error());
    if (c->model->stages[0].kv_pool) { /* the pages go back once no step reads them */
        if ((st = sync_stages(c->model)))
            return memra__fail(&c->err, st, "memra_cache_clear: %s", memra_last_error());
        for (int32_t il = 0; il < c->model->n_layer; il++)
            for (int kv = 0; kv < 2; kv++)
                memra__kv_area_clear(layer_pool(c->model, il), &c->area[il][kv]);
    }
    c->pos = 0;
    return MEMRA_OK;
}

memra_status_t memra__cache_ensure(memra_cache_t *c, int32_t n)
{
    memra_model_t *m = c->model;
    if (!m->stages[0].kv_pool || n <= 0)
        return MEMRA_OK;
    /* the pages every stage's pool must give, before anything changes */
    int64_t need[MEMRA_MAX_STAGES] = {0};
    bool shared = false;
    for (int32_t il = 0; il < m->n_layer; il++) {
        memra__kv_pool_t *pool = layer_pool(m, il);
        for (int kv = 0; kv < 2; kv++) {
            const size_t rb = kv_rb(c, il, kv);
            bool sh;
            need[memra__stage_of_layer(m, il)] +=
                memra__kv_area_need(pool, &c->area[il][kv], rb * (size_t)c->pos, rb * ((size_t)c->pos + (size_t)n), &sh);
            shared = shared || sh;
        }
    }
    for (int32_t s = 0; s < m->n_stages; s++) {
        const memra__kv_pool_t *pool = m->stages[s].kv_pool;
        if (need[s] > pool->n_free)
            return memra__fail(&c->err, MEMRA_E_FULL, "the KV pool of stage %d is exhausted: %lld more page(s) of "
                               "%zu bytes needed, %lld of %lld free (free or clear caches, or load with a larger "
                               "kv_pool_bytes)", s, (long long)need[s], pool->page, (long long)pool->n_free,
                               (long long)pool->n_pages);
    }
    if (shared) { /* rows about to be written sit in a page a fork shares: copy it once no step reads it */
        if (atomic_load(&c->in_flight) > 0)
            return memra__fail(&c->err, MEMRA_E_BUSY, "a shared KV page needs its copy while pipelined steps of "
                               "this cache are in flight");
        memra_status_t st = sync_stages(m);
        if (st)
            return st;
    }
    for (int32_t il = 0; il < m->n_layer; il++)
        for (int kv = 0; kv < 2; kv++) {
            const size_t rb = kv_rb(c, il, kv);
            memra_status_t st = memra__kv_area_ensure(layer_pool(m, il), &c->area[il][kv], rb * (size_t)c->pos,
                                                      rb * ((size_t)c->pos + (size_t)n));
            if (st)
                return st;
            /* a sliding window's pages below every later query's keys go back */
            const int64_t lo = kept_from(m, il, c->pos);
            if (lo > 0)
                memra__kv_area_drop_below(layer_pool(m, il), &c->area[il][kv], rb * (size_t)lo);
        }
    return MEMRA_OK;
}

static void snapshot_release(memra_cache_snapshot_t *s)
{
    const memra_model_t *m = s->model;
    for (int32_t il = 0; il < m->n_layer; il++) {
        memra__backend_t *be = layer_be(m, il);
        be->iface->free(be, s->conv[il]);
        be->iface->free(be, s->ssm[il]);
    }
    free(s);
}

void memra_cache_snapshot_free(memra_cache_snapshot_t *s)
{
    if (!s)
        return;
    memra_model_t *m = s->model;
    snapshot_release(s);
    atomic_fetch_sub(&m->n_snapshots, 1);
}

/* Copies the recurrent state between caches and snapshots. */
static memra_status_t copy_state(const memra_model_t *m, float *const *dst_conv, float *const *dst_ssm,
                                 float *const *src_conv, float *const *src_ssm)
{
    memra_status_t st = MEMRA_OK;
    for (int32_t il = 0; il < m->n_layer && !st; il++) {
        memra__backend_t *be = layer_be(m, il);
        const memra__layer_cache_t *lc = &m->layer_cache[il];
        if (lc->conv_floats)
            st = be->iface->copy(be, dst_conv[il], src_conv[il], (size_t)lc->conv_floats * sizeof(float));
        if (!st && lc->ssm_floats)
            st = be->iface->copy(be, dst_ssm[il], src_ssm[il], (size_t)lc->ssm_floats * sizeof(float));
    }
    return st ? st : sync_stages(m);
}

static memra_status_t cache_snapshot(memra_cache_t *c, memra_cache_snapshot_t **out)
{
    if (out)
        *out = NULL;
    if (!c || !out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_cache_snapshot: NULL argument");
    if (atomic_load(&c->in_flight) > 0)
        return memra__fail(&c->err, MEMRA_E_BUSY, "memra_cache_snapshot: pipelined steps in flight");
    memra_model_t *m = c->model;
    memra_cache_snapshot_t *s = calloc(1, sizeof *s);
    if (!s)
        return memra__fail(&c->err, MEMRA_E_NOMEM, "memra_cache_snapshot: out of memory");
    s->model = m;
    s->cache_id = c->id;
    s->n_ctx = c->n_ctx;
    s->pos = c->pos;
    for (int32_t il = 0; il < m->n_layer; il++) {
        memra__backend_t *be = layer_be(m, il);
        const memra__layer_cache_t *lc = &m->layer_cache[il];
        if ((lc->conv_floats && !(s->conv[il] = be->iface->alloc(be, (size_t)lc->conv_floats * sizeof(float)))) ||
            (lc->ssm_floats && !(s->ssm[il] = be->iface->alloc(be, (size_t)lc->ssm_floats * sizeof(float))))) {
            snapshot_release(s);
            return memra__fail(&c->err, MEMRA_E_NOMEM, "memra_cache_snapshot: out of device memory");
        }
    }
    memra_status_t st = copy_state(m, s->conv, s->ssm, c->conv, c->ssm);
    if (st) {
        snapshot_release(s);
        return memra__fail(&c->err, st, "memra_cache_snapshot: %s", memra_last_error());
    }
    atomic_fetch_add(&m->n_snapshots, 1);
    *out = s;
    return MEMRA_OK;
}

static memra_status_t cache_restore(memra_cache_t *c, const memra_cache_snapshot_t *s)
{
    if (!c || !s)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_cache_restore: NULL argument");
    if (s->model != c->model || s->n_ctx != c->n_ctx)
        return memra__fail(&c->err, MEMRA_E_MISUSE, "memra_cache_restore: snapshot belongs to another model or cache size");
    if (s->cache_id != c->id)
        return memra__fail(&c->err, MEMRA_E_MISUSE,
                           "memra_cache_restore: the snapshot was taken from another cache (its KV rows are not in this one)");
    if (atomic_load(&c->in_flight) > 0)
        return memra__fail(&c->err, MEMRA_E_BUSY, "memra_cache_restore: pipelined steps in flight");
    /* paged KV pool: a clear since the snapshot gave the rows' pages back,
     * or a sliding window moved past the rows the snapshot's next steps read */
    for (int32_t il = 0; il < c->model->n_layer; il++)
        for (int kv = 0; kv < 2 && layer_pool(c->model, il); kv++) {
            const size_t rb = kv_rb(c, il, kv);
            if (memra__kv_area_missing(layer_pool(c->model, il), &c->area[il][kv],
                                       rb * (size_t)kept_from(c->model, il, s->pos), rb * (size_t)s->pos) > 0)
                return memra__fail(&c->err, MEMRA_E_MISUSE, "memra_cache_restore: the snapshot's KV rows are gone "
                                   "(the cache was cleared since, or a sliding window moved past them)");
        }
    memra_status_t st = copy_state(c->model, c->conv, c->ssm, s->conv, s->ssm);
    if (st)
        return memra__fail(&c->err, st, "memra_cache_restore: %s", memra_last_error());
    c->pos = s->pos;
    return MEMRA_OK;
}

/* Copies SRC's KV rows [0, pos) of every layer into DST (same model and
 * types, capacity >= pos), each layer on the engine of the stage that owns
 * it: rows are row_bytes apart from row 0, so the prefix is one block. */
static memra_status_t copy_rows(memra_cache_t *dst, const memra_cache_t *src)
{
    const memra_model_t *m = src->model;
    memra_status_t st = MEMRA_OK;
    for (int32_t il = 0; il < m->n_layer && !st && src->pos > 0; il++) {
        memra__backend_t *be = layer_be(m, il);
        const size_t n_k = memra__kv_row_bytes(src, il, MEMRA__KV_K) * (size_t)src->pos;
        const size_t n_v = memra__kv_row_bytes(src, il, MEMRA__KV_V) * (size_t)src->pos;
        if (src->k[il])
            st = be->iface->copy(be, dst->k[il], src->k[il], n_k);
        if (!st && src->v[il])
            st = be->iface->copy(be, dst->v[il], src->v[il], n_v);
    }
    return st;
}

/* A new cache holding a copy of P's rows and recurrent state; P is only
 * read, so every failure leaves it as it was. */
static memra_status_t cache_fork(memra_cache_t *p, int32_t n_ctx, memra_cache_t **out)
{
    static const char fn[] = "memra_cache_fork";
    memra_model_t *m = p->model;
    int inflight = atomic_load(&p->in_flight);
    if (inflight > 0)
        return memra__model_fail(m, MEMRA_E_BUSY, "%s: %d pipelined step(s) in flight on the parent cache",
                                 fn, inflight);
    /* a deferred step of another cache still runs on the stage streams the copies would use */
    if (m->pp && atomic_load(&m->pp->unconsumed) > 0)
        return memra__model_fail(m, MEMRA_E_BUSY, "%s: pipelined steps of this model are in flight "
                                 "(wait on or free their pendings first)", fn);
    if (n_ctx <= 0)
        n_ctx = p->n_ctx;
    if (n_ctx < p->pos)
        return memra__model_fail(m, MEMRA_E_INVALID, "%s: n_ctx %d is below the parent's position %d", fn,
                                 n_ctx, p->pos);
    memra_cache_t *c = NULL;
    memra_status_t st = cache_create(m, fn, n_ctx, p->type_k, p->type_v, &c);
    if (st)
        return st;
    if (m->stages[0].kv_pool) { /* the parent's whole pages shared, the partial one copied */
        for (int32_t il = 0; il < m->n_layer && !st; il++)
            for (int kv = 0; kv < 2 && !st; kv++)
                st = memra__kv_area_fork(layer_pool(m, il), &c->area[il][kv], &p->area[il][kv],
                                         kv_rb(p, il, kv) * (size_t)p->pos);
    } else {
        st = copy_rows(c, p);
    }
    if (!st)
        st = copy_state(m, c->conv, c->ssm, p->conv, p->ssm); /* synchronizes every stage */
    if (st) {
        memra__model_fail(m, st, "%s: copying the parent's state: %s", fn, memra_last_error());
        cache_free(c);
        return st;
    }
    c->pos = p->pos;
    *out = c;
    return MEMRA_OK;
}

/* The public entry points: argument errors as before, then the model's
 * try-lock around the work (model_impl.h). */
memra_status_t memra_cache_create(memra_model_t *m, int32_t n_ctx, memra_cache_t **out)
{
    static const char fn[] = "memra_cache_create";
    if (!m || !out)
        return cache_create(m, fn, n_ctx, MEMRA_TYPE_F32, MEMRA_TYPE_F32, out);
    *out = NULL;
    MEMRA__MODEL_GUARDED(m, fn, cache_create(m, fn, n_ctx, MEMRA_TYPE_F32, MEMRA_TYPE_F32, out));
}

memra_status_t memra_cache_create_ex(memra_model_t *m, const memra_cache_params_t *params, memra_cache_t **out)
{
    static const char fn[] = "memra_cache_create_ex";
    if (out)
        *out = NULL;
    if (!params)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s: params is NULL; use memra_cache_default_params()", fn);
    if (params->size < sizeof(uint32_t) * 2)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s: params->size is %u; use memra_cache_default_params()", fn,
                           params->size);
    memra_cache_params_t p;
    memra_cache_default_params(&p);
    memra__sized_read(&p, sizeof p, params);
    if (!m || !out)
        return cache_create(m, fn, p.n_ctx, p.type_k, p.type_v, out);
    MEMRA__MODEL_GUARDED(m, fn, cache_create(m, fn, p.n_ctx, p.type_k, p.type_v, out));
}

memra_status_t memra_cache_free(memra_cache_t *c)
{
    if (!c)
        return MEMRA_OK;
    memra_model_t *m = c->model; /* cache_free frees C */
    MEMRA__MODEL_GUARDED(m, "memra_cache_free", cache_free(c));
}

memra_status_t memra_cache_clear(memra_cache_t *c)
{
    if (!c)
        return cache_clear(c);
    memra_model_t *m = c->model;
    MEMRA__MODEL_GUARDED(m, "memra_cache_clear", cache_clear(c));
}

memra_status_t memra_cache_snapshot(memra_cache_t *c, memra_cache_snapshot_t **out)
{
    if (!c || !out)
        return cache_snapshot(c, out);
    *out = NULL;
    memra_model_t *m = c->model;
    MEMRA__MODEL_GUARDED(m, "memra_cache_snapshot", cache_snapshot(c, out));
}

memra_status_t memra_cache_restore(memra_cache_t *c, const memra_cache_snapshot_t *s)
{
    if (!c || !s)
        return cache_restore(c, s);
    memra_model_t *m = c->model;
    MEMRA__MODEL_GUARDED(m, "memra_cache_restore", cache_restore(c, s));
}

memra_status_t memra_cache_fork(memra_cache_t *parent, int32_t n_ctx, memra_cache_t **out)
{
    static const char fn[] = "memra_cache_fork";
    if (out)
        *out = NULL;
    if (!parent || !out)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s: %s is NULL", fn, parent ? "out" : "parent");
    memra_model_t *m = parent->model;
    MEMRA__MODEL_GUARDED(m, fn, cache_fork(parent, n_ctx, out));
}
