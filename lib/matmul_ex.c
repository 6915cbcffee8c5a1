/* Fused matmuls (memra_mm_args_t, lib/backend.h): validation, and the
 * unfused sequence that defines them. The CPU reference always runs the
 * sequence, so its results are those of the separate ops; a device backend
 * may fuse (cuda/: one launch for norm + several projections, gate/up + GLU,
 * or a projection + the residual add), which saves launches and passes over
 * memory in decode. */
#include "backend.h"

static memra_status_t check(memra__backend_t *be, const memra_mm_args_t *a)
{
    if (!a || !a->x || a->n_rows < 0 || a->n_w < 1 || a->n_w > MEMRA_MM_MAX_W)
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: bad x, rows or weight count");
    if ((a->epi == MEMRA_MM_ADD && (a->n_w != 1 || !a->tmp[0])) ||
        (a->epi == MEMRA_MM_GLU && (a->n_w != 2 || !a->tmp[0] || !a->tmp[1])) ||
        (a->epi != MEMRA_MM_STORE && a->epi != MEMRA_MM_ADD && a->epi != MEMRA_MM_GLU))
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: epilogue %d with %d weights or no scratch",
                           (int)a->epi, a->n_w);
    if (a->epi == MEMRA_MM_GLU && a->act != MEMRA_ACT_SILU && a->act != MEMRA_ACT_GELU)
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: unknown GLU activation %d", (int)a->act);
    if (a->conv_w &&
        (a->epi != MEMRA_MM_STORE || a->post[0] != MEMRA_EW_COPY || !a->tmp[0] || a->conv_k < 1 ||
         (a->conv_k > 1 && !a->conv_state) || !a->w[0] || (a->n_rows > 1 && a->ldy[0] != a->w[0]->ne[1])))
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: conv needs STORE, no post op on weight 0, scratch, "
                                                     "a kernel size, a state and dense rows");
    if (a->norm && !a->x_tmp)
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: norm without x_tmp scratch");
    const int n_y = a->epi == MEMRA_MM_STORE ? a->n_w : 1; /* outputs */
    for (int i = 0; i < a->n_w; i++) {
        const memra_ew_op_t post = a->post[i];
        if (post != MEMRA_EW_COPY &&
            (a->epi != MEMRA_MM_STORE ||
             (post != MEMRA_EW_SIGMOID && post != MEMRA_EW_SOFTPLUS_MUL && post != MEMRA_EW_GEGLU &&
              post != MEMRA_EW_SOFTCAP) ||
             (post == MEMRA_EW_SOFTPLUS_MUL && (!a->post_b[i] || !a->post_aux[i])) ||
             (post == MEMRA_EW_SOFTCAP && a->post_s[i] == 0.0f) ||
             (post == MEMRA_EW_GEGLU && (!a->post_b[i] || a->post_bs[i] < 0))))
            return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: post op %d of weight %d unsupported or without its inputs",
                               (int)post, i);
        if (!a->w[i] || !a->w[i]->data || (i < n_y && !a->y[i]))
            return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: weight or output %d missing", i);
        if (a->w[i]->ne[0] != a->w[0]->ne[0])
            return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: weight %d is %lld wide, weight 0 %lld", i,
                               (long long)a->w[i]->ne[0], (long long)a->w[0]->ne[0]);
        if (i < n_y && a->n_rows > 1 && a->ldy[i] < a->w[i]->ne[1])
            return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: ldy[%d] = %lld below %lld outputs", i,
                               (long long)a->ldy[i], (long long)a->w[i]->ne[1]);
        if (post == MEMRA_EW_GEGLU && a->n_rows > 1 && a->post_bs[i] && a->post_bs[i] < a->w[i]->ne[1])
            return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: post_bs[%d] = %lld below %lld outputs", i,
                               (long long)a->post_bs[i], (long long)a->w[i]->ne[1]);
    }
    if (a->epi == MEMRA_MM_GLU && a->w[1]->ne[1] != a->w[0]->ne[1])
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: GLU halves of %lld and %lld rows",
                           (long long)a->w[0]->ne[1], (long long)a->w[1]->ne[1]);
    if (a->n_rows > 1 && a->ldx < a->w[0]->ne[0])
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: ldx %lld below %lld", (long long)a->ldx,
                           (long long)a->w[0]->ne[0]);
    if (a->pre && (a->pre->y != a->x || (a->n_rows > 1 && a->pre->ys != a->ldx) || a->pre->rows != a->n_rows ||
                   a->pre->dim != a->w[0]->ne[0]))
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul_ex: the pre step's y rows are not x");
    return MEMRA_OK;
}

