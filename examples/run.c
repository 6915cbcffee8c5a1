/* memra-run: generate text from a prompt.
 *
 *   memra-run [-m MODEL] [-p PROMPT | -f FILE | --chat [--system TEXT]] [-n N] [-c CTX] [--temp T]
 *             [--top-k K] [--top-p P] [--min-p M] [--repeat-penalty R] [--repeat-last-n N] [--seed S]
 *             [--device cpu|cuda:N] [--threads N] [--chunk N]
 *
 * Tokenizes the prompt (special tokens parsed, BOS as the model says),
 * prefills it, then samples and decodes up to N tokens, printing the text
 * as it comes (stdout). The load time, and at the end prefill and decode
 * speeds, go to stderr; on a terminal stderr also shows the load and
 * prefill progress. Without -m it runs the bundled default model. --chat
 * (-cnv) holds a conversation instead (examples/run_chat.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <memra/memra.h>
#include <memra/tokenizer.h>

#include "cli.h"
#include "common.h"
#include "run_chat.h"

enum {
    OPT_TEMP = CLI_LONG_ONLY,
    OPT_TOP_K,
    OPT_TOP_P,
    OPT_MIN_P,
    OPT_REPEAT_PENALTY,
    OPT_REPEAT_LAST_N,
    OPT_SEED,
    OPT_DEVICE,
    OPT_CHUNK,
    OPT_CHAT,
    OPT_SYSTEM,
    OPT_CACHE_TYPE_K,
    OPT_CACHE_TYPE_V,
};

static const cli_opt_t k_opts[] = {
    {'m', "model", "FILE", "GGUF model (default: the bundled default model; env MEMRA_DEFAULT_MODEL)"},
    {'p', "prompt", "TEXT", "prompt text (default: \"The quick brown fox\")"},
    {'f', "file", "FILE", "read the prompt from FILE ('-' = stdin), as is; the last of -p and -f wins"},
    {'n', "n-predict", "N", "tokens to generate at most (a reply in --chat), 0..1048576\n"
                            "(default: 32; --chat: 1024)"},
    {'c', "ctx-size", "N", "context size in tokens, prompt included; generation stops when it is full\n"
                           "(default: 0 = prompt tokens + N; --chat: 4096)"},
    {OPT_CHAT, "chat", NULL, "chat (also -cnv): a conversation read from stdin a line per turn (\"/exit\"\n"
                             "ends it) through the model's own chat template (docs/CHAT.md)"},
    {OPT_SYSTEM, "system", "TEXT", "--chat: the system prompt (default: none)"},
    {OPT_TEMP, "temp", "T", "sampling temperature, 0 = greedy (default: 0.8)"},
    {OPT_TOP_K, "top-k", "K", "keep the K most likely tokens, 0 = off (default: 40)"},
    {OPT_TOP_P, "top-p", "P", "nucleus sampling threshold in (0, 1], 1 = off (default: 0.95)"},
    {OPT_MIN_P, "min-p", "M", "drop tokens below M * p(top token), in [0, 1), 0 = off (default: 0.05)"},
    {OPT_REPEAT_PENALTY, "repeat-penalty", "R", "repetition penalty in [0.0001, 10000], 1 = off (default: 1)"},
    {OPT_REPEAT_LAST_N, "repeat-last-n", "N", "tokens the penalty looks back on, 0 = off (default: 64)"},
    {OPT_SEED, "seed", "S", "sampler seed, 0..2^64-1 (default: 469853106785, \"memra\")"},
    {OPT_DEVICE, "device", "DEV", "cpu, cuda or cuda:N (default: cpu)"},
    {'t', "threads", "N", "CPU threads, 0 = all cores (default: 0)"},
    {OPT_CHUNK, "chunk", "N", "prefill chunk in tokens, 0 = the model's default (env MEMRA_PRIME_CHUNK,\n"
                              "else 2048) (default: 0)"},
    {OPT_CACHE_TYPE_K, "cache-type-k", "TYPE", "KV cache type of K (also -ctk): f32, f16, bf16 or q8_0\n"
                                               "(default: f16)"},
    {OPT_CACHE_TYPE_V, "cache-type-v", "TYPE", "KV cache type of V (also -ctv): f32, f16, bf16, q8_0 or q4_0\n"
                                               "(default: f16)"},
};

static const cli_prog_t k_prog = {
    "memra-run",
    "[-m MODEL] [-p PROMPT | -f FILE] [-n N] [-c CTX] [OPTIONS]",
    "Generates text from a prompt: tokenizes it (special tokens parsed, BOS as the model says),\n"
    "prefills it, then samples up to N tokens and prints the text as it comes (stdout). The load\n"
    "time and the prefill and decode speeds go to stderr; on a terminal, so does the progress.\n"
    "The prompt is sent as raw text; --chat talks through the model's chat template instead.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "memra-run -p \"The capital of France is\" -n 16 --temp 0\n"
    "memra-run -m model.gguf -f prompt.txt -c 4096 -n 256 --device cuda:0\n"
    "memra-run -m model.gguf --chat --system \"You are terse.\" --device cuda:0",
};

/* Load progress on a terminal: "loading  42%", cleared when done. */
static int show_load(float progress, void *user)
{
    (void)user;
    fprintf(stderr, "\rloading %3d%%", (int)(progress * 100.0f + 0.5f));
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
    const char *model_path = NULL, *prompt = "The quick brown fox", *prompt_file = NULL, *device = "cpu";
    const char *system = NULL;
    long n_gen = -1, n_ctx = -1, threads = 0, chunk = 0;
    int chat = 0;
    memra_sampler_params_t sp;
    memra_sampler_default_params(&sp);
    memra_cache_params_t cp;
    memra_cache_default_params(&cp);

    for (int i = 1; i < argc; i++) /* llama.cpp's spelling of --chat */
        if (!strcmp(argv[i], "-cnv"))
            argv[i] = (char *)"--chat";
    cli_cache_type_aliases(argc, argv);
    cli_t c;
    cli_init(&c, &k_prog, argc, argv);
    for (int key; (key = cli_next(&c)) != -1;) {
        const char *v = c.arg;
        switch (key) {
        case 'm': model_path = v; break;
        case 'p': prompt = v, prompt_file = NULL; break;
        case 'f': prompt_file = v; break;
        case 'n': n_gen = cli_long(&c, v, 0, 1 << 20); break;
        case 'c': n_ctx = cli_long(&c, v, 0, INT32_MAX); break;
        case OPT_TEMP: sp.temperature = (float)cli_double(&c, v, 0, 1e6); break;
        case OPT_TOP_K: sp.top_k = (int32_t)cli_long(&c, v, 0, INT32_MAX); break;
        case OPT_TOP_P: sp.top_p = (float)cli_double(&c, v, 0, 1); break;
        case OPT_MIN_P: sp.min_p = (float)cli_double(&c, v, 0, 1); break;
        case OPT_REPEAT_PENALTY:
            sp.repeat_penalty = (float)cli_double(&c, v, MEMRA_SAMPLER_PENALTY_MIN, MEMRA_SAMPLER_PENALTY_MAX);
            break;
        case OPT_REPEAT_LAST_N: sp.repeat_last_n = (int32_t)cli_long(&c, v, 0, 1 << 20); break;
        case OPT_SEED: sp.seed = cli_u64(&c, v, 0, UINT64_MAX); break;
        case OPT_DEVICE: device = v; break;
        case 't': threads = cli_long(&c, v, 0, 4096); break;
        case OPT_CHUNK: chunk = cli_long(&c, v, 0, 1 << 20); break;
        case OPT_CHAT: chat = 1; break;
        case OPT_SYSTEM: system = v; break;
        case OPT_CACHE_TYPE_K: cp.type_k = (memra_type_t)cli_cache_type(&c, v); break;
        case OPT_CACHE_TYPE_V: cp.type_v = (memra_type_t)cli_cache_type(&c, v); break;
        }
    }
    if (n_gen < 0)
        n_gen = chat ? 1024 : 32;
    if (n_ctx < 0)
        n_ctx = chat ? 4096 : 0;
    if (c.first_operand < argc)
        cli_fail(&c, "unexpected argument '%s'", argv[c.first_operand]);
    if (!model_path && !(model_path = default_model_path())) {
        fprintf(stderr, "memra-run: no -m given and the bundled default model was not found "
                        "(set MEMRA_DEFAULT_MODEL)\n");
        return 2;
    }
    memra_sampler_t *sampler = NULL;
    if (memra_sampler_create(&sp, &sampler)) /* a sampling option out of range */
        cli_fail(&c, "%s", memra_last_error());
    size_t prompt_len = strlen(prompt);
    char *prompt_buf = NULL;
    if (prompt_file) {
        FILE *f = strcmp(prompt_file, "-") ? fopen(prompt_file, "rb") : stdin;
        prompt_buf = f ? example_read_all(f, &prompt_len) : NULL;
        if (f && f != stdin)
            fclose(f);
        if (!prompt_buf) {
            fprintf(stderr, "memra-run: cannot read the prompt from %s\n", prompt_file);
            memra_sampler_free(sampler);
            return 1;
        }
        prompt_buf[prompt_len] = 0; /* read_all leaves a spare byte */
        prompt = prompt_buf;
    }
    const int tty = isatty(STDERR_FILENO);

    int rc = 1;
    memra_engine_t *engine = NULL;
    memra_model_t *model = NULL;
    memra_cache_t *cache = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;

    double t_load = example_seconds();
    int failed = example_load("memra-run", model_path, device, (int32_t)threads, (int32_t)chunk,
                              tty ? show_load : NULL, NULL, &engine, &model);
    t_load = example_seconds() - t_load;
    if (tty)
        fprintf(stderr, "\r%*s\r", 16, "");
    if (failed)
        goto out;
    const double wb = (double)memra_model_weight_bytes(model);
    fprintf(stderr, "load: %s (%s, %d layers, %.2f %s of weights) on %s in %.3f s\n", model_path,
            memra_model_arch(model), memra_model_n_layers(model), wb >= 1e9 ? wb / 1e9 : wb / 1e6,
            wb >= 1e9 ? "GB" : "MB", device, t_load);
    const memra_tokenizer_t *tok = memra_model_tokenizer(model);
    if (!tok) {
        fprintf(stderr, "memra-run: %s has no tokenizer\n", model_path);
        goto out;
    }
    if (chat) {
        cp.n_ctx = (int32_t)n_ctx;
        if (memra_cache_create_ex(model, &cp, &cache)) {
            fprintf(stderr, "memra-run: cache: %s\n", memra_last_error());
            goto out;
        }
        const run_chat_args ca = {.model = model, .cache = cache, .tok = tok, .sampler = sampler, .system = system,
                                  .n_predict = n_gen, .n_ctx = (int32_t)n_ctx, .interactive = tty};
        rc = run_chat(&ca);
        goto out;
    }

    int32_t n_prompt = 0;
    if (example_tokenize("memra-run", tok, prompt, prompt_len,
                         MEMRA_TOKENIZE_ADD_SPECIAL | MEMRA_TOKENIZE_PARSE_SPECIAL, &ids, &n_prompt))
        goto out;
    if (n_prompt == 0) {
        fprintf(stderr, "memra-run: the prompt gives no tokens\n");
        goto out;
    }
    if (n_ctx == 0)
        n_ctx = n_prompt + n_gen;
    if (n_prompt > n_ctx) {
        fprintf(stderr, "memra-run: the prompt is %d tokens, more than the context (-c %ld)\n", n_prompt, n_ctx);
        goto out;
    }

    const int32_t n_vocab = memra_model_n_vocab(model);
    cp.n_ctx = (int32_t)n_ctx;
    if (memra_cache_create_ex(model, &cp, &cache) || !(logits = malloc((size_t)n_vocab * sizeof *logits))) {
        fprintf(stderr, "memra-run: cache: %s\n", memra_last_error());
        goto out;
    }
    for (int32_t i = 0; i < n_prompt; i++)
        memra_sampler_accept(sampler, ids[i]);

    /* Prefill; on a terminal in pieces of the prefill chunk, with progress
     * (any split gives the same logits: memra_forward chunks the same way). */
    const int32_t piece = tty ? (chunk > 0 ? (int32_t)chunk : MEMRA_PREFILL_CHUNK_DEFAULT) : n_prompt;
    double t0 = example_seconds();
    for (int32_t done = 0; done < n_prompt;) {
        int32_t k = n_prompt - done < piece ? n_prompt - done : piece;
        if (piece < n_prompt)
            fprintf(stderr, "\rprefill %d/%d tokens", done, n_prompt);
        if (memra_forward(model, cache, ids + done, k, 0, done + k == n_prompt ? logits : NULL)) {
            fprintf(stderr, "\nmemra-run: prefill: %s\n", memra_model_last_error(model));
            goto out;
        }
        done += k;
    }
    double t_prefill = example_seconds() - t0, t_decode = 0;
    if (piece < n_prompt)
        fprintf(stderr, "\r%*s\r", 40, "");

    fwrite(prompt, 1, prompt_len, stdout);
    fflush(stdout);
    int32_t n_out = 0, n_decoded = 0, full = 0;
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
        n_out++;
        if (i + 1 == n_gen)
            break;
        if (memra_cache_pos(cache) >= n_ctx) {
            full = 1;
            break;
        }
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
    if (full)
        fprintf(stderr, "memra-run: the context is full (%ld tokens) after %d generated token(s)\n", n_ctx, n_out);
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
    free(prompt_buf);
    return rc;
}
