/* memra-run: generate text from a prompt.
 *
 *   memra-run [-m MODEL] [-p PROMPT] [-n N] [--temp T] [--top-k K] [--top-p P]
 *             [--min-p M] [--repeat-penalty R] [--repeat-last-n N] [--seed S]
 *             [--device cpu|cuda:N] [--threads N]
 *
 * Tokenizes the prompt (special tokens parsed, BOS as the model says),
 * prefills it, then samples and decodes up to N tokens, printing the text
 * as it comes (stdout). Prefill and decode speeds go to stderr. Without -m
 * it runs the bundled default model. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>
#include <memra/tokenizer.h>

#include "common.h"

static void usage(FILE *o)
{
    fprintf(o, "usage: memra-run [-m MODEL] [-p PROMPT] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
               "                 [--min-p M] [--repeat-penalty R] [--repeat-last-n N] [--seed S]\n"
               "                 [--device cpu|cuda:N] [--threads N]\n"
               "Without -m the bundled default model is used (env MEMRA_DEFAULT_MODEL overrides).\n");
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "memra-run: %s: bad value '%s' (expected an integer in [%ld, %ld])\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *opt, const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "memra-run: %s: bad value '%s' (expected a number)\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Prints the piece of TOKEN; control tokens print nothing. */
static int print_piece(const memra_tokenizer_t *tok, int32_t token)
{
    char buf[256];
    size_t n = 0;
    memra_status_t st = memra_token_to_piece(tok, token, buf, sizeof buf, 0, &n);
    if (st == MEMRA_E_RANGE && n > sizeof buf) {
        char *big = malloc(n);
        if (!big || memra_token_to_piece(tok, token, big, n, 0, &n) != MEMRA_OK) {
            free(big);
            return -1;
        }
        fwrite(big, 1, n, stdout);
        free(big);
    } else if (st != MEMRA_OK) {
        return -1;
    } else {
        fwrite(buf, 1, n, stdout);
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *prompt = "The quick brown fox", *device = "cpu";
    long n_gen = 32, threads = 0;
    memra_sampler_params_t sp;
    memra_sampler_default_params(&sp);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "memra-run: %s: missing value or unknown option\n", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        long l = 0;
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model_path = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
            prompt = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            bad = parse_long(a, v, 0, 1 << 20, &n_gen);
        else if (!strcmp(a, "--temp"))
            bad = parse_float(a, v, &sp.temperature);
        else if (!strcmp(a, "--top-k")) {
            bad = parse_long(a, v, 0, INT32_MAX, &l);
            sp.top_k = (int32_t)l;
        } else if (!strcmp(a, "--top-p"))
            bad = parse_float(a, v, &sp.top_p);
        else if (!strcmp(a, "--min-p"))
            bad = parse_float(a, v, &sp.min_p);
        else if (!strcmp(a, "--repeat-penalty"))
            bad = parse_float(a, v, &sp.repeat_penalty);
        else if (!strcmp(a, "--repeat-last-n")) {
            bad = parse_long(a, v, 0, 1 << 20, &l);
            sp.repeat_last_n = (int32_t)l;
        } else if (!strcmp(a, "--seed")) {
            bad = parse_long(a, v, 0, LONG_MAX, &l);
            sp.seed = (uint64_t)l;
        } else if (!strcmp(a, "--device"))
            device = v;
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t"))
            bad = parse_long(a, v, 0, 4096, &threads);
        else {
            fprintf(stderr, "memra-run: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (!model_path && !(model_path = default_model_path())) {
        fprintf(stderr, "memra-run: no -m given and the bundled default model was not found "
                        "(set MEMRA_DEFAULT_MODEL)\n");
        return 2;
    }

    int rc = 1;
    memra_engine_t *engine = NULL;
    memra_model_t *model = NULL;
    memra_cache_t *cache = NULL;
    memra_sampler_t *sampler = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;

    if (example_load("memra-run", model_path, device, (int32_t)threads, 0, &engine, &model))
        goto out;
    const memra_tokenizer_t *tok = memra_model_tokenizer(model);
    if (!tok) {
        fprintf(stderr, "memra-run: %s has no tokenizer\n", model_path);
        goto out;
    }
    if (memra_sampler_create(&sp, &sampler)) {
        fprintf(stderr, "memra-run: %s\n", memra_last_error());
        goto out;
    }

    int32_t n_prompt = 0;
    if (example_tokenize("memra-run", tok, prompt, strlen(prompt),
                         MEMRA_TOKENIZE_ADD_SPECIAL | MEMRA_TOKENIZE_PARSE_SPECIAL, &ids, &n_prompt))
        goto out;
    if (n_prompt == 0) {
        fprintf(stderr, "memra-run: the prompt gives no tokens\n");
        goto out;
    }

    const int32_t n_vocab = memra_model_n_vocab(model);
    if (memra_cache_create(model, n_prompt + (int32_t)n_gen, &cache) ||
        !(logits = malloc((size_t)n_vocab * sizeof *logits))) {
        fprintf(stderr, "memra-run: cache: %s\n", memra_last_error());
        goto out;
    }
    for (int32_t i = 0; i < n_prompt; i++)
        memra_sampler_accept(sampler, ids[i]);

    fwrite(prompt, 1, strlen(prompt), stdout);
    fflush(stdout);
    double t0 = example_seconds();
    if (memra_forward(model, cache, ids, n_prompt, 0, logits)) {
        fprintf(stderr, "\nmemra-run: prefill: %s\n", memra_model_last_error(model));
        goto out;
    }
    double t_prefill = example_seconds() - t0, t_decode = 0;
    int32_t n_decoded = 0;
    for (long i = 0; i < n_gen; i++) {
        int32_t t;
        if (memra_sampler_sample(sampler, logits, n_vocab, &t)) {
            fprintf(stderr, "\nmemra-run: sample: %s\n", memra_sampler_last_error(sampler));
            goto out;
        }
        if (memra_tokenizer_is_eog(tok, t))
            break;
        memra_sampler_accept(sampler, t);
        if (print_piece(tok, t)) {
            fprintf(stderr, "\nmemra-run: token %d: %s\n", t, memra_last_error());
            goto out;
        }
        if (i + 1 == n_gen)
            break;
        double t1 = example_seconds();
        if (memra_decode_step(model, cache, t, logits)) {
            fprintf(stderr, "\nmemra-run: decode: %s\n", memra_model_last_error(model));
            goto out;
        }
        t_decode += example_seconds() - t1;
        n_decoded++;
    }
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", n_prompt, t_prefill,
            t_prefill > 0 ? n_prompt / t_prefill : 0.0);
    fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s)\n", n_decoded, t_decode,
            t_decode > 0 ? n_decoded / t_decode : 0.0);
    rc = 0;
out:
    free(ids);
    free(logits);
    memra_sampler_free(sampler);
    memra_cache_free(cache);
    memra_model_free(model);
    memra_engine_destroy(engine);
    return rc;
}
