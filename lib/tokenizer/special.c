/* Splitting special tokens out of the input before pre-tokenization, with
 * llama.cpp's rules (tokenizer_st_partition): candidates are the CONTROL,
 * USER_DEFINED and UNKNOWN tokens, longest text first; without
 * parse_special only USER_DEFINED ones are split. llama.cpp takes one token
 * at a time and splits every remaining raw fragment at each of its
 * leftmost non-overlapping occurrences, so a longer token wins over a shorter
 * one even if the shorter one starts earlier.
 *
 * Instead of one pass over the text per token (Llama 3 has 256 of them), all
 * occurrences are found in one pass with a byte trie and then replayed in
 * that priority order: an occurrence is taken if it does not overlap
 * anything taken before and starts after the previous occurrence taken for
 * the same token. This equals the fragment-by-fragment process, including
 * the whitespace LSTRIP/RSTRIP remove next to a token. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

static memra_status_t trie_add_node(memra_tokenizer_t *tok, int32_t *cap, uint8_t byte, int32_t *out)
{
    if (tok->n_trie == *cap) {
        int32_t nc = *cap ? *cap * 2 : 64;
        memra__trie_node_t *v = realloc(tok->trie, (size_t)nc * sizeof *v);
        if (!v)
            return MEMRA_E_NOMEM;
        tok->trie = v;
        *cap = nc;
    }
    memra__trie_node_t *n = &tok->trie[tok->n_trie];
    n->child = n->sibling = n->prio = -1;
    n->byte = byte;
    *out = tok->n_trie++;
    return MEMRA_OK;
}

/* NODE's child for BYTE, or -1; *PREV (optional) receives the last sibling
 * looked at, where a new child would be linked. */
static inline int32_t trie_child(const memra_tokenizer_t *tok, int32_t node, uint8_t byte, int32_t *prev)
{
    int32_t c = tok->trie[node].child, p = -1;
    while (c >= 0 && tok->trie[c].byte != byte) {
        p = c;
        c = tok->trie[c].sibling;
    }
    if (prev)
        *prev = p;
    return c;
}

memra_status_t memra__special_build(memra_tokenizer_t *tok)
{
    int32_t cap = 0, root;
    memset(tok->first_all, 0, sizeof tok->first_all);
    memset(tok->first_user, 0, sizeof tok->first_user);
    if (trie_add_node(tok, &cap, 0, &root) != MEMRA_OK)
        return MEMRA_E_NOMEM;
    for (int32_t prio = 0; prio < tok->n_special; prio++) {
        int32_t id = tok->special_order[prio];
        const unsigned char *s = (const unsigned char *)memra__strtab_str(&tok->strs, id);
        uint32_t len = tok->strs.len[id];
        /* Splitting out a text that is not valid UTF-8 could cut a char of valid input in two. */
        if (!memra__utf8_valid((const char *)s, len))
            continue;
        int32_t node = root;
        for (uint32_t i = 0; i < len; i++) {
            int32_t prev;
            int32_t c = trie_child(tok, node, s[i], &prev);
            if (c < 0) {
                if (trie_add_node(tok, &cap, s[i], &c) != MEMRA_OK)
                    return MEMRA_E_NOMEM;
                if (prev < 0)
                    tok->trie[node].child = c;
                else
                    tok->trie[prev].sibling = c;
            }
            node = c;
        }
        /* Texts are unique (the loader rejects duplicates), so a node ends at most one token. */
        tok->trie[node].prio = prio;
        tok->first_all[s[0] >> 3] |= (uint8_t)(1u << (s[0] & 7));
        if (tok->attr[id] & MEMRA_TOKEN_ATTR_USER_DEFINED)
            tok->first_user[s[0] >> 3] |= (uint8_t)(1u << (s[0] & 7));
    }
    return MEMRA_OK;
}

static bool allowed(const memra_tokenizer_t *tok, int32_t id, bool parse_special)
{
    return parse_special || !(tok->attr[id] & (MEMRA_TOKEN_ATTR_CONTROL | MEMRA_TOKEN_ATTR_UNKNOWN));
}

typedef struct occ {
    int32_t prio;
    uint32_t pos;
} occ_t;

static int occ_cmp(const void *a, const void *b)
{
    const occ_t *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio < y->prio ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

typedef struct taken {
    uint32_t pos, len;
    int32_t id;
} taken_t;

static int taken_cmp(const void *a, const void *b)
{
    const taken_t *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static memra_status_t frag_push(memra__frags_t *f, uint32_t off, uint32_t len, int32_t token)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        memra__frag_t *v = realloc(f->v, cap * sizeof *v);
        if (!v)
            return MEMRA_E_NOMEM;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n].off = off;
    f->v[f->n].len = len;
    f->v[f->n].token = token;
    f->n++;
    return MEMRA_OK;
}

