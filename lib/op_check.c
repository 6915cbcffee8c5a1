/* Argument checks of the op slots (lib/backend.h), shared by the CPU and
 * CUDA backends so that a bad call gets the same status and message on
 * every device. Each returns MEMRA_OK and sets *none when the op has
 * nothing to do (zero rows or tokens). */
#include "backend.h"
#include "quant.h"

memra_status_t memra__check_weight(memra__backend_t *be, const memra_weight_t *w, const char *op)
{
    if (!w || !w->data)
        return memra__fail(be->err, MEMRA_E_INVALID, "%s: missing weight", op);
    if (!memra__quant_can_compute(w->type))
        return memra__fail(be->err, MEMRA_E_UNSUPPORTED, "%s: cannot compute weight type %d", op, (int)w->type);
    const int64_t ne0 = w->ne[0], ne1 = w->ne[1], ne2 = w->ne[2] > 0 ? w->ne[2] : 1;
    const size_t row = memra__row_bytes(w->type, ne0);
    if (ne0 <= 0 || ne1 <= 0 || row == 0)
        return memra__fail(be->err, MEMRA_E_INVALID, "%s: weight rows of %lld elements are not whole blocks of type %d",
                           op, (long long)ne0, (int)w->type);
    if (w->nb1 < row || (ne2 > 1 && w->nb2 / w->nb1 < (uint64_t)ne1))
        return memra__fail(be->err, MEMRA_E_INVALID, "%s: weight strides nb1=%zu nb2=%zu overlap", op, w->nb1, w->nb2);
    return MEMRA_OK;
}

memra_status_t memra__check_matmul(memra__backend_t *be, const memra_weight_t *w, const float *x, int64_t ldx,
                                   const float *y, int64_t ldy, int64_t n_rows, bool *none)
{
    memra_status_t st = memra__check_weight(be, w, "matmul");
    if (st)
        return st;
    if (n_rows < 0 || (n_rows > 0 && (!x || !y)))
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul: bad rows or buffers");
    if (n_rows > 1 && (ldx < w->ne[0] || ldy < w->ne[1]))
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul: row strides ldx=%lld ldy=%lld too small",
                           (long long)ldx, (long long)ldy);
    *none = n_rows == 0;
    return MEMRA_OK;
}

memra_status_t memra__check_norm(memra__backend_t *be, memra_norm_kind_t kind, const float *x, int64_t xs,
                                 const float *y, int64_t ys, int64_t n_rows, int64_t dim, float eps, bool *none)
{
    if (kind != MEMRA_NORM_RMS && kind != MEMRA_NORM_L2)
        return memra__fail(be->err, MEMRA_E_INVALID, "norm: unknown kind %d", (int)kind);
    if (n_rows < 0 || dim <= 0 || (n_rows > 0 && (!x || !y)))
        return memra__fail(be->err, MEMRA_E_INVALID, "norm: bad shape or buffers");
    if (n_rows > 1 && (xs < dim || ys < dim))
        return memra__fail(be->err, MEMRA_E_INVALID, "norm: row strides %lld/%lld below dim %lld", (long long)xs,
                           (long long)ys, (long long)dim);
    if (!(eps >= 0.0f))
        return memra__fail(be->err, MEMRA_E_INVALID, "norm: eps must be >= 0");
    *none = n_rows == 0;
    return MEMRA_OK;
}

bool memra__ew_reads_b(memra_ew_op_t op)
{
    switch (op) {
    case MEMRA_EW_ADD:
    case MEMRA_EW_MUL:
    case MEMRA_EW_ADD_SCALED:
    case MEMRA_EW_SWIGLU:
    case MEMRA_EW_GEGLU:
    case MEMRA_EW_MUL_SIGMOID:
    case MEMRA_EW_SOFTPLUS_MUL:
        return true;
    default:
        return false;
    }
}

