/* Tokenizer internals shared by the lib/tokenizer sources (never installed).
 *
 * Strings (token texts and the non-token strings that merge rules name) are
 * interned once: a string id ("sid") below n_vocab is the token id of that
 * text, so BPE works on integers and a merged symbol that is a token needs no
 * further lookup. */
#ifndef MEMRA_TOK_IMPL_H
#define MEMRA_TOK_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "memra/tokenizer.h"

/* ---- hashing, string table, merge table (strtab.c) --------------------------- */

uint64_t memra__tok_hash(const void *data, size_t n);

/* A slot holds what a lookup needs, so a probe costs one cache miss plus
 * the final string compare. */
typedef struct memra__strslot {
    uint32_t sid1; /* sid + 1, 0 = empty */
    uint32_t tag;  /* high hash bits, to skip most string compares */
    uint32_t off, len;
} memra__strslot_t;

typedef struct memra__strtab {
    char *arena; /* every string, each followed by a NUL */
    size_t arena_len, arena_cap;
    uint32_t *off; /* per sid */
    uint32_t *len;
    uint32_t n, cap;
    memra__strslot_t *slots;
    uint32_t mask;
} memra__strtab_t;

memra_status_t memra__strtab_init(memra__strtab_t *t, uint32_t expect, size_t arena_hint);
void memra__strtab_free(memra__strtab_t *t);
/* sid of S[0..N) or -1. */
int32_t memra__strtab_find(const memra__strtab_t *t, const char *s, size_t n);
/* Adds S if missing; *SID receives its id and *ADDED whether it was new. */
memra_status_t memra__strtab_intern(memra__strtab_t *t, const char *s, size_t n, int32_t *sid, bool *added);
static inline const char *memra__strtab_str(const memra__strtab_t *t, int32_t sid)
{
    return t->arena + t->off[sid];
}

/* (left sid, right sid) -> (rank, merged sid); the first rule for a pair wins. */
typedef struct memra__merge_slot {
    uint64_t key; /* memra__merge_key(); 0 = empty */
    int32_t rank;
    int32_t result;
} memra__merge_slot_t;

typedef struct memra__mergemap {
    memra__merge_slot_t *slots;
    uint64_t mask;
    size_t n;
} memra__mergemap_t;

memra_status_t memra__mergemap_init(memra__mergemap_t *m, size_t expect);
void memra__mergemap_free(memra__mergemap_t *m);
/* Inserts unless the pair is present (then keeps the earlier rank). */
void memra__mergemap_add(memra__mergemap_t *m, int32_t left, int32_t right, int32_t rank, int32_t result);

