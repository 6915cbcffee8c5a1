/* memra-run's chat mode (--chat, -cnv): a multi-turn conversation through
 * the model's own chat template (memra_chat_render_tokenizer, docs/CHAT.md).
 *
 * Each turn renders the whole conversation with add_generation_prompt and
 * tokenizes it (special tokens parsed, no BOS: the template writes its own).
 * The cache is restored to the snapshot taken after the previous turn's
 * prompt, so it holds exactly that prompt's tokens; when the new rendering
 * starts with them only the rest is prefilled, else the cache starts over.
 * Restoring, not continuing after the reply, keeps the cache equal to what
 * the template renders even where the reply's sampled tokens and their
 * re-tokenized text differ, and works for recurrent (Gated DeltaNet) state,
 * which cannot be cut back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_chat.h"

/* A growable string. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* S as a JSON string literal. */
static void sb_json(sbuf *b, const char *s, size_t n)
{
    sb_str(b, "\"");
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\', esc[1] = (char)ch;
            sb_add(b, esc, 2);
        } else if (ch == '\n') {
            sb_str(b, "\\n");
        } else if (ch == '\t') {
            sb_str(b, "\\t");
        } else if (ch == '\r') {
            sb_str(b, "\\r");
        } else if (ch < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            sb_str(b, esc);
        } else {
            sb_add(b, (const char *)&ch, 1);
        }
    }
    sb_str(b, "\"");
}

/* The conversation so far: the "messages" array's items, comma-joined. */
static void add_message(sbuf *msgs, const char *role, const char *text, size_t n)
{
    if (msgs->n)
        sb_str(msgs, ",");
    sb_str(msgs, "{\"role\":\"");
    sb_str(msgs, role);
    sb_str(msgs, "\",\"content\":");
    sb_json(msgs, text, n);
    sb_str(msgs, "}");
}

/* Appends the piece of TOKEN to OUT and prints it. */
static int emit(const memra_tokenizer_t *tok, int32_t token, sbuf *out)
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
        sb_add(out, big, n);
        free(big);
    } else if (st != MEMRA_OK) {
        return -1;
    } else {
        fwrite(buf, 1, n, stdout);
        sb_add(out, buf, n);
    }
    fflush(stdout);
    return 0;
}

/* One line of user input (without its newline) into LINE; 0 at EOF. */
static int read_line(sbuf *line)
{
    line->n = 0;
    sb_str(line, "");
    int ch, any = 0;
    while ((ch = getchar()) != EOF) {
        any = 1;
        if (ch == '\n')
            break;
        char c = (char)ch;
        sb_add(line, &c, 1);
    }
    return any;
}

int run_chat(const run_chat_args *a)
{
    const memra_tokenizer_t *tok = a->tok;
    if (!memra_tokenizer_chat_template(tok)) {
        fprintf(stderr, "memra-run: the model has no chat template (tokenizer.chat_template)\n");
        return 1;
    }
    memra_chat_params_t cp;
    memra_chat_default_params(&cp);
    const int32_t n_vocab = memra_model_n_vocab(a->model);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    int32_t *hist = NULL, n_hist = 0;
    memra_cache_snapshot_t *snap = NULL;
    sbuf msgs = {0}, ctx = {0}, line = {0}, reply = {0};
    int rc = 1;
    if (!logits)
        goto out;
    if (a->system)
        add_message(&msgs, "system", a->system, strlen(a->system));
    for (;;) {
        if (a->interactive)
            fprintf(stderr, "\n> ");
        if (!read_line(&line))
            break;
        if (!strcmp(line.p, "/exit") || !strcmp(line.p, "/quit"))
            break;
        add_message(&msgs, "user", line.p, line.n);
        ctx.n = 0;
        sb_str(&ctx, "{\"add_generation_prompt\":true,\"messages\":[");
        sb_add(&ctx, msgs.p, msgs.n);
        sb_str(&ctx, "]}");
        if (msgs.oom || ctx.oom || line.oom) {
            fprintf(stderr, "memra-run: out of memory\n");
            goto out;
        }
        char *text = NULL;
        size_t text_n = 0;
        if (memra_chat_render_tokenizer(tok, ctx.p, &cp, &text, &text_n)) {
            fprintf(stderr, "memra-run: chat template: %s\n", memra_last_error());
            goto out;
        }
        int32_t *ids = NULL, n_ids = 0;
        const int bad = example_tokenize("memra-run", tok, text, text_n, MEMRA_TOKENIZE_PARSE_SPECIAL, &ids, &n_ids);
        memra_free(text);
        if (bad)
            goto out;
        if (n_ids > a->n_ctx) {
            fprintf(stderr, "memra-run: the conversation is %d tokens, more than the context (-c %d)\n", n_ids,
                    a->n_ctx);
            free(ids);
            goto out;
        }
        /* the cache back at the previous prompt; only the new tokens go in */
        int32_t keep = 0;
        if (snap && n_hist < n_ids && !memcmp(hist, ids, (size_t)n_hist * sizeof *ids) &&
            memra_cache_restore(a->cache, snap) == MEMRA_OK)
            keep = n_hist;
        else
            memra_cache_clear(a->cache);
        double t0 = example_seconds();
        memra_status_t st = memra_forward(a->model, a->cache, ids + keep, n_ids - keep, 0, logits);
        const double t_prefill = example_seconds() - t0;
        free(hist);
        hist = ids;
        n_hist = n_ids;
        memra_cache_snapshot_free(snap);
        snap = NULL;
        if (st || memra_cache_snapshot(a->cache, &snap)) {
            fprintf(stderr, "memra-run: prefill: %s\n", memra_model_last_error(a->model));
            goto out;
        }
        reply.n = 0;
        sb_str(&reply, "");
        int32_t n_gen = 0;
        t0 = example_seconds();
        for (long i = 0; i < a->n_predict; i++) {
            int32_t t;
            if (memra_sampler_sample(a->sampler, logits, n_vocab, &t)) {
                fprintf(stderr, "\nmemra-run: sample: %s\n", memra_sampler_last_error(a->sampler));
                goto out;
            }
            if (memra_tokenizer_is_eog(tok, t))
                break;
            memra_sampler_accept(a->sampler, t);
            if (emit(tok, t, &reply)) {
                fprintf(stderr, "\nmemra-run: token %d: %s\n", t, memra_last_error());
                goto out;
            }
            n_gen++;
            if (i + 1 == a->n_predict || memra_cache_pos(a->cache) >= a->n_ctx)
                break;
            if (memra_decode_step(a->model, a->cache, t, logits)) {
                fprintf(stderr, "\nmemra-run: decode: %s\n", memra_model_last_error(a->model));
                goto out;
            }
        }
        const double t_gen = example_seconds() - t0;
        printf("\n");
        fflush(stdout);
        add_message(&msgs, "assistant", reply.p, reply.n);
        if (a->interactive)
            fprintf(stderr, "[%d prompt tokens in %.3f s, %d generated at %.1f tok/s]\n", n_ids - keep, t_prefill,
                    n_gen, t_gen > 0 ? n_gen / t_gen : 0.0);
    }
    rc = 0;
out:
    memra_cache_snapshot_free(snap);
    free(hist);
    free(logits);
    free(msgs.p);
    free(ctx.p);
    free(line.p);
    free(reply.p);
    return rc;
}
