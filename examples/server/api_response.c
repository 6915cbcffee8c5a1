/* memra-server: response bodies in the OpenAI shapes (api.h). Text comes
 * from the scheduler as valid UTF-8, which jansson requires. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "textout.h"

/* The body of J as compact JSON (malloc'ed), and J released; NULL when
 * out of memory (any step of building J may have failed). */
static char *dump(json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

char *api_error_json(const api_error_t *e)
{
    /* messages quote what the client sent (a path, a tokenizer's complaint),
     * which need not be UTF-8; jansson takes only UTF-8 */
    size_t n = 0;
    char *msg = textout_utf8_clean(e->message, strlen(e->message), &n);
    char *s = msg ? dump(json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", msg, "type", e->type, "param",
                                   e->param[0] ? e->param : NULL, "code", e->code))
                  : NULL;
    free(msg);
    return s;
}

const char *api_finish_reason(sched_finish_t f) { return f == SCHED_LENGTH ? "length" : "stop"; }

static json_t *usage(int32_t n_prompt, int32_t n_gen)
{
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", (int)n_prompt, "completion_tokens", (int)n_gen,
                     "total_tokens", (int)(n_prompt + n_gen));
}

char *api_response_json(const api_model_t *m, int chat, const char *id, long created, const char *text,
                        size_t n_text, sched_finish_t finish, int32_t n_prompt, int32_t n_gen)
{
    json_t *choice;
    if (chat)
        choice = json_pack("{s:i, s:{s:s, s:s%}, s:n, s:s}", "index", 0, "message", "role", "assistant", "content",
                           text ? text : "", n_text, "logprobs", "finish_reason", api_finish_reason(finish));
    else
        choice = json_pack("{s:i, s:s%, s:n, s:s}", "index", 0, "text", text ? text : "", n_text, "logprobs",
                           "finish_reason", api_finish_reason(finish));
    return dump(json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", id, "object",
                          chat ? "chat.completion" : "text_completion", "created", (json_int_t)created, "model", m->id,
                          "choices", choice, "usage", usage(n_prompt, n_gen)));
}

char *api_chunk_json(const api_model_t *m, int chat, const char *id, long created, int role, const char *text,
                     size_t n_text, sched_finish_t finish, int usage_only, int32_t n_prompt, int32_t n_gen)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", id, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)created, "model", m->id);
    if (!o)
        return NULL;
    json_t *choices = json_array();
    if (!usage_only) {
        json_t *fin = finish == SCHED_RUNNING ? json_null() : json_string(api_finish_reason(finish));
        json_t *choice;
        if (!chat)
            choice = json_pack("{s:i, s:s%, s:n, s:o}", "index", 0, "text", text ? text : "", n_text, "logprobs",
                               "finish_reason", fin);
        else if (role)
            choice = json_pack("{s:i, s:{s:s, s:s}, s:n, s:o}", "index", 0, "delta", "role", "assistant",
                               "content", "", "logprobs", "finish_reason", fin);
        else if (text)
            choice = json_pack("{s:i, s:{s:s%}, s:n, s:o}", "index", 0, "delta", "content", text, n_text,
                               "logprobs", "finish_reason", fin);
        else
            choice = json_pack("{s:i, s:{}, s:n, s:o}", "index", 0, "delta", "logprobs", "finish_reason", fin);
        json_array_append_new(choices, choice);
    }
    json_object_set_new(o, "choices", choices);
    if (n_prompt >= 0)
        json_object_set_new(o, "usage", usage(n_prompt, n_gen));
    return dump(o);
}

char *api_models_json(const api_model_t *m)
{
    return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:{s:i, s:i}}]}", "object", "list", "data", "id", m->id,
                          "object", "model", "created", (json_int_t)m->created, "owned_by", "memra", "meta",
                          "n_ctx", (int)m->n_ctx, "n_vocab", (int)m->n_vocab));
}
