/* Row-local ops: norm, elementwise and rope.
 *
 * Like the CPU reference (lib/cpu/ops_norm.c), norm and the transcendental
 * elementwise ops compute in float64 and round once; + and * in float equal
 * that exactly. rope follows the reference's float32 angle recurrence step
 * by step, with the same host-computed powf, so angles are bit-identical. */
#include <math.h>
#include <string.h>

#include "cuda_common.cuh"
#include "kv_store.cuh"
#include "math.cuh"

/* ---- norm ------------------------------------------------------------------ */

#define NORM_THREADS MEMRA_NORM_BLOCK
static_assert(NORM_THREADS == KV_THREADS, "qk_norm_rope's blocks convert rows as kv_store's do");
#define NORM_U 8 /* 4-float chunks a thread holds in registers: rows up to 4 NORM_U NORM_THREADS = 8192 wide */

/* Whether a row goes through norm_row_regs: whole 16-byte chunks at
 * 16-byte aligned addresses, and few enough for the registers. */
static __device__ __forceinline__ bool norm_regs_ok(const float *x, const float *w, const float *add, const float *y,
                                                    int64_t dim)
{
    const uintptr_t m = (uintptr_t)x | (uintptr_t)w | (uintptr_t)add | (uintptr_t)y;
    return dim % 4 == 0 && dim <= 4 * NORM_U * NORM_THREADS && m % 16 == 0;
}

/* One row in one read of each input: thread t loads its chunks t, t + 256,
 * ... of x at once and sums their squares in row_sumsq_part's order (zeros
 * past the row add nothing), then, after the block's reduction, loads its
 * chunks of the weight and ADD at once and writes y = (ADD +) x · s · w
 * (· OUT_SCALE when SCALED), each step rounded as norm_kernel and
 * norm_ex_kernel round it. The loops of those kernels load one element
 * per thread per step, after the previous step's loads: a chain of ~11
 * round trips to L2 for a 2816-wide row (norm_ex's ~4.4 us a call in the
 * gemma-4-26b-a4b's decode, ~9 us at the 31B's 5376). Each thread writes
 * only the elements it read: in place (y == x, or y == add) is safe. */
