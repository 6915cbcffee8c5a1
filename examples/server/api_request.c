/* memra-server: checking an OpenAI request and turning it into a
 * scheduler request (api.h). Unknown members are ignored, as OpenAI
 * clients send many (user, metadata, ...); a known member of the wrong
 * type or out of its range is a 400 that names it. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

#define MAX_STOP 16          /* stop strings per request */
#define MAX_STOP_LEN 256     /* bytes per stop string */

void api_error_set(api_error_t *e, int status, const char *type, const char *code, const char *param,
                   const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

#define BAD(param, ...) \
    (api_error_set(err, 400, "invalid_request_error", "invalid_value", (param), __VA_ARGS__), -1)

/* Member KEY of O when present and not null, else NULL. */
static json_t *member(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* An optional number member in [LO, HI] into *OUT. */
static int get_number(json_t *o, const char *key, double lo, double hi, double *out, api_error_t *err)
{
    json_t *v = member(o, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return BAD(key, "'%s' must be a number", key);
    const double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return BAD(key, "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = x;
    return 0;
}

/* An optional integer member in [LO, HI] into *OUT. */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, api_error_t *err)
{
    json_t *v = member(o, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return BAD(key, "'%s' must be an integer", key);
    const long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return BAD(key, "'%s' must be in [%lld, %lld], got %lld", key, lo, hi, x);
    *out = x;
    return 0;
}

/* An optional boolean member into *OUT. */
static int get_bool(json_t *o, const char *key, int *out, api_error_t *err)
{
    json_t *v = member(o, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return BAD(key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

/* TEXT tokenized into a malloc'ed array. */
static int tokenize(const api_model_t *m, const char *text, size_t len, uint32_t flags, int32_t **ids,
                    int32_t *n, api_error_t *err)
{
    int32_t cap = (int32_t)(len < (size_t)INT32_MAX / 2 ? len : (size_t)INT32_MAX / 2) + 16, got = 0;
    for (int tries = 0; tries < 2; tries++) {
        int32_t *p = malloc((size_t)cap * sizeof *p);
        if (!p)
            break;
        memra_status_t st = memra_tokenize(m->tok, text, len, p, cap, flags, &got);
        if (st == MEMRA_OK) {
            *ids = p;
            *n = got;
            return 0;
        }
        free(p);
        if (st != MEMRA_E_RANGE) {
            api_error_set(err, 400, "invalid_request_error", "invalid_value", NULL, "tokenizer: %s",
                          memra_last_error());
            return -1;
        }
        cap = got;
    }
    api_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return -1;
}

/* /v1/completions' prompt: a string, or a list of token ids, or either
 * inside a one-element list (one prompt per request: n = 1). */
static int completion_prompt(const api_model_t *m, json_t *body, gen_params_t *g, api_error_t *err)
{
    json_t *p = member(body, "prompt");
    if (!p)
        return BAD("prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p))
        return tokenize(m, json_string_value(p), json_string_length(p),
                        MEMRA_TOKENIZE_ADD_SPECIAL | MEMRA_TOKENIZE_PARSE_SPECIAL, &g->prompt, &g->n_prompt, err);
    if (!json_is_array(p))
        return BAD("prompt", "'prompt' must be a string or a list of token ids");
    const size_t n = json_array_size(p);
    if (n > (size_t)m->n_ctx)
        return api_error_set(err, 400, "invalid_request_error", "context_length_exceeded", "prompt",
                             "the prompt is %zu tokens, more than the context (%d)", n, m->n_ctx), -1;
    if (!(g->prompt = malloc((n + 1) * sizeof *g->prompt)))
        return api_error_set(err, 500, "server_error", NULL, NULL, "out of memory"), -1;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(p, i);
        if (!json_is_integer(v))
            return BAD("prompt", "'prompt' must be a string or a list of token ids (one prompt per request)");
        const json_int_t id = json_integer_value(v);
        if (id < 0 || id >= m->n_vocab)
            return BAD("prompt", "token id %" JSON_INTEGER_FORMAT " is outside the vocabulary [0, %d)", id,
                       m->n_vocab);
        g->prompt[i] = (int32_t)id;
    }
    g->n_prompt = (int32_t)n;
    return 0;
}

/* A message's content as the template gets it: a string stays; a list of
 * text parts becomes their texts joined by "\n" (as llama.cpp's server
 * does, since most templates expect a string); null stays null. */
static int message_content(json_t *msg, size_t i, api_error_t *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    json_t *c = json_object_get(msg, "content");
    if (!c || json_is_null(c) || json_is_string(c))
        return 0;
    if (!json_is_array(c))
        return BAD(param, "'%s' must be a string, a list of text parts or null", param);
    size_t len = 0, j;
    json_t *part;
    json_array_foreach(c, j, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text"))
            return BAD(param, "'%s': only parts {\"type\": \"text\", \"text\": ...} are supported", param);
        if (!json_is_string(text))
            return BAD(param, "'%s': a text part's 'text' must be a string", param);
        len += json_string_length(text) + 1;
    }
    char *joined = malloc(len + 1), *w = joined;
    if (!joined)
        return api_error_set(err, 500, "server_error", NULL, NULL, "out of memory"), -1;
    json_array_foreach(c, j, part) {
        json_t *text = json_object_get(part, "text");
        if (j)
            *w++ = '\n';
        memcpy(w, json_string_value(text), json_string_length(text));
        w += json_string_length(text);
    }
    json_t *s = json_stringn(joined, (size_t)(w - joined));
    free(joined);
    if (!s || json_object_set_new(msg, "content", s))
        return api_error_set(err, 500, "server_error", NULL, NULL, "out of memory"), -1;
    return 0;
}

/* /v1/chat/completions' prompt: the messages (and tools, and the extension
 * chat_template_kwargs' variables) rendered by the model's chat template
 * with add_generation_prompt, then tokenized (special tokens parsed; no BOS
 * added, the template writes its own). */
static int chat_prompt(const api_model_t *m, json_t *body, gen_params_t *g, api_error_t *err)
{
    json_t *msgs = member(body, "messages");
    if (!msgs)
        return BAD("messages", "'messages' is required");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return BAD("messages", "'messages' must be a non-empty list");
    size_t i;
    json_t *msg;
    json_array_foreach(msgs, i, msg) {
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(msg))
            return BAD(param, "'%s' must be an object", param);
        if (!json_is_string(json_object_get(msg, "role"))) {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            return BAD(param, "'%s' must be a string", param);
        }
        if (message_content(msg, i, err))
            return -1;
    }
    json_t *tools = member(body, "tools"), *kw = member(body, "chat_template_kwargs");
    if (tools && !json_is_array(tools))
        return BAD("tools", "'tools' must be a list");
    if (kw && !json_is_object(kw))
        return BAD("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    json_t *ctx = json_object();
    int oom = !ctx || json_object_set(ctx, "messages", msgs) || (tools && json_object_set(ctx, "tools", tools)) ||
              json_object_set_new(ctx, "add_generation_prompt", json_true());
    if (!oom && kw)
        oom = json_object_update(ctx, kw);
    char *ctx_json = oom ? NULL : json_dumps(ctx, JSON_COMPACT);
    json_decref(ctx);
    if (!ctx_json)
        return api_error_set(err, 500, "server_error", NULL, NULL, "out of memory"), -1;
    char *text = NULL;
    size_t n_text = 0;
    memra_status_t st = memra_chat_render_tokenizer(m->tok, ctx_json, NULL, &text, &n_text);
    free(ctx_json);
    if (st == MEMRA_E_INVALID) /* the template's raise_exception: about the conversation */
        return BAD("messages", "chat template: %s", memra_last_error());
    if (st != MEMRA_OK)
        return api_error_set(err, 500, "server_error", NULL, NULL, "chat template: %s", memra_last_error()), -1;
    int rc = tokenize(m, text, n_text, MEMRA_TOKENIZE_PARSE_SPECIAL, &g->prompt, &g->n_prompt, err);
    memra_free(text);
    return rc;
}

/* stop: a string or a list of strings; empty ones are ignored (they would
 * end every reply at once). */
static int stop_strings(json_t *body, gen_params_t *g, api_error_t *err)
{
    json_t *v = member(body, "stop");
    if (!v)
        return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        items = NULL;
    } else if (!json_is_string(v)) {
        return BAD("stop", "'stop' must be a string or a list of strings");
    }
    if (n > MAX_STOP)
        return BAD("stop", "'stop' has %zu strings, at most %d are allowed", n, MAX_STOP);
    if (!(g->stop = calloc(n ? n : 1, sizeof *g->stop)))
        return api_error_set(err, 500, "server_error", NULL, NULL, "out of memory"), -1;
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        if (!json_is_string(s))
            return BAD("stop", "'stop' must be a string or a list of strings");
        if (json_string_length(s) > MAX_STOP_LEN)
            return BAD("stop", "a stop string is longer than %d bytes", MAX_STOP_LEN);
        if (!json_string_length(s))
            continue;
        if (strlen(json_string_value(s)) != json_string_length(s))
            return BAD("stop", "a stop string holds a NUL character");
        if (!(g->stop[g->n_stop] = strdup(json_string_value(s))))
            return api_error_set(err, 500, "server_error", NULL, NULL, "out of memory"), -1;
        g->n_stop++;
    }
    return 0;
}

/* logit_bias: {"token id": bias in [-100, 100]}, added to the logits. */
static int logit_bias(const api_model_t *m, json_t *body, gen_params_t *g, api_error_t *err)
{
    json_t *v = member(body, "logit_bias");
    if (!v)
        return 0;
    if (!json_is_object(v))
        return BAD("logit_bias", "'logit_bias' must be an object mapping token ids to numbers");
    const size_t n = json_object_size(v);
    g->bias_ids = malloc((n ? n : 1) * sizeof *g->bias_ids);
    g->bias = malloc((n ? n : 1) * sizeof *g->bias);
    if (!g->bias_ids || !g->bias)
        return api_error_set(err, 500, "server_error", NULL, NULL, "out of memory"), -1;
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        char *end;
        const long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id >= m->n_vocab)
            return BAD("logit_bias", "logit_bias key '%.40s' is not a token id in [0, %d)", key, m->n_vocab);
        if (!json_is_number(val) || !(json_number_value(val) >= -100 && json_number_value(val) <= 100))
            return BAD("logit_bias", "logit_bias of token %ld must be a number in [-100, 100]", id);
        g->bias_ids[g->n_bias] = (int32_t)id;
        g->bias[g->n_bias++] = (float)json_number_value(val);
    }
    return 0;
}

/* Members OpenAI has and this server does not do: refused rather than
 * ignored, since the client would get something else than it asked for. */
static int unsupported(json_t *body, api_error_t *err)
{
    static const char *const one[] = {"n", "best_of"};
    for (int i = 0; i < 2; i++) {
        json_t *v = member(body, one[i]);
        if (v && !(json_is_integer(v) && json_integer_value(v) == 1))
            return BAD(one[i], "'%s' must be 1: one choice per request", one[i]);
    }
    int flag = 0;
    if (get_bool(body, "echo", &flag, err) || flag)
        return BAD("echo", "'echo' is not supported");
    json_t *lp = member(body, "logprobs");
    if (lp && !json_is_false(lp))
        return BAD("logprobs", "'logprobs' is not supported");
    if (member(body, "top_logprobs"))
        return BAD("top_logprobs", "'top_logprobs' is not supported");
    json_t *suffix = member(body, "suffix");
    if (suffix && !(json_is_string(suffix) && !json_string_length(suffix)))
        return BAD("suffix", "'suffix' is not supported");
    return 0;
}

static int parse(const api_model_t *m, int chat, json_t *body, uint64_t seed, api_request_t *out,
                 api_error_t *err)
{
    gen_params_t *g = &out->gen;
    json_t *model = member(body, "model");
    if (model && !json_is_string(model))
        return BAD("model", "'model' must be a string");
    if (model && strcmp(json_string_value(model), m->id)) {
        api_error_set(err, 404, "invalid_request_error", "model_not_found", "model",
                      "The model '%.200s' does not exist (this server has '%.200s')", json_string_value(model),
                      m->id);
        return -1;
    }
    if (unsupported(body, err) || get_bool(body, "stream", &out->stream, err))
        return -1;
    json_t *so = member(body, "stream_options");
    if (so && !json_is_object(so))
        return BAD("stream_options", "'stream_options' must be an object");
    if (so && get_bool(so, "include_usage", &out->include_usage, err))
        return BAD("stream_options", "'stream_options.include_usage' must be a boolean");

    memra_sampler_params_t sp;
    memra_sampler_default_params(&sp);
    sp.seed = seed;
    double temp = sp.temperature, top_p = sp.top_p, min_p = sp.min_p, rp = sp.repeat_penalty;
    double presence = 0, frequency = 0;
    long long top_k = sp.top_k, rln = sp.repeat_last_n, max_tokens = INT32_MAX, s = 0;
    if (get_number(body, "temperature", 0, 1e6, &temp, err) || get_number(body, "top_p", 0, 1, &top_p, err) ||
        get_number(body, "min_p", 0, 1, &min_p, err) || get_int(body, "top_k", 0, INT32_MAX, &top_k, err) ||
        get_number(body, "presence_penalty", -2, 2, &presence, err) ||
        get_number(body, "frequency_penalty", -2, 2, &frequency, err) ||
        get_number(body, "repeat_penalty", MEMRA_SAMPLER_PENALTY_MIN, MEMRA_SAMPLER_PENALTY_MAX, &rp, err) ||
        get_int(body, "repeat_last_n", 0, 1 << 20, &rln, err) ||
        get_int(body, "max_tokens", 1, INT32_MAX, &max_tokens, err) ||
        get_int(body, "max_completion_tokens", 1, INT32_MAX, &max_tokens, err))
        return -1;
    json_t *sv = member(body, "seed");
    if (sv && !json_is_integer(sv))
        return BAD("seed", "'seed' must be an integer");
    if (sv) {
        s = json_integer_value(sv);
        sp.seed = (uint64_t)s; /* negative seeds wrap: any integer picks a stream */
    }
    sp.temperature = (float)temp;
    sp.top_p = (float)top_p;
    sp.min_p = (float)min_p;
    sp.top_k = (int32_t)top_k;
    sp.repeat_penalty = (float)rp;
    sp.repeat_last_n = (int32_t)rln;
    g->max_tokens = (int32_t)max_tokens;
    g->presence_penalty = (float)presence;
    g->frequency_penalty = (float)frequency;
    if (stop_strings(body, g, err) || logit_bias(m, body, g, err))
        return -1;
    if (memra_sampler_create(&sp, &g->sampler) != MEMRA_OK) /* the sampler's own range checks */
        return BAD(NULL, "%s", memra_last_error());

    if (chat ? chat_prompt(m, body, g, err) : completion_prompt(m, body, g, err))
        return -1;
    if (g->n_prompt == 0)
        return BAD(chat ? "messages" : "prompt", "the prompt gives no tokens");
    if (g->n_prompt > m->n_ctx) {
        api_error_set(err, 400, "invalid_request_error", "context_length_exceeded", chat ? "messages" : "prompt",
                      "the prompt is %d tokens, more than the context (%d tokens per sequence)", g->n_prompt,
                      m->n_ctx);
        return -1;
    }
    for (int32_t i = 0; i < g->n_prompt; i++) /* the repetition penalty sees the prompt, as memra-run's */
        memra_sampler_accept(g->sampler, g->prompt[i]);
    return 0;
}

int api_parse_request(const api_model_t *m, int chat, const char *body, size_t n, uint64_t seed,
                      api_request_t *out, api_error_t *err)
{
    memset(out, 0, sizeof *out);
    out->chat = chat;
    json_error_t je;
    json_t *root = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        api_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
                      "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return -1;
    }
    int rc = -1;
    if (!json_is_object(root))
        api_error_set(err, 400, "invalid_request_error", "invalid_value", NULL, "the body must be a JSON object");
    else
        rc = parse(m, chat, root, seed, out, err);
    json_decref(root);
    if (rc)
        api_request_clear(out);
    return rc;
}

void api_request_clear(api_request_t *r) { gen_params_clear(&r->gen); }
