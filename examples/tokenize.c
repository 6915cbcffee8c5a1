/* memra-tokenize: text <-> token ids with a GGUF's tokenizer.
 *
 *   memra-tokenize -m FILE [--add-special] [--parse-special] < text
 *       reads UTF-8 text on stdin (all of it, trailing newline included: use
 *       printf '%s' to leave it out) and prints the ids on one line,
 *       separated by single spaces.
 *   memra-tokenize -m FILE --decode [--add-special] [--parse-special] < ids
 *       reads whitespace-separated ids and prints the text, nothing added.
 *       With --parse-special control tokens are written as their text, with
 *       --add-special the BOS/EOS the model adds are dropped, so decoding with
 *       the flags used for encoding gives the text back.
 *   --clean-spaces (with --decode) applies llama.cpp's clean-up of spaces
 *   before punctuation for the vocabularies that ask for it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s -m FILE [--add-special] [--parse-special] < text\n"
            "       %s -m FILE --decode [--add-special] [--parse-special] [--clean-spaces] < ids\n",
            argv0, argv0);
    return 2;
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (n < cap) {
            if (ferror(f)) {
                free(b);
                return NULL;
            }
            break;
        }
        char *nb = realloc(b, cap * 2);
        if (!nb)
            free(b);
        b = nb;
        cap *= 2;
    }
    *len = n;
    return b;
}

static int encode(const memra_tokenizer_t *tok, const char *text, size_t len, uint32_t flags)
{
    int32_t n = 0;
    memra_status_t st = memra_tokenize(tok, text, len, NULL, 0, flags, &n);
    if (st != MEMRA_OK && st != MEMRA_E_RANGE) {
        fprintf(stderr, "memra-tokenize: %s\n", memra_last_error());
        return 1;
    }
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids || memra_tokenize(tok, text, len, ids, n, flags, &n) != MEMRA_OK) {
        fprintf(stderr, "memra-tokenize: %s\n", ids ? memra_last_error() : "out of memory");
        free(ids);
        return 1;
    }
    for (int32_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
    free(ids);
    return 0;
}

static int decode(const memra_tokenizer_t *tok, char *text, uint32_t flags)
{
    size_t cap = 1024, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    char *p = text;
    while (ids) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX) {
            fprintf(stderr, "memra-tokenize: not a token id: \"%.20s\"\n", p);
            free(ids);
            return 1;
        }
        if (n == cap) {
            int32_t *nv = realloc(ids, cap * 2 * sizeof *ids);
            if (!nv)
                free(ids);
            ids = nv;
            cap *= 2;
            if (!ids)
                break;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (!ids) {
        fprintf(stderr, "memra-tokenize: out of memory\n");
        return 1;
    }
    size_t len = 0;
    memra_status_t st = memra_detokenize(tok, ids, (int32_t)n, NULL, 0, flags, &len);
    char *out = st == MEMRA_OK || st == MEMRA_E_RANGE ? malloc(len + 1) : NULL;
    if (!out || memra_detokenize(tok, ids, (int32_t)n, out, len, flags, &len) != MEMRA_OK) {
        fprintf(stderr, "memra-tokenize: %s\n", memra_last_error());
        free(out);
        free(ids);
        return 1;
    }
    fwrite(out, 1, len, stdout);
    free(out);
    free(ids);
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int add = 0, parse = 0, dec = 0, clean = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--add-special"))
            add = 1;
        else if (!strcmp(argv[i], "--parse-special"))
            parse = 1;
        else if (!strcmp(argv[i], "--decode"))
            dec = 1;
        else if (!strcmp(argv[i], "--clean-spaces"))
            clean = 1;
        else
            return usage(argv[0]);
    }
    if (!model)
        return usage(argv[0]);
    memra_tokenizer_t *tok = NULL;
    if (memra_tokenizer_load(model, &tok) != MEMRA_OK) {
        fprintf(stderr, "memra-tokenize: %s\n", memra_last_error());
        return 1;
    }
    size_t len = 0;
    char *in = read_all(stdin, &len);
    if (!in) {
        fprintf(stderr, "memra-tokenize: cannot read stdin\n");
        memra_tokenizer_free(tok);
        return 1;
    }
    int rc;
    if (dec) {
        in[len] = 0; /* read_all always leaves a free byte */
        uint32_t flags = (parse ? MEMRA_DETOKENIZE_UNPARSE_SPECIAL : 0) | (add ? MEMRA_DETOKENIZE_REMOVE_SPECIAL : 0) |
                         (clean ? MEMRA_DETOKENIZE_CLEAN_SPACES : 0);
        rc = decode(tok, in, flags);
    } else {
        uint32_t flags = (add ? MEMRA_TOKENIZE_ADD_SPECIAL : 0) | (parse ? MEMRA_TOKENIZE_PARSE_SPECIAL : 0);
        rc = encode(tok, in, len, flags);
    }
    free(in);
    memra_tokenizer_free(tok);
    return rc;
}
