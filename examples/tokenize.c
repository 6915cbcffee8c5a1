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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "cli.h"
#include "common.h"

enum { OPT_ADD = CLI_LONG_ONLY, OPT_PARSE, OPT_DECODE, OPT_CLEAN };

static const cli_opt_t k_opts[] = {
    {'m', "model", "FILE", "GGUF file whose tokenizer to use (required)"},
    {OPT_ADD, "add-special", NULL, "encode: add the BOS/EOS the model asks for; decode: drop them (default: off)"},
    {OPT_PARSE, "parse-special", NULL, "encode: parse control tokens in the text; decode: write them as text\n"
                                       "(default: off)"},
    {OPT_DECODE, "decode", NULL, "read token ids on stdin and print their text (default: encode)"},
    {OPT_CLEAN, "clean-spaces", NULL, "with --decode: llama.cpp's clean-up of spaces before punctuation, for\n"
                                      "the vocabularies that ask for it (default: off)"},
};

static const cli_prog_t k_prog = {
    "memra-tokenize",
    "-m FILE [--add-special] [--parse-special] < text\n"
    "-m FILE --decode [--add-special] [--parse-special] [--clean-spaces] < ids",
    "Text <-> token ids with a GGUF's tokenizer. Encoding reads UTF-8 text on stdin (all of it,\n"
    "trailing newline included: use printf '%s' to leave it out) and prints the ids on one line,\n"
    "separated by single spaces. --decode reads whitespace-separated ids and prints the text,\n"
    "nothing added; decoding with the flags used for encoding gives the text back.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "printf '%s' 'Hello world' | memra-tokenize -m model.gguf --add-special\n"
    "memra-tokenize -m model.gguf --decode < ids.txt",
};

static int encode(const memra_tokenizer_t *tok, const char *text, size_t len, uint32_t flags)
{
    int32_t *ids = NULL, n = 0;
    if (example_tokenize("memra-tokenize", tok, text, len, flags, &ids, &n))
        return 1;
    for (int32_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
    free(ids);
    return 0;
}

static int decode(const memra_tokenizer_t *tok, char *text, uint32_t flags)
{
    int32_t *ids = NULL, n = 0;
    const char *bad = NULL;
    int parsed = example_parse_ids(text, INT32_MIN, &ids, &n, &bad);
    if (parsed) {
        if (parsed > 0)
            fprintf(stderr, "memra-tokenize: not a token id: \"%.20s\"\n", bad);
        else
            fprintf(stderr, "memra-tokenize: out of memory\n");
        return 1;
    }
    size_t len = 0;
    memra_status_t st = memra_detokenize(tok, ids, n, NULL, 0, flags, &len);
    char *out = st == MEMRA_OK || st == MEMRA_E_RANGE ? malloc(len + 1) : NULL;
    if (!out || memra_detokenize(tok, ids, n, out, len, flags, &len) != MEMRA_OK) {
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
    cli_t c;
    cli_init(&c, &k_prog, argc, argv);
    for (int key; (key = cli_next(&c)) != -1;) {
        switch (key) {
        case 'm': model = c.arg; break;
        case OPT_ADD: add = 1; break;
        case OPT_PARSE: parse = 1; break;
        case OPT_DECODE: dec = 1; break;
        case OPT_CLEAN: clean = 1; break;
        }
    }
    if (c.first_operand < argc)
        cli_fail(&c, "unexpected argument '%s' (the input comes on stdin)", argv[c.first_operand]);
    if (!model)
        cli_fail(&c, "no tokenizer given (-m FILE)");
    memra_tokenizer_t *tok = NULL;
    if (memra_tokenizer_load(model, &tok) != MEMRA_OK) {
        fprintf(stderr, "memra-tokenize: %s\n", memra_last_error());
        return 1;
    }
    size_t len = 0;
    char *in = example_read_all(stdin, &len);
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
