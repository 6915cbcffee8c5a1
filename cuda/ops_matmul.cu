/* matmul, matmul_ex, get_rows and the grouped matvec behind moe: the host
 * side. The kernels are in cuda/mmv.cuh (instantiated per type family in
 * cuda/mmv_*.cu; Q4_K/Q5_K/Q6_K take cuda/mmv_kq.cuh's).
 *
 * Decode (and every matmul of few rows, and exact mode) runs the matvec
 * kernels: each output's arithmetic is fixed by the weight alone (one lane
 * order, one shuffle tree), never by how many x rows or weights share the
 * launch, so exact-mode prefill is bit-identical to decode whatever the
 * chunking, and a fused matmul_ex is bit-identical to its unfused sequence.
 *
 * Fast prefill (n_rows above MEMRA_MMV_MAX_ROWS, engine fast on) converts x
 * to f16 (or bf16 with MEMRA_FAST_GEMM=bf16), dequantizes weight tiles into
 * the workspace in the same type and calls cublasGemmEx with float32
 * accumulation and output. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mmv.cuh"
#include "mmv_kq.cuh"
#include "mmv_q8b.cuh"

extern "C" {
#include "quant.h"
}

MMV_FOR_TYPES(MMV_EXTERN, _)

static bool is_float_type(memra_type_t t)
{
    return t == MEMRA_TYPE_F32 || t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16;
}

int64_t memra__cuda_mmv_max_rows(void)
{
    static long v = -1;
    if (v < 0)
        v = memra__cuda_env_long("MEMRA_MMV_MAX_ROWS", 8);
    return v;
}

/* Y = s * tanh(Y / s) in place, rows LD apart (the elementwise SOFTCAP). */
static memra_status_t softcap_rows(memra__backend_t *be, float *y, int64_t rows, int64_t cols, int64_t ld, float s)
{
    memra_ew_args_t e;
    memset(&e, 0, sizeof e);
    e.op = MEMRA_EW_SOFTCAP;
    e.y = y;
    e.a = y;
    e.rows = rows;
    e.cols = cols;
    e.ys = e.as = ld;
    e.s = s;
    return memra__cuda_elementwise(be, &e);
}

/* One launch column per R x rows (the kernel takes blockIdx.y * R). */
static memra_status_t run_mmv(memra__backend_t *be, memra_type_t type, const mmv_args &a0, int R, unsigned gy)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    mmv_args a = a0;
    static long lean = -1;
    if (lean < 0)
        lean = memra__cuda_env_long("MEMRA_MMV_LEAN", 1);
    a.lean = c->after_step && lean;
    c->after_step = false;
    bool vec = !a.ids || a.nb2 % 16 == 0;
    for (int i = 0; i < (a.nw > 1 ? a.nw : 1); i++)
        vec = vec && ((uintptr_t)a.W[i] % 16) == 0 && a.nb1[i] % 16 == 0;
    a.ymap = a.nw == 1 && memra__cuda_mapped(c, a.y[0]);
    /* SOFTCAP (a head's post op, memra__cuda_matmul_ex): the grouped
     * stores into mapped memory apply it; any other launch stores the dots
     * and the elementwise op follows on device memory */
    const float cap = a.nw == 1 && a.post[0] == MEMRA_EW_SOFTCAP ? a.post_s[0] : 0.0f;
    const bool kq = mmv_kq_takes(type, a); /* the K-quant kernel (cuda/mmv_kq.cuh) */
    auto launch = [&]() {
        if (kq)
            return mmv_kq_launch(type, a, R, gy, c->sm_count, c->stream);
        bool ok = false;
#define MMV_CASE(T) ok = mmv_launch<T>(a, R, gy, c->sm_count, c->stream, vec)
        MQ_DISPATCH(type, MMV_CASE)
#undef MMV_CASE
        return ok;
    };
    bool ok = launch();
    float *ymapped = a.y[0];
    const size_t ybytes = (size_t)((a.n_rows - 1) * a.ldy[0] + a.vrow0[1]) * sizeof(float);
    if (!ok && a.ymap) {
        /* no grouped launch for this case: through device memory and one
         * copy, as a download would (4-byte stores into mapped memory
         * slowed a head by a third) */
        if (ybytes > c->map_tmp_bytes) {
            cudaFree(c->map_tmp);
            c->map_tmp_bytes = 0;
            c->epoch++;
            if (cudaMalloc(&c->map_tmp, ybytes) != cudaSuccess) {
                cudaGetLastError();
                c->map_tmp = NULL;
                return memra__fail(be->err, MEMRA_E_NOMEM, "matvec: out of device memory (%zu bytes)", ybytes);
            }
            c->map_tmp_bytes = ybytes;
        }
        a.ymap = 0;
        a.post[0] = MEMRA_EW_COPY;
        a.y[0] = (float *)c->map_tmp;
        ok = launch();
    }
    MEMRA_CUDA_LAUNCHED(be);
    if (!ok)
        return memra__fail(be->err, MEMRA_E_DEVICE, "matvec: no launch configuration for type %d, %lld wide",
                           (int)type, (long long)a.ne0);
    memra_status_t st = a.ymap || cap == 0.0f ? MEMRA_OK : softcap_rows(be, a.y[0], a.n_rows, a.vrow0[1], a.ldy[0], cap);
    if (!st && a.y[0] != ymapped)
        MEMRA_CUDA_TRY(be, cudaMemcpyAsync(ymapped, c->map_tmp, ybytes, cudaMemcpyDefault, c->stream));
    return st;
}

