/* Per-call word cache: open addressing over 24-byte slots; the key bytes and
 * the ids live in side arenas. The table is sized from the input, doubles
 * when half full and stops learning at 2^21 slots. A cached word costs one hash
 * and (usually) one probe, instead of a BPE or SentencePiece merge loop whose
 * merge-table lookups are cache misses. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

enum { MAX_KEY = 256, MIN_TEXT = 4096, MIN_SLOTS = 4096, MAX_SLOTS = 1 << 21 };

struct memra__wslot {
    uint64_t hash; /* 0 = empty */
    uint32_t key_off, ids_off;
    uint16_t klen, nids;
};

static bool grow(memra__wcache_t *c, size_t want)
{
    size_t cap = c->slots ? (c->mask + 1) * 2 : want;
    struct memra__wslot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; c->slots && i <= c->mask; i++) {
        if (!c->slots[i].hash)
            continue;
        for (size_t k = (size_t)c->slots[i].hash;; k++) {
            if (!slots[k & (cap - 1)].hash) {
                slots[k & (cap - 1)] = c->slots[i];
                break;
            }
        }
    }
    free(c->slots);
    c->slots = slots;
    c->mask = cap - 1;
    return true;
}

void memra__wcache_enable(memra__wcache_t *c, size_t total)
{
    /* Small inputs would only pay for the table; big ones start at about one
     * slot per 64 bytes, enough for their distinct words without regrowing. */
    if (c->slots || total < MIN_TEXT)
        return;
    size_t want = MIN_SLOTS;
    while (want < total / 64 && want < MAX_SLOTS / 2)
        want *= 2;
    grow(c, want);
}

void memra__wcache_free(memra__wcache_t *c)
{
    free(c->slots);
    free(c->keys.v);
    free(c->ids.v);
    memset(c, 0, sizeof *c);
}

/* Slot of W, or the empty slot where it would go. */
static struct memra__wslot *find(const memra__wcache_t *c, const char *w, size_t n, uint64_t h)
{
    for (size_t i = (size_t)h;; i++) {
        struct memra__wslot *e = &c->slots[i & c->mask];
        if (!e->hash || (e->hash == h && e->klen == n && memcmp(c->keys.v + e->key_off, w, n) == 0))
            return e;
    }
}

memra_status_t memra__wcache_get(const memra__wcache_t *c, const char *w, size_t n, memra__ids_t *out, bool *hit)
{
    *hit = false;
    if (!c->slots || n > MAX_KEY)
        return MEMRA_OK;
    const struct memra__wslot *e = find(c, w, n, memra__tok_hash(w, n) | 1);
    if (!e->hash)
        return MEMRA_OK;
    *hit = true;
    const int32_t *ids = c->ids.v + e->ids_off;
    for (uint16_t q = 0; q < e->nids; q++)
        if (memra__ids_push(out, ids[q]) != MEMRA_OK)
            return MEMRA_E_NOMEM;
    return MEMRA_OK;
}

void memra__wcache_put(memra__wcache_t *c, const char *w, size_t n, const memra__ids_t *out, size_t from)
{
    size_t got = out->n - from;
    /* Learn only what the output still holds (a fixed array may have overflowed). */
    if (!c->slots || n > MAX_KEY || out->n > out->cap || got > UINT16_MAX || c->keys.n + n > UINT32_MAX ||
        c->ids.n + got > UINT32_MAX)
        return;
    if ((c->n + 1) * 2 > c->mask + 1 && (c->mask + 1 >= MAX_SLOTS || !grow(c, 0)))
        return; /* full: stop learning */
    uint64_t h = memra__tok_hash(w, n) | 1;
    struct memra__wslot *e = find(c, w, n, h);
    if (e->hash)
        return;
    size_t key_off = c->keys.n, ids_off = c->ids.n;
    if (memra__bytes_append(&c->keys, w, n) != MEMRA_OK)
        return;
    for (size_t q = 0; q < got; q++)
        if (memra__ids_push(&c->ids, out->v[from + q]) != MEMRA_OK)
            return;
    e->hash = h;
    e->key_off = (uint32_t)key_off;
    e->ids_off = (uint32_t)ids_off;
    e->klen = (uint16_t)n;
    e->nids = (uint16_t)got;
    c->n++;
}
