/* The skinny tensor-core GEMM of batched decode steps (cuda/gemm_s.cuh):
 * which matmuls it takes, x to f16 (normalized when asked), the split of
 * K, and the launch. The 256-element super-block formats are instantiated
 * in gemm_s_k.cu (two units build in parallel). */
#include <string.h>

#include "gemm_s.cuh"

#define GS_INST(T) GS_INSTANTIATE(T, _)
#define GS_EXT(T) template <> bool gs_launch<T>(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s);
GS_TYPES_32(GS_INST)
GS_TYPES_256(GS_EXT)

/* Raw bytes of one row's k tile, 0 for a type without instances. */
static int gs_tile_bytes(memra_type_t type)
{
    switch (type) {
#define GS_TB(T)                                                                                                       \
    case T:                                                                                                            \
        return GS_KT / mq_traits<T>::qk * mq_traits<T>::bytes;
        GS_TYPES_32(GS_TB)
        GS_TYPES_256(GS_TB)
#undef GS_TB
    default:
        return 0;
    }
}

static bool gs_run(memra_type_t type, const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s)
{
    switch (type) {
#define GS_CASE(T)                                                                                                     \
    case T:                                                                                                            \
        return gs_launch<T>(a, grid_x, smem, s);
        GS_TYPES_32(GS_CASE)
        GS_TYPES_256(GS_CASE)
#undef GS_CASE
    default:
        return false;
    }
}

/* x rows to f16, RMS-normalized first when W is given or NORM is set (the
 * matvec staging's arithmetic: row_scale, then row_scaled). */
__global__ void __launch_bounds__(MEMRA_NORM_BLOCK) gs_prep_kernel(const float *x, int64_t ldx, int norm,
                                                                   const float *w, float eps, int64_t K, __half *xh)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    __shared__ float red[MEMRA_NORM_BLOCK / 32];
    const float *xr = x + (size_t)blockIdx.x * ldx;
    __half *o = xh + (size_t)blockIdx.x * K;
    const float s = norm ? (float)row_scale(true, xr, K, eps, red) : 1.0f;
    for (int64_t i = threadIdx.x; i < K; i += MEMRA_NORM_BLOCK)
        o[i] = __float2half_rn(norm ? row_scaled(xr[i], s, w, i) : xr[i]);
}

static long gs_knob(void)
{
    static long v = -1;
    if (v < 0)
        v = memra__cuda_env_long("MEMRA_BATCH_GEMM", 1);
    return v;
}

/* Ring stages for STAGE bytes a stage: four, or three, at two blocks per
 * SM; else as many as fit one block; 0 when not even two do. */
static int gs_stages(size_t stage, size_t fixed)
{
    const size_t two = 113 * 1024, one = 226 * 1024;
    for (int st = 4; st >= 3; st--)
        if (st * stage + fixed <= two)
            return st;
    for (int st = 4; st >= 2; st--)
        if (st * stage + fixed <= one)
            return st;
    return 0;
}

static memra_status_t gs_counts(memra__backend_t *be, size_t n)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    if (n <= c->gs_count_n)
        return MEMRA_OK;
    if (c->gs_count) {
        MEMRA_CUDA_TRY(be, cudaStreamSynchronize(c->stream));
        cudaFree(c->gs_count);
    }
    c->gs_count = NULL;
    c->gs_count_n = 0;
    c->epoch++;
    if (cudaMalloc((void **)&c->gs_count, n * sizeof(int)) != cudaSuccess) {
        cudaGetLastError();
        c->gs_count = NULL;
        return memra__fail(be->err, MEMRA_E_NOMEM, "matmul: %zu split-K counters: cudaMalloc failed", n);
    }
    MEMRA_CUDA_TRY(be, cudaMemsetAsync(c->gs_count, 0, n * sizeof(int), c->stream));
    c->gs_count_n = n;
    return MEMRA_OK;
}

/* The scratch of a launch: XBYTES of f16 x rows (a->X, a->K apart), then
 * PBYTES of split-K partials and N_COUNT tile counters when a->split > 1. */