static __device__ __forceinline__ void norm_row_regs(bool rms, const float *xr, const float *w, const float *ar,
                                                     float *yr, int64_t dim, float eps, bool scaled, float out_scale,
                                                     float *red)
{
    const int64_t nc = dim >> 2;
    float4 v[NORM_U];
#pragma unroll
    for (int j = 0; j < NORM_U; j++) {
        const int64_t c = threadIdx.x + j * NORM_THREADS;
        v[j] = c < nc ? ((const float4 *)xr)[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_U; j++) {
        sum = row_sq_add(v[j].x, sum);
        sum = row_sq_add(v[j].y, sum);
        sum = row_sq_add(v[j].z, sum);
        sum = row_sq_add(v[j].w, sum);
    }
    const float s = (float)row_scale_reduce(rms, sum, dim, eps, red);
    float4 wv[NORM_U], av[NORM_U];
#pragma unroll
    for (int j = 0; j < NORM_U; j++) {
        const int64_t c = threadIdx.x + j * NORM_THREADS;
        wv[j] = c < nc && w ? ((const float4 *)w)[c] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        av[j] = c < nc && ar ? ((const float4 *)ar)[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < NORM_U; j++) {
        const int64_t c = threadIdx.x + j * NORM_THREADS;
        if (c >= nc)
            continue;
        float t[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
        const float wq[4] = {wv[j].x, wv[j].y, wv[j].z, wv[j].w}, aq[4] = {av[j].x, av[j].y, av[j].z, av[j].w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            t[q] = __fmul_rn(t[q], s);
            if (w)
                t[q] = __fmul_rn(t[q], wq[q]); /* row_scaled */
            if (ar)
                t[q] = __fadd_rn(aq[q], t[q]);
            if (scaled)
                t[q] = __fmul_rn(t[q], out_scale);
        }
        ((float4 *)yr)[c] = make_float4(t[0], t[1], t[2], t[3]);
    }
}

/* MEMRA_NORM_REGS=0: every row through the element loops (A/B runs). */
static int norm_regs(void)
{
    static long on = -1;
    if (on < 0)
        on = memra__cuda_env_long("MEMRA_NORM_REGS", 1);
    return on != 0;
}

__global__ void __launch_bounds__(NORM_THREADS)
    norm_kernel(int kind, const float *x, int64_t xs, const float *w, float *y, int64_t ys, int64_t n_rows,
                int64_t dim, float eps, int regs)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    __shared__ float red[NORM_THREADS / 32 + 1];
    for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
        const float *xr = x + r * xs;
        float *yr = y + r * ys;
        if (regs && norm_regs_ok(xr, w, NULL, yr, dim)) {
            norm_row_regs(kind == MEMRA_NORM_RMS, xr, w, NULL, yr, dim, eps, false, 1.0f, red);
            continue; /* row_scale_reduce's last barrier guards red */
        }
        const float scale = (float)row_scale(kind == MEMRA_NORM_RMS, xr, dim, eps, red);
        /* in place is safe: each thread rewrites only the elements it read */
        for (int64_t i = threadIdx.x; i < dim; i += NORM_THREADS)
            yr[i] = row_scaled(xr[i], scale, w, i);
        __syncthreads();
    }
}

/* Rows of at most 4 NORM_THREADS elements (a head's 128 or 256 in the Gated
 * DeltaNet's L2 and gated norms of prefill, 16384 rows a chunk at the 9B),
 * a warp each: norm_kernel's block of 256 threads gives such a row at most
 * one 4-element chunk a thread, and row_sumsq_warp (cuda/math.cuh) makes
 * row_scale_reduce's sum term for term from one warp. A block of 256
 * threads per 128-wide row left 7/8 of it idle behind two barriers: 20 %
 * of the 9B's pp512 in norm_kernel (CUPTI, 2026-12-04). */
#define NORM_WARP_MAX (4 * NORM_THREADS)

__global__ void __launch_bounds__(NORM_THREADS)
    norm_warp_kernel(int kind, const float *x, int64_t xs, const float *w, float *y, int64_t ys, int64_t n_rows,
                     int64_t dim, float eps)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const int lane = threadIdx.x & 31;
    for (int64_t r = (int64_t)blockIdx.x * (NORM_THREADS / 32) + (threadIdx.x >> 5); r < n_rows;
         r += (int64_t)gridDim.x * (NORM_THREADS / 32)) {
        const float *xr = x + r * xs;
        float *yr = y + r * ys;
        const float t = row_sumsq_warp(xr, dim);
        const float scale = (float)row_scale_of(kind == MEMRA_NORM_RMS, (double)t, dim, eps);
        __syncwarp(); /* in place: every lane's reads before any write */
        for (int64_t i = lane; i < dim; i += 32)
            yr[i] = row_scaled(xr[i], scale, w, i);
    }
}

