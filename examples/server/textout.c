/* memra-server: released text of a sequence (textout.h). */
#include "textout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void textout_init(textout_t *t, const char *const *stop, int n_stop)
{
    memset(t, 0, sizeof *t);
    t->stop = stop;
    t->n_stop = n_stop;
}

void textout_free(textout_t *t)
{
    free(t->buf);
    memset(t, 0, sizeof *t);
}

/* The valid bytes of a UTF-8 sequence at S[0..N): sets *LEN to the length
 * its lead byte announces (0 for a byte that cannot lead) and returns how
 * many bytes from the start fit it (the ranges of RFC 3629, so overlong
 * forms, surrogates and code points past U+10FFFF never fit). */
static size_t utf8_fit(const unsigned char *s, size_t n, size_t *len)
{
    const unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0x80) {
        *len = 1;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        *len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        *len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        *len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        *len = 0;
        return 0;
    }
    size_t k = 1;
    for (; k < *len && k < n; k++) {
        if (s[k] < lo || s[k] > hi)
            break;
        lo = 0x80, hi = 0xbf; /* only the second byte has narrower ranges */
    }
    return k;
}

char *textout_utf8_clean(const char *bytes, size_t n, size_t *out_n)
{
    const unsigned char *s = (const unsigned char *)bytes;
    /* at worst every byte becomes the 3-byte U+FFFD */
    char *out = malloc(n * 3 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len = 0, fit = utf8_fit(s + i, n - i, &len);
        if (len && fit == len) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i += fit ? fit : 1;
        }
    }
    out[o] = 0;
    *out_n = o;
    return out;
}

/* Where the text may end without cutting a UTF-8 character that later
 * bytes can still complete. */
static size_t utf8_safe_end(const char *buf, size_t n)
{
    const unsigned char *s = (const unsigned char *)buf;
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const unsigned char c = s[n - back];
        if ((c & 0xc0) != 0x80) { /* the last lead byte (or ASCII) */
            size_t len = 0, fit = utf8_fit(s + n - back, back, &len);
            return len > back && fit == back ? n - back : n;
        }
    }
    return n;
}

/* The longest tail of the text that is a proper prefix of a stop string:
 * it may still grow into one, so it is held back. */
static size_t stop_holdback(const textout_t *t)
{
    size_t best = 0;
    for (int i = 0; i < t->n_stop; i++) {
        const size_t len = strlen(t->stop[i]);
        for (size_t k = len - 1 < t->n ? len - 1 : t->n; k > best; k--)
            if (!memcmp(t->buf + t->n - k, t->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

int textout_add(textout_t *t, const char *piece, size_t n)
{
    if (t->stopped)
        return 1;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n + 1)
            cap *= 2;
        char *p = realloc(t->buf, cap);
        if (!p)
            return -1;
        t->buf = p;
        t->cap = cap;
    }
    const size_t old = t->n;
    memcpy(t->buf + t->n, piece, n);
    t->n += n;
    /* A match must end in the new bytes (older ones were searched before);
     * the earliest start wins. */
    size_t cut = SIZE_MAX;
    for (int i = 0; i < t->n_stop; i++) {
        const size_t len = strlen(t->stop[i]);
        if (len > t->n)
            continue;
        size_t from = old + 1 > len ? old + 1 - len : 0;
        const char *hit = memmem(t->buf + from, t->n - from, t->stop[i], len);
        if (hit && (size_t)(hit - t->buf) < cut)
            cut = (size_t)(hit - t->buf);
    }
    if (cut == SIZE_MAX)
        return 0;
    t->n = cut; /* never below `released`: the held-back tail covered the match's start */
    t->stopped = 1;
    return 1;
}

int textout_take(textout_t *t, int final, char **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t end = t->n;
    if (!final && !t->stopped) {
        end -= stop_holdback(t);
        end = utf8_safe_end(t->buf, end);
    }
    if (end <= t->released)
        return 0;
    char *s = textout_utf8_clean(t->buf + t->released, end - t->released, n);
    if (!s)
        return -1;
    t->released = end;
    *out = s;
    return 0;
}