static bool x_fits(memra_type_t type, int64_t ne0, int R);

static int rows_per_pass(int64_t n_rows)
{
    return n_rows == 1 ? 1 : n_rows == 2 ? 2 : n_rows <= 4 ? 4 : 8;
}

/* The bytes of A's weights (GLU: both). */
static size_t mmv_weight_bytes(const mmv_args &a)
{
    size_t bytes = 0;
    for (int i = 0; i < (a.nw > 1 ? a.nw : 1); i++) {
        const int64_t rows = a.glu ? a.vrow0[1] : a.vrow0[i + 1] - a.vrow0[i];
        bytes += (size_t)rows * a.nb1[i];
    }
    return bytes;
}

/* Whether a batched decode step's matvec of A (either rows mode of
 * lib/backend.h) runs one x row a block column (R = 1, a column per row)
 * rather than R rows a pass: weights of at most MEMRA_BATCH_COLS_BYTES
 * (8 MiB), read by all the columns together at most MEMRA_BATCH_COLS_READ
 * bytes (128 MiB) from L2. Each row's bits are the same either way (every
 * kernel's row is the one-row arithmetic: kernel-check matmul.rowinv.* and
 * matmul_ex.rowinv.*); only the grid changes. Why: a MoE router (128-256
 * float rows) or a shared-expert gate (one row) gave the R-row kernels
 * 1-32 blocks, each staging every x row (40 us a call at 8 rows, H100), and
 * the 26B-A4B's 2112-wide ffn_down took as long; past the read cap the
 * R-row passes win again (that ffn_down at 32 rows). Measurements:
 * docs/PERFORMANCE.md, "On an H100 at 985c095 and 9fa1174". */
static bool batch_cols(const mmv_args &a, int64_t n_rows)
{
    static long max_bytes = -1, max_read = -1;
    if (max_bytes < 0) {
        max_bytes = memra__cuda_env_long("MEMRA_BATCH_COLS_BYTES", 8l << 20);
        max_read = memra__cuda_env_long("MEMRA_BATCH_COLS_READ", 128l << 20);
    }
    if (n_rows < 2 || n_rows > 65535 || !(memra__rows_batch() || memra__rows_exact()))
        return false;
    const size_t bytes = mmv_weight_bytes(a);
    return bytes <= (size_t)max_bytes && bytes * (size_t)n_rows <= (size_t)max_read;
}

/* Runs A (its weights, epilogue and x set) over N_ROWS x rows in passes of
 * at most R * 65535 rows. */
