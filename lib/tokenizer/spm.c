/* SentencePiece-style tokenization of "llama" vocabularies, as llama.cpp's
 * llm_tokenizer_spm_session does it: spaces become U+2581 (with one in front
 * when the vocabulary adds a space prefix and the fragment starts the text or
 * follows a special token), the text is cut into UTF-8 chars, and the
 * adjacent pair whose concatenation is the token with the highest score is
 * merged (leftmost on ties) until no pair is a token. Chars that end up
 * outside any token become byte tokens <0xXX>.
 *
 * Merging the whole text at once costs O(n log n) with a heap as large as
 * the text. When no token contains "X\u2581" (X not itself U+2581), no merge
 * can join a word to the U+2581 that starts the next one, so each word is
 * merged on its own with the same result (memra__ws_next_cut). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

typedef struct ssym {
    uint32_t start, len; /* len 0: merged into its left neighbour */
    int32_t prev, next;
} ssym_t;

typedef struct sbig {
    float score;
    int32_t left, right;
    uint32_t size;
} sbig_t;

typedef struct spm_state {
    const memra_tokenizer_t *tok;
    const char *text;
    ssym_t *sy;
    sbig_t *heap;
    size_t n_heap, cap_heap;
} spm_state_t;

static inline bool before(const sbig_t *a, const sbig_t *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static memra_status_t try_pair(spm_state_t *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return MEMRA_OK;
    uint32_t start = s->sy[left].start;
    uint32_t size = s->sy[left].len + s->sy[right].len;
    int32_t id = memra__strtab_find(&s->tok->strs, s->text + start, size);
    if (id < 0 || id >= s->tok->n_vocab)
        return MEMRA_OK;
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? s->cap_heap * 2 : 64;
        sbig_t *h = realloc(s->heap, cap * sizeof *h);
        if (!h)
            return MEMRA_E_NOMEM;
        s->heap = h;
        s->cap_heap = cap;
    }
    sbig_t e = {s->tok->scores[id], left, right, size};
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&e, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
    return MEMRA_OK;
}

static sbig_t pop(spm_state_t *s)
{
    sbig_t top = s->heap[0];
    sbig_t last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!before(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

static memra_status_t run(spm_state_t *s, size_t n, memra__ids_t *out)
{
    const memra_tokenizer_t *tok = s->tok;
    int32_t m = 0;
    s->n_heap = 0;
    for (size_t i = 0; i < n; m++) {
        size_t l = memra__utf8_seq_len((unsigned char)s->text[i]);
        if (l > n - i)
            l = n - i;
        s->sy[m].start = (uint32_t)i;
        s->sy[m].len = (uint32_t)l;
        s->sy[m].prev = m - 1;
        i += l;
        s->sy[m].next = i < n ? m + 1 : -1;
    }
    for (int32_t i = 1; i < m; i++)
        if (try_pair(s, i - 1, i) != MEMRA_OK)
            return MEMRA_E_NOMEM;
    while (s->n_heap) {
        sbig_t b = pop(s);
        ssym_t *l = &s->sy[b.left], *r = &s->sy[b.right];
        if (!l->len || !r->len || l->len + r->len != b.size)
            continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->sy[r->next].prev = b.left;
        if (try_pair(s, l->prev, b.left) != MEMRA_OK || try_pair(s, b.left, l->next) != MEMRA_OK)
            return MEMRA_E_NOMEM;
    }
    for (int32_t i = 0; m && i >= 0; i = s->sy[i].next) {
        const ssym_t *y = &s->sy[i];
        int32_t id = memra__strtab_find(&tok->strs, s->text + y->start, y->len);
        if (id >= 0 && id < tok->n_vocab) {
            if (memra__ids_push(out, id) != MEMRA_OK)
                return MEMRA_E_NOMEM;
            continue;
        }
        for (uint32_t k = 0; k < y->len; k++) {
            int32_t b = tok->byte_tok[(unsigned char)s->text[y->start + k]];
            if (b < 0)
                b = tok->special[MEMRA_SPECIAL_UNK];
            if (b >= 0 && memra__ids_push(out, b) != MEMRA_OK)
                return MEMRA_E_NOMEM;
        }
    }
    return MEMRA_OK;
}

static inline bool is_ws(const char *p)
{
    return (unsigned char)p[0] == 0xE2 && (unsigned char)p[1] == 0x96 && (unsigned char)p[2] == 0x81;
}

static inline uint32_t cp_before(const unsigned char *s, size_t p)
{
    size_t q = p - 1;
    while (q > 0 && p - q < 4 && (s[q] & 0xC0) == 0x80)
        q--;
    uint32_t cp = 0xFFFD;
    return memra__utf8_decode(s + q, p - q, false, &cp) == p - q ? cp : 0xFFFD;
}

size_t memra__ws_next_cut(const memra_tokenizer_t *tok, const char *s, size_t n, size_t from)
{
    if (!tok->ws_cut)
        return n;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t p = from + 1; p + 3 <= n;) {
        const unsigned char *hit = memchr(u + p, 0xE2, n - p);
        if (!hit)
            return n;
        p = (size_t)(hit - u);
        if (p + 3 > n)
            return n;
        if (!is_ws(s + p)) {
            p++;
            continue;
        }
        uint32_t x = cp_before(u, p);
        bool blocked = x == 0x2581;
        if (!blocked && x < 0x80)
            blocked = (tok->nocut_ascii[x >> 3] >> (x & 7)) & 1;
        for (int32_t i = 0; !blocked && x >= 0x80 && i < tok->n_nocut_cp; i++)
            blocked = tok->nocut_cp[i] == x;
        if (!blocked)
            return p;
        p += 3;
    }
    return n;
}

memra_status_t memra__spm_fragment(const memra_tokenizer_t *tok, memra__wcache_t *cache, const char *text,
                                   size_t n, bool prefix, memra__ids_t *out)
{
    /* U+2581 is three bytes: the escaped text is at most 3n + 3. */
    size_t cap = 3 * n + 3;
    char *esc = malloc(cap);
    ssym_t *sy = malloc((cap + 1) * sizeof *sy);
    memra_status_t st = MEMRA_E_NOMEM;
    if (esc && sy) {
        const size_t o = memra__escape_spaces(text, n, prefix, esc);
        spm_state_t s = {tok, esc, sy, NULL, 0, 0};
        st = MEMRA_OK;
        for (size_t w = 0; w < o && st == MEMRA_OK;) {
            size_t end = memra__ws_next_cut(tok, esc, o, w);
            bool hit;
            st = memra__wcache_get(cache, esc + w, end - w, out, &hit);
            if (st == MEMRA_OK && !hit) {
                size_t before = out->n;
                s.text = esc + w;
                st = run(&s, end - w, out);
                /* A word of the whole text (no cut) is not worth remembering. */
                if (st == MEMRA_OK && (w > 0 || end < o))
                    memra__wcache_put(cache, esc + w, end - w, out, before);
            }
            w = end;
        }
        free(s.heap);
    }
    free(esc);
    free(sy);
    if (st != MEMRA_OK)
        return memra__fail(NULL, st, "out of memory in the SentencePiece tokenizer");
    return MEMRA_OK;
}
