/* memra-argmax-margin-probe MODEL PROMPT_FILE [window=24] [device=cpu|cuda:N] [budget=1e-3] [chunk=N]
 *
 * Prints memra_check_argmax_margin's table. PROMPT_FILE holds either token
 * ids (integers separated by spaces, commas or newlines; brackets allowed;
 * each must fit int32) or text, tokenized with the model's tokenizer (BOS as
 * the model adds it); at most 64 MiB. key=value also goes as --key value.
 * Exit 0 when the check ran (whatever the verdict), 2 on errors. */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "cli.h"

/* Weak: the probe still builds (ids-only) against a library without the
 * tokenizer. */
memra_status_t memra_tokenizer_load(const char *path, memra_tokenizer_t **out) __attribute__((weak));
memra_status_t memra_tokenize(const memra_tokenizer_t *tok, const char *text, size_t text_len, int32_t *ids,
                              int32_t n_max, uint32_t flags, int32_t *n_out) __attribute__((weak));
void memra_tokenizer_free(memra_tokenizer_t *tok) __attribute__((weak));
#ifndef MEMRA_TOKENIZE_ADD_SPECIAL
#define MEMRA_TOKENIZE_ADD_SPECIAL (1u << 0)
#endif

enum { OPT_WINDOW = CLI_LONG_ONLY, OPT_DEVICE, OPT_BUDGET, OPT_CHUNK };

/* The long names are also the keys of the key=value operands. */
static const cli_opt_t k_opts[] = {
    {OPT_WINDOW, "window", "N", "positions compared, 1..1048576, clamped to the prompt and\n"
                                "MEMRA_MARGIN_MAX_WINDOW (default: 24)"},
    {OPT_DEVICE, "device", "DEV", "cpu or cuda:N (default: cpu)"},
    {OPT_BUDGET, "budget", "B", "accepted |decode - prefill| logit difference, 0..1e6, 0 = 1e-3\n"
                                "(default: 1e-3)"},
    {OPT_CHUNK, "chunk", "N", "prefill chunk in tokens, 0..1048576, 0 = the model's default (default: 0)"},
};

static const cli_prog_t k_prog = {
    "memra-argmax-margin-probe",
    "MODEL PROMPT_FILE [WINDOW] [window=24] [device=cpu|cuda:N] [budget=1e-3] [chunk=N]",
    "Runs memra_check_argmax_margin and prints its table: the top-1 and its margin by decode steps\n"
    "and by prefill over the last WINDOW positions of the prompt, and the verdict. PROMPT_FILE\n"
    "holds token ids (integers separated by spaces, commas or newlines; brackets allowed) or text,\n"
    "tokenized with the model's tokenizer; at most 64 MiB. Options also go as KEY=VALUE operands.\n"
    "Exit 0 when the check ran (whatever the verdict), 2 on errors.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "memra-argmax-margin-probe model.gguf prompt.txt window=32 device=cuda:0",
};

/* Prompt files beyond this are refused: a prompt of that many bytes is far
 * beyond any context, and a device or FIFO (/dev/zero) must not grow the
 * buffer until memory runs out. */
#define MAX_PROMPT_BYTES ((size_t)64 << 20)

/* The whole file, NUL-terminated; NULL with *too_big set past the limit. */
static char *read_all(const char *path, size_t *n, bool *too_big)
{
    *too_big = false;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len > MAX_PROMPT_BYTES) {
            *too_big = true;
            free(buf);
            buf = NULL;
        } else if (len == cap) {
            char *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    *n = len;
    return buf;
}

/* Whether the file is only integers and separators (then it is ids). */
static bool looks_like_ids(const char *s)
{
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p) && !isspace((unsigned char)*p) && !strchr(",[]-", *p))
            return false;
    return true;
}

static bool is_sep(char c) { return c == ',' || c == '[' || c == ']' || isspace((unsigned char)c); }

/* Token ids: each an optional '-' and digits, in [INT32_MIN, INT32_MAX]
 * (negative ids are the library's to refuse), between separators. NULL
 * with a message on a malformed or out-of-range id. */
static int32_t *parse_ids(const char *s, int32_t *n)
{
    int32_t cap = 256, k = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    for (const char *p = s; ids && *p;) {
        if (is_sep(*p)) {
            p++;
            continue;
        }
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || (*end && !is_sep(*end)) || errno || v > INT32_MAX || v < INT32_MIN) {
            const char *e = p;
            while (*e && !is_sep(*e))
                e++;
            fprintf(stderr, "memra-argmax-margin-probe: token id '%.*s' (number %d) is not an integer in [%d, %d]\n",
                    (int)(e - p > 40 ? 40 : e - p), p, k + 1, INT32_MIN, INT32_MAX);
            free(ids);
            return NULL;
        }
        if (k == cap) {
            int32_t *ni = k < INT32_MAX / 2 ? realloc(ids, (size_t)(cap *= 2) * sizeof *ids) : NULL;
            if (!ni) {
                free(ids);
                return NULL;
            }
            ids = ni;
        }
        ids[k++] = (int32_t)v;
        p = end;
    }
    *n = k;
    return ids;
}

