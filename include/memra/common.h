/* memra: common definitions shared by every public header: export macro,
 * status codes, version queries, logging and the thread's last error. */
#ifndef MEMRA_COMMON_H
#define MEMRA_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(MEMRA_BUILDING_LIBRARY) && defined(__GNUC__)
#define MEMRA_API __attribute__((visibility("default")))
#else
#define MEMRA_API
#endif

#if defined(__GNUC__)
#define MEMRA_DEPRECATED(hint) __attribute__((deprecated(hint)))
#else
#define MEMRA_DEPRECATED(hint)
#endif

/* Status codes. Values are stable once shipped and never reused; new codes
 * are appended with the next free negative value. */
#define MEMRA_STATUS_MAP(XX)                                                     \
    XX(OK, 0, "success")                                                         \
    XX(E_INVALID, -1, "invalid argument")                                        \
    XX(E_MISUSE, -2, "API misuse (wrong handle, wrong order or wrong state)")   \
    XX(E_NOMEM, -3, "out of memory")                                             \
    XX(E_IO, -4, "input/output error")                                           \
    XX(E_FORMAT, -5, "malformed or corrupt file")                                \
    XX(E_UNSUPPORTED, -6, "unsupported feature, type or architecture")           \
    XX(E_NO_DEVICE, -7, "no such device or backend not built")                   \
    XX(E_DEVICE, -8, "device or driver error")                                   \
    XX(E_RANGE, -9, "value out of range")                                        \
    XX(E_FULL, -10, "cache is full")                                             \
    XX(E_AGAIN, -11, "not ready yet, try again")                                 \
    XX(E_NOT_FOUND, -12, "not found")                                            \
    XX(E_BUSY, -13, "handle has work in flight")                                 \
    XX(E_TYPE, -14, "value has a different type")                                \
    XX(E_MISMATCH, -15, "check found a mismatch")                                \
    XX(E_INTERNAL, -16, "internal error")

typedef enum memra_status {
#define MEMRA__STATUS_ENUM(name, value, text) MEMRA_##name = value,
    MEMRA_STATUS_MAP(MEMRA__STATUS_ENUM)
#undef MEMRA__STATUS_ENUM
} memra_status_t;

/* Static English text for a status; unknown values give "unknown status".
 * Thread-safety: any thread. */
MEMRA_API const char *memra_strerror(memra_status_t status);

/* Symbolic name without prefix, e.g. "E_FORMAT". Thread-safety: any thread. */
MEMRA_API const char *memra_status_name(memra_status_t status);

/* Message of the last failed call made by the calling thread (empty string
 * if none). Every failing call also stores its message here, including
 * constructors that have no handle yet. Valid until the thread's next failing
 * call. Thread-safety: any thread (per-thread storage). */
MEMRA_API const char *memra_last_error(void);

/* "0.1.0" and 100 (MAJOR*10000 + MINOR*100 + PATCH) of the loaded library;
 * compare with MEMRA_VERSION_NUMBER to detect header/library skew.
 * Thread-safety: any thread. */
MEMRA_API const char *memra_version(void);
MEMRA_API uint32_t memra_version_number(void);

typedef enum memra_log_level {
    MEMRA_LOG_DEBUG = 0,
    MEMRA_LOG_INFO = 1,
    MEMRA_LOG_WARN = 2,
    MEMRA_LOG_ERROR = 3,
} memra_log_level_t;

/* Receives finished text (no trailing newline). Never called while the
 * library holds an internal lock. */
typedef void (*memra_log_fn)(memra_log_level_t level, const char *text, void *user);

/* Installs the process-wide logger (NULL = silent, the default) and the
 * minimum level passed to it. Thread-safety: before any other call. */
MEMRA_API void memra_log_set(memra_log_fn fn, void *user, memra_log_level_t min_level);

/* A ready-made logger that writes "memra: LEVEL: text" lines to stderr, for
 * examples and tools. Thread-safety: any thread. */
MEMRA_API void memra_log_stderr(memra_log_level_t level, const char *text, void *user);

/* sizeof X as the uint32_t a params struct's size field holds; a
 * static_cast in C++, so the macros below compile under -Wold-style-cast. */
#ifdef __cplusplus
#define MEMRA__SIZEOF32(x) (static_cast<uint32_t>(sizeof(x)))
#else
#define MEMRA__SIZEOF32(x) ((uint32_t)sizeof(x))
#endif

/* Sets the size field of a params struct; use with *_default_params(). */
#define MEMRA_PARAMS_INIT(type) MEMRA__SIZEOF32(type)

#ifdef __cplusplus
}
#endif
#endif
