/* Building a tokenizer from GGUF `tokenizer.*` keys, following llama.cpp's
 * llama_vocab::impl::load step by step (special-id defaults, add_bos rules,
 * the text-based EOT/FIM/EOG detection and the attribute fix-ups), and the
 * read-only accessors of the public API. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/gguf.h"
#include "tokenizer/tok_impl.h"

static const char *const LIST_EOT[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                       "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                       "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                       "<end_of_utterance>", NULL};
static const char *const LIST_EOM[] = {"<|eom_id|>", NULL};
static const char *const LIST_FIM_PRE[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                           "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
                                           "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const LIST_FIM_SUF[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                           "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>",
                                           "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const LIST_FIM_MID[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                           "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
                                           "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const LIST_FIM_PAD[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const LIST_FIM_REP[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
                                           NULL};
static const char *const LIST_FIM_SEP[] = {"<|file_sep|>", NULL};

/* Texts that end generation (and are forced to CONTROL). */
static const char *const LIST_EOG[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                       "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
                                       "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                                       "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                                       "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                       "[e~[", NULL};

static const struct {
    const char *key;
    memra_special_token_t role;
} SPECIAL_KEYS[] = {
    {"tokenizer.ggml.bos_token_id", MEMRA_SPECIAL_BOS},
    {"tokenizer.ggml.eos_token_id", MEMRA_SPECIAL_EOS},
    {"tokenizer.ggml.eot_token_id", MEMRA_SPECIAL_EOT},
    {"tokenizer.ggml.eom_token_id", MEMRA_SPECIAL_EOM},
    {"tokenizer.ggml.unknown_token_id", MEMRA_SPECIAL_UNK},
    {"tokenizer.ggml.seperator_token_id", MEMRA_SPECIAL_SEP},
    {"tokenizer.ggml.padding_token_id", MEMRA_SPECIAL_PAD},
    {"tokenizer.ggml.mask_token_id", MEMRA_SPECIAL_MASK},
    {"tokenizer.ggml.fim_pre_token_id", MEMRA_SPECIAL_FIM_PRE},
    {"tokenizer.ggml.fim_suf_token_id", MEMRA_SPECIAL_FIM_SUF},
    {"tokenizer.ggml.fim_mid_token_id", MEMRA_SPECIAL_FIM_MID},
    {"tokenizer.ggml.fim_pad_token_id", MEMRA_SPECIAL_FIM_PAD},
    {"tokenizer.ggml.fim_rep_token_id", MEMRA_SPECIAL_FIM_REP},
    {"tokenizer.ggml.fim_sep_token_id", MEMRA_SPECIAL_FIM_SEP},
    /* deprecated spellings */
    {"tokenizer.ggml.prefix_token_id", MEMRA_SPECIAL_FIM_PRE},
    {"tokenizer.ggml.suffix_token_id", MEMRA_SPECIAL_FIM_SUF},
    {"tokenizer.ggml.middle_token_id", MEMRA_SPECIAL_FIM_MID},
};

/* ---- errors ----------------------------------------------------------------- */

memra_status_t memra__tok_fail(const memra_tokenizer_t *tok, memra_status_t status, const char *fmt, ...)
{
    char msg[MEMRA__ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memra__fail(NULL, status, "%s", msg);
    if (tok) {
        /* The handle is otherwise read-only; only this slot changes, under its lock. */
        memra_tokenizer_t *t = (memra_tokenizer_t *)tok;
        pthread_mutex_lock(&t->err_lock);
        t->err.status = status;
        memcpy(t->err.msg, msg, sizeof msg);
        pthread_mutex_unlock(&t->err_lock);
    }
    return status;
}

const char *memra_tokenizer_last_error(const memra_tokenizer_t *tok)
{
    static _Thread_local char copy[MEMRA__ERRMSG_MAX];
    if (!tok)
        return "";
    memra_tokenizer_t *t = (memra_tokenizer_t *)tok;
    pthread_mutex_lock(&t->err_lock);
    memcpy(copy, t->err.msg, sizeof copy);
    pthread_mutex_unlock(&t->err_lock);
    return copy;
}

/* ---- GGUF helpers ----------------------------------------------------------- */

static const char *kv_str(const memra_gguf_t *g, const char *key, size_t *len)
{
    int64_t i = memra_gguf_find_kv(g, key);
    const char *s = NULL;
    if (i < 0 || memra_gguf_kv_type(g, i) != MEMRA_GGUF_STRING || memra_gguf_kv_str(g, i, &s, len) != MEMRA_OK)
        return NULL;
    return s;
}

/* Reads an optional bool; 1 = found. A key of another type is an error. */
static memra_status_t kv_bool(const memra_gguf_t *g, const char *key, bool *val, bool *found)
{
    *found = false;
    int64_t i = memra_gguf_find_kv(g, key);
    if (i < 0)
        return MEMRA_OK;
    int v;
    if (memra_gguf_kv_bool(g, i, &v) != MEMRA_OK)
        return memra__fail(NULL, MEMRA_E_FORMAT, "tokenizer key %s is not a bool", key);
    *val = v != 0;
    *found = true;
    return MEMRA_OK;
}

static int32_t find_text(const memra_tokenizer_t *tok, const char *s)
{
    return memra_tokenizer_token_id(tok, s, strlen(s));
}

static bool text_is(const memra_tokenizer_t *tok, int32_t id, const char *s)
{
    size_t n = strlen(s);
    return tok->strs.len[id] == n && memcmp(memra__strtab_str(&tok->strs, id), s, n) == 0;
}

/* ---- GPT-2 byte alphabet ----------------------------------------------------- */

static void gpt2_alphabet(uint16_t cp[256])
{
    unsigned next = 256;
    for (unsigned b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        cp[b] = (uint16_t)(printable ? b : next++);
    }
}

/* Next code point of S[*i..N), as llama.cpp reads vocabulary text (not
 * strict); invalid bytes read as U+FFFD one at a time. */
static uint32_t get_utf8(const unsigned char *s, size_t n, size_t *i)
{
    uint32_t cp;
    const size_t len = memra__utf8_decode(s + *i, n - *i, false, &cp);
    *i += len ? len : 1;
    return len ? cp : 0xFFFD;
}

/* ---- pieces ----------------------------------------------------------------- */

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* "<0xXX>" -> byte; strtol-like: stops at the first non-hex digit. */
static unsigned char byte_of(const char *text, uint32_t len)
{
    unsigned v = 0;
    for (uint32_t k = 3; k < 5 && k < len && hexval(text[k]) >= 0; k++)
        v = v * 16 + (unsigned)hexval(text[k]);
    return (unsigned char)v;
}

static memra_status_t append_unescaped(memra__bytes_t *b, const char *t, uint32_t n)
{
    for (uint32_t i = 0; i < n;) {
        if (n - i >= 3 && memcmp(t + i, "\xE2\x96\x81", 3) == 0) {
            if (memra__bytes_append(b, " ", 1) != MEMRA_OK)
                return MEMRA_E_NOMEM;
            i += 3;
        } else {
            if (memra__bytes_append(b, t + i, 1) != MEMRA_OK)
                return MEMRA_E_NOMEM;
            i++;
        }
    }
    return MEMRA_OK;
}

/* llama.cpp's llama_decode_text: GPT-2 alphabet back to bytes. */
static memra_status_t append_gpt2_decoded(memra__bytes_t *b, const int16_t *inv, const char *t, uint32_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp = get_utf8((const unsigned char *)t, n, &i);
        if (cp < 0x144 && inv[cp] >= 0) {
            char c = (char)inv[cp];
            if (memra__bytes_append(b, &c, 1) != MEMRA_OK)
                return MEMRA_E_NOMEM;
            continue;
        }
        char u[4], hex[16];
        size_t ul = memra__utf8_put(u, cp);
        if (memra__bytes_append(b, "[UNK_BYTE_0x", 12) != MEMRA_OK)
            return MEMRA_E_NOMEM;
        for (size_t k = 0; k < ul; k++) {
            snprintf(hex, sizeof hex, "%02x", (unsigned)(unsigned char)u[k]);
            if (memra__bytes_append(b, hex, 2) != MEMRA_OK)
                return MEMRA_E_NOMEM;
        }
        if (memra__bytes_append(b, t, n) != MEMRA_OK || memra__bytes_append(b, "]", 1) != MEMRA_OK)
            return MEMRA_E_NOMEM;
    }
    return MEMRA_OK;
}

static memra_status_t build_pieces(memra_tokenizer_t *tok)
{
    int16_t inv[0x144];
    for (int i = 0; i < 0x144; i++)
        inv[i] = -1;
    for (int b = 0; b < 256; b++)
        inv[tok->byte_cp[b]] = (int16_t)b;
    memra__bytes_t buf = {0};
    tok->piece_off = malloc((size_t)tok->n_vocab * sizeof *tok->piece_off);
    tok->piece_len = malloc((size_t)tok->n_vocab * sizeof *tok->piece_len);
    if (!tok->piece_off || !tok->piece_len || memra__bytes_reserve(&buf, tok->strs.arena_len + 16) != MEMRA_OK)
        goto nomem;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        const char *t = memra__strtab_str(&tok->strs, id);
        uint32_t n = tok->strs.len[id];
        uint32_t a = tok->attr[id];
        size_t start = buf.n;
        memra_status_t st = MEMRA_OK;
        if (a & (MEMRA_TOKEN_ATTR_UNKNOWN | MEMRA_TOKEN_ATTR_CONTROL | MEMRA_TOKEN_ATTR_USER_DEFINED)) {
            st = memra__bytes_append(&buf, t, n);
        } else if (a & MEMRA_TOKEN_ATTR_NORMAL) {
            if (tok->kind == MEMRA__TOK_BPE)
                st = append_gpt2_decoded(&buf, inv, t, n);
            else
                st = append_unescaped(&buf, t, n);
        } else if (a & MEMRA_TOKEN_ATTR_BYTE) {
            unsigned char c = byte_of(t, n);
            st = memra__bytes_append(&buf, &c, 1);
        }
        if (st != MEMRA_OK || buf.n > UINT32_MAX)
            goto nomem;
        tok->piece_off[id] = (uint32_t)start;
        tok->piece_len[id] = (uint32_t)(buf.n - start);
    }
    tok->pieces = buf.v ? buf.v : calloc(1, 1);
    return tok->pieces ? MEMRA_OK : memra__fail(NULL, MEMRA_E_NOMEM, "out of memory building token pieces");
nomem:
    free(buf.v);
    return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory building token pieces");
}

/* ---- loading ---------------------------------------------------------------- */

/* *IDX = the required key KEY, an array of strings (WHAT names it). */
static memra_status_t find_str_array(const memra_gguf_t *g, const char *key, const char *what, int64_t *idx)
{
    *idx = memra_gguf_find_kv(g, key);
    if (*idx < 0)
        return memra__fail(NULL, MEMRA_E_FORMAT, "cannot find tokenizer %s (%s)", what, key);
    if (memra_gguf_kv_type(g, *idx) != MEMRA_GGUF_ARRAY || memra_gguf_arr_type(g, *idx) != MEMRA_GGUF_STRING)
        return memra__fail(NULL, MEMRA_E_FORMAT, "%s is not an array of strings", key);
    return MEMRA_OK;
}

/* The raw elements of the optional per-token array KEY (NULL when absent),
 * of element type WANT or else ALSO (*TYPE says which; ALSO may be WANT),
 * with at least N entries. KINDS names the accepted types in messages. */
static memra_status_t per_token_array(const memra_gguf_t *g, const char *key, uint64_t n, memra_gguf_type_t want,
                                      memra_gguf_type_t also, const char *kinds, const unsigned char **data,
                                      memra_gguf_type_t *type)
{
    *data = NULL;
    int64_t i = memra_gguf_find_kv(g, key);
    if (i < 0)
        return MEMRA_OK;
    *type = memra_gguf_kv_type(g, i) == MEMRA_GGUF_ARRAY ? memra_gguf_arr_type(g, i) : MEMRA_GGUF_TYPE_COUNT;
    if (*type != want && *type != also)
        return memra__fail(NULL, MEMRA_E_FORMAT, "%s is not %s array", key, kinds);
    if (memra_gguf_arr_n(g, i) < n)
        return memra__fail(NULL, MEMRA_E_FORMAT, "%s has %llu entries for %llu tokens", key,
                           (unsigned long long)memra_gguf_arr_n(g, i), (unsigned long long)n);
    *data = memra_gguf_arr_data(g, i);
    return MEMRA_OK;
}

static memra_status_t load_tokens(memra_tokenizer_t *tok, const memra_gguf_t *g)
{
    int64_t ki;
    memra_status_t st = find_str_array(g, "tokenizer.ggml.tokens", "vocab", &ki);
    if (st != MEMRA_OK)
        return st;
    uint64_t n = memra_gguf_arr_n(g, ki);
    if (n == 0 || n >= (uint64_t)INT32_MAX / 2)
        return memra__fail(NULL, MEMRA_E_FORMAT, "tokenizer.ggml.tokens has %llu entries", (unsigned long long)n);
    tok->n_vocab = (int32_t)n;

    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if (memra_gguf_arr_str(g, ki, i, &s, &len) != MEMRA_OK)
            return memra__fail(NULL, MEMRA_E_FORMAT, "cannot read tokenizer.ggml.tokens[%llu]", (unsigned long long)i);
        total += len + 1;
    }
    /* Merge rules add a few strings that are not tokens. */
    if (memra__strtab_init(&tok->strs, (uint32_t)(n + n / 8), total + total / 4) != MEMRA_OK)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory for %llu tokens", (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        char empty[32];
        memra_gguf_arr_str(g, ki, i, &s, &len);
        if (len == 0) {
            /* llama.cpp renames empty texts so they stay unique. */
            len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%llu]", (unsigned long long)i);
            s = empty;
        }
        int32_t sid;
        bool added;
        if ((st = memra__strtab_intern(&tok->strs, s, len, &sid, &added)) != MEMRA_OK)
            return memra__fail(NULL, st, "out of memory for %llu tokens", (unsigned long long)n);
        if (!added)
            return memra__fail(NULL, MEMRA_E_FORMAT, "duplicate token in vocabulary: '%.*s' has ids %d and %llu",
                               (int)(len > 64 ? 64 : len), s, (int)sid, (unsigned long long)i);
    }

    tok->scores = calloc(n, sizeof *tok->scores);
    tok->attr = malloc(n * sizeof *tok->attr);
    if (!tok->scores || !tok->attr)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory for %llu tokens", (unsigned long long)n);

    const unsigned char *scores, *types;
    memra_gguf_type_t st_type = MEMRA_GGUF_FLOAT32, tt_type;
    if ((st = per_token_array(g, "tokenizer.ggml.scores", n, MEMRA_GGUF_FLOAT32, MEMRA_GGUF_INT32,
                              "a FLOAT32 or INT32", &scores, &st_type)) != MEMRA_OK ||
        (st = per_token_array(g, "tokenizer.ggml.token_type", n, MEMRA_GGUF_INT32, MEMRA_GGUF_INT32, "an INT32",
                              &types, &tt_type)) != MEMRA_OK)
        return st;
    for (uint64_t i = 0; scores && i < n; i++) {
        if (st_type == MEMRA_GGUF_FLOAT32) {
            memcpy(&tok->scores[i], scores + 4 * i, 4);
        } else {
            int32_t v;
            memcpy(&v, scores + 4 * i, 4);
            tok->scores[i] = (float)v;
        }
    }
    for (uint64_t i = 0; i < n; i++) {
        int32_t ty = 1; /* NORMAL without the key */
        if (types)
            memcpy(&ty, types + 4 * i, 4);
        /* GGUF token types 1..6 -> attribute bits; anything else is UNDEFINED (0). */
        static const uint32_t map[7] = {0, MEMRA_TOKEN_ATTR_NORMAL, MEMRA_TOKEN_ATTR_UNKNOWN, MEMRA_TOKEN_ATTR_CONTROL,
                                        MEMRA_TOKEN_ATTR_USER_DEFINED, MEMRA_TOKEN_ATTR_UNUSED, MEMRA_TOKEN_ATTR_BYTE};
        tok->attr[i] = ty >= 0 && ty <= 6 ? map[ty] : 0;
    }
    return MEMRA_OK;
}

