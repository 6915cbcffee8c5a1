/* memra_tokenize: UTF-8 check, special-token splitting, then the model's
 * tokenizer on each raw fragment, with BOS/EOS as llama.cpp adds them. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

static memra_status_t push(memra__ids_t *out, int32_t id)
{
    if (memra__ids_push(out, id) != MEMRA_OK)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory collecting token ids");
    return MEMRA_OK;
}

static memra_status_t add_bos(const memra_tokenizer_t *tok, uint32_t flags, memra__ids_t *out)
{
    if (!(flags & MEMRA_TOKENIZE_ADD_SPECIAL) || !tok->add_bos)
        return MEMRA_OK;
    return push(out, tok->special[MEMRA_SPECIAL_BOS]);
}

static memra_status_t add_eos(const memra_tokenizer_t *tok, uint32_t flags, memra__ids_t *out)
{
    if (!(flags & MEMRA_TOKENIZE_ADD_SPECIAL) || !tok->add_eos)
        return MEMRA_OK;
    return push(out, tok->special[MEMRA_SPECIAL_EOS]);
}

size_t memra__escape_spaces(const char *text, size_t n, bool prefix, char *dst)
{
    size_t o = 0;
    if (prefix) {
        memcpy(dst, "\xE2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (text[i] == ' ') {
            memcpy(dst + o, "\xE2\x96\x81", 3);
            o += 3;
        } else {
            dst[o++] = text[i];
        }
    }
    return o;
}

/* gemma4 writes spaces as U+2581 before merging. */
static memra_status_t escape_spaces(const char *text, size_t n, memra__bytes_t *buf)
{
    buf->n = 0;
    if (memra__bytes_reserve(buf, 3 * n) != MEMRA_OK)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory escaping spaces");
    buf->n = memra__escape_spaces(text, n, false, buf->v);
    return MEMRA_OK;
}

memra_status_t memra__tokenize_ids(const memra_tokenizer_t *tok, const char *text, size_t n, uint32_t flags,
                                   memra__ids_t *out)
{
    memra__frags_t frags = {0};
    memra__bpe_scratch_t *bpe = NULL;
    memra__bytes_t esc = {0};
    memra__wcache_t spm_cache = {0};
    if (tok->kind == MEMRA__TOK_SPM)
        memra__wcache_enable(&spm_cache, n);
    memra_status_t st = memra__special_partition(tok, text, n, (flags & MEMRA_TOKENIZE_PARSE_SPECIAL) != 0, &frags);
    if (st == MEMRA_OK)
        st = add_bos(tok, flags, out);
    bool prev_special = true; /* SentencePiece: the first fragment gets the space prefix */
    for (size_t f = 0; f < frags.n && st == MEMRA_OK; f++) {
        const memra__frag_t *fr = &frags.v[f];
        if (fr->token >= 0) {
            st = push(out, fr->token);
            prev_special = true;
            continue;
        }
        const char *piece = text + fr->off;
        switch (tok->kind) {
        case MEMRA__TOK_SPM:
            st = memra__spm_fragment(tok, &spm_cache, piece, fr->len, tok->add_space_prefix && prev_special, out);
            break;
        case MEMRA__TOK_BPE:
            st = memra__bpe_fragment(tok, &bpe, piece, fr->len, n, out);
            break;
        case MEMRA__TOK_GEMMA4:
            st = escape_spaces(piece, fr->len, &esc);
            if (st == MEMRA_OK)
                st = memra__bpe_fragment(tok, &bpe, esc.v, esc.n, n, out);
            break;
        }
        prev_special = false;
    }
    if (st == MEMRA_OK)
        st = add_eos(tok, flags, out);
    free(frags.v);
    free(esc.v);
    memra__wcache_free(&spm_cache);
    memra__bpe_scratch_free(bpe);
    return st;
}

memra_status_t memra_tokenize(const memra_tokenizer_t *tok, const char *text, size_t text_len, int32_t *ids,
                              int32_t n_max, uint32_t flags, int32_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!tok || !n_out || (!text && text_len) || n_max < 0 || (!ids && n_max))
        return memra__tok_fail(tok, MEMRA_E_INVALID,
                               "memra_tokenize: NULL handle, text, ids or n_out, or negative n_max");
    if (flags & ~(uint32_t)(MEMRA_TOKENIZE_ADD_SPECIAL | MEMRA_TOKENIZE_PARSE_SPECIAL))
        return memra__tok_fail(tok, MEMRA_E_INVALID, "memra_tokenize: unknown flags 0x%x", (unsigned)flags);
    if (text_len > (size_t)INT32_MAX)
        return memra__tok_fail(tok, MEMRA_E_INVALID, "memra_tokenize: text of %zu bytes is longer than 2 GiB",
                               text_len);
    size_t bad = memra__utf8_bad_offset(text, text_len);
    if (bad < text_len)
        return memra__tok_fail(tok, MEMRA_E_INVALID,
                               "memra_tokenize: invalid UTF-8 at byte %zu (0x%02X)", bad,
                               (unsigned)(unsigned char)text[bad]);
    /* Ids go straight into the caller's array; past N_MAX they are only counted. */
    memra__ids_t out = {ids, 0, (size_t)n_max, true};
    memra_status_t st = memra__tokenize_ids(tok, text, text_len, flags, &out);
    if (st != MEMRA_OK)
        return memra__tok_fail(tok, st, "memra_tokenize: %s", memra_last_error());
    if (out.n > (size_t)INT32_MAX)
        return memra__tok_fail(tok, MEMRA_E_RANGE, "memra_tokenize: more than 2^31 tokens");
    *n_out = (int32_t)out.n;
    if (out.n > (size_t)n_max)
        return memra__tok_fail(tok, MEMRA_E_RANGE, "memra_tokenize: %zu ids do not fit in n_max = %d", out.n,
                               (int)n_max);
    return MEMRA_OK;
}
