/* memra-batch: serve many prompts at once through memra_forward_batch.
 *
 *   memra-batch [-m MODEL] -f FILE [-b B] [-n N] [--chunk N] [--device cpu|cuda:N] [--threads N]
 *
 * Reads prompts from FILE, one per line (empty lines skipped; '-' = stdin),
 * and runs a simple continuous-batching scheduler: up to B sequences are
 * live, each with its own cache; every step takes, for each live sequence,
 * either its next prompt chunk (at most --chunk tokens, so a new prompt
 * does not stall the sequences already decoding) or its next decode token;
 * a sequence retires at an end-of-generation token or after N tokens, and
 * the next prompt is admitted in its place. Decoding is greedy (argmax), so
 * each sequence's text is what `memra-run -p PROMPT -n N --temp 0` prints
 * alone. Each retired sequence is printed as a header line and its text
 * (prompt + generation); the aggregate rate goes to stderr. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>
#include <memra/tokenizer.h>

#include "cli.h"
#include "common.h"

enum { OPT_DEVICE = CLI_LONG_ONLY, OPT_CHUNK };

static const cli_opt_t k_opts[] = {
    {'m', "model", "FILE", "GGUF model (default: the bundled default model; env MEMRA_DEFAULT_MODEL)"},
    {'f', "file", "FILE", "prompts, one per line ('-' = stdin; empty lines are skipped) (required)"},
    {'b', "batch", "B", "sequences live at once, 1..64 (default: 8)"},
    {'n', "n-predict", "N", "tokens to generate per sequence at most, 1..1048576 (default: 32)"},
    {OPT_CHUNK, "chunk", "N", "prompt tokens a sequence feeds per step, 1..1048576 (default: 64)"},
    {OPT_DEVICE, "device", "DEV", "cpu, cuda or cuda:N (default: cpu)"},
    {'t', "threads", "N", "CPU threads, 0 = all cores (default: 0)"},
};

static const cli_prog_t k_prog = {
    "memra-batch",
    "[-m MODEL] -f FILE [-b B] [-n N] [--chunk N] [--device DEV] [--threads N]",
    "Serves the prompts of FILE (one per line) through batched steps: up to B sequences live at\n"
    "once, each step feeding every live sequence either its next prompt chunk or its next\n"
    "decode token (continuous batching with chunked prefill); a sequence retires at an\n"
    "end-of-generation token or after N tokens and the next prompt takes its place. Greedy\n"
    "decoding. Prints each sequence (a header line, then prompt and generated text) as it\n"
    "retires, and the aggregate rate to stderr.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "memra-batch -m model.gguf -f prompts.txt -b 16 -n 128 --device cuda:0",
};

typedef struct seq {
    int index;          /* line number among the prompts, from 0 */
    const char *prompt; /* borrowed from the prompt text */
    int32_t *ids, n_ids, fed;
    memra_cache_t *cache;
    char *text;         /* generated text */
    size_t len, cap;
    int32_t n_gen, last;
} seq_t;