static memra_status_t load_merges(memra_tokenizer_t *tok, const memra_gguf_t *g)
{
    int64_t mi;
    memra_status_t st = find_str_array(g, "tokenizer.ggml.merges", "merges", &mi);
    if (st != MEMRA_OK)
        return st;
    uint64_t n = memra_gguf_arr_n(g, mi);
    if (n >= (uint64_t)INT32_MAX)
        return memra__fail(NULL, MEMRA_E_FORMAT, "tokenizer.ggml.merges has %llu entries", (unsigned long long)n);
    if (memra__mergemap_init(&tok->merges, n) != MEMRA_OK)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory for %llu merges", (unsigned long long)n);
    char *cat = NULL;
    size_t cat_cap = 0;
    for (uint64_t i = 0; i < n && st == MEMRA_OK; i++) {
        const char *s;
        size_t len;
        if (memra_gguf_arr_str(g, mi, i, &s, &len) != MEMRA_OK) {
            st = memra__fail(NULL, MEMRA_E_FORMAT, "cannot read tokenizer.ggml.merges[%llu]", (unsigned long long)i);
            break;
        }
        /* "A B", split at the first space after the first byte (a part may itself be " "). */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp)
            continue;
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        if (ll + rl > cat_cap) {
            cat_cap = (ll + rl) * 2 + 64;
            char *c = realloc(cat, cat_cap);
            if (!c) {
                st = MEMRA_E_NOMEM;
                break;
            }
            cat = c;
        }
        int32_t l, r, res;
        memcpy(cat, s, ll);
        memcpy(cat + ll, sp + 1, rl);
        if ((st = memra__strtab_intern(&tok->strs, s, ll, &l, NULL)) != MEMRA_OK ||
            (st = memra__strtab_intern(&tok->strs, sp + 1, rl, &r, NULL)) != MEMRA_OK ||
            (st = memra__strtab_intern(&tok->strs, cat, ll + rl, &res, NULL)) != MEMRA_OK)
            break;
        memra__mergemap_add(&tok->merges, l, r, (int32_t)i, res);
    }
    free(cat);
    if (st == MEMRA_E_NOMEM || st == MEMRA_E_RANGE)
        return memra__fail(NULL, st, "out of memory for %llu merges", (unsigned long long)n);
    return st;
}

