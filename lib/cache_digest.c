/* A digest of a cache's contents for tests (model_impl.h): they compare a
 * cache before and after other caches run, to show that nothing wrote into
 * it, without knowing where its rows live (host or device memory, which
 * stage). */
#include <stdlib.h>

#include "kv_rows.h"
#include "model_impl.h"

/* FNV-1a, 64 bit: a few lines, and any change of any byte changes the
 * value with overwhelming odds; no cryptographic strength is needed. */
static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Downloads N bytes at SRC from BE and folds them into *H. */
static memra_status_t fold(memra__backend_t *be, const void *src, size_t n, unsigned char **buf, size_t *cap,
                           uint64_t *h)
{
    if (!src || n == 0)
        return MEMRA_OK;
    if (n > *cap) {
        unsigned char *b = realloc(*buf, n);
        if (!b)
            return memra__fail(NULL, MEMRA_E_NOMEM, "memra__cache_digest: out of memory");
        *buf = b;
        *cap = n;
    }
    memra_status_t st = be->iface->download(be, *buf, src, n);
    if (!st)
        st = be->iface->synchronize(be);
    if (!st)
        *h = fnv1a(*h, *buf, n);
    return st;
}

memra_status_t memra__cache_digest(const memra_cache_t *c, uint64_t *out)
{
    const memra_model_t *m = c->model;
    uint64_t h = 0xcbf29ce484222325ull;
    unsigned char *buf = NULL;
    size_t cap = 0;
    memra_status_t st = MEMRA_OK;
    for (int32_t il = 0; il < m->n_layer && !st; il++) {
        memra__backend_t *be = m->stages[memra__stage_of_layer(m, il)].be;
        const memra__layer_cache_t *lc = &m->layer_cache[il];
        /* a sliding window's rows: those the next step reads (a paged cache
         * gives the ones further below back to its pool) */
        const int64_t lo = lc->swa > 0 && c->pos > lc->swa ? c->pos - lc->swa : 0;
        const size_t rk = memra__kv_row_bytes(c, il, MEMRA__KV_K), rv = memra__kv_row_bytes(c, il, MEMRA__KV_V);
        st = fold(be, c->k[il] ? (uint8_t *)c->k[il] + rk * (size_t)lo : NULL, rk * (size_t)(c->pos - lo), &buf, &cap,
                  &h);
        if (!st)
            st = fold(be, c->v[il] ? (uint8_t *)c->v[il] + rv * (size_t)lo : NULL, rv * (size_t)(c->pos - lo), &buf,
                      &cap, &h);
        if (!st)
            st = fold(be, c->conv[il], (size_t)lc->conv_floats * sizeof(float), &buf, &cap, &h);
        if (!st)
            st = fold(be, c->ssm[il], (size_t)lc->ssm_floats * sizeof(float), &buf, &cap, &h);
    }
    free(buf);
    *out = fnv1a(h, (const unsigned char *)&c->pos, sizeof c->pos);
    return st;
}
