/* Ids back to bytes: token_to_piece and detokenize as llama.cpp defines them.
 * The pieces themselves (GPT-2 alphabet decoded, U+2581 turned back into
 * spaces, <0xXX> into bytes) are precomputed at load time in vocab.c. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

/* Bytes of ID's piece; control/unknown tokens are empty unless SPECIAL.
 * LSTRIP drops one leading space. */
static inline const char *piece(const memra_tokenizer_t *tok, int32_t id, bool special, bool lstrip,
                                uint32_t *len)
{
    if (!special && (tok->attr[id] & (MEMRA_TOKEN_ATTR_CONTROL | MEMRA_TOKEN_ATTR_UNKNOWN))) {
        *len = 0;
        return "";
    }
    const char *p = tok->pieces + tok->piece_off[id];
    *len = tok->piece_len[id];
    if (lstrip && *len && p[0] == ' ') {
        p++;
        (*len)--;
    }
    return p;
}

memra_status_t memra_token_to_piece(const memra_tokenizer_t *tok, int32_t id, char *buf, size_t cap,
                                    uint32_t flags, size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!tok || !n_out || (!buf && cap))
        return memra__tok_fail(tok, MEMRA_E_INVALID, "memra_token_to_piece: NULL handle, buf or n_out");
    if (flags & ~(uint32_t)(MEMRA_PIECE_SPECIAL | MEMRA_PIECE_LSTRIP))
        return memra__tok_fail(tok, MEMRA_E_INVALID, "memra_token_to_piece: unknown flags 0x%x", (unsigned)flags);
    if (id < 0 || id >= tok->n_vocab)
        return memra__tok_fail(tok, MEMRA_E_RANGE, "memra_token_to_piece: token id %d is outside [0, %d)",
                               (int)id, (int)tok->n_vocab);
    uint32_t len;
    const char *p = piece(tok, id, (flags & MEMRA_PIECE_SPECIAL) != 0, (flags & MEMRA_PIECE_LSTRIP) != 0, &len);
    *n_out = len;
    if (len > cap)
        return memra__tok_fail(tok, MEMRA_E_RANGE, "memra_token_to_piece: piece of %u bytes does not fit in %zu",
                               (unsigned)len, cap);
    if (len)
        memcpy(buf, p, len);
    return MEMRA_OK;
}

/* llama.cpp's clean_up_tokenization_spaces, three passes over the text. */
static size_t clean_spaces(char *t, size_t total)
{
    /* " ?", " !", " .", " ," lose the space. */
    size_t n1 = total, o = total ? 1 : 0;
    for (size_t i = 1; i < n1; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            o--;
        t[o++] = x;
    }
    /* " ' " becomes "'". */
    size_t n2 = o;
    o = n2 ? 1 : 0;
    for (size_t i = 1; i < n2; i++) {
        char x = t[i];
        if (x == '\'' && i + 1 < n2 && t[i - 1] == ' ' && t[i + 1] == ' ') {
            o--;
            t[++i] = '\0';
        }
        t[o++] = x;
    }
    /* " 's", " 'm", " 're", " 've" lose the space (" 't", " 'd", " 'll" keep it). */
    size_t n3 = o;
    o = n3 ? 1 : 0;
    for (size_t i = 1; i < n3; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < n3) {
            char x1 = t[i + 1];
            if (x1 == 's' || x1 == 'm')
                o--;
            else if (i + 2 < n3 && ((x1 == 'r' && t[i + 2] == 'e') || (x1 == 'v' && t[i + 2] == 'e')))
                o--;
        }
        t[o++] = x;
    }
    return o;
}

memra_status_t memra_detokenize(const memra_tokenizer_t *tok, const int32_t *ids, int32_t n, char *buf,
                                size_t cap, uint32_t flags, size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!tok || !n_out || (!ids && n) || n < 0 || (!buf && cap))
        return memra__tok_fail(tok, MEMRA_E_INVALID,
                               "memra_detokenize: NULL handle, ids, buf or n_out, or negative n");
    if (flags & ~(uint32_t)(MEMRA_DETOKENIZE_REMOVE_SPECIAL | MEMRA_DETOKENIZE_UNPARSE_SPECIAL |
                            MEMRA_DETOKENIZE_CLEAN_SPACES))
        return memra__tok_fail(tok, MEMRA_E_INVALID, "memra_detokenize: unknown flags 0x%x", (unsigned)flags);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->n_vocab)
            return memra__tok_fail(tok, MEMRA_E_RANGE, "memra_detokenize: ids[%d] = %d is outside [0, %d)",
                                   (int)i, (int)ids[i], (int)tok->n_vocab);
    bool special = (flags & MEMRA_DETOKENIZE_UNPARSE_SPECIAL) != 0;
    /* SentencePiece: the first piece loses the space the prefix added. */
    bool strip_first = tok->add_space_prefix;
    if ((flags & MEMRA_DETOKENIZE_REMOVE_SPECIAL) && tok->add_bos && n > 0 &&
        ids[0] == tok->special[MEMRA_SPECIAL_BOS]) {
        /* llama.cpp keeps the first piece's space once it dropped BOS. */
        strip_first = false;
        ids++;
        n--;
    }
    if ((flags & MEMRA_DETOKENIZE_REMOVE_SPECIAL) && tok->add_eos && n > 0 &&
        ids[n - 1] == tok->special[MEMRA_SPECIAL_EOS])
        n--;

    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t len;
        piece(tok, ids[i], special, i == 0 && strip_first, &len);
        total += len;
    }
    bool clean = (flags & MEMRA_DETOKENIZE_CLEAN_SPACES) && tok->clean_spaces;
    /* Cleaning only shrinks the text, but needs all of it in one place first. */
    char *dst = buf;
    char *tmp = NULL;
    if (clean) {
        if (!(tmp = malloc(total + 1)))
            return memra__tok_fail(tok, MEMRA_E_NOMEM, "memra_detokenize: out of memory");
        dst = tmp;
    } else if (total > cap) {
        *n_out = total;
        return memra__tok_fail(tok, MEMRA_E_RANGE, "memra_detokenize: %zu bytes do not fit in %zu", total, cap);
    }
    size_t o = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t len;
        const char *p = piece(tok, ids[i], special, i == 0 && strip_first, &len);
        if (len)
            memcpy(dst + o, p, len);
        o += len;
    }
    if (clean) {
        o = clean_spaces(dst, o);
        *n_out = o;
        if (o > cap) {
            free(tmp);
            return memra__tok_fail(tok, MEMRA_E_RANGE, "memra_detokenize: %zu bytes do not fit in %zu", o, cap);
        }
        if (o)
            memcpy(buf, tmp, o);
        free(tmp);
        return MEMRA_OK;
    }
    *n_out = o;
    return MEMRA_OK;
}
