/* Internal helpers shared by every file of the library (never installed). */
#ifndef MEMRA_INTERNAL_H
#define MEMRA_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/common.h"

#define MEMRA__ERRMSG_MAX 512

/* Last-error slot embedded in every handle. */
typedef struct memra__err {
    memra_status_t status;
    char msg[MEMRA__ERRMSG_MAX];
} memra__err_t;

/* Formats the message into ERR (may be NULL) and the thread's last error,
 * logs it at debug level, and returns STATUS so callers can write
 * `return memra__fail(...)`. */
memra_status_t memra__fail(memra__err_t *err, memra_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
memra_status_t memra__vfail(memra__err_t *err, memra_status_t status, const char *fmt, va_list ap);

/* Re-raises the calling thread's last error on ERR (may be NULL) as ST,
 * after an optional printf-style prefix (not repeated when the message
 * already starts with it). The message is copied first: memra__fail
 * formats into the very buffer memra_last_error() returns. */
memra_status_t memra__relay(memra__err_t *err, memra_status_t st, const char *prefix_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* MSG past a leading "PREFIX: ", or MSG itself when it does not start so:
 * for re-raising an inner message under a prefix (a path, a function
 * name) that the inner message may already carry, without repeating it. */
const char *memra__skip_prefix(const char *msg, const char *prefix);

/* Resets ERR (may be NULL) to MEMRA_OK with an empty message, so that a
 * handle's last error describes the latest failing call only. */
void memra__err_clear(memra__err_t *err);

void memra__log(memra_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Overflow-checked size arithmetic: false on overflow. */
static inline bool memra__mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool memra__add_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* The library's one UTF-8 decoder. Decodes the sequence at S[0..N) into
 * *CP and returns its length (1..4), or 0 when S does not start with a whole
 * sequence: N = 0, a continuation byte or F8..FF as lead, a lead without
 * its continuation bytes, and, when STRICT, an overlong form, a surrogate
 * or a value past U+10FFFF (*CP is then unspecified). Not strict is
 * llama.cpp's unicode_cpt_from_utf8, which checks the structure only; the
 * tokenizer uses it where llama.cpp does (vocabulary text), and on text
 * already checked strictly, where both agree. */
static inline size_t memra__utf8_decode(const unsigned char *s, size_t n, bool strict, uint32_t *cp)
{
    if (n == 0)
        return 0;
    const unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    const size_t len = c < 0xC0 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 0;
    if (len == 0 || n < len)
        return 0;
    uint32_t v = c & (0x7Fu >> len);
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[k] & 0x3Fu);
    }
    if (strict) {
        static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000}; /* below: overlong */
        if (v < least[len] || (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF)
            return 0;
    }
    *cp = v;
    return len;
}

/* Length of the UTF-8 sequence that lead byte C starts, from its high nibble
 * alone (a stray continuation byte counts as 1), for walking text already
 * checked; callers clamp it to the bytes left. */
static inline size_t memra__utf8_seq_len(unsigned char c)
{
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[c >> 4];
}

/* Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF): the offset of
 * the first sequence that breaks it, or N if S[0..N) is valid. */
size_t memra__utf8_bad_offset(const char *s, size_t n);
bool memra__utf8_valid(const char *s, size_t n);
/* Writes CP (below 2^21; not checked for surrogates) as 1..4 bytes of UTF-8;
 * returns the count. */
size_t memra__utf8_put(char *out, uint32_t cp);

/* IEEE half / bfloat16 conversion (exact, all classes). */
float memra__fp16_to_f32(uint16_t h);
uint16_t memra__f32_to_fp16(float f); /* round to nearest even */
float memra__bf16_to_f32(uint16_t h);
uint16_t memra__f32_to_bf16(float f); /* round to nearest even, NaN kept quiet */

/* Size-versioned structs (params and info) start with `uint32_t size`, and
 * the library touches only the bytes the caller's version has.
 * sized_write copies the SRC_SIZE-byte struct SRC into the caller's struct
 * DST of DST_SIZE (>= 4) bytes, as far as both reach, and sets DST's size to
 * the bytes written. sized_read overlays the caller's struct SRC (its own
 * size) on DST, which holds defaults, and sets DST's size to DST_SIZE. */
void memra__sized_write(void *dst, uint32_t dst_size, const void *src, size_t src_size);
void memra__sized_read(void *dst, size_t dst_size, const void *src);

/* Integer settings from text (env knobs, stage specs), one rule for all:
 * an optional sign and decimal digits, leading and trailing spaces allowed,
 * nothing else, in [LO, HI]. Otherwise MEMRA_E_INVALID with the message
 * "WHAT='S': expected an integer in [LO, HI]" in the thread's last error. */
memra_status_t memra__parse_int(const char *what, const char *s, long lo, long hi, int32_t *out);
/* Env knob NAME through memra__parse_int: unset or empty = DEF. Every knob
 * read where a call can fail (model load, engine create, the checks) uses
 * this, so garbage fails that call instead of being half-read or ignored.
 * (The CUDA backend's tuning knobs, read once inside kernels with no call
 * to fail, keep their default on garbage; cuda/cuda_backend.cu.) */
memra_status_t memra__env_int(const char *name, long lo, long hi, long def, int32_t *out);
/* The fewest decode rows a fast engine's step of model M runs on the
 * batched kernels: MEMRA_BATCH_FAST_MIN (read once) when set, else 2 for a
 * model whose trunk's rows end in a short K-quant segment (the
 * model's fast_min2, lib/model.c), else 3 (lib/forward.c says why). */
struct memra_model;
int32_t memra__batch_fast_min(const struct memra_model *m);

#define MEMRA__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Evaluates a status-returning EXPR; on failure, returns its status. */
#define MEMRA__TRY(expr)                                                                           \
    do {                                                                                           \
        memra_status_t st_ = (expr);                                                               \
        if (st_ != MEMRA_OK)                                                                       \
            return st_;                                                                            \
    } while (0)

#endif