/* Sids are below 2^31, so the key is never 0 and never wraps. */
static inline uint64_t memra__merge_key(int32_t left, int32_t right)
{
    return (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
}

static inline uint64_t memra__merge_home(uint64_t key)
{
    return (key * 0x9E3779B97F4A7C15ull) >> 17;
}

/* Starts loading the slot of (LEFT, RIGHT), so that several lookups overlap
 * their cache misses. */
static inline void memra__mergemap_prefetch(const memra__mergemap_t *m, int32_t left, int32_t right)
{
    if (left >= 0 && right >= 0 && m->slots)
        __builtin_prefetch(&m->slots[memra__merge_home(memra__merge_key(left, right)) & m->mask]);
}

static inline const memra__merge_slot_t *memra__mergemap_get(const memra__mergemap_t *m, int32_t left,
                                                             int32_t right)
{
    if (left < 0 || right < 0 || !m->slots)
        return NULL;
    uint64_t key = memra__merge_key(left, right);
    uint64_t i = memra__merge_home(key);
    for (;; i++) {
        const memra__merge_slot_t *s = &m->slots[i & m->mask];
        if (s->key == key)
            return s;
        if (!s->key)
            return NULL;
    }
}

/* ---- growable buffers ---------------------------------------------------------- */

/* Token ids. A growable buffer, or (FIXED) the caller's array: then ids past
 * CAP are only counted, so a too-small array still yields the count. */
typedef struct memra__ids {
    int32_t *v;
    size_t n, cap;
    bool fixed;
} memra__ids_t;

memra_status_t memra__ids_grow(memra__ids_t *b);
static inline memra_status_t memra__ids_push(memra__ids_t *b, int32_t id)
{
    if (b->n < b->cap) {
        b->v[b->n++] = id;
        return MEMRA_OK;
    }
    if (b->fixed) {
        b->n++;
        return MEMRA_OK;
    }
    if (memra__ids_grow(b) != MEMRA_OK)
        return MEMRA_E_NOMEM;
    b->v[b->n++] = id;
    return MEMRA_OK;
}

typedef struct memra__bytes {
    char *v;
    size_t n, cap;
} memra__bytes_t;

memra_status_t memra__bytes_reserve(memra__bytes_t *b, size_t extra);
memra_status_t memra__bytes_append(memra__bytes_t *b, const void *data, size_t n);

/* ---- per-call word cache (wcache.c) ----------------------------------------------- */

/* Maps words (pre-tokens) to their ids during one call. It lives in the
 * call's scratch, so the tokenizer itself stays read-only. */
typedef struct memra__wcache {
    struct memra__wslot *slots;
    size_t mask, n;
    memra__bytes_t keys;
    memra__ids_t ids;
} memra__wcache_t;

/* Turns the cache on when the whole input (TOTAL bytes) is big enough to repeat words. */
void memra__wcache_enable(memra__wcache_t *c, size_t total);
void memra__wcache_free(memra__wcache_t *c);
/* On a hit (*HIT) appends the ids of W[0..N) to OUT. */
memra_status_t memra__wcache_get(const memra__wcache_t *c, const char *w, size_t n, memra__ids_t *out, bool *hit);
/* Records OUT->v[FROM..OUT->n) as the ids of W (ignored when disabled or full). */
void memra__wcache_put(memra__wcache_t *c, const char *w, size_t n, const memra__ids_t *out, size_t from);

/* ---- pre-tokenizers (pretok.c) -------------------------------------------------- */

typedef struct memra__pretok memra__pretok_t; /* compiled regexes of one pre-type */

typedef struct memra__pre_info {
    const char *name;    /* canonical name, e.g. "qwen2" */
    bool ignore_merges;  /* a pre-token that is a vocab entry is taken whole */
    bool add_bos;        /* default of add_bos for this pre-type */
    bool clean_spaces;   /* clean_up_tokenization_spaces at detokenize */
    bool bos_none;       /* the pre-type clears the default BOS id */
} memra__pre_info_t;

/* Looks up a `tokenizer.ggml.pre` value (NULL or "" = "default"). */
const memra__pre_info_t *memra__pre_lookup(const char *name);
/* Comma-separated list of the accepted names, for error messages. */
const char *memra__pre_names(void);

memra_status_t memra__pretok_create(const char *name, memra__pretok_t **out);
void memra__pretok_free(memra__pretok_t *p);

typedef struct memra__span {
    uint32_t off, len;
} memra__span_t;

typedef struct memra__spans {
    memra__span_t *v;
    size_t n, cap;
} memra__spans_t;

memra_status_t memra__spans_push(memra__spans_t *s, size_t off, size_t len); /* skips empty spans */

/* Hand-written matchers of the common regexes (split.c); REGEX = use PCRE2. */
typedef enum memra__split_kind {
    MEMRA__SPLIT_REGEX = 0,
    MEMRA__SPLIT_GPT2,
    MEMRA__SPLIT_LLAMA3,
    MEMRA__SPLIT_QWEN2,
    MEMRA__SPLIT_QWEN35,
    MEMRA__SPLIT_NEWLINES,
} memra__split_kind_t;

/* Receives one pre-token: TEXT[OFF..OFF+LEN). */
typedef memra_status_t (*memra__piece_fn)(void *ctx, const char *text, size_t off, size_t len);

/* Calls FN for each piece of TEXT[OFF..OFF+N), in order. */
memra_status_t memra__split_custom(memra__split_kind_t kind, const char *text, size_t off, size_t n,
                                   memra__piece_fn fn, void *ctx);

/* Per-call matching state (PCRE2 match data, JIT stack). */
typedef struct memra__pretok_scratch memra__pretok_scratch_t;
void memra__pretok_scratch_free(memra__pretok_scratch_t *s);

/* Splits TEXT[0..N) into pre-tokens and calls FN for each, in order (the
 * pieces tile the text; there are no empty ones). REGEX_ONLY runs every
 * stage with PCRE2, for tests of the hand-written matchers. */
memra_status_t memra__pretok_run(const memra__pretok_t *p, memra__pretok_scratch_t **scratch, const char *text,
                                 size_t n, bool regex_only, memra__piece_fn fn, void *ctx);
/* Same, collecting the pieces into OUT (replacing its contents). */
memra_status_t memra__pretok_split(const memra__pretok_t *p, memra__pretok_scratch_t **scratch,
                                   const char *text, size_t n, bool regex_only, memra__spans_t *out);

/* ---- the tokenizer ------------------------------------------------------------- */

typedef enum memra__tok_kind {
    MEMRA__TOK_SPM = 1,    /* "llama" */
    MEMRA__TOK_BPE = 2,    /* "gpt2" */
    MEMRA__TOK_GEMMA4 = 3, /* "gemma4": BPE over raw UTF-8, U+2581 for spaces */
} memra__tok_kind_t;

/* Special-token matcher: a byte trie of the control / user-defined / unknown
 * texts (special.c). */
typedef struct memra__trie_node {
    int32_t child;   /* first child, -1 if none */
    int32_t sibling; /* next sibling, -1 if none */
    int32_t prio;    /* index into special order if a token ends here, else -1 */
    uint8_t byte;
} memra__trie_node_t;

struct memra_tokenizer {
    memra__tok_kind_t kind;
    char *model_name;
    char *pre_name;
    const memra__pre_info_t *pre;
    memra__pretok_t *pretok; /* BPE only */

    bool ignore_merges;
    bool add_space_prefix;
    bool add_bos, add_eos;
    bool clean_spaces;

    int32_t n_vocab;
    memra__strtab_t strs; /* sids 0..n_vocab-1 are the tokens */
    float *scores;
    uint32_t *attr;
    memra__mergemap_t merges;

    /* Decoded text of each token (llama.cpp's token_to_piece with special). */
    char *pieces;
    uint32_t *piece_off;
    uint32_t *piece_len;

    uint16_t byte_cp[256];   /* gpt2: GPT-2 alphabet code point of each byte */
    int32_t byte_sid[256];   /* gpt2: sid of that char */
    int32_t byte_fb[256][2]; /* gpt2 fallback tokens of a byte; -1 = nothing */
    int32_t byte_tok[256];   /* llama/gemma4: byte-fallback token (-1 if none) */

    int32_t special[MEMRA_SPECIAL_COUNT];

    /* llama/gemma4: U+2581 starts an independent word unless the char before
     * it is one of these (some vocabulary string contains "X\u2581"). */
    bool ws_cut;
    uint8_t nocut_ascii[16];
    uint32_t *nocut_cp; /* non-ASCII X, ascending */
    int32_t n_nocut_cp;

    /* Tokens split out of text before the pre-tokenizer, longest text first. */
    int32_t *special_order;
    int32_t n_special;
    memra__trie_node_t *trie;
    int32_t n_trie;
    uint8_t first_all[32];  /* first bytes of every special text */
    uint8_t first_user[32]; /* first bytes of the user-defined ones */

    int32_t *eog; /* ascending */
    int32_t n_eog;

    char *chat_template;

    pthread_mutex_t err_lock;
    memra__err_t err;
};

/* Sets the thread's last error and TOK's (under its lock); returns STATUS. */
memra_status_t memra__tok_fail(const memra_tokenizer_t *tok, memra_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Builds the special-token trie and first-byte sets (special.c). */
memra_status_t memra__special_build(memra_tokenizer_t *tok);

/* A piece of input after special-token splitting: raw text or one token. */
typedef struct memra__frag {
    uint32_t off, len; /* raw text, when token < 0 */
    int32_t token;
} memra__frag_t;

typedef struct memra__frags {
    memra__frag_t *v;
    size_t n, cap;
} memra__frags_t;

/* Splits TEXT into raw fragments and special tokens with llama.cpp's rules
 * (tokenizer_st_partition). */
memra_status_t memra__special_partition(const memra_tokenizer_t *tok, const char *text, size_t n,
                                        bool parse_special, memra__frags_t *out);

/* BPE over one raw fragment (bpe.c); appends ids to OUT. TOTAL is the length
 * of the whole input: large inputs get a word cache. */
typedef struct memra__bpe_scratch memra__bpe_scratch_t;
memra_status_t memra__bpe_fragment(const memra_tokenizer_t *tok, memra__bpe_scratch_t **scratch,
                                   const char *text, size_t n, size_t total, memra__ids_t *out);
void memra__bpe_scratch_free(memra__bpe_scratch_t *s);

/* Where the word starting at FROM ends in escaped text S[0..N): at the next
 * U+2581 no merge can reach across, or N (spm.c). */
size_t memra__ws_next_cut(const memra_tokenizer_t *tok, const char *s, size_t n, size_t from);
/* Finds the chars X that block a cut (vocab.c helper, run at load). */
memra_status_t memra__ws_cut_init(memra_tokenizer_t *tok);

/* SentencePiece over one raw fragment (spm.c); PREFIX adds the leading space. */
memra_status_t memra__spm_fragment(const memra_tokenizer_t *tok, memra__wcache_t *cache, const char *text,
                                   size_t n, bool prefix, memra__ids_t *out);

/* Writes TEXT[0..N) with each space as U+2581, after one more U+2581 when
 * PREFIX, to DST (room for 3N + 3 bytes); returns the length (encode.c). */
size_t memra__escape_spaces(const char *text, size_t n, bool prefix, char *dst);

/* Tokenizes with an internal growable result (encode.c). */
memra_status_t memra__tokenize_ids(const memra_tokenizer_t *tok, const char *text, size_t n,
                                   uint32_t flags, memra__ids_t *out);

#endif
