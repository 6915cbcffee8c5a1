/* The forward driver: validates a request, splits it into prefill chunks,
 * and walks each chunk through the stages (embed on the first, layers on
 * their owners, head on the last). Arch code never sees chunking or
 * stages, so decode, any chunk size and any stage split run the same ops
 * on the same rows. */
#include <stdlib.h>
#include <string.h>

#include "model_impl.h"

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

/* Grows a device buffer of STAGE to at least NEED bytes. */
static memra_status_t ensure(memra_model_t *m, memra__stage_t *st, void **p, size_t *cap, size_t need)
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

static memra_status_t prepare_stage(memra_model_t *m, memra__stage_t *st, const int32_t *io_host, int32_t n,
                                    int32_t n_out, bool last)
{
    size_t ws = m->arch->workspace_bytes(m, n) + 256;
    memra_status_t s = ensure(m, st, &st->ws, &st->ws_cap, ws);
    if (!s)
        s = ensure(m, st, (void **)&st->io, &st->io_cap, 2 * (size_t)n * sizeof(int32_t));
    if (!s)
        s = ensure(m, st, (void **)&st->carry, &st->carry_cap, (size_t)n * (size_t)m->carry_floats * sizeof(float));
    if (!s && last && n_out > 0)
        s = ensure(m, st, (void **)&st->logits, &st->logits_cap, (size_t)n_out * (size_t)m->n_vocab * sizeof(float));
    if (!s && (s = st->be->iface->upload(st->be, st->io, io_host, 2 * (size_t)n * sizeof(int32_t))))
        memra__model_fail(m, s, "token upload failed: %s", memra_last_error());
    return s;
}

/* Moves the carry rows of one chunk from stage A to stage B. */
static memra_status_t cross(memra_model_t *m, memra__stage_t *a, memra__stage_t *b, int32_t n)
{
    size_t bytes = (size_t)n * (size_t)m->carry_floats * sizeof(float);
    if (a->be == b->be)
        return b->be->iface->copy(b->be, b->carry, a->carry, bytes);
    void *tmp = malloc(bytes);
    if (!tmp)
        return memra__model_fail(m, MEMRA_E_NOMEM, "out of memory for a stage boundary");
    memra_status_t s = a->be->iface->download(a->be, tmp, a->carry, bytes);
    if (!s)
        s = a->be->iface->synchronize(a->be);
    if (!s)
        s = b->be->iface->upload(b->be, b->carry, tmp, bytes);
    free(tmp);
    return s;
}

static memra_status_t call(memra__run_t *r, int what, int32_t il)
{
    r->ws_used = 0;
    memra_status_t s;
    switch (what) {
    case 0: s = r->m->arch->embed(r); break;
    case 1: s = r->m->arch->layer(r, il); break;
    default: s = r->m->arch->head(r); break;
    }
    if (s && r->m->err.status != s)
        memra__model_fail(r->m, s, "%s", memra_last_error());
    return s;
}

/* One chunk: N tokens at the cache position; logits rows [out_row0,
 * out_row0+n_out) go to HOST_LOGITS (n_out may be 0). */
static memra_status_t run_chunk(memra_model_t *m, memra_cache_t *c, const int32_t *tokens, int32_t n,
                                int32_t out_row0, int32_t n_out, float *host_logits)
{
    int32_t *io = malloc(2 * (size_t)n * sizeof *io);
    if (!io)
        return memra__model_fail(m, MEMRA_E_NOMEM, "out of memory");
    memcpy(io, tokens, (size_t)n * sizeof *io);
    for (int32_t i = 0; i < n; i++)
        io[n + i] = c->pos + i;
    memra_status_t s = MEMRA_OK;
    for (int32_t si = 0; si < m->n_stages && !s; si++) {
        memra__stage_t *st = &m->stages[si];
        bool last = si == m->n_stages - 1;
        if ((s = prepare_stage(m, st, io, n, n_out, last)))
            break;
        memra__run_t r = {
            .m = m, .st = st, .be = st->be, .ops = st->be->iface, .c = c,
            .n = n, .pos0 = c->pos, .tokens = st->io, .pos = st->io + n,
            .carry = st->carry, .out_row0 = out_row0, .n_out = n_out,
            .logits = st->logits, .ws = st->ws, .ws_cap = st->ws_cap,
        };
        if (si == 0)
            s = call(&r, 0, 0);
        else
            s = cross(m, &m->stages[si - 1], st, n);
        for (int32_t il = st->layer0; il < st->layer1 && !s; il++)
            s = call(&r, 1, il);
        if (!s && last && n_out > 0) {
            s = call(&r, 2, 0);
            if (!s)
                s = st->be->iface->download(st->be, host_logits, st->logits,
                                            (size_t)n_out * (size_t)m->n_vocab * sizeof(float));
        }
        if (!s)
            s = st->be->iface->synchronize(st->be);
    }
    free(io);
    if (s && !m->err.msg[0])
        memra__model_fail(m, s, "forward failed: %s", memra_last_error());
    return s;
}

memra_status_t memra_forward(memra_model_t *m, memra_cache_t *c, const int32_t *tokens, int32_t n, uint32_t flags,
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
        memra_status_t s = run_chunk(m, c, tokens + done, k, out0, n_out, dst);
        if (s)
            return s;
        c->pos += k;
        done += k;
    }
    return MEMRA_OK;
}

memra_status_t memra_decode_step(memra_model_t *m, memra_cache_t *c, int32_t token, float *logits)
{
    return memra_forward(m, c, &token, 1, 0, logits);
}
