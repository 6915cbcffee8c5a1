/* CPU reference backend internals: the context and the op entry points
 * implemented across lib/cpu/ops_*.c. */
#ifndef MEMRA_CPU_BACKEND_H
#define MEMRA_CPU_BACKEND_H

#include <math.h>

#include "backend.h"
#include "fmath.h"
#include "pool.h"

typedef struct memra__cpu_ctx {
    memra__pool_t *pool;
} memra__cpu_ctx_t;

/* cpu_vm.c: paged KV memory (backend.h: vm_*) */
size_t memra__cpu_vm_granularity(memra__backend_t *be);
void *memra__cpu_vm_arena_create(memra__backend_t *be, size_t page, int64_t n_pages);
void memra__cpu_vm_arena_free(memra__backend_t *be, void *arena);
void *memra__cpu_vm_reserve(memra__backend_t *be, size_t bytes);
void memra__cpu_vm_unreserve(memra__backend_t *be, void *va, size_t bytes);
memra_status_t memra__cpu_vm_map(memra__backend_t *be, void *arena, int64_t page, void *va);
void memra__cpu_vm_unmap(memra__backend_t *be, void *arena, void *va);

static inline memra__pool_t *memra__cpu_pool(memra__backend_t *be)
{
    return ((memra__cpu_ctx_t *)be->ctx)->pool;
}

/* The one summation order every CPU op uses for a dot product: sequential,
 * in float64. Sharing it is what makes an output depend only on its own
 * inputs, never on batch size, chunking or thread count. */
static inline double memra__cpu_dot(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

/* Activations: GELU and the sigmoid in float64, callers round once to
 * float; SiLU in float32 with lib/fmath.h (HF's precision, the GPU's bits).
 * elementwise and moe share them so that a fused MoE equals the
 * composition of the plain ops. */
static inline double memra__cpu_sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* The tanh form 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) of model-spec §3.3,
 * exact in float64 (ggml's f16 lookup table is deliberately not copied). */
static inline double memra__cpu_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}

/* act(g) · u of a GLU: GEGLU as (float)(gelu(g) · u) in float64, SWIGLU
 * as siluf(g) · u in float32 (the elementwise ops' expressions). */
static inline float memra__cpu_glu(memra_act_t act, float g, float u)
{
    return act == MEMRA_ACT_GELU ? (float)(memra__cpu_gelu(g) * (double)u) : memra_siluf(g) * u;
}

/* The op slots (lib/cpu/ops_*.c); semantics in lib/backend.h. */
memra_status_t memra__cpu_matmul(memra__backend_t *be, const memra_weight_t *w, const float *x,
                                 int64_t ldx, float *y, int64_t ldy, int64_t n_rows);
memra_status_t memra__cpu_get_rows(memra__backend_t *be, const memra_weight_t *w, const int32_t *ids,
                                   int64_t n, float *y, int64_t ldy);
memra_status_t memra__cpu_norm(memra__backend_t *be, memra_norm_kind_t kind, const float *x, int64_t xs,
                               const float *w, float *y, int64_t ys, int64_t n_rows, int64_t dim, float eps);
memra_status_t memra__cpu_elementwise(memra__backend_t *be, const memra_ew_args_t *a);
memra_status_t memra__cpu_rope(memra__backend_t *be, const memra_rope_args_t *a);
memra_status_t memra__cpu_kv_store(memra__backend_t *be, const memra_kv_store_args_t *a);
memra_status_t memra__cpu_attention(memra__backend_t *be, const memra_attn_args_t *a);
memra_status_t memra__cpu_argmax(memra__backend_t *be, const float *x, int64_t n, int32_t *out);
memra_status_t memra__cpu_conv(memra__backend_t *be, const memra_conv_args_t *a);
memra_status_t memra__cpu_delta(memra__backend_t *be, const memra_delta_args_t *a);
memra_status_t memra__cpu_route(memra__backend_t *be, const memra_route_args_t *a);
memra_status_t memra__cpu_moe(memra__backend_t *be, const memra_moe_args_t *a);

#endif