static void byte_tables(memra_tokenizer_t *tok)
{
    gpt2_alphabet(tok->byte_cp);
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t ul = memra__utf8_put(u, tok->byte_cp[b]);
        tok->byte_sid[b] = memra__strtab_find(&tok->strs, u, ul);
        /* Fallback: each byte of the encoded char as a one-byte token. */
        for (size_t k = 0; k < 2; k++)
            tok->byte_fb[b][k] = k < ul ? memra_tokenizer_token_id(tok, u + k, 1) : -1;
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", (unsigned)b);
        int32_t id = find_text(tok, hex);
        if (id < 0 && tok->kind == MEMRA__TOK_SPM) {
            char c = (char)b;
            id = memra_tokenizer_token_id(tok, &c, 1);
        }
        tok->byte_tok[b] = id;
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

memra_status_t memra__ws_cut_init(memra_tokenizer_t *tok)
{
    tok->ws_cut = false;
    if (tok->kind == MEMRA__TOK_BPE)
        return MEMRA_OK;
    uint32_t cps[64];
    int32_t n_cp = 0;
    /* Every string merges can produce is interned (tokens, and for BPE the merge results). */
    for (uint32_t id = 0; id < tok->strs.n; id++) {
        const unsigned char *t = (const unsigned char *)memra__strtab_str(&tok->strs, (int32_t)id);
        uint32_t n = tok->strs.len[id];
        for (uint32_t q = 1; q + 3 <= n; q++) {
            if (t[q] != 0xE2 || t[q + 1] != 0x96 || t[q + 2] != 0x81)
                continue;
            size_t i = q - 1;
            while (i > 0 && q - i < 4 && (t[i] & 0xC0) == 0x80)
                i--;
            size_t k = i;
            uint32_t x = get_utf8(t, q, &k);
            if (k != q || x == 0x2581)
                continue;
            if (x < 0x80) {
                tok->nocut_ascii[x >> 3] |= (uint8_t)(1u << (x & 7));
                continue;
            }
            bool seen = false;
            for (int32_t j = 0; j < n_cp && !seen; j++)
                seen = cps[j] == x;
            if (seen)
                continue;
            if (n_cp == (int32_t)MEMRA__ARRAY_LEN(cps))
                return MEMRA_OK; /* too many exceptions: merge whole pieces */
            cps[n_cp++] = x;
        }
    }
    if (n_cp) {
        if (!(tok->nocut_cp = malloc((size_t)n_cp * sizeof *tok->nocut_cp)))
            return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory for the tokenizer");
        qsort(cps, (size_t)n_cp, sizeof *cps, cmp_u32);
        memcpy(tok->nocut_cp, cps, (size_t)n_cp * sizeof *cps);
        tok->n_nocut_cp = n_cp;
    }
    tok->ws_cut = true;
    return MEMRA_OK;
}

static void detect_role(memra_tokenizer_t *tok, memra_special_token_t role, const char *const *list)
{
    if (tok->special[role] >= 0)
        return;
    /* llama.cpp takes whichever candidate its hash map yields first; we take list order. */
    for (size_t i = 0; list[i]; i++) {
        int32_t id = find_text(tok, list[i]);
        if (id >= 0) {
            tok->special[role] = id;
            tok->attr[id] |= MEMRA_TOKEN_ATTR_CONTROL;
            return;
        }
    }
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static memra_status_t build_eog(memra_tokenizer_t *tok)
{
    int32_t cap = 64;
    tok->eog = malloc((size_t)cap * sizeof *tok->eog);
    if (!tok->eog)
        return MEMRA_E_NOMEM;
    tok->n_eog = 0;
    int32_t cand[64];
    int32_t nc = 0;
    cand[nc++] = tok->special[MEMRA_SPECIAL_FIM_PAD];
    cand[nc++] = tok->special[MEMRA_SPECIAL_FIM_REP];
    cand[nc++] = tok->special[MEMRA_SPECIAL_FIM_SEP];
    for (size_t i = 0; LIST_EOG[i]; i++) {
        int32_t id = find_text(tok, LIST_EOG[i]);
        if (id >= 0) {
            tok->attr[id] |= MEMRA_TOKEN_ATTR_CONTROL;
            cand[nc++] = id;
        }
    }
    /* gpt-oss: these must always be rendered (llama.cpp makes them user-defined). */
    static const char *const render[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < MEMRA__ARRAY_LEN(render); i++) {
        int32_t id = find_text(tok, render[i]);
        if (id >= 0)
            tok->attr[id] = MEMRA_TOKEN_ATTR_USER_DEFINED;
    }
    cand[nc++] = tok->special[MEMRA_SPECIAL_EOS];
    cand[nc++] = tok->special[MEMRA_SPECIAL_EOT];
    cand[nc++] = tok->special[MEMRA_SPECIAL_EOM];
    for (int32_t i = 0; i < nc; i++) {
        if (cand[i] < 0)
            continue;
        bool dup = false;
        for (int32_t k = 0; k < tok->n_eog && !dup; k++)
            dup = tok->eog[k] == cand[i];
        if (!dup)
            tok->eog[tok->n_eog++] = cand[i];
    }
    /* o200k_harmony / solar-open: "<|end|>" is not the end when "<|return|>"+"<|call|>"
     * (or "<|calls|>"+"<|flush|>") exist. gemma4: "</s>" is not the end when
     * "<|tool_response>" exists. */
    bool has_return = false, has_call = false, has_flush = false, has_tool = false;
    int32_t end_id = -1, s_id = -1;
    for (int32_t k = 0; k < tok->n_eog; k++) {
        int32_t id = tok->eog[k];
        has_return |= text_is(tok, id, "<|return|>");
        has_call |= text_is(tok, id, "<|call|>") || text_is(tok, id, "<|calls|>");
        has_flush |= text_is(tok, id, "<|flush|>");
        has_tool |= text_is(tok, id, "<|tool_response>");
        if (text_is(tok, id, "<|end|>"))
            end_id = id;
        if (text_is(tok, id, "</s>"))
            s_id = id;
    }
    int32_t drop[2] = {-1, -1};
    if (end_id >= 0 && ((has_return && has_call) || (has_call && has_flush))) {
        drop[0] = end_id;
        tok->attr[end_id] = MEMRA_TOKEN_ATTR_USER_DEFINED;
    }
    if (s_id >= 0 && has_tool) {
        drop[1] = s_id;
        tok->attr[s_id] = MEMRA_TOKEN_ATTR_NORMAL;
    }
    int32_t o = 0;
    for (int32_t k = 0; k < tok->n_eog; k++)
        if (tok->eog[k] != drop[0] && tok->eog[k] != drop[1])
            tok->eog[o++] = tok->eog[k];
    tok->n_eog = o;
    qsort(tok->eog, (size_t)tok->n_eog, sizeof *tok->eog, cmp_i32);
    return MEMRA_OK;
}

static memra_status_t build_special_order(memra_tokenizer_t *tok)
{
    const uint32_t want = MEMRA_TOKEN_ATTR_CONTROL | MEMRA_TOKEN_ATTR_USER_DEFINED | MEMRA_TOKEN_ATTR_UNKNOWN;
    int32_t n = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++)
        n += (tok->attr[id] & want) != 0;
    tok->special_order = malloc(((size_t)n + 1) * sizeof *tok->special_order);
    if (!tok->special_order)
        return MEMRA_E_NOMEM;
    tok->n_special = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++)
        if (tok->attr[id] & want)
            tok->special_order[tok->n_special++] = id;
    /* Longest text first; llama.cpp's std::sort leaves equal lengths in any order, we keep
     * id order. Bottom-up merge sort: stable, and needs no global for the comparison. */
    int32_t *tmp = malloc(((size_t)n + 1) * sizeof *tmp);
    if (!tmp)
        return MEMRA_E_NOMEM;
    for (int32_t w = 1; w < n; w *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * w) {
            int32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int32_t a = tok->special_order[i], b = tok->special_order[j];
                uint32_t la = tok->strs.len[a], lb = tok->strs.len[b];
                tmp[k++] = (lb > la || (lb == la && b < a)) ? tok->special_order[j++] : tok->special_order[i++];
            }
            while (i < mid)
                tmp[k++] = tok->special_order[i++];
            while (j < hi)
                tmp[k++] = tok->special_order[j++];
        }
        memcpy(tok->special_order, tmp, (size_t)n * sizeof *tmp);
    }
    free(tmp);
    return MEMRA_OK;
}

