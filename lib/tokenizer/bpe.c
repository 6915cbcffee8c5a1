/* BPE merging for "gpt2" (byte-level) and "gemma4" (raw UTF-8) vocabularies.
 *
 * Each pre-token starts as one symbol per byte (gpt2: the byte's GPT-2
 * alphabet char) or per UTF-8 char (gemma4). The adjacent pair with the
 * lowest merge rank is merged, the leftmost on ties, until no pair has a
 * rule. llama.cpp does this with a priority queue keyed (rank, left index);
 * popping the smallest valid entry is the same choice, so short words use a
 * plain scan over the pair ranks and long ones a binary heap. A final symbol
 * that is not a token falls back to per-byte tokens: gpt2 looks up each byte
 * of the symbol's encoded text as a one-byte token (usually only printable
 * ASCII exists), gemma4 uses the <0xXX> tokens.
 *
 * Encoding a large text meets the same words again and again, so a per-call
 * cache (wcache.c) maps pre-tokens to their ids. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

typedef struct sym {
    int32_t sid; /* -1: text not interned, so it merges with nothing */
    uint32_t start, len;
    int32_t prev, next;
} sym_t;

typedef struct hent {
    int32_t rank;
    int32_t left, right;
    int32_t lsid, rsid;
} hent_t;

struct memra__bpe_scratch {
    memra__pretok_scratch_t *pre;
    sym_t *sy;
    size_t cap_sy;
    int32_t *rank; /* small path: rank of pair (i, next(i)), INT32_MAX if none */
    int32_t *res;  /* small path: merged sid of that pair */
    hent_t *heap;
    size_t cap_heap;
    char *enc;
    size_t cap_enc;
    memra__wcache_t cache;
    /* per-fragment context for the piece callback */
    const memra_tokenizer_t *tok;
    memra__ids_t *out;
};

void memra__bpe_scratch_free(memra__bpe_scratch_t *s)
{
    if (!s)
        return;
    memra__pretok_scratch_free(s->pre);
    free(s->sy);
    free(s->rank);
    free(s->res);
    free(s->heap);
    free(s->enc);
    memra__wcache_free(&s->cache);
    free(s);
}

static memra_status_t ensure_syms(memra__bpe_scratch_t *s, size_t n)
{
    if (n <= s->cap_sy)
        return MEMRA_OK;
    size_t cap = s->cap_sy ? s->cap_sy : 64;
    while (cap < n)
        cap *= 2;
    sym_t *sy = realloc(s->sy, cap * sizeof *sy);
    if (!sy)
        return MEMRA_E_NOMEM;
    s->sy = sy;
    int32_t *rk = realloc(s->rank, cap * sizeof *rk);
    if (!rk)
        return MEMRA_E_NOMEM;
    s->rank = rk;
    int32_t *rs = realloc(s->res, cap * sizeof *rs);
    if (!rs)
        return MEMRA_E_NOMEM;
    s->res = rs;
    s->cap_sy = cap;
    return MEMRA_OK;
}

static inline void pair_rank(const memra_tokenizer_t *tok, memra__bpe_scratch_t *s, int32_t i)
{
    int32_t j = s->sy[i].next;
    const memra__merge_slot_t *m = j >= 0 ? memra__mergemap_get(&tok->merges, s->sy[i].sid, s->sy[j].sid) : NULL;
    s->rank[i] = m ? m->rank : INT32_MAX;
    s->res[i] = m ? m->result : -1;
}

static inline void merge_into(sym_t *sy, int32_t i, int32_t sid)
{
    int32_t j = sy[i].next;
    sy[i].sid = sid;
    sy[i].len += sy[j].len;
    sy[i].next = sy[j].next;
    if (sy[j].next >= 0)
        sy[sy[j].next].prev = i;
    sy[j].len = 0;
}

static void merge_small(const memra_tokenizer_t *tok, memra__bpe_scratch_t *s, int32_t m)
{
    sym_t *sy = s->sy;
    for (int32_t i = 0; i + 1 < m; i++)
        memra__mergemap_prefetch(&tok->merges, sy[i].sid, sy[i + 1].sid);
    for (int32_t i = 0; i < m; i++)
        pair_rank(tok, s, i);
    for (;;) {
        int32_t best = -1, best_rank = INT32_MAX;
        for (int32_t i = 0; i >= 0; i = sy[i].next)
            if (s->rank[i] < best_rank) {
                best_rank = s->rank[i];
                best = i;
            }
        if (best < 0)
            return;
        merge_into(sy, best, s->res[best]);
        int32_t prev = sy[best].prev, next = sy[best].next;
        if (next >= 0)
            memra__mergemap_prefetch(&tok->merges, sy[best].sid, sy[next].sid);
        if (prev >= 0)
            memra__mergemap_prefetch(&tok->merges, sy[prev].sid, sy[best].sid);
        pair_rank(tok, s, best);
        if (prev >= 0)
            pair_rank(tok, s, prev);
    }
}

