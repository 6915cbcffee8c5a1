/* The moe_fused slot (lib/backend.h): a MoE feed-forward, its shared
 * expert included, in two launches (cuda/mmv_moe.cuh) where the sequence
 * takes four or five (the routed experts: grouped gate and up matvecs or
 * one gate_up matvec, the act, the grouped down matvec, the slot sum) plus,
 * with a shared expert, its route, sigmoid, five more and the add, and
 * with accumulate the add into out. The
 * bits are the sequence's: a launch takes the K-quant lanes
 * (cuda/mmv_moe_kq.cuh) when the sequence's grouped matvecs of all its
 * weights take the K-quant kernel (memra__cuda_grouped_kq), the generic
 * dots when none of them does. The cases the kernels do not cover are
 * declined and run as the sequence: fast prefill (the grouped GEMMs),
 * float weights, gate and up (or the shared expert's weights) of differing
 * types, weights of one launch on which the sequence's kernels differ,
 * more than MMV_MOE_PARTS slots, x too wide to stage, and MEMRA_MMV_TMA=0.
 * MEMRA_MOE_FUSE=0 declines every case (A/B). */
#include <string.h>

#include "mmv_moe.cuh"
#include "mmv_moe_kq.cuh"

MMV_FOR_TYPES(MMV_MOE_EXTERN, _)

#define MOE_FUSED_WS_CAP ((size_t)256 << 20) /* h scratch per pass, at most */

static bool is_float(memra_type_t t)
{
    return t == MEMRA_TYPE_F32 || t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16;
}

/* Whether x rows of NE0 floats, NR of them, stage next to type T's ring:
 * the fused launches stage them (NR: 1 for gate/up, the slots for down),
 * and so must the unfused matvecs (one row), whose Q8_0 dot differs when
 * x stays in global memory. */
static bool stages(memra_type_t t, int64_t ne0, int nr)
{
    bool ok = false;
#define FIT_CASE(T) ok = !is_float(T) && mmv_moe_fits<T>(ne0, nr) && mmv_x_fits<T>(ne0, 1)
    MQ_DISPATCH(t, FIT_CASE)
#undef FIT_CASE
    return ok;
}

/* Which dots a launch on weights WS (N of them, one type T; NULLs
 * skipped) takes, staging NR x rows of NE0: 1 the K-quant lanes (the
 * sequence's grouped matvecs of every weight take the K-quant kernel), 0
 * the generic dots (none of them does), -1 neither (a mix, or x too wide
 * for the kernel): the case is declined. */
static int dots(memra_type_t t, const memra_weight_t *const *ws, int n, int64_t ne0, int nr)
{
    int kq = -1;
    for (int i = 0; i < n; i++) {
        if (!ws[i])
            continue;
        const int k = memra__cuda_grouped_kq(ws[i]) ? 1 : 0;
        if (kq >= 0 && k != kq)
            return -1;
        kq = k;
    }
    if (kq == 1)
        return mmv_moe_kq_fits(t, ne0, nr) ? 1 : -1;
    return stages(t, ne0, nr) ? 0 : -1;
}

static memra_status_t launch(memra__backend_t *be, memra_type_t t, const mmv_moe_args &m, bool down, int64_t gy,
                             bool kq)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    bool ok = false;
#define MOE_CASE(T) ok = mmv_moe_launch<T>(m, down, (unsigned)gy, c->sm_count, c->stream)
    if (kq)
        ok = mmv_moe_kq_launch(t, m, down, (unsigned)gy, c->sm_count, c->stream);
    else
        MQ_DISPATCH(t, MOE_CASE)
#undef MOE_CASE
    MEMRA_CUDA_LAUNCHED(be);
    if (!ok)
        return memra__fail(be->err, MEMRA_E_DEVICE, "moe: no launch configuration for the fused %s (type %d)",
                           down ? "down" : "gate/up", (int)t);
    return MEMRA_OK;
}

