/* memra_chat_render_tokenizer: the chat-template API over a loaded
 * tokenizer's own template and special tokens (apart from chat.c, so that
 * the interpreter builds without the tokenizer, as the fuzz target does). */
#include "../internal.h"
#include "chat_impl.h"
#include "memra/chat.h"

memra_status_t memra_chat_render_tokenizer(const memra_tokenizer_t *tok, const char *context_json,
                                           const memra_chat_params_t *params, char **out, size_t *n_out)
{
    if (!tok)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_chat_render_tokenizer: NULL tokenizer");
    const char *tmpl = memra_tokenizer_chat_template(tok);
    if (!tmpl)
        return memra__fail(NULL, MEMRA_E_NOT_FOUND, "memra_chat_render_tokenizer: the model has no tokenizer.chat_template");
    int32_t bos = memra_tokenizer_bos(tok), eos = memra_tokenizer_eos(tok);
    const char *bt = bos >= 0 ? memra_tokenizer_token_text(tok, bos) : NULL;
    const char *et = eos >= 0 ? memra_tokenizer_token_text(tok, eos) : NULL;
    memra__chat_job_t j = {.tmpl = tmpl, .ctx = context_json, .bos = bt ? bt : "", .eos = et ? et : "", .params = params};
    return memra__chat_render(&j, out, n_out);
}
