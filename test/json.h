/* A small JSON reader for tests: parses a whole document into a tree.
 * Strings are decoded to UTF-8 (\uXXXX and surrogate pairs included) and
 * may contain NUL bytes, so each carries its length. */
#ifndef MEMRA_TEST_JSON_H
#define MEMRA_TEST_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum tj_type { TJ_NULL, TJ_BOOL, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ } tj_type_t;

typedef struct tj_value tj_value_t;
struct tj_value {
    tj_type_t type;
    int boolean;
    double num;
    char *str; /* TJ_STR: NUL-terminated copy, LEN bytes before the NUL */
    size_t len;
    tj_value_t *items; /* TJ_ARR / TJ_OBJ: N values */
    char **keys;       /* TJ_OBJ: N NUL-terminated keys */
    size_t n;
};

/* Parses TEXT[0..N); NULL on error with a message in ERR. */
tj_value_t *tj_parse(const char *text, size_t n, char *err, size_t err_len);
/* Same for the whole file PATH. */
tj_value_t *tj_parse_file(const char *path, char *err, size_t err_len);
void tj_free(tj_value_t *v);
/* Member KEY of an object, or NULL. */
const tj_value_t *tj_get(const tj_value_t *obj, const char *key);
/* Array of numbers KEY of DOC as malloc'ed int32s; NULL and *N = 0 when it
 * is absent or not an array of numbers. */
int32_t *tj_int_array(const tj_value_t *doc, const char *key, int32_t *n);

#endif
