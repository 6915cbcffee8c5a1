/* Hand-written matchers for the pre-tokenizer regexes almost every model
 * uses: GPT-2's, the Llama-3 family's (digits in runs of 3, or 1 as Qwen2
 * does; Qwen3.5 also keeps combining marks with letters) and Gemma 4's
 * newline split. llama.cpp hand-writes the first two as well. On 4 MB of
 * mixed text PCRE2 runs the Qwen2 regex at ~125 MB/s with its JIT but ~23
 * MB/s without it (JIT is optional in PCRE2 builds and refused under some
 * W^X policies), which alone would put the tokenizer under its 20 MB/s
 * target; these run at ~190 MB/s either way. Each function follows its
 * regex's backtracking semantics alternative by alternative (the comments
 * name them), and test_tokenizer checks them against PCRE2 on random text.
 * Character classes come from utf8proc; whitespace is llama.cpp's set (the
 * Unicode White_Space property). */
#include <utf8proc.h>

#include "tokenizer/tok_impl.h"

enum { C_L = 1, C_N = 2, C_M = 4, C_WS = 8 };

static inline unsigned cls(uint32_t cp)
{
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
            return C_L;
        if (cp >= '0' && cp <= '9')
            return C_N;
        return cp == ' ' || (cp >= '\t' && cp <= '\r') ? C_WS : 0;
    }
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
        cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000)
        return C_WS;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    if (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO)
        return C_L;
    if (c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME)
        return C_M;
    if (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO)
        return C_N;
    return 0;
}

/* Text is valid UTF-8 (checked on entry), so decoding needs no checks. */
typedef struct cur {
    const unsigned char *s;
    size_t n;
} cur_t;

/* Class of the char at I (0 past the end) and its byte length. */
static inline unsigned at(const cur_t *c, size_t i, size_t *len)
{
    if (i >= c->n) {
        *len = 0;
        return 0;
    }
    unsigned b = c->s[i];
    if (b < 0x80) {
        *len = 1;
        return cls(b);
    }
    uint32_t cp;
    *len = memra__utf8_decode(c->s + i, c->n - i, false, &cp);
    if (!*len) { /* not reached on checked text; a stray byte still moves on */
        *len = 1;
        cp = 0xFFFD;
    }
    return cls(cp);
}

/* End of the run of chars whose class intersects MASK, from I. */
static inline size_t run(const cur_t *c, size_t i, unsigned mask)
{
    size_t len;
    while (i < c->n && (at(c, i, &len) & mask))
        i += len;
    return i;
}

/* End of the run of chars whose class does not intersect MASK (and exist). */
static inline size_t run_not(const cur_t *c, size_t i, unsigned mask)
{
    size_t len;
    while (i < c->n && !(at(c, i, &len) & mask))
        i += len;
    return i;
}

static inline unsigned lower(unsigned char b)
{
    return b >= 'A' && b <= 'Z' ? b + 32u : b;
}

