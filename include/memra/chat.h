/* memra: chat templates. Renders a model's `tokenizer.chat_template` (a
 * Jinja template) for a conversation, as Hugging Face transformers'
 * apply_chat_template does with jinja2: trim_blocks, lstrip_blocks, loop
 * controls, `tojson` as json.dumps(ensure_ascii=False), raise_exception()
 * and strftime_now(). The interpreter covers the subset of Jinja that chat
 * templates use (docs/CHAT.md lists it) and is sandboxed: templates reach
 * only the context's data, and loops, macro depth and output are bounded.
 *
 * The context is one JSON object whose members become the template's
 * variables, e.g.
 *   {"messages": [{"role": "user", "content": "Hi"}],
 *    "tools": [...], "add_generation_prompt": true,
 *    "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false}
 * Messages may carry role, content (a string or a list of parts),
 * reasoning_content, tool_calls, tool_call_id, name: whatever the template
 * reads. JSON objects keep their member order (json.loads does too).
 *
 * Errors: MEMRA_E_INVALID for a context that is not a JSON object and when
 * the template calls raise_exception(MSG) (memra_last_error() is then MSG
 * exactly, up to its 511-byte limit); MEMRA_E_FORMAT for a template syntax error ("chat template:
 * line N: ..."); MEMRA_E_TYPE when the template uses a value it cannot
 * (jinja2's message, e.g. "list object has no element 0" for messages[0].role
 * of an empty list); MEMRA_E_UNSUPPORTED for a filter, test or statement
 * outside the subset; MEMRA_E_RANGE when a limit below is reached;
 * MEMRA_E_NOMEM. Nothing is written to the caller's output on error. */
#ifndef MEMRA_CHAT_H
#define MEMRA_CHAT_H

#include "common.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memra_chat_params {
    uint32_t size;        /* sizeof(memra_chat_params_t), set by the init macro */
    uint32_t max_depth;   /* macro calls nested at most this deep (0 = 64, default 0) */
    const char *now;      /* the time strftime_now() formats, "YYYY-MM-DD[THH:MM[:SS]]"
                             (NULL = the current local time, default NULL) */
    uint64_t max_output;  /* bytes of the rendering and of any string built on the way
                             (0 = 16 MiB, default 0) */
    uint64_t max_steps;   /* loop iterations plus macro calls (0 = 10 000 000, default 0) */
} memra_chat_params_t;

/* Fills PARAMS with defaults for a struct of SIZE bytes (use the macro).
 * Thread-safety: any thread. */
MEMRA_API void memra_chat_params_init(memra_chat_params_t *params, uint32_t size);
#define memra_chat_default_params(p) memra_chat_params_init((p), MEMRA__SIZEOF32(*(p)))

/* Renders TEMPLATE (NUL-terminated) for CONTEXT_JSON (NUL-terminated) into
 * BUF, NUL-terminated. *N_OUT receives the rendering's length in bytes
 * without the NUL; when CAP < *N_OUT + 1 the call returns MEMRA_E_RANGE with
 * that length and BUF unspecified (pass NULL, 0 to ask for the size; a
 * second call renders again). PARAMS may be NULL (defaults).
 * Thread-safety: any thread (no shared state). */
MEMRA_API memra_status_t memra_chat_render(const char *tmpl, const char *context_json,
                                           const memra_chat_params_t *params, char *buf, size_t cap,
                                           size_t *n_out);

/* As memra_chat_render(), into a NUL-terminated string the library
 * allocates (*OUT, free it with memra_free()); N_OUT may be NULL.
 * Thread-safety: any thread (no shared state). */
MEMRA_API memra_status_t memra_chat_render_alloc(const char *tmpl, const char *context_json,
                                                 const memra_chat_params_t *params, char **out,
                                                 size_t *n_out);

/* As memra_chat_render_alloc() with the template of TOK (the GGUF's
 * `tokenizer.chat_template`; MEMRA_E_NOT_FOUND if it has none; a loaded
 * model's tokenizer is memra_model_tokenizer(model)). When the
 * context has no bos_token or eos_token, the text of TOK's BOS and EOS
 * tokens (or "") is given to the template.
 * Thread-safety: any thread, concurrently on one tokenizer. */
MEMRA_API memra_status_t memra_chat_render_tokenizer(const memra_tokenizer_t *tok, const char *context_json,
                                                     const memra_chat_params_t *params, char **out,
                                                     size_t *n_out);

#ifdef __cplusplus
}
#endif
#endif