memra_status_t memra__cuda_moe_fused(memra__backend_t *be, const memra_moe_args_t *a, bool *done)
{
    *done = false;
    static long fuse = -1, tma = -1, flat = -1;
    if (fuse < 0) {
        fuse = memra__cuda_env_long("MEMRA_MOE_FUSE", 1);
        tma = memra__cuda_env_long("MEMRA_MMV_TMA", 1);
        flat = memra__cuda_env_long("MEMRA_MOE_FLAT", 1);
    }
    if (!fuse || !tma || a->n_tokens == 0 || memra__cuda_moe_gemm_rows(be, a))
        return MEMRA_OK;
    const memra_weight_t *g = a->gate_up ? a->gate_up : a->gate, *u = a->gate_up ? a->gate_up : a->up, *d = a->down;
    const memra_moe_shared_t *s = a->shared;
    const memra_type_t tg = g->type, td = d->type;
    if (u->type != tg || u->nb2 != g->nb2)
        return MEMRA_OK;
    if (s && (s->gate->type != tg || s->up->type != tg || s->down->type != td || s->n_ff != a->n_ff))
        return MEMRA_OK;
    const int64_t k = a->k, n_ff = a->n_ff, n_embd = a->n_embd, np = k + (s ? 1 : 0);
    if (np > MMV_MOE_PARTS)
        return MEMRA_OK;
    /* each launch's dots: those of the sequence's matvecs on its weights */
    const memra_weight_t *wglu[4] = {g, u, s ? s->gate : NULL, s ? s->up : NULL}, *wdown[2] = {d, s ? s->down : NULL};
    const int kq_glu = dots(tg, wglu, 4, n_embd, 1), kq_down = dots(td, wdown, 2, n_ff, (int)np);
    if (kq_glu < 0 || kq_down < 0)
        return MEMRA_OK;
    /* h: np rows of n_ff per token; one launch per pass of tokens */
    const size_t per_tok = (size_t)np * (size_t)n_ff * sizeof(float);
    int64_t pass = (int64_t)(MOE_FUSED_WS_CAP / per_tok);
    if (pass > 65535 / np)
        pass = 65535 / np;
    if (pass > a->n_tokens)
        pass = a->n_tokens;
    if (pass < 1)
        return MEMRA_OK;
    float *h = (float *)memra__cuda_ws(be, per_tok * (size_t)pass);
    if (!h)
        return MEMRA_E_NOMEM;
    memra__cuda_ctx(be)->after_step = false; /* as a matvec launch would (run_mmv) */
    const int64_t ne = d->ne[2] > 0 ? d->ne[2] : 1;
    for (int64_t t0 = 0; t0 < a->n_tokens; t0 += pass) {
        const int64_t nt = a->n_tokens - t0 < pass ? a->n_tokens - t0 : pass;
        mmv_moe_args m;
        memset(&m, 0, sizeof m);
        m.ids = a->ids + t0 * k;
        m.n_expert = ne;
        m.n_tok = nt;
        m.k = (int)k;
        m.gelu = a->act == MEMRA_ACT_GELU;
        m.flat = flat != 0;
        /* gate/up + act: x rows of n_embd into h */
        m.m.ne0 = n_embd;
        m.m.ldx = n_embd;
        m.W[0] = (const uint8_t *)g->data;
        m.W[1] = (const uint8_t *)u->data + (a->gate_up ? (size_t)n_ff * g->nb1 : 0);
        m.nb1[0] = g->nb1;
        m.nb1[1] = u->nb1;
        m.nb2 = g->nb2;
        if (s) {
            m.shW[0] = (const uint8_t *)s->gate->data;
            m.shW[1] = (const uint8_t *)s->up->data;
            m.sh_nb1[0] = s->gate->nb1;
            m.sh_nb1[1] = s->up->nb1;
        }
        m.rows = n_ff;
        m.x = a->x + t0 * n_embd;
        m.y = h;
        m.ldy = n_ff;
        memra_status_t st = launch(be, tg, m, false, nt * np, kq_glu == 1);
        if (st)
            return st;
        /* down + slot sum (+ the shared expert): h rows into out */
        m.m.ne0 = n_ff;
        m.m.ldx = n_ff;
        m.W[0] = (const uint8_t *)d->data;
        m.W[1] = NULL;
        m.nb1[0] = d->nb1;
        m.nb1[1] = 0;
        m.nb2 = d->nb2;
        if (s) {
            m.shW[0] = (const uint8_t *)s->down->data;
            m.shW[1] = NULL;
            m.sh_nb1[0] = s->down->nb1;
            m.sh_nb1[1] = 0;
            m.sh_logit = s->logit + t0;
        }
        const int64_t ldo = a->out_stride ? a->out_stride : n_embd;
        m.rows = n_embd;
        m.x = h;
        m.y = a->out + t0 * ldo;
        m.ldy = ldo;
        m.acc = a->accumulate;
        m.w = a->weights + t0 * k;
        m.scale = a->expert_scale;
        st = launch(be, td, m, true, nt, kq_down == 1);
        if (st)
            return st;
    }
    *done = true;
    return MEMRA_OK;
}