memra_status_t memra__cuda_norm(memra__backend_t *be, memra_norm_kind_t kind, const float *x, int64_t xs,
                                const float *w, float *y, int64_t ys, int64_t n_rows, int64_t dim, float eps)
{
    bool none;
    memra_status_t st = memra__check_norm(be, kind, x, xs, y, ys, n_rows, dim, eps, &none);
    if (st || none)
        return st;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    static long warp_rows = -1;
    if (warp_rows < 0)
        warp_rows = memra__cuda_env_long("MEMRA_NORM_WARP", 1); /* 0: a block a row (A/B) */
    if (warp_rows && dim <= NORM_WARP_MAX)
        memra__launch(norm_warp_kernel, memra__cuda_blocks(n_rows, NORM_THREADS / 32, 65535), NORM_THREADS, 0,
                      c->stream, (int)kind, x, xs, w, y, ys, n_rows, dim, eps);
    else
        memra__launch(norm_kernel, memra__cuda_blocks(n_rows, 1, 65535), NORM_THREADS, 0, c->stream, (int)kind, x, xs,
                      w, y, ys, n_rows, dim, eps, norm_regs());
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- norm with add and scale (memra_norm_args_t), chains of them ----------- */

/* One row R of norm_ex: norm_kernel's arithmetic, then the ADD and SCALE
 * of the sequence with elementwise's float expressions (a + b, a * s: one
 * rounding each, as the CPU's float64-then-round equals), every step
 * rounded on its own (the _rn intrinsics keep nvcc from contracting them
 * into an FMA). y may be add: each thread reads add[i] before it writes
 * y[i]. Ends in a barrier: the block may read what it wrote. */
static __device__ __forceinline__ void norm_ex_row(const memra_norm_args_t &a, int64_t r, int regs, float *red)
{
    const bool scaled = a.scale != 1.0f;
    const float *xr = a.x + r * a.xs;
    const float *ar = a.add ? a.add + r * a.adds : NULL;
    float *yr = a.y + r * a.ys;
    if (regs && norm_regs_ok(xr, a.w, ar, yr, a.dim)) {
        norm_row_regs(true, xr, a.w, ar, yr, a.dim, a.eps, scaled, a.scale, red);
    } else {
        const float scale = (float)row_scale(true, xr, a.dim, a.eps, red);
        for (int64_t i = threadIdx.x; i < a.dim; i += NORM_THREADS) {
            float v = row_scaled(xr[i], scale, a.w, i);
            if (ar)
                v = __fadd_rn(ar[i], v);
            yr[i] = scaled ? __fmul_rn(v, a.scale) : v;
        }
    }
    __syncthreads();
}

/* A chain's steps (memra__norm_chain): all of the same rows, sharing
 * memory only row for row, so a block takes a row through every step. */
struct norm_chain_args {
    memra_norm_args_t s[MEMRA_NORM_CHAIN_MAX];
    int n;
};

__global__ void __launch_bounds__(NORM_THREADS) norm_chain_kernel(const norm_chain_args a, int regs)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    __shared__ float red[NORM_THREADS / 32 + 1];
    for (int64_t r = blockIdx.x; r < a.s[0].rows; r += gridDim.x)
        for (int i = 0; i < a.n; i++)
            norm_ex_row(a.s[i], r, regs, red);
}

memra_status_t memra__cuda_norm_ex(memra__backend_t *be, const memra_norm_args_t *a, int n, bool *done)
{
    memra_status_t st = memra__cuda_norm_chain_smem(be, a, n, done); /* cuda/norm_chain.cu */
    if (st || *done)
        return st;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    norm_chain_args ca;
    memset(&ca, 0, sizeof ca);
    for (int i = 0; i < n; i++)
        ca.s[i] = a[i];
    ca.n = n;
    memra__launch(norm_chain_kernel, memra__cuda_blocks(a[0].rows, 1, 65535), NORM_THREADS, 0, c->stream, ca,
                  norm_regs());
    MEMRA_CUDA_LAUNCHED(be);
    *done = true;
    return MEMRA_OK;
}

/* ---- elementwise ------------------------------------------------------------- */

