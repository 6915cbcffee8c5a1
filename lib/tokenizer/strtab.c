/* Hash tables of the tokenizer: interned strings and BPE merge rules, plus the
 * small growable buffers the encoder uses. Open addressing, power-of-two
 * sizes, load factor <= 1/2, never shrinking: built once at load time and
 * only read afterwards. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

static inline uint64_t mum(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

uint64_t memra__tok_hash(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0x243F6A8885A308D3ull ^ ((uint64_t)n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = mum(h ^ v, 0xA0761D6478BD642Full);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = 0;
        memcpy(&v, p, n);
        h = mum(h ^ v ^ ((uint64_t)n << 59), 0xE7037ED1A0B428DBull);
    }
    return mum(h, 0x8EBC6AF09C88C6E3ull);
}

static uint32_t pow2_at_least(uint64_t x)
{
    uint32_t c = 16;
    while (c < x)
        c <<= 1;
    return c;
}

memra_status_t memra__strtab_init(memra__strtab_t *t, uint32_t expect, size_t arena_hint)
{
    memset(t, 0, sizeof *t);
    uint32_t slots = pow2_at_least((uint64_t)expect * 10 / 7 + 16);
    t->cap = expect + 16;
    t->arena_cap = arena_hint + 64;
    t->off = malloc(t->cap * sizeof *t->off);
    t->len = malloc(t->cap * sizeof *t->len);
    t->arena = malloc(t->arena_cap);
    t->slots = calloc(slots, sizeof *t->slots);
    t->mask = slots - 1;
    if (!t->off || !t->len || !t->arena || !t->slots) {
        memra__strtab_free(t);
        return MEMRA_E_NOMEM;
    }
    return MEMRA_OK;
}

void memra__strtab_free(memra__strtab_t *t)
{
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

/* Slot index of S, or of the empty slot where it would go. */
static inline uint32_t probe(const memra__strtab_t *t, const char *s, size_t n, uint64_t h)
{
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h;; i++) {
        uint32_t k = i & t->mask;
        const memra__strslot_t *e = &t->slots[k];
        if (!e->sid1 || (e->tag == tag && e->len == n && memcmp(t->arena + e->off, s, n) == 0))
            return k;
    }
}

int32_t memra__strtab_find(const memra__strtab_t *t, const char *s, size_t n)
{
    const memra__strslot_t *e = &t->slots[probe(t, s, n, memra__tok_hash(s, n))];
    return (int32_t)e->sid1 - 1;
}

static memra_status_t grow_slots(memra__strtab_t *t)
{
    uint32_t nslots = (t->mask + 1) * 2;
    memra__strslot_t *slots = calloc(nslots, sizeof *slots);
    if (!slots)
        return MEMRA_E_NOMEM;
    for (uint32_t k = 0; k <= t->mask; k++) {
        const memra__strslot_t *e = &t->slots[k];
        if (!e->sid1)
            continue;
        uint64_t h = memra__tok_hash(t->arena + e->off, e->len);
        for (uint32_t i = (uint32_t)h;; i++) {
            if (!slots[i & (nslots - 1)].sid1) {
                slots[i & (nslots - 1)] = *e;
                break;
            }
        }
    }
    free(t->slots);
    t->slots = slots;
    t->mask = nslots - 1;
    return MEMRA_OK;
}

memra_status_t memra__strtab_intern(memra__strtab_t *t, const char *s, size_t n, int32_t *sid, bool *added)
{
    uint64_t h = memra__tok_hash(s, n);
    uint32_t k = probe(t, s, n, h);
    if (t->slots[k].sid1) {
        *sid = (int32_t)t->slots[k].sid1 - 1;
        if (added)
            *added = false;
        return MEMRA_OK;
    }
    if (n > UINT32_MAX / 2 || t->n >= (uint32_t)INT32_MAX - 1)
        return MEMRA_E_RANGE;
    if (t->n == t->cap) {
        uint32_t cap = t->cap * 2;
        uint32_t *off = realloc(t->off, cap * sizeof *off);
        if (!off)
            return MEMRA_E_NOMEM;
        t->off = off;
        uint32_t *len = realloc(t->len, cap * sizeof *len);
        if (!len)
            return MEMRA_E_NOMEM;
        t->len = len;
        t->cap = cap;
    }
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t cap = t->arena_cap * 2 + n + 1;
        if (cap > UINT32_MAX)
            cap = UINT32_MAX;
        if (t->arena_len + n + 1 > cap)
            return MEMRA_E_RANGE;
        char *a = realloc(t->arena, cap);
        if (!a)
            return MEMRA_E_NOMEM;
        t->arena = a;
        t->arena_cap = cap;
    }
    uint32_t id = t->n++;
    t->off[id] = (uint32_t)t->arena_len;
    t->len[id] = (uint32_t)n;
    memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = '\0';
    t->slots[k] = (memra__strslot_t){id + 1, (uint32_t)(h >> 32), (uint32_t)t->arena_len, (uint32_t)n};
    t->arena_len += n + 1;
    *sid = (int32_t)id;
    if (added)
        *added = true;
    if ((uint64_t)t->n * 10 > (uint64_t)t->mask * 7)
        return grow_slots(t);
    return MEMRA_OK;
}

memra_status_t memra__mergemap_init(memra__mergemap_t *m, size_t expect)
{
    uint64_t cap = pow2_at_least((uint64_t)expect * 10 / 7 + 16);
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots)
        return MEMRA_E_NOMEM;
    m->mask = cap - 1;
    m->n = 0;
    return MEMRA_OK;
}

void memra__mergemap_free(memra__mergemap_t *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

void memra__mergemap_add(memra__mergemap_t *m, int32_t left, int32_t right, int32_t rank, int32_t result)
{
    uint64_t key = memra__merge_key(left, right);
    for (uint64_t i = memra__merge_home(key);; i++) {
        memra__merge_slot_t *s = &m->slots[i & m->mask];
        if (s->key == key)
            return;
        if (!s->key) {
            s->key = key;
            s->rank = rank;
            s->result = result;
            m->n++;
            return;
        }
    }
}

memra_status_t memra__ids_grow(memra__ids_t *b)
{
    size_t cap = b->cap ? b->cap * 2 : 256;
    int32_t *v = realloc(b->v, cap * sizeof *v);
    if (!v)
        return MEMRA_E_NOMEM;
    b->v = v;
    b->cap = cap;
    return MEMRA_OK;
}

memra_status_t memra__bytes_reserve(memra__bytes_t *b, size_t extra)
{
    if (b->n + extra <= b->cap)
        return MEMRA_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra)
        cap *= 2;
    char *v = realloc(b->v, cap);
    if (!v)
        return MEMRA_E_NOMEM;
    b->v = v;
    b->cap = cap;
    return MEMRA_OK;
}

memra_status_t memra__bytes_append(memra__bytes_t *b, const void *data, size_t n)
{
    memra_status_t st = memra__bytes_reserve(b, n);
    if (st != MEMRA_OK)
        return st;
    if (n)
        memcpy(b->v + b->n, data, n);
    b->n += n;
    return MEMRA_OK;
}

memra_status_t memra__spans_push(memra__spans_t *s, size_t off, size_t len)
{
    if (!len)
        return MEMRA_OK;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        memra__span_t *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return MEMRA_E_NOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n].off = (uint32_t)off;
    s->v[s->n].len = (uint32_t)len;
    s->n++;
    return MEMRA_OK;
}