static inline bool hless(const hent_t *a, const hent_t *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static memra_status_t heap_push(memra__bpe_scratch_t *s, size_t *n, const memra_tokenizer_t *tok, int32_t left)
{
    sym_t *sy = s->sy;
    int32_t right = left >= 0 ? sy[left].next : -1;
    if (left < 0 || right < 0)
        return MEMRA_OK;
    const memra__merge_slot_t *m = memra__mergemap_get(&tok->merges, sy[left].sid, sy[right].sid);
    if (!m)
        return MEMRA_OK;
    if (*n == s->cap_heap) {
        size_t cap = s->cap_heap ? s->cap_heap * 2 : 256;
        hent_t *h = realloc(s->heap, cap * sizeof *h);
        if (!h)
            return MEMRA_E_NOMEM;
        s->heap = h;
        s->cap_heap = cap;
    }
    hent_t e = {m->rank, left, right, sy[left].sid, sy[right].sid};
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&e, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
    return MEMRA_OK;
}

static hent_t heap_pop(memra__bpe_scratch_t *s, size_t *n)
{
    hent_t top = s->heap[0];
    hent_t last = s->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && hless(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!hless(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (*n)
        s->heap[i] = last;
    return top;
}

static memra_status_t merge_heap(const memra_tokenizer_t *tok, memra__bpe_scratch_t *s, int32_t m)
{
    size_t n = 0;
    memra_status_t st = MEMRA_OK;
    for (int32_t i = 0; i + 1 < m; i++)
        memra__mergemap_prefetch(&tok->merges, s->sy[i].sid, s->sy[i + 1].sid);
    for (int32_t i = 0; i + 1 < m && st == MEMRA_OK; i++)
        st = heap_push(s, &n, tok, i);
    while (n && st == MEMRA_OK) {
        hent_t e = heap_pop(s, &n);
        sym_t *sy = s->sy;
        /* Stale entries: one side was merged away or grew since the push. */
        if (!sy[e.left].len || sy[e.left].next != e.right || sy[e.left].sid != e.lsid || sy[e.right].sid != e.rsid)
            continue;
        const memra__merge_slot_t *mg = memra__mergemap_get(&tok->merges, e.lsid, e.rsid);
        merge_into(sy, e.left, mg->result);
        st = heap_push(s, &n, tok, sy[e.left].prev);
        if (st == MEMRA_OK)
            st = heap_push(s, &n, tok, e.left);
    }
    return st;
}

static memra_status_t run_merges(const memra_tokenizer_t *tok, memra__bpe_scratch_t *s, int32_t m)
{
    if (m < 2)
        return MEMRA_OK;
    if (m <= 48) {
        merge_small(tok, s, m);
        return MEMRA_OK;
    }
    return merge_heap(tok, s, m);
}

/* Appends the ids of the final symbols of WORD (which starts at TEXT). */
static memra_status_t emit(const memra_tokenizer_t *tok, memra__bpe_scratch_t *s, const char *text,
                           memra__ids_t *out)
{
    bool gpt2 = tok->kind == MEMRA__TOK_BPE;
    for (int32_t i = 0; i >= 0; i = s->sy[i].next) {
        const sym_t *y = &s->sy[i];
        if (y->sid >= 0 && y->sid < tok->n_vocab) {
            if (memra__ids_push(out, y->sid) != MEMRA_OK)
                return MEMRA_E_NOMEM;
            continue;
        }
        for (uint32_t k = 0; k < y->len; k++) {
            unsigned char b = (unsigned char)text[y->start + k];
            const int32_t *fb = gpt2 ? tok->byte_fb[b] : &tok->byte_tok[b];
            for (int q = 0; q < (gpt2 ? 2 : 1); q++)
                if (fb[q] >= 0 && memra__ids_push(out, fb[q]) != MEMRA_OK)
                    return MEMRA_E_NOMEM;
        }
    }
    return MEMRA_OK;
}

/* Writes the GPT-2 alphabet form of BYTES into s->enc; returns its length. */
static memra_status_t byte_encode(const memra_tokenizer_t *tok, memra__bpe_scratch_t *s, const char *bytes,
                                  size_t n, size_t *len)
{
    if (2 * n > s->cap_enc) {
        size_t cap = s->cap_enc ? s->cap_enc : 256;
        while (cap < 2 * n)
            cap *= 2;
        char *e = realloc(s->enc, cap);
        if (!e)
            return MEMRA_E_NOMEM;
        s->enc = e;
        s->cap_enc = cap;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned b = (unsigned char)bytes[i];
        /* The alphabet maps bytes to U+0021..U+0143: one or two UTF-8 bytes. */
        unsigned cp = tok->byte_cp[b];
        if (cp < 0x80) {
            s->enc[o++] = (char)cp;
        } else {
            s->enc[o++] = (char)(0xC0 | (cp >> 6));
            s->enc[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    *len = o;
    return MEMRA_OK;
}

static memra_status_t word(const memra_tokenizer_t *tok, memra__bpe_scratch_t *s, const char *w, size_t n,
                           memra__ids_t *out)
{
    memra_status_t st;
    if (tok->kind == MEMRA__TOK_BPE) {
        if (tok->ignore_merges) {
            size_t elen;
            if ((st = byte_encode(tok, s, w, n, &elen)) != MEMRA_OK)
                return st;
            int32_t id = memra__strtab_find(&tok->strs, s->enc, elen);
            if (id >= 0 && id < tok->n_vocab)
                return memra__ids_push(out, id);
        }
        if ((st = ensure_syms(s, n)) != MEMRA_OK)
            return st;
        for (size_t i = 0; i < n; i++) {
            sym_t *y = &s->sy[i];
            y->sid = tok->byte_sid[(unsigned char)w[i]];
            y->start = (uint32_t)i;
            y->len = 1;
            y->prev = (int32_t)i - 1;
            y->next = i + 1 < n ? (int32_t)i + 1 : -1;
        }
        if ((st = run_merges(tok, s, (int32_t)n)) != MEMRA_OK)
            return st;
        return emit(tok, s, w, out);
    }

    /* gemma4: a run of newlines that is itself a token stays whole. */
    size_t k = 0;
    while (k < n && w[k] == '\n')
        k++;
    if (k == n) {
        int32_t id = memra__strtab_find(&tok->strs, w, n);
        if (id >= 0 && id < tok->n_vocab)
            return memra__ids_push(out, id);
    }
    if ((st = ensure_syms(s, n)) != MEMRA_OK)
        return st;
    int32_t m = 0;
    for (size_t i = 0; i < n; m++) {
        size_t l = memra__utf8_seq_len((unsigned char)w[i]);
        if (l > n - i)
            l = n - i;
        sym_t *y = &s->sy[m];
        y->sid = memra__strtab_find(&tok->strs, w + i, l);
        y->start = (uint32_t)i;
        y->len = (uint32_t)l;
        y->prev = m - 1;
        i += l;
        y->next = i < n ? m + 1 : -1;
    }
    if ((st = run_merges(tok, s, m)) != MEMRA_OK)
        return st;
    return emit(tok, s, w, out);
}

static memra_status_t cached_word(const memra_tokenizer_t *tok, memra__bpe_scratch_t *s, const char *w,
                                  size_t n, memra__ids_t *out)
{
    bool hit;
    if (memra__wcache_get(&s->cache, w, n, out, &hit) != MEMRA_OK)
        return MEMRA_E_NOMEM;
    if (hit)
        return MEMRA_OK;
    size_t before = out->n;
    memra_status_t st = word(tok, s, w, n, out);
    if (st == MEMRA_OK)
        memra__wcache_put(&s->cache, w, n, out, before);
    return st;
}

static memra_status_t on_piece(void *ctx, const char *text, size_t off, size_t len)
{
    memra__bpe_scratch_t *s = ctx;
    const char *w = text + off;
    /* gemma4 pieces are whole lines: merge word by word where that is exact. */
    for (size_t i = 0; i < len;) {
        size_t end = s->tok->kind == MEMRA__TOK_GEMMA4 ? memra__ws_next_cut(s->tok, w, len, i) : len;
        if (cached_word(s->tok, s, w + i, end - i, s->out) != MEMRA_OK)
            return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory in the BPE tokenizer");
        i = end;
    }
    return MEMRA_OK;
}

memra_status_t memra__bpe_fragment(const memra_tokenizer_t *tok, memra__bpe_scratch_t **scratch,
                                   const char *text, size_t n, size_t total, memra__ids_t *out)
{
    memra__bpe_scratch_t *s = *scratch;
    if (!s) {
        if (!(s = calloc(1, sizeof *s)))
            return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory in the BPE tokenizer");
        *scratch = s;
    }
    memra__wcache_enable(&s->cache, total);
    s->tok = tok;
    s->out = out;
    return memra__pretok_run(tok->pretok, &s->pre, text, n, false, on_piece, s);
}