static __device__ __forceinline__ float ew_one(int op, float a, float b, float aux, float s)
{
    switch (op) {
    case MEMRA_EW_COPY: return a;
    case MEMRA_EW_ADD: return a + b;
    case MEMRA_EW_MUL: return a * b;
    case MEMRA_EW_SCALE: return a * s;
    case MEMRA_EW_ADD_SCALED: return (float)((double)a + (double)b * (double)s);
    case MEMRA_EW_SILU: return memra_siluf(a);
    case MEMRA_EW_GELU: return (float)d_gelu(a);
    case MEMRA_EW_SIGMOID: return (float)d_sigmoid(a);
    case MEMRA_EW_SWIGLU: return memra_siluf(a) * b;
    case MEMRA_EW_GEGLU: return (float)(d_gelu(a) * (double)b);
    case MEMRA_EW_MUL_SIGMOID: return (float)((double)a * d_sigmoid(b));
    case MEMRA_EW_SOFTCAP: return d_softcap(a, s);
    case MEMRA_EW_SOFTPLUS_MUL: return (float)(d_softplus((double)a + (double)b) * (double)aux);
    case MEMRA_EW_FILL: return s;
    }
    return __int_as_float(0x7fc00000);
}

/* memra__ew_reads_b (lib/op_check.c) for the device */
static __device__ __forceinline__ bool ew_reads_b(int op)
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

/* V consecutive floats (V = 1, or 4 in one 16-byte access) */
template <int V> struct ew_vec;
template <> struct ew_vec<1> {
    typedef float t;
    static __device__ __forceinline__ float get(const float &v, int) { return v; }
    static __device__ __forceinline__ void set(float &v, int, float x) { v = x; }
};
template <> struct ew_vec<4> {
    typedef float4 t;
    static __device__ __forceinline__ float get(const float4 &v, int e)
    {
        return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
    }
    static __device__ __forceinline__ void set(float4 &v, int e, float x)
    {
        if (e == 0)
            v.x = x;
        else if (e == 1)
            v.y = x;
        else if (e == 2)
            v.z = x;
        else
            v.w = x;
    }
};

/* blockIdx.y (with a grid-stride loop) walks rows, x-threads columns, so
 * no 64-bit division per element. V = 4: four columns a thread in 16-byte
 * loads and stores (the host checks: every pointer read or written 16-byte
 * aligned, cols and every stride whole multiples of four). The same ew_one
 * per element either way. */
template <int V> __global__ void ew_kernel(const memra_ew_args_t a)
{
    typedef typename ew_vec<V>::t vt;
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const bool rb = ew_reads_b(a.op), ra = a.op != MEMRA_EW_FILL;
    const int64_t cn = V == 4 ? a.cols >> 2 : a.cols;
    for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
        const vt *ar = (const vt *)(a.a + r * a.as);
        const vt *br = rb ? (const vt *)(a.b + r * a.bs) : NULL;
        vt *yr = (vt *)(a.y + r * a.ys);
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cn; c += (int64_t)gridDim.x * blockDim.x) {
            const vt av = ra ? ar[c] : vt{}, bv = rb ? br[c] : vt{};
            const vt xv = a.op == MEMRA_EW_SOFTPLUS_MUL ? ((const vt *)a.aux)[c] : vt{};
            vt y;
#pragma unroll
            for (int e = 0; e < V; e++)
                ew_vec<V>::set(y, e,
                               ew_one(a.op, ew_vec<V>::get(av, e), ew_vec<V>::get(bv, e), ew_vec<V>::get(xv, e), a.s));
            yr[c] = y;
        }
    }
}

/* elements below which a call keeps one column a thread (decode's rows) */
#define EW4_MIN (1 << 16)