memra_status_t memra__check_ew(memra__backend_t *be, const memra_ew_args_t *a, bool *none)
{
    if (!a || (unsigned)a->op > (unsigned)MEMRA_EW_FILL)
        return memra__fail(be->err, MEMRA_E_INVALID, "elementwise: unknown op");
    if (a->rows < 0 || a->cols < 0)
        return memra__fail(be->err, MEMRA_E_INVALID, "elementwise: negative shape");
    *none = a->rows == 0 || a->cols == 0;
    if (*none)
        return MEMRA_OK;
    if (!a->y || (a->op != MEMRA_EW_FILL && !a->a) || (memra__ew_reads_b(a->op) && !a->b) ||
        (a->op == MEMRA_EW_SOFTPLUS_MUL && !a->aux))
        return memra__fail(be->err, MEMRA_E_INVALID, "elementwise: op %d is missing an input", (int)a->op);
    if (a->rows > 1 && (a->ys < a->cols || a->as < 0 || a->bs < 0))
        return memra__fail(be->err, MEMRA_E_INVALID, "elementwise: bad row strides");
    if (a->op == MEMRA_EW_SOFTCAP && a->s == 0.0f)
        return memra__fail(be->err, MEMRA_E_INVALID, "elementwise: softcap of 0");
    return MEMRA_OK;
}

memra_status_t memra__check_rope(memra__backend_t *be, const memra_rope_args_t *a, bool *none)
{
    if (!a || (a->mode != MEMRA_ROPE_NORM && a->mode != MEMRA_ROPE_NEOX))
        return memra__fail(be->err, MEMRA_E_INVALID, "rope: unknown mode");
    if (a->n_tokens < 0 || a->n_heads < 0 || a->head_dim <= 0 || a->n_rot < 0 || a->n_rot % 2 ||
        a->n_rot > a->head_dim)
        return memra__fail(be->err, MEMRA_E_INVALID, "rope: bad shape (n_rot %lld, head_dim %lld)",
                           (long long)a->n_rot, (long long)a->head_dim);
    *none = a->n_tokens == 0 || a->n_heads == 0 || a->n_rot == 0;
    if (*none)
        return MEMRA_OK;
    if (!a->x || !a->pos)
        return memra__fail(be->err, MEMRA_E_INVALID, "rope: missing x or pos");
    if (!(a->base > 0.0f))
        return memra__fail(be->err, MEMRA_E_INVALID, "rope: base must be > 0");
    return MEMRA_OK;
}

memra_status_t memra__check_attention(memra__backend_t *be, const memra_attn_args_t *a, bool *none)
{
    if (!a || a->n_tokens < 0 || a->pos0 < 0 || a->n_head <= 0 || a->n_kv_head <= 0 || a->head_dim <= 0 ||
        a->n_swa < 0)
        return memra__fail(be->err, MEMRA_E_INVALID, "attention: bad shape");
    if (a->n_head % a->n_kv_head)
        return memra__fail(be->err, MEMRA_E_INVALID, "attention: %lld heads not a multiple of %lld kv heads",
                           (long long)a->n_head, (long long)a->n_kv_head);
    *none = a->n_tokens == 0;
    if (*none)
        return MEMRA_OK;
    if (!a->q || !a->k_cache || !a->v_cache || !a->out)
        return memra__fail(be->err, MEMRA_E_INVALID, "attention: missing buffer");
    const int64_t kvw = a->n_kv_head * a->head_dim;
    if ((a->n_tokens > 1 && a->q_stride < a->n_head * a->head_dim) ||
        (((a->k_type == MEMRA_TYPE_F32 && !a->k_row_bytes) || (a->v_type == MEMRA_TYPE_F32 && !a->v_row_bytes)) &&
         a->kv_stride < kvw))
        return memra__fail(be->err, MEMRA_E_INVALID, "attention: q_stride %lld or kv_stride %lld too small",
                           (long long)a->q_stride, (long long)a->kv_stride);
    const struct {
        memra_type_t type;
        size_t row_bytes;
        const char *what;
    } kv[2] = {{a->k_type, a->k_row_bytes, "K"}, {a->v_type, a->v_row_bytes, "V"}};
    for (int i = 0; i < 2; i++) {
        if (!memra__kv_type_ok(kv[i].type, i == 1))
            return memra__fail(be->err, MEMRA_E_UNSUPPORTED, "attention: %s cache type %s is not one of f32, f16, "
                               "bf16, q8_0%s", kv[i].what, memra_type_name(kv[i].type), i ? ", q4_0" : "");
        if (memra__kv_type_blocks(kv[i].type) && a->head_dim % 32)
            return memra__fail(be->err, MEMRA_E_UNSUPPORTED, "attention: a %s %s cache needs head_dim %% 32 == 0 "
                               "(head_dim %lld)", memra_type_name(kv[i].type), kv[i].what, (long long)a->head_dim);
        if (kv[i].type != MEMRA_TYPE_F32 && kv[i].row_bytes < memra__row_bytes(kv[i].type, kvw))
            return memra__fail(be->err, MEMRA_E_INVALID, "attention: %s row stride %zu bytes below the %zu of a %s row",
                               kv[i].what, kv[i].row_bytes, memra__row_bytes(kv[i].type, kvw),
                               memra_type_name(kv[i].type));
        if (kv[i].type == MEMRA_TYPE_F32 && kv[i].row_bytes && (kv[i].row_bytes % 4 || kv[i].row_bytes < (size_t)kvw * 4))
            return memra__fail(be->err, MEMRA_E_INVALID, "attention: %s row stride %zu bytes is not a float stride "
                               "of at least %lld floats", kv[i].what, kv[i].row_bytes, (long long)kvw);
    }
    return MEMRA_OK;
}