static memra_status_t matvec_rows(memra__backend_t *be, memra_type_t type, mmv_args a, int64_t n_rows)
{
    int R = rows_per_pass(n_rows);
    if (batch_cols(a, n_rows)) {
        R = 1;
    } else if (type == MEMRA_TYPE_Q8_0) {
        /* the batched kernel: as many rows per pass as fit; else as many
         * as keep x in shared memory, where Q8_0's dot is the one-row
         * kernels' (from global memory the generic kernel takes another
         * dot, whose bits differ) */
        const int rq = mmv_q8b_rows_for(a, n_rows);
        if (rq)
            R = rq;
        else
            while (R > 1 && !x_fits(type, a.ne0, R))
                R /= 2;
    } else if (mmv_kq_takes(type, a)) {
        /* the K-quant kernel stages every x row: as many rows per pass as fit */
        while (R > 1 && !mmv_kq_x_fits(type, a.ne0, R))
            R /= 2;
    }
    const float *x = a.x;
    float *y[MMV_MAXW];
    memcpy(y, a.y, sizeof y);
    for (int64_t r0 = 0; r0 < n_rows; r0 += (int64_t)R * 65535) {
        const int64_t n = n_rows - r0 < (int64_t)R * 65535 ? n_rows - r0 : (int64_t)R * 65535;
        a.x = x + r0 * a.ldx;
        for (int i = 0; i < a.nw; i++)
            a.y[i] = y[i] + r0 * a.ldy[i];
        a.n_rows = n;
        memra_status_t st = run_mmv(be, type, a, R, (unsigned)((n + R - 1) / R));
        if (st)
            return st;
    }
    return MEMRA_OK;
}

static mmv_args one_weight(const memra_weight_t *w, const float *x, int64_t ldx, float *y, int64_t ldy)
{
    mmv_args a;
    memset(&a, 0, sizeof a);
    a.W[0] = (const uint8_t *)w->data;
    a.nb1[0] = w->nb1;
    a.y[0] = y;
    a.ldy[0] = ldy;
    a.vrow0[1] = w->ne[1];
    a.nw = 1;
    a.nb2 = w->nb2;
    a.ne0 = w->ne[0];
    a.x = x;
    a.ldx = ldx;
    a.xdiv = 1;
    return a;
}

/* The grouped matvec's arguments (before run_mmv): W's experts by IDS. */
static mmv_args grouped_args(const memra_weight_t *w, const int32_t *ids, int64_t n_expert, const float *x,
                             int64_t ldx, int64_t xdiv, float *y, int64_t ldy)
{
    mmv_args a = one_weight(w, x, ldx, y, ldy);
    a.ids = ids;
    a.n_expert = n_expert;
    a.xdiv = xdiv;
    return a;
}

bool memra__cuda_grouped_kq(const memra_weight_t *w)
{
    static const int32_t id0 = 0; /* the rule reads whether ids are set, never them */
    return mmv_kq_takes(w->type, grouped_args(w, &id0, 1, NULL, 0, 1, NULL, 0));
}

memra_status_t memra__cuda_matvec_grouped(memra__backend_t *be, const memra_weight_t *w, const int32_t *ids,
                                          int64_t n_expert, int64_t n_problems, const float *x, int64_t ldx,
                                          int64_t xdiv, float *y, int64_t ldy)
{
    for (int64_t p0 = 0; p0 < n_problems; p0 += 65535) {
        const int64_t n = n_problems - p0 < 65535 ? n_problems - p0 : 65535;
        /* problem p0+q reads x row (p0+q)/xdiv: shift x by whole groups only */
        if (p0 % xdiv)
            return memra__fail(be->err, MEMRA_E_INVALID, "matvec: %lld problems not a multiple of %lld",
                               (long long)n_problems, (long long)xdiv);
        const mmv_args a = grouped_args(w, ids + p0, n_expert, x + (p0 / xdiv) * ldx, ldx, xdiv, y + p0 * ldy, ldy);
        memra_status_t st = run_mmv(be, w->type, a, 1, (unsigned)n);
        if (st)
            return st;
    }
    return MEMRA_OK;
}

/* ---- fused matmuls ------------------------------------------------------------ */

static bool x_fits(memra_type_t type, int64_t ne0, int R)
{
    bool fits = false;
#define FIT_CASE(T) fits = mmv_x_fits<T>(ne0, R)
    MQ_DISPATCH(type, FIT_CASE)
#undef FIT_CASE
    return fits;
}