memra_status_t memra__cuda_elementwise(memra__backend_t *be, const memra_ew_args_t *a0)
{
    bool none;
    memra_status_t st = memra__check_ew(be, a0, &none);
    if (st || none)
        return st;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    memra_ew_args_t a = *a0;
    static long fast = -1;
    if (fast < 0)
        fast = memra__cuda_env_long("MEMRA_EW_FLAT", 1); /* 0: a row a grid line, one column a thread (A/B) */
    const bool rb = memra__ew_reads_b(a.op), ra = a.op != MEMRA_EW_FILL, rx = a.op == MEMRA_EW_SOFTPLUS_MUL;
    bool vec = false;
    if (fast) {
        /* rows that follow each other in every operand are one long row
         * (a prefill's many short head rows fill the grid); not with a
         * per-column vector */
        if (a.rows == 1) { /* one row: its strides are never used */
            a.ys = a.as = a.cols;
            a.bs = rb ? a.cols : 0;
        }
        if (a.rows > 1 && !rx && a.ys == a.cols && (!ra || a.as == a.cols) && (!rb || a.bs == a.cols)) {
            a.cols *= a.rows;
            a.rows = 1;
        }
        const uintptr_t al = (uintptr_t)a.y | (ra ? (uintptr_t)a.a : 0) | (rb ? (uintptr_t)a.b : 0) |
                             (rx ? (uintptr_t)a.aux : 0);
        /* four columns a thread only where there are many: a decode
         * step's short rows are latency-bound, and four serial ew_one
         * chains a thread cost the E4B's tg128 2 % (265.3 against 270.2
         * tok/s with MEMRA_EW_FLAT=0, H200, 2026-12-04) */
        vec = a.cols * a.rows >= EW4_MIN && al % 16 == 0 && a.cols % 4 == 0 && a.ys % 4 == 0 &&
              (!ra || a.as % 4 == 0) && (!rb || a.bs % 4 == 0);
    }
    const unsigned bx = memra__cuda_blocks(vec ? a.cols / 4 : a.cols, 256, 4096);
    unsigned by = memra__cuda_blocks(a.rows, 1, 65535);
    /* keep the grid bounded for many short rows */
    while ((uint64_t)bx * by > (1u << 20) && by > 1)
        by = (by + 1) / 2;
    if (vec)
        memra__launch(ew_kernel<4>, dim3(bx, by), 256, 0, c->stream, a);
    else
        memra__launch(ew_kernel<1>, dim3(bx, by), 256, 0, c->stream, a);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- rope ------------------------------------------------------------------- */

/* cos and sin of pair i's angle at position POS: the angle is rebuilt with
 * the same i float multiplications the reference makes. */
static __device__ __forceinline__ float2 rope_cs(const memra_rope_args_t &a, float theta_scale, int32_t pos, int64_t i)
{
    float theta = (float)pos;
    for (int64_t k = 0; k < i; k++)
        theta = __fmul_rn(theta, theta_scale);
    const float ff = a.freq_factors ? a.freq_factors[i] : 1.0f;
    const float ang = __fdiv_rn(theta, ff);
    /* float64 then one rounding: the correctly rounded cosf/sinf */
    return make_float2((float)cos((double)ang), (float)sin((double)ang));
}

/* Pair i of a head row ((i, i+half) NEOX, (2i, 2i+1) NORM) from SRC into P
 * (may be SRC). */
static __device__ __forceinline__ void rope_rot(const memra_rope_args_t &a, float2 cs, int64_t i, const float *src,
                                                float *p)
{
    const int64_t step = a.mode == MEMRA_ROPE_NEOX ? 1 : 2;
    const int64_t other = a.mode == MEMRA_ROPE_NEOX ? a.n_rot / 2 : 1;
    const float x0 = src[i * step], x1 = src[i * step + other];
    p[i * step] = __fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y));
    p[i * step + other] = __fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x));
}

/* Block per token; thread i rotates pair i of every head. */
__global__ void rope_kernel(const memra_rope_args_t a, float theta_scale)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const int64_t half = a.n_rot / 2;
    for (int64_t t = blockIdx.x; t < a.n_tokens; t += gridDim.x) {
        float *xt = a.x + t * a.token_stride;
        for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
            const float2 cs = rope_cs(a, theta_scale, a.pos[t], i);
            for (int64_t h = 0; h < a.n_heads; h++)
                rope_rot(a, cs, i, xt + h * a.head_stride, xt + h * a.head_stride);
        }
    }
}

