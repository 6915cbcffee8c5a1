/* Helpers shared by the architecture binders and forwards (lib/arch_*.c).
 * Not installed. */
#ifndef MEMRA_ARCH_COMMON_H
#define MEMRA_ARCH_COMMON_H

#include "kv_rows.h"
#include "model_impl.h"

/* Evaluates a status-returning EXPR; on failure, returns its status. */
#define MEMRA__TRY(expr)                                                                           \
    do {                                                                                           \
        memra_status_t st_ = (expr);                                                               \
        if (st_ != MEMRA_OK)                                                                       \
            return st_;                                                                            \
    } while (0)

/* Declares `float *VAR` holding N_FLOATS of the run R's workspace. NULL means
 * the arch's workspace_bytes under-estimated: memra__ws has already failed
 * the model with MEMRA_E_INTERNAL, which the callback then returns. */
#define MEMRA__WS(var, n_floats)                                                                   \
    float *var = memra__wsf(r, (n_floats));                                                        \
    if (!var)                                                                                      \
    return MEMRA_E_INTERNAL

/* y = op(a, b, s) over ROWS x COLS with row strides YS, AS, BS; y may be a
 * (in place). */
static inline memra_status_t memra__arch_ew(memra__run_t *r, memra_ew_op_t op, float *y, int64_t ys, const float *a,
                                            int64_t as, const float *b, int64_t bs, int64_t rows, int64_t cols,
                                            float s)
{
    const memra_ew_args_t e = {
        .op = op, .y = y, .a = a, .b = b, .rows = rows, .cols = cols, .ys = ys, .as = as, .bs = bs, .s = s,
    };
    return r->ops->elementwise(r->be, &e);
}

/* The usual head: logits rows = OUTPUT · rms_norm(carry rows, OUTPUT_NORM),
 * for the rows [out_row0, out_row0 + n_out) of the chunk. */
static inline memra_status_t memra__arch_head(memra__run_t *r, const float *output_norm,
                                              const memra_weight_t *output, int64_t n_embd, float eps)
{
    const int64_t cf = r->m->carry_floats;
    MEMRA__WS(xn, (int64_t)r->n_out * n_embd);
    const memra_mm_args_t a = {.x = r->carry + (int64_t)r->out_row0 * cf, .ldx = cf, .n_rows = r->n_out,
                               .norm = true, .norm_w = output_norm, .eps = eps, .n_w = 1, .w = {output},
                               .y = {r->logits}, .ldy = {r->m->n_vocab}, .x_tmp = xn};
    return memra__matmul_ex(r->be, &a);
}

#endif