/* The matvec arguments of M's weights I0 .. I0 + *NW - 1: the run of
 * weights of one type from I0, their epilogues and x. */
static mmv_args mm_run_args(const memra_mm_args_t *m, int i0, int *nw_out)
{
    mmv_args a;
    memset(&a, 0, sizeof a);
    const memra_type_t t = m->w[i0]->type;
    int nw = 0;
    while (i0 + nw < m->n_w && m->w[i0 + nw]->type == t) {
        const memra_weight_t *w = m->w[i0 + nw];
        a.W[nw] = (const uint8_t *)w->data;
        a.nb1[nw] = w->nb1;
        a.y[nw] = m->y[i0 + nw];
        a.ldy[nw] = m->ldy[i0 + nw];
        a.post[nw] = (int)m->post[i0 + nw];
        a.post_b[nw] = m->post_b[i0 + nw];
        a.post_aux[nw] = m->post_aux[i0 + nw];
        a.post_s[nw] = m->post_s[i0 + nw];
        a.vrow0[nw + 1] = a.vrow0[nw] + (m->epi == MEMRA_MM_GLU ? 0 : w->ne[1]);
        nw++;
    }
    if (m->epi == MEMRA_MM_GLU)
        a.vrow0[1] = m->w[0]->ne[1];
    a.nw = nw;
    if (i0 == 0 && m->conv_w) {
        a.conv_w = m->conv_w;
        a.conv_state = m->conv_state;
        a.conv_k = (int)m->conv_k;
    }
    a.glu = m->epi == MEMRA_MM_GLU;
    a.gelu = m->act == MEMRA_ACT_GELU;
    a.add = m->epi == MEMRA_MM_ADD;
    a.norm = m->norm;
    a.norm_w = m->norm_w;
    a.eps = m->eps;
    a.ne0 = m->w[0]->ne[0];
    a.x = m->x;
    a.ldx = m->ldx;
    a.xdiv = 1;
    *nw_out = nw;
    return a;
}

/* M with its SOFTCAP post ops as COPY, then those ops as elementwise
 * launches over their outputs, when the fused path takes M (else *DONE
 * stays false and the caller runs the sequence). */
static memra_status_t matmul_ex_softcap(memra__backend_t *be, const memra_mm_args_t *m, bool *done)
{
    memra_mm_args_t b = *m;
    for (int i = 0; i < b.n_w; i++)
        if (b.post[i] == MEMRA_EW_SOFTCAP)
            b.post[i] = MEMRA_EW_COPY;
    memra_status_t st = memra__cuda_matmul_ex(be, &b, done);
    for (int i = 0; i < m->n_w && !st && *done; i++)
        if (m->post[i] == MEMRA_EW_SOFTCAP)
            st = softcap_rows(be, m->y[i], m->n_rows, m->w[i]->ne[1], m->ldy[i], m->post_s[i]);
    return st;
}

/* Fuses what the matvec kernel can: quantized weights of one type, decode
 * or exact-mode rows (fast prefill runs the sequence, whose GEMMs win
 * there), x within shared memory when it is normalized on the way in.
 * Several weights of differing types are fused per run of equal type, each
 * run normalizing x itself (the same bits every time). */