static int append_piece(const memra_tokenizer_t *tok, seq_t *s, int32_t token)
{
    size_t n = 0;
    memra_status_t st = memra_token_to_piece(tok, token, NULL, 0, 0, &n);
    if (st != MEMRA_OK && st != MEMRA_E_RANGE)
        return -1;
    if (s->len + n + 1 > s->cap) {
        size_t cap = (s->len + n + 1) * 2;
        char *t = realloc(s->text, cap);
        if (!t)
            return -1;
        s->text = t;
        s->cap = cap;
    }
    if (n && memra_token_to_piece(tok, token, s->text + s->len, n, 0, &n) != MEMRA_OK)
        return -1;
    s->len += n;
    s->text[s->len] = 0;
    return 0;
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static void retire(seq_t *s, const char *why)
{
    printf("--- sequence %d: %d prompt tokens, %d generated, %s\n%s%s\n", s->index, s->n_ids, s->n_gen, why, s->prompt,
           s->text ? s->text : "");
    fflush(stdout);
    memra_cache_free(s->cache);
    free(s->ids);
    free(s->text);
    memset(s, 0, sizeof *s);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *file = NULL, *device = "cpu";
    int b_max = 8, threads = 0;
    int32_t n_gen = 32, chunk = 64;
    cli_t cl;
    cli_init(&cl, &k_prog, argc, argv);
    for (int key; (key = cli_next(&cl)) != -1;) {
        const char *v = cl.arg;
        switch (key) {
        case 'm': path = v; break;
        case 'f': file = v; break;
        case 'b': b_max = (int)cli_long(&cl, v, 1, MEMRA_MAX_BATCH); break;
        case 'n': n_gen = (int32_t)cli_long(&cl, v, 1, 1 << 20); break;
        case OPT_CHUNK: chunk = (int32_t)cli_long(&cl, v, 1, 1 << 20); break;
        case OPT_DEVICE: device = v; break;
        case 't': threads = (int)cli_long(&cl, v, 0, 4096); break;
        }
    }
    if (cl.first_operand < argc)
        cli_fail(&cl, "unexpected argument '%s'", argv[cl.first_operand]);
    if (!file)
        cli_fail(&cl, "no prompt file given (-f FILE)");
    if (!path && !(path = default_model_path())) {
        fprintf(stderr, "memra-batch: no model given (-m) and no bundled default model found\n");
        return 1;
    }
    FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
    size_t text_len = 0;
    char *text = in ? example_read_all(in, &text_len) : NULL;
    if (in && in != stdin)
        fclose(in);
    if (!text) {
        fprintf(stderr, "memra-batch: %s: cannot read\n", file);
        return 1;
    }
    /* the prompts: the non-empty lines, split in place */
    int n_prompts = 0;
    char **prompts = malloc((text_len / 2 + 2) * sizeof *prompts);
    for (char *p = text, *end = text + text_len; prompts && p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        *stop = 0;
        if (stop > p && stop[-1] == '\r')
            stop[-1] = 0;
        if (*p)
            prompts[n_prompts++] = p;
        p = stop + 1;
    }
    memra_engine_t *engine = NULL;
    memra_model_t *model = NULL;
    if (!prompts || example_load("memra-batch", path, device, threads, chunk, NULL, NULL, &engine, &model)) {
        free(prompts);
        free(text);
        return 1;
    }
    const memra_tokenizer_t *tok = memra_model_tokenizer(model);
    const int32_t n_vocab = memra_model_n_vocab(model);
    seq_t *seq = calloc((size_t)b_max, sizeof *seq);
    memra_batch_item_t *items = calloc((size_t)b_max, sizeof *items);
    int *slot_of = calloc((size_t)b_max, sizeof *slot_of);
    float *logits = memra_engine_host_alloc(engine, (size_t)b_max * (size_t)n_vocab * sizeof *logits);
    int rc = 1, next = 0, live = 0;
    long n_steps = 0, n_prompt_tok = 0, n_gen_tok = 0;
    if (!tok || !seq || !items || !slot_of || !logits) {
        fprintf(stderr, "memra-batch: %s\n", !tok ? "the model has no tokenizer" : "out of memory");
        goto out;
    }
    double t0 = example_seconds();
    for (;;) {
        /* admit the next prompts into free slots */
        for (int i = 0; i < b_max && next < n_prompts; i++) {
            seq_t *s = &seq[i];
            if (s->cache)
                continue;
            s->index = next;
            s->prompt = prompts[next++];
            if (example_tokenize("memra-batch", tok, s->prompt, strlen(s->prompt),
                                 MEMRA_TOKENIZE_ADD_SPECIAL | MEMRA_TOKENIZE_PARSE_SPECIAL, &s->ids, &s->n_ids))
                goto out;
            if (s->n_ids == 0) {
                fprintf(stderr, "memra-batch: prompt %d has no tokens\n", s->index);
                goto out;
            }
            if (memra_cache_create(model, s->n_ids + n_gen, &s->cache)) {
                fprintf(stderr, "memra-batch: cache: %s\n", memra_model_last_error(model));
                goto out;
            }
            live++;
        }
        if (live == 0)
            break;
        /* one step: each live sequence's next prompt chunk or decode token */
        int n_items = 0;
        for (int i = 0; i < b_max; i++) {
            seq_t *s = &seq[i];
            if (!s->cache)
                continue;
            memra_batch_item_t *it = &items[n_items];
            float *row = logits + (size_t)n_items * (size_t)n_vocab;
            if (s->fed < s->n_ids) {
                int32_t k = s->n_ids - s->fed < chunk ? s->n_ids - s->fed : chunk;
                *it = (memra_batch_item_t){.cache = s->cache, .tokens = s->ids + s->fed, .n_tokens = k,
                                           .logits = s->fed + k == s->n_ids ? row : NULL};
                s->fed += k;
                n_prompt_tok += k;
            } else {
                *it = (memra_batch_item_t){.cache = s->cache, .tokens = &s->last, .n_tokens = 1, .logits = row};
                n_gen_tok++;
            }
            slot_of[n_items++] = i;
        }
        if (memra_forward_batch(model, items, n_items, 0)) {
            fprintf(stderr, "memra-batch: step: %s\n", memra_model_last_error(model));
            goto out;
        }
        n_steps++;
        /* the sequences with logits pick their next token or retire */
        for (int j = 0; j < n_items; j++) {
            seq_t *s = &seq[slot_of[j]];
            if (!items[j].logits)
                continue;
            int32_t t = argmax(items[j].logits, n_vocab);
            if (memra_tokenizer_is_eog(tok, t)) {
                retire(s, "end of generation");
                live--;
                continue;
            }
            if (append_piece(tok, s, t)) {
                fprintf(stderr, "memra-batch: token %d: %s\n", t, memra_last_error());
                goto out;
            }
            s->last = t;
            if (++s->n_gen == n_gen) {
                retire(s, "length");
                live--;
            }
        }
    }
    double dt = example_seconds() - t0;
    fprintf(stderr, "%d sequences, %ld steps, %ld prompt + %ld decoded tokens in %.3f s: %.1f tok/s aggregate\n",
            n_prompts, n_steps, n_prompt_tok, n_gen_tok, dt, dt > 0 ? (double)(n_prompt_tok + n_gen_tok) / dt : 0.0);
    rc = 0;
out:
    for (int i = 0; seq && i < b_max; i++) {
        memra_cache_free(seq[i].cache);
        free(seq[i].ids);
        free(seq[i].text);
    }
    free(seq);
    free(items);
    free(slot_of);
    memra_host_free(logits);
    memra_model_free(model);
    memra_engine_destroy(engine);
    free(prompts);
    free(text);
    return rc;
}
