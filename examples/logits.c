/* memra-logits: dump the logits of every position of a token sequence.
 *
 *   memra-logits [-m MODEL] --tokens "1 2 3" --mode decode|prefill [--chunk N]
 *                [--device cpu|cuda:N] [--threads N] --out FILE
 *
 * decode: one memra_decode_step per token; prefill: one memra_forward over
 * all tokens with MEMRA_FORWARD_ALL_ROWS (split into chunks of N tokens when
 * --chunk is given). FILE receives row-major float32 [n_tokens][n_vocab],
 * the layout of the fixture references. Without -m the bundled default
 * model is used. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "common.h"

static void usage(FILE *o)
{
    fprintf(o, "usage: memra-logits [-m MODEL] --tokens \"1 2 3\" --mode decode|prefill [--chunk N]\n"
               "                    [--device cpu|cuda:N] [--threads N] --out FILE\n");
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *tokens_arg = NULL, *mode = NULL, *device = "cpu", *out_path = NULL;
    long chunk = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "memra-logits: %s: missing value or unknown option\n", a);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model_path = v;
        else if (!strcmp(a, "--tokens"))
            tokens_arg = v;
        else if (!strcmp(a, "--mode"))
            mode = v;
        else if (!strcmp(a, "--device"))
            device = v;
        else if (!strcmp(a, "--out") || !strcmp(a, "-o"))
            out_path = v;
        else if (!strcmp(a, "--chunk") && (chunk = strtol(v, &end, 10)) > 0 && !*end)
            ;
        else if ((!strcmp(a, "--threads") || !strcmp(a, "-t")) && (threads = strtol(v, &end, 10)) >= 0 && !*end)
            ;
        else {
            fprintf(stderr, "memra-logits: bad option or value: %s %s\n", a, v);
            usage(stderr);
            return 2;
        }
    }
    if (!tokens_arg || !mode || !out_path || (strcmp(mode, "decode") && strcmp(mode, "prefill"))) {
        usage(stderr);
        return 2;
    }
    if (!model_path && !(model_path = default_model_path())) {
        fprintf(stderr, "memra-logits: no -m given and the bundled default model was not found\n");
        return 2;
    }
    int32_t *tokens = NULL, n = 0;
    const char *bad = NULL;
    int parsed = example_parse_ids(tokens_arg, 0, &tokens, &n, &bad);
    if (parsed > 0)
        fprintf(stderr, "memra-logits: --tokens: bad token id near '%.16s'\n", bad);
    if (parsed || n == 0) {
        fprintf(stderr, "memra-logits: --tokens gives no tokens\n");
        free(tokens);
        return 2;
    }

    int rc = 1;
    memra_engine_t *engine = NULL;
    memra_model_t *model = NULL;
    memra_cache_t *cache = NULL;
    float *logits = NULL;

    if (example_load("memra-logits", model_path, device, (int32_t)threads, (int32_t)chunk, NULL, NULL, &engine,
                     &model))
        goto out;
    const size_t n_vocab = (size_t)memra_model_n_vocab(model);
    if (memra_cache_create(model, n, &cache) || !(logits = malloc((size_t)n * n_vocab * sizeof *logits))) {
        fprintf(stderr, "memra-logits: cache: %s\n", memra_last_error());
        goto out;
    }
    memra_status_t st = MEMRA_OK;
    if (!strcmp(mode, "prefill"))
        st = memra_forward(model, cache, tokens, n, MEMRA_FORWARD_ALL_ROWS, logits);
    else
        for (int32_t i = 0; i < n && !st; i++)
            st = memra_decode_step(model, cache, tokens[i], logits + (size_t)i * n_vocab);
    if (st) {
        fprintf(stderr, "memra-logits: %s: %s\n", mode, memra_model_last_error(model));
        goto out;
    }
    FILE *f = fopen(out_path, "wb");
    int written = f && fwrite(logits, sizeof *logits, (size_t)n * n_vocab, f) == (size_t)n * n_vocab;
    if (f && fclose(f) != 0)
        written = 0;
    if (!written) {
        fprintf(stderr, "memra-logits: cannot write %s: %s\n", out_path, strerror(errno));
        goto out;
    }
    fprintf(stderr, "memra-logits: %d x %zu float32 logits (%s) -> %s\n", n, n_vocab, mode, out_path);
    rc = 0;
out:
    free(tokens);
    free(logits);
    memra_cache_free(cache);
    memra_model_free(model);
    memra_engine_destroy(engine);
    return rc;
}