memra_status_t memra__cuda_matmul_ex(memra__backend_t *be, const memra_mm_args_t *m, bool *done)
{
    *done = false;
    /* a pre step or a GEGLU post op (gemma4's post-norms and per-layer
     * gate): the sequence, norm_ex / elementwise launches beside the
     * matmul. Their fused forms (the pre step in the Q8_0 fast path's
     * staging, GEGLU in the matvec's epilogue) measured 1-3 % slower on
     * the E4B (H100, 2026-12-05) and were removed. */
    if (m->pre)
        return MEMRA_OK;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    /* SOFTCAP (gemma4's head): one row into mapped host memory takes it
     * into the matvec (run_mmv), so that the logits cross PCIe once, as
     * the kernel writes them; anything else runs as without it, then the
     * elementwise op over y (the sequence's launches) */
    for (int i = 0; i < m->n_w; i++) {
        if (m->post[i] == MEMRA_EW_GEGLU)
            return MEMRA_OK;
        if (m->post[i] == MEMRA_EW_SOFTCAP && !(m->n_w == 1 && m->n_rows == 1 && memra__cuda_mapped(c, m->y[0])))
            return matmul_ex_softcap(be, m, done);
    }
    memra_status_t gs = memra__cuda_gemm_s(be, m, done);
    if (gs || *done)
        return gs;
    const memra_type_t t0 = m->w[0]->type;
    const int64_t ne0 = m->w[0]->ne[0];
    /* float weights: plain stores of one type only (the float matvec has no
     * norm prologue, GLU, add or conv) */
    const bool fl = is_float_type(t0);
    if (fl && (m->epi != MEMRA_MM_STORE || m->norm || m->conv_w))
        return MEMRA_OK;
    if (memra__cuda_fast_rows(be, m->n_rows) || m->n_rows > INT32_MAX)
        return MEMRA_OK;
    if (m->norm && !x_fits(t0, ne0, rows_per_pass(m->n_rows)))
        return MEMRA_OK;
    if (m->conv_w && m->n_rows != 1)
        return MEMRA_OK; /* the conv walks tokens in order: one row per launch only */
    for (int i = 0; i < m->n_w; i++) {
        memra_status_t st = memra__check_weight(be, m->w[i], "matmul_ex");
        if (st)
            return st;
        if (is_float_type(m->w[i]->type) != fl || (fl && m->w[i]->type != t0) ||
            (m->epi != MEMRA_MM_STORE && m->w[i]->type != t0) ||
            (m->norm && !x_fits(m->w[i]->type, ne0, rows_per_pass(m->n_rows))))
            return MEMRA_OK;
    }
    MEMRA_CUDA_PROF_DETAIL(c, "%s %lldx%lld x%d n%lld%s%s", memra_type_name(t0), (long long)ne0,
                           (long long)m->w[0]->ne[1], m->n_w, (long long)m->n_rows, m->norm ? " norm" : "",
                           m->epi == MEMRA_MM_ADD ? " add" : m->epi == MEMRA_MM_GLU ? " glu" : "");
    for (int i0 = 0; i0 < m->n_w;) {
        int nw;
        const mmv_args a = mm_run_args(m, i0, &nw);
        const memra_type_t t = m->w[i0]->type;
        memra_status_t st = matvec_rows(be, t, a, m->n_rows);
        if (st)
            return st;
        i0 += nw;
    }
    *done = true;
    return MEMRA_OK;
}

/* The router slot (lib/router.c): one decode row of float weights of one
 * type (a MoE router, with qwen35moe's shared-expert gate) in one matvec
 * launch whose last block routes the first weight's outputs
 * (cuda/mmv.cuh: mmv_f_route). The logits are the launch matmul_ex makes,
 * the ids and weights route_kernel's. Declined (the sequence runs): more
 * than one row, other weights or epilogues, logits in mapped memory, more
 * than ROUTER_FUSE_MAX experts, no ticket, and MEMRA_ROUTE_FUSE=0, the
 * default until the launch is checked and timed on the H200. */
#define ROUTER_FUSE_MAX 4096

memra_status_t memra__cuda_router(memra__backend_t *be, const memra_mm_args_t *m, const memra_route_args_t *rt,
                                  bool *done)
{
    *done = false;
    static long on = -1;
    if (on < 0)
        on = memra__cuda_env_long("MEMRA_ROUTE_FUSE", 0);
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const memra_type_t t = m->w[0]->type;
    if (!on || !c->route_ticket || m->n_rows != 1 || m->epi != MEMRA_MM_STORE || m->norm || m->conv_w ||
        !is_float_type(t) || rt->n_expert > ROUTER_FUSE_MAX || memra__cuda_fast_rows(be, 1) ||
        memra__cuda_mapped(c, m->y[0]))
        return MEMRA_OK;
    for (int i = 0; i < m->n_w; i++) {
        memra_status_t st = memra__check_weight(be, m->w[i], "router");
        if (st)
            return st;
        if (m->w[i]->type != t)
            return MEMRA_OK;
    }
    int nw;
    mmv_args a = mm_run_args(m, 0, &nw);
    a.route_ticket = c->route_ticket;
    a.route = *rt;
    MEMRA_CUDA_PROF_DETAIL(c, "%s %lldx%lld x%d route %lld of %lld", memra_type_name(t), (long long)a.ne0,
                           (long long)m->w[0]->ne[1], m->n_w, (long long)rt->k, (long long)rt->n_expert);
    memra_status_t st = matvec_rows(be, t, a, 1);
    *done = st == MEMRA_OK;
    return st;
}