static void set_attr(memra_tokenizer_t *tok, const char *text, uint32_t bit, bool on)
{
    int32_t id = find_text(tok, text);
    if (id < 0)
        return;
    tok->attr[id] = on ? tok->attr[id] | bit : tok->attr[id] & ~bit;
}

/* llama.cpp sets LSTRIP/RSTRIP by model, pre-tokenizer or architecture name. */
static void name_attrs(memra_tokenizer_t *tok, const memra_gguf_t *g)
{
    size_t len = 0;
    const char *name = kv_str(g, "general.name", &len);
    const char *arch = kv_str(g, "general.architecture", NULL);
    const char *pre = kv_str(g, "tokenizer.ggml.pre", NULL);
    char lower[256];
    size_t ln = 0;
    for (; name && ln < len && ln + 1 < sizeof lower; ln++)
        lower[ln] = (char)tolower((unsigned char)name[ln]);
    lower[ln] = '\0';
    bool jina = pre && (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") || strstr(pre, "jina-v2-code"));
    bool bert = arch && (strstr(arch, "nomic-bert-moe") || strstr(arch, "jina-bert-v3"));
    if (jina || bert) {
        set_attr(tok, "<mask>", MEMRA_TOKEN_ATTR_LSTRIP, true);
    } else if (strstr(lower, "phi-3") || strstr(lower, "phi3")) {
        for (int32_t i = 0; i < tok->n_special; i++)
            tok->attr[tok->special_order[i]] |= MEMRA_TOKEN_ATTR_RSTRIP;
        set_attr(tok, "</s>", MEMRA_TOKEN_ATTR_RSTRIP, true);
        set_attr(tok, "<unk>", MEMRA_TOKEN_ATTR_RSTRIP, false);
        set_attr(tok, "<s>", MEMRA_TOKEN_ATTR_RSTRIP, false);
        set_attr(tok, "<|endoftext|>", MEMRA_TOKEN_ATTR_RSTRIP, false);
    } else if (strstr(lower, "modern-bert")) {
        set_attr(tok, "[MASK]", MEMRA_TOKEN_ATTR_LSTRIP, true);
    }
}

static memra_status_t dup_cstr(char **dst, const char *s, size_t n)
{
    *dst = malloc(n + 1);
    if (!*dst)
        return MEMRA_E_NOMEM;
    memcpy(*dst, s, n);
    (*dst)[n] = '\0';
    return MEMRA_OK;
}

static memra_status_t build(memra_tokenizer_t *tok, const memra_gguf_t *g)
{
    memra_status_t st;
    size_t mlen = 0, plen = 0;
    const char *model = kv_str(g, "tokenizer.ggml.model", &mlen);
    if (!model)
        return memra__fail(NULL, MEMRA_E_NOT_FOUND, "the file has no tokenizer (no tokenizer.ggml.model key)");
    const char *pre = kv_str(g, "tokenizer.ggml.pre", &plen);
    if (strcmp(model, "no_vocab") == 0 || strcmp(model, "none") == 0)
        return memra__fail(NULL, MEMRA_E_NOT_FOUND, "the file has no vocabulary (tokenizer.ggml.model = %s)", model);

    for (int r = 0; r < MEMRA_SPECIAL_COUNT; r++)
        tok->special[r] = -1;
    if (strcmp(model, "llama") == 0) {
        tok->kind = MEMRA__TOK_SPM;
        tok->special[MEMRA_SPECIAL_BOS] = 1;
        tok->special[MEMRA_SPECIAL_EOS] = 2;
        tok->special[MEMRA_SPECIAL_UNK] = 0;
        tok->add_space_prefix = true;
        tok->add_bos = true;
        if ((st = dup_cstr(&tok->pre_name, "default", 7)) != MEMRA_OK)
            return st;
    } else if (strcmp(model, "gpt2") == 0 || strcmp(model, "gemma4") == 0) {
        bool gemma = strcmp(model, "gemma4") == 0;
        const char *pname = gemma ? "gemma4" : pre;
        if (!gemma && (!pre || !*pre))
            memra__log(MEMRA_LOG_WARN, "tokenizer: missing tokenizer.ggml.pre, using 'default' (quality degrades)");
        tok->pre = memra__pre_lookup(pname);
        if (!tok->pre)
            return memra__fail(NULL, MEMRA_E_UNSUPPORTED, "unknown pre-tokenizer type '%s' (supported: %s)", pname,
                               memra__pre_names());
        tok->kind = gemma || strcmp(tok->pre->name, "gemma4") == 0 || strcmp(tok->pre->name, "granite-embed-multi-311m") == 0
                        ? MEMRA__TOK_GEMMA4
                        : MEMRA__TOK_BPE;
        if (!gemma) {
            tok->special[MEMRA_SPECIAL_BOS] = 11;
            tok->special[MEMRA_SPECIAL_EOS] = 11;
        }
        if (tok->pre->bos_none)
            tok->special[MEMRA_SPECIAL_BOS] = -1;
        tok->ignore_merges = tok->pre->ignore_merges;
        tok->add_bos = tok->pre->add_bos;
        tok->clean_spaces = tok->pre->clean_spaces;
        if ((st = dup_cstr(&tok->pre_name, tok->pre->name, strlen(tok->pre->name))) != MEMRA_OK)
            return st;
    } else {
        return memra__fail(NULL, MEMRA_E_UNSUPPORTED,
                           "unsupported tokenizer model '%s' (supported: gpt2, llama, gemma4)", model);
    }
    if ((st = dup_cstr(&tok->model_name, model, mlen)) != MEMRA_OK)
        return st;
    bool found;
    if ((st = kv_bool(g, "tokenizer.ggml.add_space_prefix", &tok->add_space_prefix, &found)) != MEMRA_OK)
        return st;

    if ((st = load_tokens(tok, g)) != MEMRA_OK)
        return st;
    if (tok->kind != MEMRA__TOK_SPM && (st = load_merges(tok, g)) != MEMRA_OK)
        return st;
    byte_tables(tok);
    if ((st = memra__ws_cut_init(tok)) != MEMRA_OK)
        return st;
    if (tok->kind != MEMRA__TOK_SPM && (st = memra__pretok_create(tok->pre->name, &tok->pretok)) != MEMRA_OK)
        return st;

    /* Newline token, found before any special token exists (as llama.cpp does). */
    if (tok->kind == MEMRA__TOK_SPM) {
        tok->special[MEMRA_SPECIAL_NL] = tok->byte_tok['\n'] >= 0 ? tok->byte_tok['\n'] : tok->special[MEMRA_SPECIAL_PAD];
    } else {
        memra__ids_t nl = {0};
        if ((st = memra__tokenize_ids(tok, "\n", 1, 0, &nl)) != MEMRA_OK) {
            free(nl.v);
            return st;
        }
        tok->special[MEMRA_SPECIAL_NL] = nl.n ? nl.v[0] : -1;
        free(nl.v);
    }

    /* Special ids: an out-of-range default is dropped, an out-of-range key ignored. */
    for (int r = 0; r < MEMRA_SPECIAL_COUNT; r++)
        if (tok->special[r] >= tok->n_vocab && r != MEMRA_SPECIAL_NL)
            tok->special[r] = -1;
    for (size_t k = 0; k < MEMRA__ARRAY_LEN(SPECIAL_KEYS); k++) {
        int64_t i = memra_gguf_find_kv(g, SPECIAL_KEYS[k].key);
        if (i < 0)
            continue;
        uint64_t v;
        if (memra_gguf_kv_u64(g, i, &v) != MEMRA_OK)
            return memra__fail(NULL, MEMRA_E_FORMAT, "tokenizer key %s is not an unsigned integer", SPECIAL_KEYS[k].key);
        if (v >= (uint64_t)tok->n_vocab)
            memra__log(MEMRA_LOG_WARN, "tokenizer: %s = %llu is out of range, keeping %d", SPECIAL_KEYS[k].key,
                       (unsigned long long)v, (int)tok->special[SPECIAL_KEYS[k].role]);
        else
            tok->special[SPECIAL_KEYS[k].role] = (int32_t)v;
    }
    if ((st = kv_bool(g, "tokenizer.ggml.add_bos_token", &tok->add_bos, &found)) != MEMRA_OK ||
        (st = kv_bool(g, "tokenizer.ggml.add_eos_token", &tok->add_eos, &found)) != MEMRA_OK)
        return st;
    /* llama.cpp PR #21500: Gemma 4 always starts with BOS. */
    if (tok->kind == MEMRA__TOK_GEMMA4)
        tok->add_bos = true;
    if (tok->add_bos && tok->special[MEMRA_SPECIAL_BOS] < 0)
        return memra__fail(NULL, MEMRA_E_FORMAT, "tokenizer.ggml.add_bos_token is true, but there is no BOS token");
    if (tok->add_eos && tok->special[MEMRA_SPECIAL_EOS] < 0)
        return memra__fail(NULL, MEMRA_E_FORMAT, "tokenizer.ggml.add_eos_token is true, but there is no EOS token");

    detect_role(tok, MEMRA_SPECIAL_EOT, LIST_EOT);
    detect_role(tok, MEMRA_SPECIAL_EOM, LIST_EOM);
    detect_role(tok, MEMRA_SPECIAL_FIM_PRE, LIST_FIM_PRE);
    detect_role(tok, MEMRA_SPECIAL_FIM_SUF, LIST_FIM_SUF);
    detect_role(tok, MEMRA_SPECIAL_FIM_MID, LIST_FIM_MID);
    detect_role(tok, MEMRA_SPECIAL_FIM_PAD, LIST_FIM_PAD);
    detect_role(tok, MEMRA_SPECIAL_FIM_REP, LIST_FIM_REP);
    detect_role(tok, MEMRA_SPECIAL_FIM_SEP, LIST_FIM_SEP);
    /* Control tokens named "unused" are unused. */
    for (int32_t id = 0; id < tok->n_vocab; id++)
        if ((tok->attr[id] & MEMRA_TOKEN_ATTR_CONTROL) && strstr(memra__strtab_str(&tok->strs, id), "unused"))
            tok->attr[id] |= MEMRA_TOKEN_ATTR_UNUSED;
    if (build_eog(tok) != MEMRA_OK || build_special_order(tok) != MEMRA_OK || memra__special_build(tok) != MEMRA_OK)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory building special tokens");
    if ((st = build_pieces(tok)) != MEMRA_OK)
        return st;
    name_attrs(tok, g);

    size_t tlen = 0;
    const char *tmpl = kv_str(g, "tokenizer.chat_template", &tlen);
    if (tmpl && (st = dup_cstr(&tok->chat_template, tmpl, tlen)) != MEMRA_OK)
        return st;
    return MEMRA_OK;
}

memra_status_t memra_tokenizer_from_gguf(const memra_gguf_t *gguf, memra_tokenizer_t **out)
{
    if (out)
        *out = NULL;
    if (!gguf || !out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_tokenizer_from_gguf: NULL gguf or out");
    memra_tokenizer_t *tok = calloc(1, sizeof *tok);
    if (!tok)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory for a tokenizer");
    pthread_mutex_init(&tok->err_lock, NULL);
    memra_status_t st = build(tok, gguf);
    if (st != MEMRA_OK) {
        memra_tokenizer_free(tok);
        return memra__fail(NULL, st, "tokenizer: %s", memra_last_error());
    }
    *out = tok;
    return MEMRA_OK;
}

memra_status_t memra_tokenizer_load(const char *path, memra_tokenizer_t **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_tokenizer_load: NULL path or out");
    memra_gguf_t *g = NULL;
    memra_status_t st = memra_gguf_open(path, &g);
    if (st != MEMRA_OK)
        return st;
    st = memra_tokenizer_from_gguf(g, out);
    memra_gguf_close(g);
    if (st != MEMRA_OK)
        return memra__fail(NULL, st, "%s: %s", path, memra_last_error());
    return MEMRA_OK;
}

void memra_tokenizer_free(memra_tokenizer_t *tok)
{
    if (!tok)
        return;
    memra__pretok_free(tok->pretok);
    memra__strtab_free(&tok->strs);
    memra__mergemap_free(&tok->merges);
    free(tok->model_name);
    free(tok->pre_name);
    free(tok->scores);
    free(tok->attr);
    free(tok->pieces);
    free(tok->piece_off);
    free(tok->piece_len);
    free(tok->special_order);
    free(tok->trie);
    free(tok->eog);
    free(tok->chat_template);
    free(tok->nocut_cp);
    pthread_mutex_destroy(&tok->err_lock);
    free(tok);
}

/* ---- accessors ---------------------------------------------------------------- */

int32_t memra_tokenizer_n_vocab(const memra_tokenizer_t *tok)
{
    return tok ? tok->n_vocab : 0;
}

const char *memra_tokenizer_model(const memra_tokenizer_t *tok)
{
    return tok ? tok->model_name : NULL;
}

const char *memra_tokenizer_pre(const memra_tokenizer_t *tok)
{
    return tok ? tok->pre_name : NULL;
}

int32_t memra_tokenizer_special(const memra_tokenizer_t *tok, memra_special_token_t which)
{
    if (!tok || (unsigned)which >= MEMRA_SPECIAL_COUNT)
        return -1;
    return tok->special[which];
}

int32_t memra_tokenizer_bos(const memra_tokenizer_t *tok)
{
    return memra_tokenizer_special(tok, MEMRA_SPECIAL_BOS);
}

int32_t memra_tokenizer_eos(const memra_tokenizer_t *tok)
{
    return memra_tokenizer_special(tok, MEMRA_SPECIAL_EOS);
}

int32_t memra_tokenizer_eot(const memra_tokenizer_t *tok)
{
    return memra_tokenizer_special(tok, MEMRA_SPECIAL_EOT);
}

int memra_tokenizer_add_bos(const memra_tokenizer_t *tok)
{
    return tok && tok->add_bos;
}

int memra_tokenizer_add_eos(const memra_tokenizer_t *tok)
{
    return tok && tok->add_eos;
}

int memra_tokenizer_is_eog(const memra_tokenizer_t *tok, int32_t id)
{
    if (!tok || id < 0)
        return 0;
    int32_t lo = 0, hi = tok->n_eog;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (tok->eog[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < tok->n_eog && tok->eog[lo] == id;
}

memra_status_t memra_tokenizer_eog_ids(const memra_tokenizer_t *tok, int32_t *ids, int32_t n_max, int32_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!tok || !n_out || n_max < 0 || (!ids && n_max))
        return memra__tok_fail(tok, MEMRA_E_INVALID, "memra_tokenizer_eog_ids: NULL handle, ids or n_out");
    *n_out = tok->n_eog;
    if (tok->n_eog > n_max)
        return memra__tok_fail(tok, MEMRA_E_RANGE, "memra_tokenizer_eog_ids: %d ids do not fit in %d", (int)tok->n_eog,
                               (int)n_max);
    if (tok->n_eog)
        memcpy(ids, tok->eog, (size_t)tok->n_eog * sizeof *ids);
    return MEMRA_OK;
}

const char *memra_tokenizer_chat_template(const memra_tokenizer_t *tok)
{
    return tok ? tok->chat_template : NULL;
}

const char *memra_tokenizer_token_text(const memra_tokenizer_t *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->n_vocab)
        return NULL;
    return memra__strtab_str(&tok->strs, id);
}

float memra_tokenizer_token_score(const memra_tokenizer_t *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->n_vocab)
        return 0.0f;
    return tok->scores[id];
}

uint32_t memra_tokenizer_token_attr(const memra_tokenizer_t *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->n_vocab)
        return 0;
    return tok->attr[id];
}

int32_t memra_tokenizer_token_id(const memra_tokenizer_t *tok, const char *text, size_t len)
{
    if (!tok || (!text && len))
        return -1;
    int32_t id = memra__strtab_find(&tok->strs, text ? text : "", len);
    return id < tok->n_vocab ? id : -1;
}