static memra_status_t gs_scratch(memra__backend_t *be, gs_args *a, size_t xbytes, size_t pbytes, size_t n_count)
{
    uint8_t *ws = (uint8_t *)memra__cuda_ws(be, xbytes + pbytes);
    if (!ws)
        return MEMRA_E_NOMEM;
    if (a->split > 1) {
        memra_status_t st = gs_counts(be, n_count);
        if (st)
            return st;
        a->count = memra__cuda_ctx(be)->gs_count;
        a->part = (float *)(ws + xbytes);
    }
    a->X = (const __half *)ws;
    a->ldx = a->K;
    return MEMRA_OK;
}

/* gsw_kernel's switches, read once: MEMRA_BATCH_GSW=0 (Q8_0 on gs_kernel
 * too), MEMRA_GSW_RING (ring items per warp, 2..GSW_RING_MAX; fewer
 * where two blocks would not fit an SM), MEMRA_GSW_XF (0: x through
 * gs_prep_kernel), MEMRA_GSW_FIN (0: steps of 17-32 rows add the
 * split-K partials with the loads of one slice at a time, as smaller
 * steps do), A/B runs with the same bits; MEMRA_GSW_ODD=0 keeps Q8_0
 * weights whose rows are 4-12 bytes off 16 or whose K is a multiple of 64
 * but not of 256 on the matvecs (one x row a block column) instead of
 * the kernel's ODD form (the 26B-A4B's steps of 4 / 8 rows +3.5 / +6.7 %,
 * H100, 2026-12-06); MEMRA_GSW_KT (1..GSW_KT_MAX, default the most) caps
 * a slice's k tiles: shorter slices stage less x (more blocks an SM at
 * 17-32 rows) for more split-K partials; other bits, the same for every
 * row count (a function of the shape and the device still).
 * Q4_K / Q5_K / Q6_K run on gsw_kernel's K-quant form (cuda/gemm_swk.cu;
 * MEMRA_BATCH_GSWK=0: gs_kernel, and Q6_K rows off 16 on the matvecs),
 * MEMRA_GSWK_RING its ring items per warp (2..GSWK_RING_MAX, default 4;
 * fewer where two blocks would not fit an SM). Against gs_kernel
 * (memra-bench --batch, H100, 2026-12-07): the 9B Q4_K's steps of 3 / 4 /
 * 8 / 16 / 32 rows +107 / +104 / +98 / +95 / +60 %, the 9B Q5_K's
 * +216-358 %, Q6_K's +66-156 %, the E4B Q4_K's +30-78 %. */
typedef struct gsw_knobs {
    int on, ring, xf, fin, odd, kt, kq, kring;
} gsw_knobs;

static const gsw_knobs *gsw_cfg(void)
{
    static gsw_knobs k = {-1, 0, 0, 0, 0, 0, 0, 0};
    if (k.on < 0) {
        gsw_knobs r;
        const long ring = memra__cuda_env_long("MEMRA_GSW_RING", 3);
        r.ring = ring < 2 || ring > GSW_RING_MAX ? 3 : (int)ring;
        const long kring = memra__cuda_env_long("MEMRA_GSWK_RING", 4);
        r.kring = kring < 2 || kring > GSWK_RING_MAX ? 4 : (int)kring;
        r.kq = memra__cuda_env_long("MEMRA_BATCH_GSWK", 1) != 0;
        const long kt = memra__cuda_env_long("MEMRA_GSW_KT", GSW_KT_MAX);
        r.kt = kt < 1 || kt > GSW_KT_MAX ? GSW_KT_MAX : (int)kt;
        r.xf = memra__cuda_env_long("MEMRA_GSW_XF", 1) != 0;
        r.fin = memra__cuda_env_long("MEMRA_GSW_FIN", 1) != 0;
        r.on = memra__cuda_env_long("MEMRA_BATCH_GSW", 1) != 0;
        r.odd = memra__cuda_env_long("MEMRA_GSW_ODD", 1) != 0;
        k = r;
    }
    return &k;
}

/* gsw_kernel's slices of K into A: at most gsw_cfg()->kt k tiles each
 * (the staged x), and enough blocks of 64 rows (of NV) for three an SM:
 * a function of the weight's shape and the device only, never of the row
 * count. false: more slices than a grid holds. */
