/* memra-server: a sequence's generated text on its way to the client.
 *
 * Token pieces are bytes: a piece may end inside a UTF-8 character, and the
 * text may be growing into one of the request's stop strings. Only text
 * that can no longer change is released: never an incomplete UTF-8
 * character, never a tail that could still become a stop string (so a stop
 * string never reaches the client, not even in part, also when streamed).
 * A stop string cuts the text where it begins. */
#ifndef MEMRA_SERVER_TEXTOUT_H
#define MEMRA_SERVER_TEXTOUT_H

#include <stddef.h>

typedef struct textout {
    char *buf;                /* the text so far (stop string cut off) */
    size_t n, cap;
    size_t released;          /* bytes handed out by textout_take */
    const char *const *stop;  /* stop strings (borrowed), none empty */
    int n_stop;
    int stopped;              /* a stop string was found */
} textout_t;

/* Starts T with N_STOP stop strings (borrowed; they must outlive T). */
void textout_init(textout_t *t, const char *const *stop, int n_stop);
void textout_free(textout_t *t);

/* Appends a piece. Returns 1 when a stop string is now complete (the text
 * is cut where it starts and nothing more may be added), 0 otherwise, -1
 * when out of memory. */
int textout_add(textout_t *t, const char *piece, size_t n);

/* The text released since the last call into *OUT (malloc'ed, valid UTF-8:
 * stray bytes become U+FFFD, NUL-terminated) with its length in *N. With
 * FINAL everything left is released (the sequence ended). Returns 0, or -1
 * when out of memory. *OUT is NULL when there is nothing new. */
int textout_take(textout_t *t, int final, char **out, size_t *n);

/* BYTES[0..N) as valid UTF-8 (each byte of a malformed sequence becomes
 * U+FFFD, as Python's errors="replace" does per maximal invalid prefix),
 * malloc'ed and NUL-terminated, length in *OUT_N; NULL when out of memory. */
char *textout_utf8_clean(const char *bytes, size_t n, size_t *out_n);

#endif
