/* The forward driver: validates a request and splits it into prefill
 * chunks, each walked through the stages by memra__run_chunk (lib/stage.c).
 * Arch code never sees chunking or stages, so decode, any chunk size and
 * any stage split run the same ops on the same rows. */
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h" /* struct memra__pp: deferred steps in flight */

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
    /* the capacity first: an N beyond it is refused before TOKENS is read */
    if ((int64_t)c->pos + n > c->n_ctx)
        return memra__model_fail(m, MEMRA_E_FULL, "memra_forward: %d token(s) at position %d exceed the cache capacity %d",
                                 n, c->pos, c->n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->n_vocab)
            return memra__model_fail(m, MEMRA_E_RANGE, "memra_forward: token %d at index %d is outside the vocabulary [0, %d)",
                                     tokens[i], i, m->n_vocab);
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
