/* A fixed pool of worker threads running "parallel for" loops. The caller
 * thread takes part, so a pool of 1 runs everything inline. */
#ifndef MEMRA_CPU_POOL_H
#define MEMRA_CPU_POOL_H

#include <stdint.h>

#include "memra/common.h"

typedef struct memra__pool memra__pool_t;

/* fn(ctx, begin, end) over [0, n) split into contiguous chunks. */
typedef void (*memra__pool_fn)(void *ctx, int64_t begin, int64_t end);

memra_status_t memra__pool_create(int n_threads, memra__pool_t **out);
void memra__pool_destroy(memra__pool_t *pool);
/* Runs fn over [0, n); chunks are at least min_chunk long. Safe to call
 * from several threads at once: their loops run one after the other. Not
 * reentrant: fn must not call memra__pool_for on the same pool. */
void memra__pool_for(memra__pool_t *pool, int64_t n, int64_t min_chunk, memra__pool_fn fn, void *ctx);

#endif
