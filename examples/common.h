/* What the example programs share: the bundled default model, engine and
 * model setup, tokenizing into a fresh array, and reading input. Public API
 * only, like the examples themselves. */
#ifndef MEMRA_EXAMPLES_COMMON_H
#define MEMRA_EXAMPLES_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include <memra/memra.h>

/* Where the examples find the bundled default model (test/data/default.gguf,
 * a tiny random-weight qwen3 with a real tokenizer) when no -m is given:
 * $MEMRA_DEFAULT_MODEL; else default.gguf next to the executable or in
 * ../share/memra/ (installed); else the source tree path compiled in.
 * Returns a static string, or NULL when none of them exists. */
const char *default_model_path(void);

/* Creates an engine for DEVICE ("cpu", "cuda", "cuda:N") with THREADS CPU
 * threads (0 = all cores) and loads PATH onto it with prefill chunk CHUNK
 * (0 = the model's default), calling PROGRESS (may be NULL) with USER as
 * the load goes. On failure it prints "PROG: ..." to stderr, frees what it
 * made and returns -1; else 0 (free *model, then *engine). */
int example_load(const char *prog, const char *path, const char *device, int32_t threads, int32_t chunk,
                 memra_progress_fn progress, void *user, memra_engine_t **engine, memra_model_t **model);

/* Tokenizes TEXT[0..LEN) with FLAGS into a malloc'ed *IDS of *N ids (room
 * for one more). On failure prints "PROG: ..." and returns -1. */
int example_tokenize(const char *prog, const memra_tokenizer_t *tok, const char *text, size_t len, uint32_t flags,
                     int32_t **ids, int32_t *n);

/* Integers separated by spaces, tabs, newlines or commas, each in
 * [MIN, INT32_MAX], into a malloc'ed *IDS of *N. Returns 0; -1 when out of
 * memory; or 1 with *BAD at the first text that is not such an integer. */
int example_parse_ids(const char *s, int32_t min, int32_t **ids, int32_t *n, const char **bad);

/* Seconds on the monotonic clock, for timing. */
double example_seconds(void);

/* All of F (malloc'ed, with one spare byte after *LEN), or NULL on a read
 * error or when out of memory. */
char *example_read_all(FILE *f, size_t *len);

#endif
