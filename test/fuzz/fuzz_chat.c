/* libFuzzer target for the chat-template interpreter: the input is a
 * template, then a NUL byte and a context JSON (without one, a fixed
 * conversation). Any input must render or fail with one of the documented
 * statuses and a message, within the limits, without crashing, leaking or
 * reading outside the input (ASan/UBSan). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memra/memra.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char default_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Hi é\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>r</think>A\", \"tool_calls\": [{\"type\": \"function\","
    " \"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"abcdefghi\", \"content\": \"42\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    size_t tl = strlen(buf);
    const char *ctx = tl < size ? buf + tl + 1 : default_ctx;
    memra_chat_params_t p;
    memra_chat_default_params(&p);
    p.now = "2026-01-15T09:30:00";
    p.max_steps = 20000;
    p.max_output = 1 << 20;
    char *out = NULL;
    size_t n = 0;
    memra_status_t st = memra_chat_render_alloc(buf, ctx, &p, &out, &n);
    if (st == MEMRA_OK) {
        if (!out || strlen(out) > n || n > p.max_output)
            __builtin_trap();
    } else if (out || memra_last_error()[0] == '\0' ||
               (st != MEMRA_E_INVALID && st != MEMRA_E_FORMAT && st != MEMRA_E_TYPE && st != MEMRA_E_UNSUPPORTED &&
                st != MEMRA_E_RANGE && st != MEMRA_E_NOMEM)) {
        __builtin_trap();
    }
    memra_free(out);
    free(buf);
    return 0;
}
