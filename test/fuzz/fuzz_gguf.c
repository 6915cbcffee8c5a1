/* libFuzzer target for the GGUF reader: any input must either open and then
 * satisfy every invariant gguf_walk() checks through the public accessors,
 * or fail with a status and a message. Nothing may crash, leak or read
 * outside the input (ASan/UBSan). */
#include <stddef.h>
#include <stdint.h>

#include "memra/memra.h"
#include "gguf_walk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    memra_gguf_t *g = NULL;
    memra_status_t st = memra_gguf_open_memory(data, size, &g);
    if (st != MEMRA_OK) {
        if (g != NULL || memra_last_error()[0] == '\0' ||
            (st != MEMRA_E_FORMAT && st != MEMRA_E_UNSUPPORTED))
            __builtin_trap();
        return 0;
    }
    if (!g || gguf_walk(g, data, size) != 0)
        __builtin_trap();
    memra_gguf_close(g);
    return 0;
}