static bool gsw_slices(gs_args *a, int64_t nv, int sm_count)
{
    const int64_t nkt = (a->K + GS_KT - 1) / GS_KT, blocks = (nv + 63) / 64, ktmax = gsw_cfg()->kt;
    int64_t split = (nkt + ktmax - 1) / ktmax;
    const int64_t want = (3 * (int64_t)sm_count + blocks - 1) / blocks;
    if (split < want)
        split = want;
    if (split > nkt)
        split = nkt;
    a->kt_per = (int)((nkt + split - 1) / split);
    a->split = (int)((nkt + a->kt_per - 1) / a->kt_per);
    return a->split <= 65535;
}

/* M's Q8_0 weights (A: their arguments) on gsw_kernel, or its Q4_K /
 * Q5_K / Q6_K weights (TYPE) on the K-quant form, in passes of GSW_MAXN x
 * rows. */
static memra_status_t gsw_run(memra__backend_t *be, const memra_mm_args_t *m, gs_args a, memra_type_t type,
                              bool *done)
{
    bool ksum = false;
    const int ktb = type == MEMRA_TYPE_Q8_0 ? 0 : gswk_row_bytes((int)type, &ksum);
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const bool glu = a.epi == MEMRA_MM_GLU;
    const int np = glu ? 2 : 1;
    const int64_t nv = glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t groups = (nv + GSW_ROWS - 1) / GSW_ROWS;
    if (groups > INT32_MAX / 2 || !gsw_slices(&a, nv, c->sm_count))
        return MEMRA_OK;
    const int64_t grid_x = (groups + GSW_WARPS - 1) / GSW_WARPS;

    const int64_t n_all = m->n_rows;
    const int64_t nmax = n_all < GSW_MAXN ? n_all : GSW_MAXN;
    const size_t xbytes = ((size_t)nmax * a.K * sizeof(__half) + 255) & ~(size_t)255;
    const size_t pbytes =
        a.split > 1 ? (size_t)a.split * groups * np * nmax * GSW_ROWS * sizeof(float) : 0;
    memra_status_t st = gs_scratch(be, &a, xbytes, pbytes, (size_t)groups);
    if (st)
        return st;
    __half *ws = (__half *)a.X;
    /* x without a norm: gsw_kernel stages the float rows itself, rounding
     * each element to f16 as gs_prep_kernel would (the same bits, one
     * launch fewer: the prep cost ~8 us of marginal time a call in a 9B
     * step of 4 rows, CUPTI, H100 2026-12-05); MEMRA_GSW_XF=0 keeps the
     * prep (also for 16 and 32 rows, where each block's float x is about
     * its weights' bytes: the prep's f16 x lost 3-5 %, H100 2026-12-06) */
    const gsw_knobs *kn = gsw_cfg();
    const bool xf = kn->xf && !m->norm && (uintptr_t)m->x % 16 == 0 && m->ldx % 4 == 0;
    a.fin = kn->fin;
    a.ldxf = m->ldx;
    MEMRA_CUDA_PROF_DETAIL(c, "%s %lldx%lld x%d n%lld gsw split %d%s%s%s", memra_type_name(type), (long long)a.K,
                           (long long)a.vrow0[a.nw], a.nw, (long long)n_all, a.split, m->norm ? " norm" : "",
                           xf ? " xf" : "", a.odd ? " odd" : "");
    for (int64_t r0 = 0; r0 < n_all; r0 += GSW_MAXN) {
        a.n = (int)(n_all - r0 < GSW_MAXN ? n_all - r0 : GSW_MAXN);
        /* the ring as deep as two blocks an SM allow (the staged x of 32
         * rows is 65 KiB) */
        const size_t xs = (size_t)a.n * ((size_t)a.kt_per * GS_KT + 16) * sizeof(__half) +
                          (ksum ? gswk_sums_bytes(a.n, a.kt_per) : 0);
        a.st = ktb ? gsw_cfg()->kring : gsw_cfg()->ring;
        const size_t slot = ktb ? (size_t)GSW_ROWS * ktb : a.odd ? GSW_SLOT_ODD : GSW_SLOT;
        while (a.st > 2 && (size_t)GSW_WARPS * a.st * slot + xs > GSW_SMEM_2)
            a.st--;
        const size_t smem = (size_t)GSW_WARPS * a.st * slot + xs;
        if (xf) {
            a.Xf = m->x + r0 * m->ldx;
        } else {
            memra__launch(gs_prep_kernel, dim3((unsigned)a.n), MEMRA_NORM_BLOCK, 0, c->stream, m->x + r0 * m->ldx,
                          m->ldx, (int)m->norm, m->norm_w, m->eps, a.K, ws);
            MEMRA_CUDA_LAUNCHED(be);
        }
        if (!(ktb ? gswk_launch((int)type, a, (unsigned)grid_x, smem, c->stream)
                  : gsw_launch(a, (unsigned)grid_x, smem, c->stream)))
            return r0 ? memra__fail(be->err, MEMRA_E_DEVICE, "matmul: %s skinny GEMM launch failed", memra_type_name(type))
                      : MEMRA_OK;
        MEMRA_CUDA_LAUNCHED(be);
        for (int i = 0; i < a.nw; i++)
            a.y[i] += GSW_MAXN * a.ldy[i];
    }
    *done = true;
    return MEMRA_OK;
}