bool memra__kv_type_ok(memra_type_t type, bool v)
{
    return type == MEMRA_TYPE_F32 || type == MEMRA_TYPE_F16 || type == MEMRA_TYPE_BF16 || type == MEMRA_TYPE_Q8_0 ||
           (v && type == MEMRA_TYPE_Q4_0);
}

bool memra__kv_type_blocks(memra_type_t type)
{
    return type == MEMRA_TYPE_Q8_0 || type == MEMRA_TYPE_Q4_0;
}

size_t memra__attn_k_row_bytes(const memra_attn_args_t *a)
{
    return a->k_row_bytes ? a->k_row_bytes : (size_t)a->kv_stride * sizeof(float);
}

size_t memra__attn_v_row_bytes(const memra_attn_args_t *a)
{
    return a->v_row_bytes ? a->v_row_bytes : (size_t)a->kv_stride * sizeof(float);
}

memra_status_t memra__check_kv_store(memra__backend_t *be, const memra_kv_store_args_t *a, bool *none)
{
    if (!a || a->rows < 0 || a->cols <= 0)
        return memra__fail(be->err, MEMRA_E_INVALID, "kv_store: bad shape");
    if (!memra__kv_type_ok(a->type, true))
        return memra__fail(be->err, MEMRA_E_UNSUPPORTED, "kv_store: cache type %s is not one of f32, f16, bf16, q8_0, "
                           "q4_0", memra_type_name(a->type));
    if (memra__kv_type_blocks(a->type) && a->cols % 32)
        return memra__fail(be->err, MEMRA_E_INVALID, "kv_store: %lld columns are not whole %s blocks of 32",
                           (long long)a->cols, memra_type_name(a->type));
    *none = a->rows == 0;
    if (*none)
        return MEMRA_OK;
    if (!a->src || !a->dst)
        return memra__fail(be->err, MEMRA_E_INVALID, "kv_store: missing buffer");
    if ((a->rows > 1 && (a->src_stride < a->cols || a->dst_row_bytes < memra__row_bytes(a->type, a->cols))))
        return memra__fail(be->err, MEMRA_E_INVALID, "kv_store: src stride %lld or dst row stride %zu too small",
                           (long long)a->src_stride, a->dst_row_bytes);
    return MEMRA_OK;
}

memra_status_t memra__check_conv(memra__backend_t *be, const memra_conv_args_t *a, bool *none)
{
    if (!a || a->n_tokens < 0 || a->channels <= 0 || a->kernel <= 0)
        return memra__fail(be->err, MEMRA_E_INVALID, "conv: bad shape");
    *none = a->n_tokens == 0;
    if (*none)
        return MEMRA_OK;
    if (!a->x || !a->w || !a->out || (a->kernel > 1 && !a->state))
        return memra__fail(be->err, MEMRA_E_INVALID, "conv: missing buffer");
    if (a->n_tokens > 1 && a->x_stride < a->channels)
        return memra__fail(be->err, MEMRA_E_INVALID, "conv: x_stride %lld below %lld channels", (long long)a->x_stride,
                           (long long)a->channels);
    return MEMRA_OK;
}