/* ---- fast prefill: f16/bf16 tiles + cuBLAS ---------------------------------- */

template <typename H> __global__ void x_to_h_kernel(const float *x, int64_t ldx, int64_t n_rows, int64_t ne0, H *out)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const int64_t n = n_rows * ne0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = to_h<H>(x[(i / ne0) * ldx + i % ne0]);
}

/* x_to_h_kernel four elements a thread: rows on the grid's y, 16-byte loads
 * of x and 8-byte stores (ne0 and ldx multiples of 4, x 16-byte aligned,
 * OUT 8-byte aligned: the host checks). The same rounding per element. */
template <typename H>
__global__ void x_to_h4_kernel(const float *x, int64_t ldx, int64_t n_rows, int64_t ne0, H *out)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const int64_t n4 = ne0 >> 2;
    for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
        const float4 *xr = (const float4 *)(x + r * ldx);
        uint2 *o = (uint2 *)(out + r * ne0);
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < n4; c += (int64_t)gridDim.x * blockDim.x) {
            const float4 v = xr[c];
            o[c] = make_uint2(pack2(H(), v.x, v.y), pack2(H(), v.z, v.w));
        }
    }
}

/* X (N_ROWS rows of NE0 floats, LDX apart) to dense H rows in OUT. */
template <typename H>
static void x_to_h(memra__cuda_ctx_t *c, const float *x, int64_t ldx, int64_t n_rows, int64_t ne0, H *out)
{
    if (ne0 % 4 == 0 && ldx % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)out % 8 == 0) {
        const unsigned bx = memra__cuda_blocks(ne0 / 4, 256, 64);
        memra__launch(x_to_h4_kernel<H>, dim3(bx, memra__cuda_blocks(n_rows, 1, 65535)), 256, 0, c->stream, x, ldx,
                      n_rows, ne0, out);
    } else {
        memra__launch(x_to_h_kernel<H>, memra__cuda_blocks(n_rows * ne0, 256, 65535), 256, 0, c->stream, x, ldx,
                      n_rows, ne0, out);
    }
}

template <typename H>
static memra_status_t gemm_fast_t(memra__backend_t *be, const memra_weight_t *w, const float *x, int64_t ldx, float *y,
                                  int64_t ldy, int64_t n_rows, cudaDataType_t dt)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const int64_t ne0 = w->ne[0], ne1 = w->ne[1];
    const size_t xbytes = ((size_t)n_rows * ne0 * sizeof(H) + 255) & ~(size_t)255;
    /* a weight tile of at most ~64 MiB, whole multiples of 128 rows */
    int64_t tile = (int64_t)((64u << 20) / ((size_t)ne0 * sizeof(H)));
    tile = tile < 128 ? 128 : tile / 128 * 128;
    if (tile > ne1)
        tile = ne1;
    uint8_t *ws = (uint8_t *)memra__cuda_ws(be, xbytes + (size_t)tile * ne0 * sizeof(H));
    if (!ws)
        return MEMRA_E_NOMEM;
    H *xh = (H *)ws, *wh = (H *)(ws + xbytes);
    x_to_h<H>(c, x, ldx, n_rows, ne0, xh);
    MEMRA_CUDA_LAUNCHED(be);
    const float one = 1.0f, zero = 0.0f;
    for (int64_t o0 = 0; o0 < ne1; o0 += tile) {
        const int64_t nt = ne1 - o0 < tile ? ne1 - o0 : tile;
#define DEQ_CASE(T) mmv_dequant<T, H>((const uint8_t *)w->data, w->nb1, ne0, o0, nt, wh, c->sm_count, c->stream)
        MQ_DISPATCH(w->type, DEQ_CASE)
#undef DEQ_CASE
        MEMRA_CUDA_LAUNCHED(be);
        /* column-major view: Yᵀ[nt x n_rows] = (W tile)ᵀᵀ · Xᵀ */
        cublasStatus_t cs = cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nt, (int)n_rows, (int)ne0, &one, wh,
                                         dt, (int)ne0, xh, dt, (int)ne0, &zero, y + o0, CUDA_R_32F, (int)ldy,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (cs != CUBLAS_STATUS_SUCCESS)
            return memra__fail(be->err, MEMRA_E_DEVICE, "matmul: cublasGemmEx failed (status %d)", (int)cs);
    }
    return MEMRA_OK;
}

