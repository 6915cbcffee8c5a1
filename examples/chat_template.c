/* memra-chat-template: renders a chat template for one conversation.
 *
 *   memra-chat-template [--now YYYY-MM-DDTHH:MM:SS] TEMPLATE.jinja CONTEXT.json
 *   memra-chat-template [--now ...] -m MODEL.gguf CONTEXT.json
 *
 * CONTEXT.json is one JSON object: the template's variables (messages,
 * tools, add_generation_prompt, bos_token, eos_token, enable_thinking, ...).
 * With -m the GGUF's own tokenizer.chat_template is used, and its BOS/EOS
 * texts stand in for a missing bos_token/eos_token. The rendering goes to
 * stdout exactly as rendered (nothing added); an error goes to stderr and
 * the exit status is 1 (2 for bad usage). --now fixes strftime_now(). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "cli.h"

static const cli_opt_t k_opts[] = {
    {'m', "model", "MODEL", "render MODEL.gguf's own tokenizer.chat_template (then one operand: CONTEXT.json)"},
    {CLI_LONG_ONLY, "now", "TIME", "the time strftime_now() formats, YYYY-MM-DD[THH:MM[:SS]] (default: now)"},
};

static const cli_prog_t k_prog = {
    .name = "memra-chat-template",
    .synopsis = "[--now TIME] TEMPLATE.jinja CONTEXT.json\n[--now TIME] -m MODEL.gguf CONTEXT.json",
    .about = "Renders a chat template (a Jinja subset, docs/CHAT.md) for the variables in CONTEXT.json, one JSON "
             "object (messages, tools, add_generation_prompt, bos_token, eos_token, extras such as "
             "enable_thinking). The rendering goes to stdout exactly, nothing added; a template error goes to "
             "stderr with exit status 1.",
    .opts = k_opts,
    .n_opts = (int)(sizeof k_opts / sizeof k_opts[0]),
    .examples = "memra-chat-template template.jinja context.json\nmemra-chat-template -m model.gguf context.json",
};

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "memra-chat-template: %s: cannot open\n", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        fprintf(stderr, "memra-chat-template: %s: read error\n", path);
        return NULL;
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        free(buf);
        fprintf(stderr, "memra-chat-template: %s: contains a NUL byte\n", path);
        return NULL;
    }
    return buf;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *now = NULL;
    cli_t c;
    cli_init(&c, &k_prog, argc, argv);
    for (int key; (key = cli_next(&c)) != -1;)
        switch (key) {
        case 'm': model = c.arg; break;
        case CLI_LONG_ONLY: now = c.arg; break;
        default: break;
        }
    const int npos = argc - c.first_operand;
    if (npos != (model ? 1 : 2))
        cli_fail(&c, "want %s", model ? "one operand, CONTEXT.json" : "two operands, TEMPLATE.jinja CONTEXT.json");
    const char *pos[2] = {argv[c.first_operand], npos > 1 ? argv[c.first_operand + 1] : NULL};
    memra_chat_params_t params;
    memra_chat_default_params(&params);
    params.now = now;
    char *ctx = read_file(pos[model ? 0 : 1]);
    if (!ctx)
        return 1;
    char *out = NULL;
    size_t n = 0;
    memra_status_t st;
    if (model) {
        memra_tokenizer_t *tok = NULL;
        st = memra_tokenizer_load(model, &tok);
        if (st == MEMRA_OK) {
            st = memra_chat_render_tokenizer(tok, ctx, &params, &out, &n);
            memra_tokenizer_free(tok);
        }
    } else {
        char *tmpl = read_file(pos[0]);
        if (!tmpl) {
            free(ctx);
            return 1;
        }
        st = memra_chat_render_alloc(tmpl, ctx, &params, &out, &n);
        free(tmpl);
    }
    free(ctx);
    if (st != MEMRA_OK) {
        fprintf(stderr, "memra-chat-template: %s\n", memra_last_error());
        return 1;
    }
    int rc = fwrite(out, 1, n, stdout) == n && fflush(stdout) == 0 ? 0 : 1;
    memra_free(out);
    if (rc)
        fprintf(stderr, "memra-chat-template: write error\n");
    return rc;
}