/* 's|'t|'re|'ve|'m|'ll|'d, case-insensitive or not; returns the length or 0. */
static inline size_t contraction(const cur_t *c, size_t i, bool fold)
{
    if (c->s[i] != '\'' || i + 1 >= c->n)
        return 0;
    unsigned a = fold ? lower(c->s[i + 1]) : c->s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (i + 2 >= c->n)
        return 0;
    unsigned b = fold ? lower(c->s[i + 2]) : c->s[i + 2];
    return ((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

/* Whitespace handling shared by both families: \s+(?!\S) then \s+. WS_END
 * is the end of the run of whitespace starting at I. */
static inline size_t ws_tail(const cur_t *c, size_t i, size_t ws_end, size_t last_start)
{
    /* Followed by a non-space: keep the last space for the next piece, unless it is the only one. */
    if (ws_end < c->n && last_start > i)
        return last_start;
    return ws_end;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static size_t gpt2_piece(const cur_t *c, size_t i)
{
    size_t k = contraction(c, i, false);
    if (k)
        return i + k;
    size_t l0, l1;
    unsigned k0 = at(c, i, &l0);
    size_t st = i;
    unsigned k1 = k0;
    if (c->s[i] == ' ' && i + 1 < c->n) {
        k1 = at(c, i + 1, &l1);
        if (k1 & (C_L | C_N) || !(k1 & C_WS))
            st = i + 1; /* " ?" takes the space */
        else
            k1 = k0;
    }
    if (k1 & C_L)
        return run(c, st, C_L);
    if (k1 & C_N)
        return run(c, st, C_N);
    if (!(k1 & C_WS))
        return run_not(c, st, C_WS | C_L | C_N);
    /* \s+(?!\S); a single space before a non-space matches nothing and is a piece of its own. */
    size_t j = i, last = i, len;
    while (j < c->n && (at(c, j, &len) & C_WS)) {
        last = j;
        j += len;
    }
    return ws_tail(c, i, j, last);
}

/* (?:'[sS]|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with MARKS (qwen35): [\p{L}\p{M}]+ for the letters and \p{M} out of the punctuation class. */
static size_t llama3_piece(const cur_t *c, size_t i, unsigned max_digits, bool marks)
{
    size_t k = contraction(c, i, true);
    if (k)
        return i + k;
    const unsigned LM = C_L | (marks ? C_M : 0);
    size_t l0, l1;
    unsigned k0 = at(c, i, &l0);
    unsigned b0 = c->s[i];
    if (b0 != '\r' && b0 != '\n' && !(k0 & C_N)) {
        if (k0 & LM)
            return run(c, i, LM);
        /* the optional leading char: anything but CR, LF, a letter or a digit */
        if (at(c, i + l0, &l1) & LM)
            return run(c, i + l0, LM);
    }
    if (k0 & C_N) {
        size_t j = i;
        for (unsigned d = 0; d < max_digits && j < c->n && (at(c, j, &l1) & C_N); d++)
            j += l1;
        return j;
    }
    const unsigned NOT_P = C_WS | C_L | C_N | (marks ? C_M : 0);
    size_t st = i;
    unsigned kp = k0;
    if (b0 == ' ' && i + 1 < c->n) {
        unsigned k1 = at(c, i + 1, &l1);
        if (!(k1 & NOT_P)) {
            st = i + 1;
            kp = k1;
        }
    }
    if (!(kp & NOT_P)) {
        size_t j = run_not(c, st, NOT_P);
        while (j < c->n && (c->s[j] == '\r' || c->s[j] == '\n'))
            j++;
        return j;
    }
    /* Whitespace: \s*[\r\n]+ ends at the run's last CR/LF, else \s+(?!\S) | \s+. */
    size_t j = i, last = i, after_nl = 0, len;
    while (j < c->n && (at(c, j, &len) & C_WS)) {
        if (c->s[j] == '\r' || c->s[j] == '\n')
            after_nl = j + 1;
        last = j;
        j += len;
    }
    if (after_nl)
        return after_nl;
    return ws_tail(c, i, j, last);
}

memra_status_t memra__split_custom(memra__split_kind_t kind, const char *text, size_t off, size_t n,
                                   memra__piece_fn fn, void *ctx)
{
    cur_t c = {(const unsigned char *)text + off, n};
    size_t i = 0;
    memra_status_t st = MEMRA_OK;
    while (i < n && st == MEMRA_OK) {
        size_t j;
        switch (kind) {
        case MEMRA__SPLIT_GPT2:
            j = gpt2_piece(&c, i);
            break;
        case MEMRA__SPLIT_LLAMA3:
            j = llama3_piece(&c, i, 3, false);
            break;
        case MEMRA__SPLIT_QWEN2:
            j = llama3_piece(&c, i, 1, false);
            break;
        case MEMRA__SPLIT_QWEN35:
            j = llama3_piece(&c, i, 1, true);
            break;
        case MEMRA__SPLIT_NEWLINES: {
            /* [^\n]+|[\n]+ */
            bool nl = c.s[i] == '\n';
            j = i;
            while (j < n && (c.s[j] == '\n') == nl)
                j++;
            break;
        }
        default:
            return memra__fail(NULL, MEMRA_E_INTERNAL, "pre-tokenizer: no hand-written splitter %d", (int)kind);
        }
        st = fn(ctx, text, off + i, j - i);
        i = j;
    }
    return st;
}
