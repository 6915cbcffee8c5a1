/* The forward driver: validates a request, splits it into prefill chunks,
 * and walks each chunk through the stages (embed on the first, layers on
 * their owners, head on the last). Arch code never sees chunking or
 * stages, so decode, any chunk size and any stage split run the same ops
 * on the same rows. */
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h"

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

memra_status_t memra__stage_run(memra_model_t *m, int32_t si, memra_cache_t *c, const int32_t *io_host, int32_t n,
                                float *carry, int32_t out_row0, int32_t n_out, float *logits_to)
{
    memra__stage_t *st = &m->stages[si];
    bool last = si == m->n_stages - 1;
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
        .m = m, .st = st, .be = st->be, .ops = st->be->iface, .c = c,
        .n = n, .pos0 = io_host[n], .tokens = st->io, .pos = st->io + n,
        .carry = carry, .out_row0 = out_row0, .n_out = n_out,
        .logits = logits_to ? logits_to : st->logits, .ws = st->ws, .ws_cap = st->ws_cap,
    };
    if (si == 0)
        s = call(&r, 0, 0);
    for (int32_t il = st->layer0; il < st->layer1 && !s; il++)
        s = call(&r, 1, il);
    if (!s && last && n_out > 0)
        s = call(&r, 2, 0);
    return s;
}

/* One chunk, walked stage by stage on the calling thread: N tokens at the
 * cache position; logits rows [out_row0, out_row0+n_out) go to HOST_LOGITS
 * (n_out may be 0). */
memra_status_t memra__run_chunk(memra_model_t *m, memra_cache_t *c, const int32_t *tokens, int32_t n,
                                int32_t out_row0, int32_t n_out, float *host_logits)
{
    int32_t *io = malloc(2 * (size_t)n * sizeof *io);
    if (!io)
        return memra__model_fail(m, MEMRA_E_NOMEM, "out of memory");
    memcpy(io, tokens, (size_t)n * sizeof *io);
    for (int32_t i = 0; i < n; i++)
        io[n + i] = c->pos + i;
    size_t carry_bytes = (size_t)n * (size_t)m->carry_floats * sizeof(float);
    memra_status_t s = MEMRA_OK;
    for (int32_t si = 0; si < m->n_stages && !s; si++) {
        memra__stage_t *st = &m->stages[si];
        if ((s = memra__stage_buf(m, st, (void **)&st->carry, &st->carry_cap, carry_bytes)))
            break;
        /* the boundary copy is queued on the previous stage's stream: wait
         * for it before this stage's stream reads the carry */
        if (si > 0 && ((s = memra__cross(m, si - 1, m->stages[si - 1].carry, si, st->carry, carry_bytes)) ||
                       (s = m->stages[si - 1].be->iface->synchronize(m->stages[si - 1].be))))
            break;
        size_t out_bytes = (size_t)n_out * (size_t)m->n_vocab * sizeof(float);
        float *mapped = NULL;
        if (si == m->n_stages - 1 && n_out == 1 && st->be->iface->host_map && !m->arch->head_rewrites)
            mapped = st->be->iface->host_map(st->be, host_logits, out_bytes);
        if ((s = memra__stage_run(m, si, c, io, n, st->carry, out_row0, n_out, mapped)))
            break;
        if (si == m->n_stages - 1 && n_out > 0 && !mapped)
            s = st->be->iface->download(st->be, host_logits, st->logits, out_bytes);
        if (!s)
            s = st->be->iface->synchronize(st->be);
    }
    free(io);
    if (s && m->err.status != s)
        memra__relay(&m->err, s, "forward failed: ");
    return s;
}

static memra_status_t forward(memra_model_t *m, memra_cache_t *c, const int32_t *tokens, int32_t n, uint32_t flags,
                              float *logits)
{
    if (!m || !c || (!tokens && n > 0))
        return memra__fail(m ? &m->err : NULL, MEMRA_E_INVALID, "memra_forward: NULL model, cache or tokens");
    if (c->model != m)
        return memra__model_fail(m, MEMRA_E_MISUSE, "memra_forward: the cache belongs to another model");
    if (n <= 0)
        return memra__model_fail(m, MEMRA_E_INVALID, "memra_forward: n = %d (need at least one token)", n);
    if (flags & ~MEMRA_FORWARD_ALL_ROWS)
        return memra__model_fail(m, MEMRA_E_INVALID, "memra_forward: unknown flags 0x%x", flags);
    if (atomic_load(&c->in_flight) > 0)
        return memra__model_fail(m, MEMRA_E_BUSY, "memra_forward: pipelined steps are in flight on this cache");
    if (m->pp && atomic_load(&m->pp->unconsumed) > 0)
        return memra__model_fail(m, MEMRA_E_BUSY, "memra_forward: pipelined steps of this model are in flight "
                                 "(wait on or free their pendings first)");
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->n_vocab)
            return memra__model_fail(m, MEMRA_E_RANGE, "memra_forward: token %d at index %d is outside the vocabulary [0, %d)",
                                     tokens[i], i, m->n_vocab);
    if ((int64_t)c->pos + n > c->n_ctx)
        return memra__model_fail(m, MEMRA_E_FULL, "memra_forward: %d token(s) at position %d exceed the cache capacity %d",
                                 n, c->pos, c->n_ctx);
    memra__err_clear(&m->err);
    bool all = (flags & MEMRA_FORWARD_ALL_ROWS) != 0;
    for (int32_t done = 0; done < n;) {
        int32_t k = n - done < m->prefill_chunk ? n - done : m->prefill_chunk;
        bool final = done + k == n;
        int32_t out0 = all ? 0 : k - 1;
        int32_t n_out = !logits ? 0 : all ? k : final ? 1 : 0;
        float *dst = !logits ? NULL : all ? logits + (size_t)done * (size_t)m->n_vocab : logits;
        memra_status_t s = memra__run_chunk(m, c, tokens + done, k, out0, n_out, dst);
        if (s)
            return s;
        c->pos += k;
        done += k;
    }
    return MEMRA_OK;
}

memra_status_t memra_forward(memra_model_t *m, memra_cache_t *c, const int32_t *tokens, int32_t n, uint32_t flags,
                             float *logits)
{
    if (!m)
        return forward(m, c, tokens, n, flags, logits);
    MEMRA__MODEL_GUARDED(m, "memra_forward", forward(m, c, tokens, n, flags, logits));
}

memra_status_t memra_decode_step(memra_model_t *m, memra_cache_t *c, int32_t token, float *logits)
{
    return memra_forward(m, c, &token, 1, 0, logits);
}
