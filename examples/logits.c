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

#include "default_model.h"

static void usage(FILE *o)
{
    fprintf(o, "usage: memra-logits [-m MODEL] --tokens \"1 2 3\" --mode decode|prefill [--chunk N]\n"
               "                    [--device cpu|cuda:N] [--threads N] --out FILE\n");
}

/* Space- or comma-separated integers; returns the count or -1. */
static int32_t parse_tokens(const char *s, int32_t **out)
{
    size_t cap = 16, n = 0;
    int32_t *v = malloc(cap * sizeof *v);
    while (v && *s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n')
            s++;
        if (!*s)
            break;
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (errno || end == s || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "memra-logits: --tokens: bad token id near '%.16s'\n", s);
            free(v);
            return -1;
        }
        if (n == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[n++] = (int32_t)x;
        s = end;
    }
    *out = v;
    return v ? (int32_t)n : -1;
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
    int32_t *tokens = NULL;
    int32_t n = parse_tokens(tokens_arg, &tokens);
    if (n <= 0) {
        fprintf(stderr, "memra-logits: --tokens gives no tokens\n");
        free(tokens);
        return 2;
    }

    int rc = 1;
    memra_engine_t *engine = NULL;
    memra_model_t *model = NULL;
    memra_cache_t *cache = NULL;
    float *logits = NULL;

    memra_engine_params_t ep;
    memra_engine_default_params(&ep);
    ep.n_threads = (int32_t)threads;
    if (memra_engine_params_set_device(&ep, device) || memra_engine_create(&ep, &engine)) {
        fprintf(stderr, "memra-logits: device %s: %s\n", device, memra_last_error());
        goto out;
    }
    memra_model_params_t mp;
    memra_model_default_params(&mp);
    mp.engine = engine;
    mp.prefill_chunk = (int32_t)chunk;
    if (memra_model_load(model_path, &mp, &model)) {
        fprintf(stderr, "memra-logits: %s\n", memra_last_error());
        goto out;
    }
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