memra_status_t memra__check_delta(memra__backend_t *be, const memra_delta_args_t *a, bool *none)
{
    if (!a || a->n_tokens < 0 || a->n_k <= 0 || a->n_v <= 0 || a->d <= 0)
        return memra__fail(be->err, MEMRA_E_INVALID, "delta: bad shape");
    *none = a->n_tokens == 0;
    if (*none)
        return MEMRA_OK;
    if (!a->q || !a->k || !a->v || !a->g || !a->beta || !a->state || !a->out)
        return memra__fail(be->err, MEMRA_E_INVALID, "delta: missing buffer");
    if (a->n_tokens > 1 && (a->qk_stride < a->n_k * a->d || a->v_stride < a->n_v * a->d || a->gb_stride < a->n_v))
        return memra__fail(be->err, MEMRA_E_INVALID, "delta: row strides too small");
    return MEMRA_OK;
}

memra_status_t memra__check_route(memra__backend_t *be, const memra_route_args_t *a, bool *none)
{
    if (!a || a->n_tokens < 0 || a->n_expert <= 0 || a->n_expert > INT32_MAX || a->k <= 0 || a->k > a->n_expert)
        return memra__fail(be->err, MEMRA_E_INVALID, "route: bad shape");
    *none = a->n_tokens == 0;
    if (*none)
        return MEMRA_OK;
    if (!a->logits || !a->ids || !a->weights)
        return memra__fail(be->err, MEMRA_E_INVALID, "route: missing buffer");
    return MEMRA_OK;
}

memra_status_t memra__check_moe(memra__backend_t *be, const memra_moe_args_t *a, bool *none)
{
    if (!a || a->n_tokens < 0 || a->k <= 0 || a->n_embd <= 0 || a->n_ff <= 0 ||
        (a->act != MEMRA_ACT_SILU && a->act != MEMRA_ACT_GELU))
        return memra__fail(be->err, MEMRA_E_INVALID, "moe: bad shape or activation");
    if (!a->gate_up == !(a->gate && a->up) || (a->gate_up && (a->gate || a->up)))
        return memra__fail(be->err, MEMRA_E_INVALID, "moe: give either gate_up or both gate and up");
    const memra_weight_t *ws[3] = {a->gate_up ? a->gate_up : a->gate, a->gate_up ? NULL : a->up, a->down};
    for (int i = 0; i < 3; i++) {
        if (!ws[i] && i == 1)
            continue;
        memra_status_t st = memra__check_weight(be, ws[i], "moe");
        if (st)
            return st;
    }
    const int64_t ne = a->down->ne[2] > 0 ? a->down->ne[2] : 1;
    const int64_t gate_rows = a->gate_up ? 2 * a->n_ff : a->n_ff;
    for (int i = 0; i < 2; i++)
        if (ws[i] &&
            (ws[i]->ne[0] != a->n_embd || ws[i]->ne[1] != gate_rows || (ws[i]->ne[2] > 0 ? ws[i]->ne[2] : 1) != ne))
            return memra__fail(be->err, MEMRA_E_INVALID, "moe: gate/up weight shape does not match");
    if (a->down->ne[0] != a->n_ff || a->down->ne[1] != a->n_embd)
        return memra__fail(be->err, MEMRA_E_INVALID, "moe: down weight shape does not match");
    if (a->shared || a->accumulate || a->out_stride)
        return memra__fail(be->err, MEMRA_E_INVALID,
                           "moe: a shared expert or an accumulated out runs through memra__moe, not the slot");
    *none = a->n_tokens == 0;
    if (!*none && (!a->x || !a->ids || !a->weights || !a->out))
        return memra__fail(be->err, MEMRA_E_INVALID, "moe: missing buffer");
    return MEMRA_OK;
}
