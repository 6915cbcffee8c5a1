/* Internal layout of an engine. */
#ifndef MEMRA_ENGINE_IMPL_H
#define MEMRA_ENGINE_IMPL_H

#include <stdatomic.h>

#include "backend.h"
#include "memra/engine.h"

struct memra_engine {
    memra_engine_params_t params;
    memra__backend_t *be;
    memra__err_t err;
    atomic_int users; /* models (or stages) placed on this engine */
};

/* Effective "fast prefill" setting: params, else env MEMRA_FAST (0 or 1;
 * anything else is MEMRA_E_INVALID), else on. */
memra_status_t memra__engine_fast(const memra_engine_t *e, bool *fast);

#endif