memra_status_t memra__cuda_rope(memra__backend_t *be, const memra_rope_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_rope(be, a, &none);
    if (st || none)
        return st;
    /* host powf: the same libm result the CPU reference starts from */
    const float theta_scale = powf(a->base, -2.0f / (float)a->n_rot);
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const int threads = a->n_rot / 2 >= 128 ? 128 : (int)((a->n_rot / 2 + 31) / 32 * 32);
    memra__launch(rope_kernel, memra__cuda_blocks(a->n_tokens, 1, 65535), threads, 0, c->stream, *a, theta_scale);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- per-head norm + rope (memra_qk_args_t) --------------------------------------- */

/* A qk_norm_rope launch's stores (MEMRA_QK_STORE, on by default): item i's rows are
 * part[i]'s dst (its blocks convert their head's span once the head row
 * is written) or, part[i] = -1, rows no part writes (qwen35's V: converted
 * by blocks of their own, grid row heads + j for extra[j] = i). */
struct qk_stores {
    memra_kv_store_args_t st[MEMRA_QK_MAX_STORES];
    int code[MEMRA_QK_MAX_STORES], part[MEMRA_QK_MAX_STORES], extra[MEMRA_QK_MAX_STORES];
    int n, n_extra;
    int64_t heads;
};

/* Block per (token, head) of every part: norm_kernel's arithmetic into
 * shared memory, then rope_kernel's from there, so the sequence's bits. A
 * no_rope part's heads are normed straight into dst. STORE: then the
 * stores, with kv_store's conversions (cuda/kv_store.cuh), so the bits of
 * the kv_store launch after the sequence. */
template <bool STORE>
static __device__ __forceinline__ void qk_norm_rope_body(const memra_qk_args_t &a, float theta_scale,
                                                         const qk_stores *ks)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    extern __shared__ float qk_row[];
    __shared__ float red[NORM_THREADS / 32 + 1];
    const int64_t t = blockIdx.x, hd = a.rope.head_dim;
    int64_t h = blockIdx.y;
    if (STORE && h >= ks->heads) { /* an item no part writes: its row t */
        const int i = ks->extra[h - ks->heads];
        if (t < ks->st[i].rows)
            kv_store_row(ks->st[i], ks->code[i], t);
        return;
    }
    int p = 0; /* parts past n_parts have 0 heads (the host sets them) */
    while (p < MEMRA_QK_MAX_PARTS - 1 && h >= a.part[p].n_heads)
        h -= a.part[p++].n_heads;
    const memra_qk_part_t &q = a.part[p];
    const float *src = q.src + t * q.src_token_stride + h * q.src_head_stride;
    float *dst = q.dst + t * q.dst_token_stride + h * q.dst_head_stride;
    const float scale = (float)row_scale(true, src, hd, a.eps, red);
    if (q.no_rope) { /* block-uniform: no barrier is skipped by part of a block */
        for (int64_t i = threadIdx.x; i < hd; i += NORM_THREADS)
            dst[i] = row_scaled(src[i], scale, q.norm_w, i);
    } else {
        for (int64_t i = threadIdx.x; i < hd; i += NORM_THREADS)
            qk_row[i] = row_scaled(src[i], scale, q.norm_w, i);
        __syncthreads();
        const int64_t n_rot = a.rope.n_rot;
        for (int64_t i = threadIdx.x; i < n_rot / 2; i += NORM_THREADS)
            rope_rot(a.rope, rope_cs(a.rope, theta_scale, a.rope.pos[t], i), i, qk_row, dst);
        for (int64_t i = n_rot + threadIdx.x; i < hd; i += NORM_THREADS)
            dst[i] = qk_row[i];
    }
    if (STORE)
        for (int i = 0; i < ks->n; i++)
            if (ks->part[i] == p) {
                __syncthreads(); /* the block's head row written (block-uniform branch) */
                kv_store_span(ks->st[i], ks->code[i], t, h * hd, hd);
            }
}

__global__ void __launch_bounds__(NORM_THREADS) qk_norm_rope_kernel(const memra_qk_args_t a, float theta_scale)
{
    qk_norm_rope_body<false>(a, theta_scale, NULL);
}

