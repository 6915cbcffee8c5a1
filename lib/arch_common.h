/* Helpers shared by the architecture binders and forwards (lib/arch_*.c).
 * Not installed. */
#ifndef MEMRA_ARCH_COMMON_H
#define MEMRA_ARCH_COMMON_H

#include "kv_rows.h"
#include "model_impl.h"

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

/* Attention of every segment over its own cache (layer IL's K and V): A
 * describes the step's rows (q, out, gate at row 0; the cache fields,
 * n_tokens and pos0 are filled in per segment). Out rows are
 * n_head*head_dim apart (the op's contract). One batched call for all the
 * segments: a backend may run a step's decodes in one launch. */
static inline memra_status_t memra__arch_attention(memra__run_t *r, int32_t il, const memra_attn_args_t *a)
{
    const int64_t out_w = a->n_head * a->head_dim;
    memra_attn_args_t sa[MEMRA_MAX_BATCH];
    if (r->n_seg > MEMRA_MAX_BATCH)
        return memra__fail(r->be->err, MEMRA_E_INTERNAL, "attention: %d segments", (int)r->n_seg);
    for (int32_t i = 0; i < r->n_seg; i++) {
        const memra__seg_t *s = &r->seg[i];
        sa[i] = *a;
        sa[i].q = a->q + (int64_t)s->row0 * a->q_stride;
        sa[i].out = a->out + (int64_t)s->row0 * out_w;
        if (a->gate)
            sa[i].gate = a->gate + (int64_t)s->row0 * a->gate_stride;
        memra__kv_attn(s->c, il, &sa[i]); /* its rows, types and strides */
        sa[i].n_tokens = s->n;
        sa[i].pos0 = s->pos0;
        if (r->recorded) { /* recorded for replays at later positions */
            sa[i].pos_dev = r->pos + s->row0;
            sa[i].keys_max = memra__graph_keys(s->pos0);
        }
    }
    return memra__attention_batch(r->be, sa, r->n_seg);
}

/* The usual head: logits rows = OUTPUT · rms_norm(carry rows, OUTPUT_NORM),
 * for each segment's rows [out0, out0 + n_out), in order, through the
 * elementwise SOFTCAP with s = SOFTCAP when it is positive (the matmul's
 * post op: a backend may apply it as it writes the logits). Rows that are
 * not one block of the carry are gathered first (a copy: the same bits). */
static inline memra_status_t memra__arch_head(memra__run_t *r, const float *output_norm,
                                              const memra_weight_t *output, int64_t n_embd, float eps, float softcap)
{
    const int64_t cf = r->m->carry_floats;
    const float *x = NULL;
    int64_t ldx = cf;
    int32_t n_spans = 0;
    for (int32_t i = 0; i < r->n_seg; i++)
        if (r->seg[i].n_out > 0 && n_spans++ == 0)
            x = r->carry + (int64_t)(r->seg[i].row0 + r->seg[i].out0) * cf;
    if (n_spans > 1) {
        MEMRA__WS(xg, (int64_t)r->n_out * n_embd);
        int64_t at = 0;
        for (int32_t i = 0; i < r->n_seg; i++) {
            const memra__seg_t *s = &r->seg[i];
            if (s->n_out == 0)
                continue;
            MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_COPY, xg + at * n_embd, n_embd,
                                      r->carry + (int64_t)(s->row0 + s->out0) * cf, cf, NULL, 0, s->n_out, n_embd,
                                      0.0f));
            at += s->n_out;
        }
        x = xg;
        ldx = n_embd;
    }
    MEMRA__WS(xn, (int64_t)r->n_out * n_embd);
    const memra_mm_args_t a = {.x = x, .ldx = ldx, .n_rows = r->n_out, .norm = true, .norm_w = output_norm,
                               .eps = eps, .n_w = 1, .w = {output}, .y = {r->logits}, .ldy = {r->m->n_vocab},
                               .post = {softcap > 0.0f ? MEMRA_EW_SOFTCAP : MEMRA_EW_COPY}, .post_s = {softcap},
                               .x_tmp = xn};
    return memra__matmul_ex(r->be, &a);
}

#endif