static memra_status_t unfused(memra__backend_t *be, const memra_mm_args_t *a)
{
    const memra__backend_i *ops = be->iface;
    const int64_t n = a->n_rows, ne0 = a->w[0]->ne[0];
    const float *x = a->x;
    int64_t ldx = a->ldx;
    if (a->norm) {
        memra_status_t st = ops->norm(be, MEMRA_NORM_RMS, x, ldx, a->norm_w, a->x_tmp, ne0, n, ne0, a->eps);
        if (st)
            return st;
        x = a->x_tmp;
        ldx = ne0;
    }
    if (a->epi == MEMRA_MM_STORE) {
        for (int i = 0; i < a->n_w; i++) {
            if (i == 0 && a->conv_w) {
                const int64_t ne1 = a->w[0]->ne[1];
                memra_status_t st = ops->matmul(be, a->w[0], x, ldx, a->tmp[0], ne1, n);
                const memra_conv_args_t cv = {.x = a->tmp[0], .x_stride = ne1, .state = a->conv_state,
                                              .w = a->conv_w, .out = a->y[0], .n_tokens = n, .channels = ne1,
                                              .kernel = a->conv_k};
                if (!st)
                    st = ops->conv(be, &cv);
                if (st)
                    return st;
                continue;
            }
            memra_status_t st = ops->matmul(be, a->w[i], x, ldx, a->y[i], a->ldy[i], n);
            if (!st && a->post[i] != MEMRA_EW_COPY) {
                const memra_ew_args_t e = {.op = a->post[i], .y = a->y[i], .a = a->y[i], .b = a->post_b[i],
                                           .aux = a->post_aux[i], .rows = n, .cols = a->w[i]->ne[1],
                                           .ys = a->ldy[i], .as = a->ldy[i], .bs = a->post_bs[i],
                                           .s = a->post_s[i]};
                st = ops->elementwise(be, &e);
            }
            if (st)
                return st;
        }
        return MEMRA_OK;
    }
    const int64_t ne1 = a->w[0]->ne[1];
    for (int i = 0; i < a->n_w; i++) {
        memra_status_t st = ops->matmul(be, a->w[i], x, ldx, a->tmp[i], ne1, n);
        if (st)
            return st;
    }
    memra_ew_args_t e = {.y = a->y[0], .a = a->y[0], .b = a->tmp[0], .rows = n, .cols = ne1,
                         .ys = a->ldy[0], .as = a->ldy[0], .bs = ne1};
    if (a->epi == MEMRA_MM_ADD) {
        e.op = MEMRA_EW_ADD;
    } else {
        e.op = a->act == MEMRA_ACT_GELU ? MEMRA_EW_GEGLU : MEMRA_EW_SWIGLU;
        e.a = a->tmp[0];
        e.as = ne1;
        e.b = a->tmp[1];
    }
    return ops->elementwise(be, &e);
}

memra_status_t memra__matmul_ex(memra__backend_t *be, const memra_mm_args_t *a)
{
    memra_status_t st = check(be, a);
    if (st || a->n_rows == 0)
        return st;
    if (be->iface->matmul_ex) {
        bool done = false;
        st = be->iface->matmul_ex(be, a, &done);
        if (st || done)
            return st;
    }
    if (a->pre) { /* the pre step on its own (fused where the backend fuses norm_ex), then the rest */
        MEMRA__TRY(memra__norm_ex(be, a->pre));
        memra_mm_args_t b = *a;
        b.pre = NULL;
        return memra__matmul_ex(be, &b);
    }
    return unfused(be, a);
}