__global__ void __launch_bounds__(NORM_THREADS)
    qk_norm_rope_store_kernel(const memra_qk_args_t a, float theta_scale, const qk_stores ks)
{
    qk_norm_rope_body<true>(a, theta_scale, &ks);
}

/* A's stores as the store kernel takes them; false (the launch declines)
 * for an item it cannot take. */
static bool qk_store_plan(const memra_qk_args_t &a, int64_t heads, qk_stores *ks)
{
    memset(ks, 0, sizeof *ks);
    const int64_t n = a.rope.n_tokens, hd = a.rope.head_dim;
    ks->heads = heads;
    for (int i = 0; i < a.n_store; i++) {
        const memra_kv_store_args_t &st = a.store[i];
        if (kv_misaligned(&st) || st.rows > n || st.cols > INT32_MAX)
            return false;
        ks->st[i] = st;
        ks->code[i] = kv_code(st.type);
        ks->part[i] = -1;
        for (int p = 0; p < a.n_parts; p++) {
            const memra_qk_part_t &q = a.part[p];
            const int64_t span = (n - 1) * q.dst_token_stride + q.n_heads * q.dst_head_stride;
            if (q.n_heads == 0 || !memra__ranges_overlap(st.src, (size_t)((st.rows - 1) * st.src_stride + st.cols) * 4,
                                                         q.dst, (size_t)span * 4))
                continue;
            /* rows a part writes: exactly its dst, a head's span each */
            if (st.src != q.dst || st.src_stride != q.dst_token_stride || q.dst_head_stride != hd ||
                st.cols != q.n_heads * hd || st.rows != n || ks->part[i] >= 0)
                return false;
            ks->part[i] = p;
        }
        if (ks->part[i] < 0)
            ks->extra[ks->n_extra++] = i;
    }
    ks->n = a.n_store;
    return true;
}

memra_status_t memra__cuda_qk_norm_rope(memra__backend_t *be, const memra_qk_args_t *a, bool *done)
{
    *done = false;
    memra_qk_args_t k = *a;
    int64_t heads = 0;
    for (int p = 0; p < MEMRA_QK_MAX_PARTS; p++) {
        if (p >= k.n_parts)
            k.part[p].n_heads = 0;
        heads += k.part[p].n_heads;
    }
    if (a->rope.n_tokens > INT32_MAX || heads == 0 || heads > 65535 || a->rope.head_dim > 8192 || a->rope.n_rot == 0)
        return MEMRA_OK;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const float theta_scale = powf(a->rope.base, -2.0f / (float)a->rope.n_rot); /* as memra__cuda_rope */
    if (a->n_store) {
        /* the stores in the same launch, the default since 2026-12-05 (H100,
         * tg128: the 26B-A4B +1.9 %, the 31B +1.8 %, the E4B level;
         * docs/PERFORMANCE.md). MEMRA_QK_STORE=0: declined, and
         * memra__qk_norm_rope runs this launch, then the kv_store launch */
        static long on = -1;
        if (on < 0)
            on = memra__cuda_env_long("MEMRA_QK_STORE", 1);
        qk_stores ks;
        if (!on || !qk_store_plan(k, heads, &ks) || heads + ks.n_extra > 65535)
            return MEMRA_OK;
        memra__launch(qk_norm_rope_store_kernel, dim3((unsigned)a->rope.n_tokens, (unsigned)(heads + ks.n_extra)),
                      NORM_THREADS, (size_t)a->rope.head_dim * sizeof(float), c->stream, k, theta_scale, ks);
    } else {
        memra__launch(qk_norm_rope_kernel, dim3((unsigned)a->rope.n_tokens, (unsigned)heads), NORM_THREADS,
                      (size_t)a->rope.head_dim * sizeof(float), c->stream, k, theta_scale);
    }
    MEMRA_CUDA_LAUNCHED(be);
    *done = true;
    return MEMRA_OK;
}
