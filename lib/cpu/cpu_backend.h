/* CPU reference backend internals: the context and the op entry points
 * implemented across lib/cpu/ops_*.c. */
#ifndef MEMRA_CPU_BACKEND_H
#define MEMRA_CPU_BACKEND_H

#include "backend.h"
#include "pool.h"

typedef struct memra__cpu_ctx {
    memra__pool_t *pool;
} memra__cpu_ctx_t;

static inline memra__pool_t *memra__cpu_pool(memra__backend_t *be)
{
    return ((memra__cpu_ctx_t *)be->ctx)->pool;
}

#endif