memra_status_t memra__cuda_gemm_s(memra__backend_t *be, const memra_mm_args_t *m, bool *done)
{
    *done = false;
    if (!gs_knob() || !be->fast || !memra__rows_batch() || m->n_rows < 2 || m->conv_w)
        return MEMRA_OK;
    const memra_weight_t *w0 = m->w[0];
    const memra_type_t type = w0->type;
    const int64_t K = w0->ne[0];
    const int tb = gs_tile_bytes(type);
    /* ODD (gsw_kernel's form for Q8_0 rows 4-12 bytes off 16, or K a
     * multiple of 64 only: 4-byte rows, 34 K / 32 bytes): gemma-4-26b-a4b's
     * 2112-wide ffn_down */
    const bool odd_ok = type == MEMRA_TYPE_Q8_0 && gsw_cfg()->on && gsw_cfg()->odd && K % 64 == 0;
    /* Q6_K rows of any (even) length on the K-quant form's row-offset ring:
     * the E4B's 2560-wide head is 2100 bytes a row */
    const bool q6_ro = type == MEMRA_TYPE_Q6_K && gsw_cfg()->kq;
    bool odd = K % GS_KT != 0;
    if (!tb || (odd && !odd_ok) || K > INT32_MAX || m->n_w < 1 || m->n_w > GS_MAXW)
        return MEMRA_OK;
    if ((m->epi == MEMRA_MM_GLU && (m->n_w != 2 || m->w[1]->ne[1] != w0->ne[1])) ||
        (m->epi == MEMRA_MM_ADD && m->n_w != 1))
        return MEMRA_OK;
    gs_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < m->n_w; i++) {
        const memra_weight_t *w = m->w[i];
        if (w->type != type || w->ne[0] != K || (uintptr_t)w->data % 16 || w->nb1 % (odd_ok ? 4 : q6_ro ? 2 : 16) ||
            w->ne[1] > INT32_MAX ||
            m->post[i] == MEMRA_EW_GEGLU) /* gs_store has no per-row post vector: the sequence runs it */
            return MEMRA_OK;
        odd = odd || w->nb1 % 16;
        a.W[i] = (const uint8_t *)w->data;
        a.nb1[i] = w->nb1;
        a.y[i] = m->y[i];
        a.ldy[i] = m->ldy[i];
        a.post[i] = (int)m->post[i];
        a.post_b[i] = m->post_b[i];
        a.post_aux[i] = m->post_aux[i];
        a.vrow0[i + 1] = m->epi == MEMRA_MM_GLU ? w0->ne[1] : a.vrow0[i] + w->ne[1];
    }
    a.nw = m->n_w;
    a.K = K;
    a.epi = (int)m->epi;
    a.gelu = m->act == MEMRA_ACT_GELU;
    a.odd = odd;
    if (type == MEMRA_TYPE_Q8_0 && gsw_cfg()->on)
        return gsw_run(be, m, a, type, done);
    if (gsw_cfg()->kq && gswk_row_bytes((int)type, NULL) && (!odd || q6_ro)) {
        memra_status_t st = gsw_run(be, m, a, type, done);
        if (st || *done || odd)
            return st; /* gs_kernel: 16-byte aligned rows only */
    }

    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const int64_t per = m->epi == MEMRA_MM_GLU ? GS_BM / 2 : GS_BM;
    const int64_t tiles = (a.vrow0[a.nw] + per - 1) / per;
    /* slices: enough blocks for two per SM, at least two k tiles each; a
     * function of the shape and the device only (see gemm_s.cuh) */
    const int64_t nkt = K / GS_KT;
    int64_t split = (2 * (int64_t)c->sm_count + tiles - 1) / tiles;
    if (split > nkt / 2)
        split = nkt / 2;
    if (split < 1)
        split = 1;
    a.kt_per = (int)((nkt + split - 1) / split);
    a.split = (int)((nkt + a.kt_per - 1) / a.kt_per);
    /* Q8_0's 8-block tile is 272 bytes, always 16-byte aligned: no slack
     * (and 17 chunks a row keep the repack's loads in distinct banks) */
    const bool q8 = type == MEMRA_TYPE_Q8_0;
    a.rb = q8 ? tb : (tb + 15) / 16 * 16 + 16;
    if (GS_BM * (a.rb / 16) > GS_CPT * GS_THREADS)
        return MEMRA_OK;

    const int64_t n_all = m->n_rows;
    const int64_t nmax = n_all < GS_MAXN ? n_all : GS_MAXN;
    const size_t xbytes = ((size_t)nmax * K * sizeof(__half) + 255) & ~(size_t)255;
    const size_t pbytes = a.split > 1 ? (size_t)a.split * tiles * GS_BM * GS_MAXN * sizeof(float) : 0;
    memra_status_t st = gs_scratch(be, &a, xbytes, pbytes, (size_t)tiles);
    if (st)
        return st;
    __half *ws = (__half *)a.X;
    MEMRA_CUDA_PROF_DETAIL(c, "%s %lldx%lld x%d n%lld gs split %d%s", memra_type_name(type), (long long)K,
                           (long long)a.vrow0[a.nw], a.nw, (long long)n_all, a.split, m->norm ? " norm" : "");
    for (int64_t r0 = 0; r0 < n_all; r0 += GS_MAXN) {
        a.n = (int)(n_all - r0 < GS_MAXN ? n_all - r0 : GS_MAXN);
        const int nx = a.n <= 8 ? 8 : a.n <= 16 ? 16 : 32;
        const size_t stage = (size_t)GS_BM * a.rb + (size_t)nx * (q8 ? GS_Q8_XLD : GS_LDX) * sizeof(__half);
        const size_t fixed = (size_t)GS_WARPS * (q8 ? GS_Q8_WARP : 16 * GS_LDA * sizeof(__half));
        a.st = gs_stages(stage, fixed);
        if (!a.st)
            return r0 ? memra__fail(be->err, MEMRA_E_DEVICE, "matmul: skinny GEMM stages do not fit") : MEMRA_OK;
        memra__launch(gs_prep_kernel, dim3((unsigned)a.n), MEMRA_NORM_BLOCK, 0, c->stream, m->x + r0 * m->ldx,
                      m->ldx, (int)m->norm, m->norm_w, m->eps, K, ws);
        MEMRA_CUDA_LAUNCHED(be);
        if (!gs_run(type, a, (unsigned)tiles, a.st * stage + fixed, c->stream))
            return memra__fail(be->err, MEMRA_E_DEVICE, "matmul: skinny GEMM launch failed (type %d)", (int)type);
        MEMRA_CUDA_LAUNCHED(be);
        for (int i = 0; i < a.nw; i++)
            a.y[i] += GS_MAXN * a.ldy[i];
    }
    *done = true;
    return MEMRA_OK;
}
