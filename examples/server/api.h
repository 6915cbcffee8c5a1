/* memra-server: the OpenAI API's JSON (jansson): requests of
 * /v1/chat/completions and /v1/completions checked and turned into a
 * scheduler request, and the response, chunk, model list and error bodies. */
#ifndef MEMRA_SERVER_API_H
#define MEMRA_SERVER_API_H

#include <stddef.h>
#include <stdint.h>

#include <memra/memra.h>

#include "scheduler.h"

/* The model as the API shows it. */
typedef struct api_model {
    const memra_tokenizer_t *tok;
    const char *id;       /* the "model" requests name, /v1/models lists */
    int32_t n_ctx;        /* tokens per sequence */
    int32_t n_vocab;
    long created;         /* start time, for /v1/models */
} api_model_t;

/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}}. */
typedef struct api_error {
    int status;           /* HTTP status */
    const char *type;     /* "invalid_request_error", "server_error", ... */
    const char *code;     /* or NULL */
    char param[64];       /* the request member at fault, or "" */
    char message[512];
} api_error_t;

void api_error_set(api_error_t *e, int status, const char *type, const char *code, const char *param,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* The error's JSON body (malloc'ed), or NULL when out of memory. */
char *api_error_json(const api_error_t *e);

/* A checked request. */
typedef struct api_request {
    int chat;             /* /v1/chat/completions (else /v1/completions) */
    int stream;
    int include_usage;    /* stream_options.include_usage: a last chunk with the usage */
    gen_params_t gen;     /* prompt tokens, sampler, limits, stop strings */
} api_request_t;

/* Parses and checks BODY[0..N) for the endpoint (CHAT or not): model,
 * sampling parameters, the prompt (for chat, messages rendered through the
 * model's chat template) tokenized and fitted to the context. SEED is the
 * seed when the request names none. Returns 0, or -1 with *ERR filled
 * (nothing left to free). */
int api_parse_request(const api_model_t *m, int chat, const char *body, size_t n, uint64_t seed,
                      api_request_t *out, api_error_t *err);

/* Frees what api_parse_request made and the scheduler did not take. */
void api_request_clear(api_request_t *r);

/* "stop" or "length" for a finished request. */
const char *api_finish_reason(sched_finish_t f);

/* The non-stream response body (malloc'ed; NULL when out of memory). */
char *api_response_json(const api_model_t *m, int chat, const char *id, long created, const char *text,
                        size_t n_text, sched_finish_t finish, int32_t n_prompt, int32_t n_gen);

/* One stream chunk (malloc'ed JSON, no "data: " framing): ROLE (chat: the
 * first chunk's delta is {"role":"assistant","content":""}), else TEXT as the
 * delta, FINISH (or SCHED_RUNNING) and, when N_PROMPT >= 0, the usage. With
 * USAGE_ONLY: the chunk of stream_options.include_usage (no choices). */
char *api_chunk_json(const api_model_t *m, int chat, const char *id, long created, int role, const char *text,
                     size_t n_text, sched_finish_t finish, int usage_only, int32_t n_prompt, int32_t n_gen);

/* GET /v1/models. */
char *api_models_json(const api_model_t *m);

#endif