memra_status_t memra__cuda_to_f16(memra__backend_t *be, const float *x, int64_t ldx, int64_t n_rows, int64_t ne0,
                                  __half *out)
{
    x_to_h<__half>(memra__cuda_ctx(be), x, ldx, n_rows, ne0, out);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* MEMRA_FAST_GEMM: f16 (default: f16 tiles + cuBLAS), bf16 (bf16 tiles +
 * cuBLAS), mmq (cuda/gemm_q.cuh: tensor cores over weight tiles
 * dequantized in shared memory, no f16 copy of the weight) */
enum { FAST_F16, FAST_BF16, FAST_MMQ };

static int fast_gemm(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("MEMRA_FAST_GEMM");
        v = e && strcmp(e, "bf16") == 0 ? FAST_BF16 : e && strcmp(e, "mmq") == 0 ? FAST_MMQ : FAST_F16;
    }
    return v;
}

static memra_status_t gemm_mmq(memra__backend_t *be, const memra_weight_t *w, const float *x, int64_t ldx, float *y,
                               int64_t ldy, int64_t n_rows)
{
    const size_t xbytes = (size_t)n_rows * w->ne[0] * sizeof(__half);
    __half *xh = (__half *)memra__cuda_ws(be, xbytes);
    if (!xh)
        return MEMRA_E_NOMEM;
    memra_status_t st = memra__cuda_to_f16(be, x, ldx, n_rows, w->ne[0], xh);
    return st ? st : memra__cuda_gemm_q(be, w, xh, w->ne[0], n_rows, y, ldy);
}

memra_status_t memra__cuda_matmul(memra__backend_t *be, const memra_weight_t *w, const float *x, int64_t ldx,
                                  float *y, int64_t ldy, int64_t n_rows)
{
    bool none;
    memra_status_t st = memra__check_matmul(be, w, x, ldx, y, ldy, n_rows, &none);
    if (st || none)
        return st;
    if (memra__rows_batch()) {
        /* a batched step's rows: the skinny tensor-core GEMM when it takes them */
        memra_mm_args_t mm;
        memset(&mm, 0, sizeof mm);
        mm.x = x;
        mm.ldx = ldx;
        mm.n_rows = n_rows;
        mm.n_w = 1;
        mm.w[0] = w;
        mm.y[0] = y;
        mm.ldy[0] = ldy;
        mm.epi = MEMRA_MM_STORE;
        bool done;
        st = memra__cuda_gemm_s(be, &mm, &done);
        if (st || done)
            return st;
        /* what it does not take (float weights such as MoE routers, the
         * types without tiles) runs on the matvec, whose rows are the same
         * in any step: cuBLAS picks its algorithm, and with it the order of
         * the sums, by the row count */
        MEMRA_CUDA_PROF_DETAIL(memra__cuda_ctx(be), "%s %lldx%lld n%lld batch mmv", memra_type_name(w->type),
                               (long long)w->ne[0], (long long)w->ne[1], (long long)n_rows);
        return matvec_rows(be, w->type, one_weight(w, x, ldx, y, ldy), n_rows);
    }
    const bool big = n_rows <= INT32_MAX && w->ne[0] <= INT32_MAX && w->ne[1] <= INT32_MAX && ldy <= INT32_MAX;
    /* narrow outputs (routers, gates) stay exact: no GEMM pays off there,
     * and a rounded router logit can flip an expert choice */
    static long min_out = -1;
    if (min_out < 0)
        min_out = memra__cuda_env_long("MEMRA_FAST_MIN_OUT", 512);
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const bool gemm = memra__cuda_fast_rows(be, n_rows) && w->ne[1] > min_out && big;
    MEMRA_CUDA_PROF_DETAIL(c, "%s %lldx%lld n%lld%s", memra_type_name(w->type), (long long)w->ne[0],
                           (long long)w->ne[1], (long long)n_rows, gemm ? " gemm" : "");
    /* float32 weights in a fast prefill (MoE routers and their gates in
     * released files; every weight of the float fixtures): one strict
     * float32 GEMM, no TF32. The fast tier never computes below a weight's
     * own precision (a rounded router logit can flip an expert choice),
     * and this replaces the matvec's many passes over the rows (242 us for
     * a 35B-A3B router at 512 rows). */
    if (memra__cuda_fast_rows(be, n_rows) && w->type == MEMRA_TYPE_F32 && big &&
        w->nb1 % sizeof(float) == 0 && ldx <= INT32_MAX) {
        const float one = 1.0f, zero = 0.0f;
        cublasStatus_t cs = cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->ne[1], (int)n_rows, (int)w->ne[0],
                                         &one, w->data, CUDA_R_32F, (int)(w->nb1 / sizeof(float)), x, CUDA_R_32F,
                                         (int)ldx, &zero, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F_PEDANTIC,
                                         CUBLAS_GEMM_DEFAULT);
        if (cs != CUBLAS_STATUS_SUCCESS)
            return memra__fail(be->err, MEMRA_E_DEVICE, "matmul: cublasGemmEx (f32) failed (status %d)", (int)cs);
        return MEMRA_OK;
    }
    if (gemm && fast_gemm() == FAST_MMQ && memra__cuda_gq_ok(w))
        return gemm_mmq(be, w, x, ldx, y, ldy, n_rows);
    if (gemm)
        return fast_gemm() == FAST_BF16 ? gemm_fast_t<__nv_bfloat16>(be, w, x, ldx, y, ldy, n_rows, CUDA_R_16BF)
                                        : gemm_fast_t<__half>(be, w, x, ldx, y, ldy, n_rows, CUDA_R_16F);
    return matvec_rows(be, w->type, one_weight(w, x, ldx, y, ldy), n_rows);
}