/* isspace() of the "C" locale, as llama.cpp's strip uses. */
static inline bool c_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

enum { RAW = 0, TOKEN = 1, STRIPPED = 2 };

static memra_status_t replay(const memra_tokenizer_t *tok, const char *text, size_t n, occ_t *occ,
                             size_t n_occ, memra__frags_t *out)
{
    memra_status_t st = MEMRA_E_NOMEM;
    uint8_t *claim = calloc(n, 1);
    taken_t *tk = malloc(n_occ * sizeof *tk);
    size_t n_tk = 0;
    if (!claim || !tk)
        goto done;
    qsort(occ, n_occ, sizeof *occ, occ_cmp);
    for (size_t i = 0; i < n_occ;) {
        int32_t prio = occ[i].prio;
        int32_t id = tok->special_order[prio];
        uint32_t len = tok->strs.len[id];
        uint32_t attr = tok->attr[id];
        size_t next_free = 0;
        for (; i < n_occ && occ[i].prio == prio; i++) {
            size_t p = occ[i].pos;
            if (p < next_free)
                continue;
            bool clear = true;
            for (size_t j = p; j < p + len && clear; j++)
                clear = claim[j] == RAW;
            if (!clear)
                continue;
            memset(claim + p, TOKEN, len);
            tk[n_tk].pos = (uint32_t)p;
            tk[n_tk].len = len;
            tk[n_tk].id = id;
            n_tk++;
            size_t end = p + len;
            if (attr & MEMRA_TOKEN_ATTR_LSTRIP)
                for (size_t j = p; j > 0 && claim[j - 1] == RAW && c_space((unsigned char)text[j - 1]); j--)
                    claim[j - 1] = STRIPPED;
            if (attr & MEMRA_TOKEN_ATTR_RSTRIP)
                while (end < n && claim[end] == RAW && c_space((unsigned char)text[end]))
                    claim[end++] = STRIPPED;
            next_free = end;
        }
    }
    qsort(tk, n_tk, sizeof *tk, taken_cmp);
    out->n = 0;
    size_t pos = 0;
    for (size_t t = 0; t <= n_tk; t++) {
        size_t stop = t < n_tk ? tk[t].pos : n;
        /* Raw runs between taken tokens, without the stripped whitespace. */
        while (pos < stop) {
            while (pos < stop && claim[pos] != RAW)
                pos++;
            size_t s0 = pos;
            while (pos < stop && claim[pos] == RAW)
                pos++;
            if (pos > s0 && frag_push(out, (uint32_t)s0, (uint32_t)(pos - s0), -1) != MEMRA_OK)
                goto done;
        }
        if (t < n_tk) {
            if (frag_push(out, tk[t].pos, tk[t].len, tk[t].id) != MEMRA_OK)
                goto done;
            pos = tk[t].pos + tk[t].len;
        }
    }
    st = MEMRA_OK;
done:
    free(claim);
    free(tk);
    return st;
}

memra_status_t memra__special_partition(const memra_tokenizer_t *tok, const char *text, size_t n,
                                        bool parse_special, memra__frags_t *out)
{
    out->n = 0;
    if (n == 0)
        return MEMRA_OK;
    const uint8_t *first = parse_special ? tok->first_all : tok->first_user;
    occ_t *occ = NULL;
    size_t n_occ = 0, cap_occ = 0;
    memra_status_t st = MEMRA_OK;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n && tok->n_special; i++) {
        if (!(first[s[i] >> 3] & (1u << (s[i] & 7))))
            continue;
        int32_t node = 0;
        for (size_t j = i; j < n; j++) {
            int32_t c = trie_child(tok, node, s[j], NULL);
            if (c < 0)
                break;
            node = c;
            int32_t prio = tok->trie[node].prio;
            if (prio >= 0 && allowed(tok, tok->special_order[prio], parse_special)) {
                if (n_occ == cap_occ) {
                    size_t nc = cap_occ ? cap_occ * 2 : 64;
                    occ_t *v = realloc(occ, nc * sizeof *v);
                    if (!v) {
                        st = MEMRA_E_NOMEM;
                        goto done;
                    }
                    occ = v;
                    cap_occ = nc;
                }
                occ[n_occ].prio = prio;
                occ[n_occ].pos = (uint32_t)i;
                n_occ++;
            }
        }
    }
    if (n_occ == 0)
        st = frag_push(out, 0, (uint32_t)n, -1);
    else
        st = replay(tok, text, n, occ, n_occ, out);
done:
    free(occ);
    if (st != MEMRA_OK)
        return memra__fail(NULL, st, "out of memory splitting special tokens");
    return MEMRA_OK;
}