static int32_t *tokenize(const char *model, const char *text, size_t len, int32_t *n)
{
    if (!memra_tokenizer_load || !memra_tokenize) {
        fprintf(stderr, "memra-argmax-margin-probe: this libmemra has no tokenizer; give token ids\n");
        return NULL;
    }
    memra_tokenizer_t *tok = NULL;
    if (memra_tokenizer_load(model, &tok)) {
        fprintf(stderr, "memra-argmax-margin-probe: tokenizer: %s\n", memra_last_error());
        return NULL;
    }
    int32_t need = 0;
    memra_tokenize(tok, text, len, NULL, 0, MEMRA_TOKENIZE_ADD_SPECIAL, &need);
    int32_t *ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *ids);
    if (ids && memra_tokenize(tok, text, len, ids, need, MEMRA_TOKENIZE_ADD_SPECIAL, n)) {
        fprintf(stderr, "memra-argmax-margin-probe: tokenize: %s\n", memra_last_error());
        free(ids);
        ids = NULL;
    }
    memra_tokenizer_free(tok);
    return ids;
}

static void print_report(const memra_margin_report_t *r)
{
    printf("argmax margin: %s, vocab %d, %d prompt tokens, window %d, budget %.3g\n", r->arch, r->n_vocab,
           r->n_tokens, r->window, (double)r->budget);
    printf("%5s  %8s %8s %11s  %8s %8s %11s  %10s %5s\n", "pos", "dec top1", "dec top2", "dec margin", "pre top1",
           "pre top2", "pre margin", "spread", "agree");
    for (int32_t i = 0; i < r->window; i++) {
        const memra_margin_row_t *w = &r->rows[i];
        printf("%5d  %8d %8d %11.4g  %8d %8d %11.4g  %10.3g %5s%s\n", w->pos, w->top1_decode, w->top2_decode,
               (double)w->margin_decode, w->top1_prefill, w->top2_prefill, (double)w->margin_prefill,
               (double)w->spread, w->agree ? "yes" : "NO", i == r->window - 1 ? "  <- decision" : "");
    }
    printf("agree %d/%d, max spread %.3g (max |decode - prefill| over all ids %.3g), smallest margin %.4g\n",
           r->n_agree, r->window, (double)r->max_spread, (double)r->max_abs_diff, (double)r->min_margin);
    printf("decision position %d: margin %.4g, rank %d of %d (%.1f%% of the window below it)\n", r->decision_pos,
           (double)r->decision_margin, r->decision_rank, r->window, (double)r->decision_percentile);
    printf("verdict: %s: %s\n", memra_margin_verdict_name(r->verdict), r->reason);
}

/* One option's value into P or *WINDOW; exits 2 on a bad value. */
static void set(cli_t *c, int key, const char *v, memra_margin_params_t *p, int32_t *window)
{
    switch (key) {
    case OPT_WINDOW: *window = (int32_t)cli_long(c, v, 1, 1 << 20); break;
    case OPT_DEVICE: p->device = v; break;
    case OPT_BUDGET: p->budget = (float)cli_double(c, v, 0, 1e6); break;
    case OPT_CHUNK: p->prefill_chunk = (int32_t)cli_long(c, v, 0, 1 << 20); break;
    }
}

int main(int argc, char **argv)
{
    memra_margin_params_t p;
    memra_margin_default_params(&p);
    int32_t window = 24;
    cli_t c;
    cli_init(&c, &k_prog, argc, argv);
    for (int key; (key = cli_next(&c)) != -1;)
        set(&c, key, c.arg, &p, &window);
    if (argc - c.first_operand < 2)
        cli_fail(&c, "give MODEL and PROMPT_FILE");
    const char *model = argv[c.first_operand], *prompt_path = argv[c.first_operand + 1];
    int n_pos = 0;
    for (int i = c.first_operand + 2; i < argc; i++) {
        const char *a = argv[i];
        int key = cli_keyval(&c, a);
        if (key >= 0) {
            set(&c, key, c.arg, &p, &window);
        } else if (strchr(a, '=')) {
            cli_fail(&c, "unknown key in '%s'", a);
        } else if (n_pos++ == 0) {
            c.cur = "window";
            set(&c, OPT_WINDOW, a, &p, &window);
        } else {
            cli_fail(&c, "unexpected argument '%s'", a);
        }
    }
    size_t len = 0;
    bool too_big = false;
    char *text = read_all(prompt_path, &len, &too_big);
    if (!text) {
        if (too_big)
            fprintf(stderr, "memra-argmax-margin-probe: %s is larger than %zu bytes\n", prompt_path, MAX_PROMPT_BYTES);
        else
            fprintf(stderr, "memra-argmax-margin-probe: cannot read %s\n", prompt_path);
        return 2;
    }
    int32_t n = 0;
    int32_t *ids = looks_like_ids(text) ? parse_ids(text, &n) : tokenize(model, text, len, &n);
    free(text);
    if (!ids || n < 1) {
        fprintf(stderr, "memra-argmax-margin-probe: no prompt tokens in %s\n", prompt_path);
        free(ids);
        return 2;
    }
    memra_margin_report_t *r = calloc(1, sizeof *r);
    if (!r)
        return 2;
    r->size = sizeof *r;
    memra_status_t st = memra_check_argmax_margin(model, ids, n, window, &p, r);
    free(ids);
    if (st) {
        fprintf(stderr, "memra-argmax-margin-probe: %s: %s\n", memra_status_name(st), memra_last_error());
        free(r);
        return 2;
    }
    print_report(r);
    free(r);
    return 0;
}