/* ---- get_rows ------------------------------------------------------------- */

template <int T>
__global__ void get_rows_kernel(const uint8_t *W, size_t nb1, int64_t ne0, int64_t ne1, const int32_t *ids, int64_t n,
                                float *y, int64_t ldy)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const int32_t id = ids[r];
        float *yr = y + r * ldy;
        if (id < 0 || id >= ne1) {
            for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x)
                yr[i] = __int_as_float(0x7fc00000);
            continue;
        }
        const uint8_t *row = W + (size_t)id * nb1;
        if (mq_is_float<T>::value) {
            for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x)
                yr[i] = mq_float_at<T>(row, i);
        } else {
            constexpr int BB = mq_traits<T>::bytes, SUBS = mq_traits<T>::subs;
            for (int64_t u = threadIdx.x; u < ne0 / 32; u += blockDim.x) {
                float v[32];
                mq_deq32<T>(row + (u / SUBS) * BB, (int)(u % SUBS), v);
#pragma unroll
                for (int i = 0; i < 32; i++)
                    yr[u * 32 + i] = v[i];
            }
        }
    }
}

memra_status_t memra__cuda_get_rows(memra__backend_t *be, const memra_weight_t *w, const int32_t *ids, int64_t n,
                                    float *y, int64_t ldy)
{
    memra_status_t st = memra__check_weight(be, w, "get_rows");
    if (st)
        return st;
    if (n < 0 || (n > 0 && (!ids || !y)) || (n > 1 && ldy < w->ne[0]))
        return memra__fail(be->err, MEMRA_E_INVALID, "get_rows: bad rows, buffers or stride");
    if (n == 0)
        return MEMRA_OK;
    /* ids stay on the device: an id out of range gives a row of NaN */
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const unsigned blocks = memra__cuda_blocks(n, 1, 65535);
#define GR_CASE(T)                                                                                                 \
    memra__launch(get_rows_kernel<T>, blocks, 128, 0, c->stream, (const uint8_t *)w->data, w->nb1, w->ne[0], w->ne[1], \
                  ids, n, y, ldy)
    MQ_DISPATCH(w->type, GR_CASE)
#undef GR_CASE
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}
