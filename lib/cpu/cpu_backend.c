/* CPU reference backend: "device" memory is host memory, ops run
 * synchronously on the calling thread plus the pool. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_backend.h"

static void *cpu_alloc(memra__backend_t *be, size_t n)
{
    (void)be;
    void *p = NULL;
    /* 64-byte alignment keeps rows cache-line aligned for the loops */
    if (posix_memalign(&p, 64, n ? n : 1) != 0)
        return NULL;
    return p;
}

static void cpu_free(memra__backend_t *be, void *p)
{
    (void)be;
    free(p);
}

static memra_status_t cpu_copy(memra__backend_t *be, void *dst, const void *src, size_t n)
{
    (void)be;
    if (n)
        memmove(dst, src, n);
    return MEMRA_OK;
}

static memra_status_t cpu_sync(memra__backend_t *be)
{
    (void)be;
    return MEMRA_OK;
}

static const memra__backend_i cpu_iface = {
    .api_version = MEMRA_BACKEND_API_VERSION,
    .name = "cpu",
    .host_memory = true,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .synchronize = cpu_sync,
    .vm_granularity = memra__cpu_vm_granularity,
    .vm_arena_create = memra__cpu_vm_arena_create,
    .vm_arena_free = memra__cpu_vm_arena_free,
    .vm_reserve = memra__cpu_vm_reserve,
    .vm_unreserve = memra__cpu_vm_unreserve,
    .vm_map = memra__cpu_vm_map,
    .vm_unmap = memra__cpu_vm_unmap,
    .matmul = memra__cpu_matmul,
    .get_rows = memra__cpu_get_rows,
    .norm = memra__cpu_norm,
    .elementwise = memra__cpu_elementwise,
    .rope = memra__cpu_rope,
    .attention = memra__cpu_attention,
    .kv_store = memra__cpu_kv_store,
    .conv = memra__cpu_conv,
    .delta = memra__cpu_delta,
    .route = memra__cpu_route,
    .moe = memra__cpu_moe,
    .argmax = memra__cpu_argmax,
};

memra_status_t memra__cpu_backend_create(int n_threads, memra__backend_t **out)
{
    *out = NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    memra__backend_t *be = calloc(1, sizeof *be);
    memra__cpu_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        free(be);
        free(ctx);
        return memra__fail(NULL, MEMRA_E_NOMEM, "cpu backend: out of memory");
    }
    memra_status_t st = memra__pool_create(n_threads, &ctx->pool);
    if (st) {
        free(be);
        free(ctx);
        return st;
    }
    be->iface = &cpu_iface;
    be->ctx = ctx;
    *out = be;
    return MEMRA_OK;
}

void memra__cpu_backend_destroy(memra__backend_t *be)
{
    if (!be)
        return;
    memra__cpu_ctx_t *ctx = be->ctx;
    memra__pool_destroy(ctx->pool);
    free(ctx);
    free(be);
}
