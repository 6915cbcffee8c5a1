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

#include "cli.h"
#include "common.h"

enum { OPT_TOKENS = CLI_LONG_ONLY, OPT_MODE, OPT_CHUNK, OPT_DEVICE };

static const cli_opt_t k_opts[] = {
    {'m', "model", "FILE", "GGUF model (default: the bundled default model; env MEMRA_DEFAULT_MODEL)"},
    {OPT_TOKENS, "tokens", "IDS", "token ids, separated by spaces, commas or newlines (required)"},
    {OPT_MODE, "mode", "MODE", "decode (one step per token) or prefill (one forward, every row) (required)"},
    {'o', "out", "FILE", "where the float32 [n_tokens][n_vocab] logits go (required)"},
    {OPT_CHUNK, "chunk", "N", "prefill chunk in tokens, 1..1048576 (default: the model's, env\n"
                              "MEMRA_PRIME_CHUNK or 2048)"},
    {OPT_DEVICE, "device", "DEV", "cpu, cuda or cuda:N (default: cpu)"},
    {'t', "threads", "N", "CPU threads, 0 = all cores (default: 0)"},
};

static const cli_prog_t k_prog = {
    "memra-logits",
    "[-m MODEL] --tokens \"1 2 3\" --mode decode|prefill [--chunk N]\n"
    " [--device DEV] [--threads N] --out FILE",
    "Dumps the logits of every position of a token sequence: decode runs one memra_decode_step per\n"
    "token, prefill one memra_forward over all of them (MEMRA_FORWARD_ALL_ROWS). FILE receives\n"
    "row-major float32 [n_tokens][n_vocab], the layout of the fixture references.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "memra-logits -m model.gguf --tokens \"1 2 3 4\" --mode prefill --out /tmp/logits.f32",
};

int main(int argc, char **argv)
{
    const char *model_path = NULL, *tokens_arg = NULL, *mode = NULL, *device = "cpu", *out_path = NULL;
    long chunk = 0, threads = 0;
    cli_t c;
    cli_init(&c, &k_prog, argc, argv);
    for (int key; (key = cli_next(&c)) != -1;) {
        switch (key) {
        case 'm': model_path = c.arg; break;
        case OPT_TOKENS: tokens_arg = c.arg; break;
        case OPT_MODE: mode = c.arg; break;
        case 'o': out_path = c.arg; break;
        case OPT_CHUNK: chunk = cli_long(&c, c.arg, 1, 1 << 20); break;
        case OPT_DEVICE: device = c.arg; break;
        case 't': threads = cli_long(&c, c.arg, 0, 4096); break;
        }
    }
    if (c.first_operand < argc)
        cli_fail(&c, "unexpected argument '%s'", argv[c.first_operand]);
    if (!tokens_arg || !mode || !out_path)
        cli_fail(&c, "--tokens, --mode and --out are required");
    if (strcmp(mode, "decode") && strcmp(mode, "prefill"))
        cli_fail(&c, "--mode: '%s' is neither decode nor prefill", mode);
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
