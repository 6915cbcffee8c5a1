/* memra-run's chat mode (examples/run_chat.c). */
#ifndef MEMRA_EXAMPLES_RUN_CHAT_H
#define MEMRA_EXAMPLES_RUN_CHAT_H

#include <memra/memra.h>

#include "common.h"

typedef struct run_chat_args {
    memra_model_t *model;
    memra_cache_t *cache;         /* n_ctx tokens */
    const memra_tokenizer_t *tok;
    memra_sampler_t *sampler;
    const char *system;           /* system prompt, or NULL */
    long n_predict;               /* reply tokens at most */
    int32_t n_ctx;
    int interactive;              /* prompts and per-turn rates on stderr */
} run_chat_args;

/* Reads user turns from stdin, a line each, until EOF or "/exit", and
 * streams each reply to stdout. 0, or 1 after an error it printed. */
int run_chat(const run_chat_args *a);

#endif
