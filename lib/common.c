/* Status text, version, logging, the per-thread last error, and the one
 * parser of integer settings. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "memra/common.h"
#include "memra/gguf.h"

#define MEMRA__STR2(x) #x
#define MEMRA__STR(x) MEMRA__STR2(x)

static _Thread_local char tls_last_error[MEMRA__ERRMSG_MAX];

static memra_log_fn g_log_fn;
static void *g_log_user;
static memra_log_level_t g_log_min = MEMRA_LOG_INFO;

const char *memra_strerror(memra_status_t status)
{
    switch (status) {
#define XX(name, value, text) \
    case MEMRA_##name:        \
        return text;
        MEMRA_STATUS_MAP(XX)
#undef XX
    }
    return "unknown status";
}

const char *memra_status_name(memra_status_t status)
{
    switch (status) {
#define XX(name, value, text) \
    case MEMRA_##name:        \
        return #name;
        MEMRA_STATUS_MAP(XX)
#undef XX
    }
    return "UNKNOWN";
}

const char *memra_last_error(void)
{
    return tls_last_error;
}

const char *memra_version(void)
{
    return MEMRA__STR(MEMRA_VERSION_MAJOR) "." MEMRA__STR(MEMRA_VERSION_MINOR) "." MEMRA__STR(
        MEMRA_VERSION_PATCH);
}

uint32_t memra_version_number(void)
{
    return MEMRA_VERSION_NUMBER;
}

void memra_log_set(memra_log_fn fn, void *user, memra_log_level_t min_level)
{
    g_log_fn = fn;
    g_log_user = user;
    g_log_min = min_level;
}

void memra_log_stderr(memra_log_level_t level, const char *text, void *user)
{
    (void)user;
    static const char *names[] = {"debug", "info", "warn", "error"};
    const char *name = (unsigned)level < 4 ? names[level] : "?";
    fprintf(stderr, "memra: %s: %s\n", name, text ? text : "");
}

static void vlog(memra_log_level_t level, const char *fmt, va_list ap)
{
    memra_log_fn fn = g_log_fn;
    if (!fn || level < g_log_min)
        return;
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    fn(level, buf, g_log_user);
}

void memra__log(memra_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

memra_status_t memra__vfail(memra__err_t *err, memra_status_t status, const char *fmt, va_list ap)
{
    /* format into a local buffer first: callers often pass
     * memra_last_error() itself as an argument */
    char msg[MEMRA__ERRMSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(tls_last_error, msg, sizeof msg);
    if (err) {
        err->status = status;
        memcpy(err->msg, tls_last_error, sizeof err->msg);
    }
    memra__log(MEMRA_LOG_DEBUG, "%s (%s)", tls_last_error, memra_status_name(status));
    return status;
}

memra_status_t memra__fail(memra__err_t *err, memra_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    memra__vfail(err, status, fmt, ap);
    va_end(ap);
    return status;
}

memra_status_t memra__relay(memra__err_t *err, memra_status_t st, const char *fmt, ...)
{
    char last[MEMRA__ERRMSG_MAX], pre[256] = "";
    snprintf(last, sizeof last, "%s", memra_last_error());
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(pre, sizeof pre, fmt, ap);
        va_end(ap);
    }
    /* an inner message that already starts with the prefix keeps one copy */
    if (pre[0] && strncmp(last, pre, strlen(pre)) == 0)
        return memra__fail(err, st, "%s", last);
    return memra__fail(err, st, "%s%s", pre, last);
}

const char *memra__skip_prefix(const char *msg, const char *prefix)
{
    const size_t n = strlen(prefix);
    if (n && strncmp(msg, prefix, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        return msg + n + 2;
    return msg;
}

void memra__err_clear(memra__err_t *err)
{
    if (err) {
        err->status = MEMRA_OK;
        err->msg[0] = '\0';
    }
}

size_t memra__utf8_bad_offset(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        const size_t len = memra__utf8_decode(s + i, n - i, true, &cp);
        if (!len)
            return i;
        i += len;
    }
    return n;
}

bool memra__utf8_valid(const char *s, size_t n)
{
    return memra__utf8_bad_offset(s, n) == n;
}

size_t memra__utf8_put(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

void memra__sized_write(void *dst, uint32_t dst_size, const void *src, size_t src_size)
{
    uint32_t n = dst_size < src_size ? dst_size : (uint32_t)src_size;
    memcpy(dst, src, n);
    memcpy(dst, &n, sizeof n);
}

void memra__sized_read(void *dst, size_t dst_size, const void *src)
{
    uint32_t n;
    memcpy(&n, src, sizeof n);
    memcpy(dst, src, n < dst_size ? n : dst_size);
    uint32_t full = (uint32_t)dst_size;
    memcpy(dst, &full, sizeof full);
}

void memra_free(void *p)
{
    free(p);
}

memra_status_t memra__parse_int(const char *what, const char *s, long lo, long hi, int32_t *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10); /* skips leading spaces */
    while (*end == ' ')
        end++;
    if (end == s || *end || errno || v < lo || v > hi)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s='%s': expected an integer in [%ld, %ld]", what, s, lo, hi);
    *out = (int32_t)v;
    return MEMRA_OK;
}

memra_status_t memra__env_int(const char *name, long lo, long hi, long def, int32_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = (int32_t)def;
        return MEMRA_OK;
    }
    return memra__parse_int(name, v, lo, hi, out);
}
