/* matmul, get_rows and the grouped matvec behind moe.
 *
 * Decode (and every matmul of few rows, and exact mode) runs the matvec
 * kernels: a warp per weight row, 16-byte loads of the row's bytes, float32
 * accumulation. Each output's arithmetic is fixed by the weight alone (one
 * lane order, one shuffle tree), never by how many x rows share the launch,
 * so exact-mode prefill is bit-identical to decode whatever the chunking.
 *
 * Fast prefill (n_rows above MEMRA_MMV_MAX_ROWS, engine fast on) converts x
 * to f16 (or bf16 with MEMRA_FAST_GEMM=bf16), dequantizes weight tiles into
 * the workspace in the same type and calls cublasGemmEx with float32
 * accumulation and output. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda_common.cuh"
#include "quant.cuh"

extern "C" {
#include "quant.h"
}

#define MMV_WARPS 8

struct mmv_args {
    const uint8_t *W;
    size_t nb1, nb2;
    int64_t ne0, ne1;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
    int64_t n_rows;     /* plain: x rows in all */
    const int32_t *ids; /* grouped: expert of problem blockIdx.y, else NULL */
    int64_t n_expert, xdiv;
};

/* Per-launch setup: the weight, x and y of this block's problem, and how
 * many x rows (<= R) it takes. Returns false for a bad expert id, after
 * poisoning the problem's output (ids live on the device: no error path). */
template <int R>
static __device__ __forceinline__ bool mmv_setup(const mmv_args &a, const uint8_t *&W, const float *&x, float *&y,
                                                 int &nr)
{
    if (a.ids) {
        const int64_t p = blockIdx.y;
        const int32_t e = a.ids[p];
        y = a.y + p * a.ldy;
        if (e < 0 || e >= a.n_expert) {
            for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < a.ne1; i += (int64_t)gridDim.x * blockDim.x)
                y[i] = __int_as_float(0x7fc00000);
            return false;
        }
        W = a.W + (size_t)e * a.nb2;
        x = a.x + (p / a.xdiv) * a.ldx;
        nr = 1;
    } else {
        const int64_t r0 = (int64_t)blockIdx.y * R;
        W = a.W;
        x = a.x + r0 * a.ldx;
        y = a.y + r0 * a.ldy;
        nr = (int)min((int64_t)R, a.n_rows - r0);
    }
    return true;
}

static __device__ __forceinline__ void load32(const float *p, float *v)
{
    if (((uintptr_t)p & 15) == 0) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 f = __ldg((const float4 *)p + i);
            v[4 * i] = f.x;
            v[4 * i + 1] = f.y;
            v[4 * i + 2] = f.z;
            v[4 * i + 3] = f.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++)
            v[i] = __ldg(p + i);
    }
}

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Quantized types: a warp stages SEGB blocks of its row (32 sub-blocks)
 * into shared memory with 16-byte loads, then each lane decodes one
 * sub-block and dots it with x. */
template <int T, int R>
__global__ void __launch_bounds__(MMV_WARPS * 32) mmv_q_kernel(const mmv_args a)
{
    constexpr int QK = mq_traits<T>::qk, BB = mq_traits<T>::bytes, SUBS = mq_traits<T>::subs;
    constexpr int SEGB = 32 / SUBS;
    constexpr int SMEM = ((SEGB * BB + 15) / 16 + 1) * 16;
    __shared__ __align__(16) uint8_t smem[MMV_WARPS][SMEM];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint8_t *sm = smem[warp];
    const uint8_t *W;
    const float *x;
    float *y;
    int nr;
    if (!mmv_setup<R>(a, W, x, y, nr))
        return;
    const int64_t nblk = a.ne0 / QK;
    for (int64_t row = (int64_t)blockIdx.x * MMV_WARPS + warp; row < a.ne1; row += (int64_t)gridDim.x * MMV_WARPS) {
        const uint8_t *wrow = W + (size_t)row * a.nb1;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[r] = 0.0f;
        for (int64_t b0 = 0; b0 < nblk; b0 += SEGB) {
            const int nb = (int)min((int64_t)SEGB, nblk - b0);
            const uint8_t *start = wrow + b0 * BB;
            const uint4 *a0 = (const uint4 *)((uintptr_t)start & ~(uintptr_t)15);
            const int off = (int)((uintptr_t)start & 15);
            const int nchunk = (off + nb * BB + 15) >> 4;
            for (int c = lane; c < nchunk; c += 32)
                ((uint4 *)sm)[c] = __ldg(a0 + c);
            __syncwarp();
            if (lane < nb * SUBS) {
                float v[32];
                const int blk = lane / SUBS, sub = lane % SUBS;
                mq_deq32<T>(sm + off + blk * BB, sub, v);
                const int64_t e0 = (b0 + blk) * QK + sub * 32;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if (r < nr) {
                        float xv[32];
                        load32(x + r * a.ldx + e0, xv);
                        float s = 0.0f;
#pragma unroll
                        for (int i = 0; i < 32; i++)
                            s = fmaf(v[i], xv[i], s);
                        acc[r] += s;
                    }
                }
            }
            __syncwarp();
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = warp_sum(acc[r]);
            if (lane == 0 && r < nr)
                y[r * a.ldy + row] = s;
        }
    }
}

/* Float weights: 16-byte loads straight from global memory when every row
 * is 16-byte aligned (VEC), else element by element. */
template <int T, int R>
__global__ void __launch_bounds__(MMV_WARPS * 32) mmv_f_kernel(const mmv_args a, const bool vec)
{
    constexpr int EPV = T == MEMRA_TYPE_F32 ? 4 : 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint8_t *W;
    const float *x;
    float *y;
    int nr;
    if (!mmv_setup<R>(a, W, x, y, nr))
        return;
    const int64_t ne0 = a.ne0;
    for (int64_t row = (int64_t)blockIdx.x * MMV_WARPS + warp; row < a.ne1; row += (int64_t)gridDim.x * MMV_WARPS) {
        const uint8_t *wrow = W + (size_t)row * a.nb1;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[r] = 0.0f;
        int64_t tail = 0;
        if (vec) {
            const int64_t nv = ne0 / EPV;
            for (int64_t c = lane; c < nv; c += 32) {
                const uint4 u = __ldg((const uint4 *)wrow + c);
                float w[EPV];
                if (T == MEMRA_TYPE_F32) {
                    w[0] = __uint_as_float(u.x);
                    w[1] = __uint_as_float(u.y);
                    w[2] = __uint_as_float(u.z);
                    w[3] = __uint_as_float(u.w);
                } else {
                    const uint32_t p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const uint16_t lo = (uint16_t)(p[k] & 0xFFFF), hi = (uint16_t)(p[k] >> 16);
                        if (T == MEMRA_TYPE_F16) {
                            w[2 * k] = __half2float(__ushort_as_half(lo));
                            w[2 * k + 1] = __half2float(__ushort_as_half(hi));
                        } else {
                            w[2 * k] = mq_bf16(lo);
                            w[2 * k + 1] = mq_bf16(hi);
                        }
                    }
                }
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if (r < nr) {
                        const float *xr = x + r * a.ldx + c * EPV;
#pragma unroll
                        for (int k = 0; k < EPV; k++)
                            acc[r] = fmaf(w[k], __ldg(xr + k), acc[r]);
                    }
                }
            }
            tail = nv * EPV;
        }
        for (int64_t i = tail + lane; i < ne0; i += 32) {
            const float w = mq_float_at<T>(wrow, i);
#pragma unroll
            for (int r = 0; r < R; r++)
                if (r < nr)
                    acc[r] = fmaf(w, __ldg(x + r * a.ldx + i), acc[r]);
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = warp_sum(acc[r]);
            if (lane == 0 && r < nr)
                y[r * a.ldy + row] = s;
        }
    }
}

memra_status_t memra__cuda_check_weight(memra__backend_t *be, const memra_weight_t *w, const char *op)
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

static bool is_float_type(memra_type_t t)
{
    return t == MEMRA_TYPE_F32 || t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16;
}

template <int T, int R> static void launch_mmv(const mmv_args &a, dim3 grid, cudaStream_t s, bool vec)
{
    if (mq_is_float<T>::value)
        mmv_f_kernel<T, R><<<grid, MMV_WARPS * 32, 0, s>>>(a, vec);
    else
        mmv_q_kernel<T, R><<<grid, MMV_WARPS * 32, 0, s>>>(a);
}

template <int T> static void launch_mmv_r(const mmv_args &a, int R, dim3 grid, cudaStream_t s, bool vec)
{
    switch (R) {
    case 1: launch_mmv<T, 1>(a, grid, s, vec); break;
    case 2: launch_mmv<T, 2>(a, grid, s, vec); break;
    case 4: launch_mmv<T, 4>(a, grid, s, vec); break;
    default: launch_mmv<T, 8>(a, grid, s, vec); break;
    }
}

static memra_status_t run_mmv(memra__backend_t *be, memra_type_t type, const mmv_args &a, int R, unsigned gy)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const bool vec = ((uintptr_t)a.W % 16) == 0 && a.nb1 % 16 == 0 && (!a.ids || a.nb2 % 16 == 0);
    const dim3 grid(memra__cuda_blocks(a.ne1, MMV_WARPS, 1 << 30), gy);
#define MMV_CASE(T) launch_mmv_r<T>(a, R, grid, c->stream, vec)
    MQ_DISPATCH(type, MMV_CASE)
#undef MMV_CASE
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* Matvec of N_ROWS x rows (any number: groups of up to 8 per launch column). */
static memra_status_t matvec_rows(memra__backend_t *be, const memra_weight_t *w, const float *x, int64_t ldx, float *y,
                                  int64_t ldy, int64_t n_rows)
{
    const int R = n_rows == 1 ? 1 : n_rows == 2 ? 2 : n_rows <= 4 ? 4 : 8;
    for (int64_t r0 = 0; r0 < n_rows; r0 += (int64_t)R * 65535) {
        const int64_t n = n_rows - r0 < (int64_t)R * 65535 ? n_rows - r0 : (int64_t)R * 65535;
        mmv_args a = {(const uint8_t *)w->data, w->nb1, w->nb2, w->ne[0], w->ne[1], x + r0 * ldx, ldx,
                      y + r0 * ldy, ldy, n, NULL, 0, 1};
        memra_status_t st = run_mmv(be, w->type, a, R, (unsigned)((n + R - 1) / R));
        if (st)
            return st;
    }
    return MEMRA_OK;
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
        mmv_args a = {(const uint8_t *)w->data, w->nb1, w->nb2, w->ne[0], w->ne[1], x + (p0 / xdiv) * ldx, ldx,
                      y + p0 * ldy, ldy, 0, ids + p0, n_expert, xdiv};
        memra_status_t st = run_mmv(be, w->type, a, 1, (unsigned)n);
        if (st)
            return st;
    }
    return MEMRA_OK;
}

/* ---- fast prefill: f16/bf16 tiles + cuBLAS ---------------------------------- */

template <typename H> static __device__ __forceinline__ H to_h(float v);
template <> __device__ __forceinline__ __half to_h<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 to_h<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename H>
__global__ void x_to_h_kernel(const float *x, int64_t ldx, int64_t n_rows, int64_t ne0, H *out)
{
    const int64_t n = n_rows * ne0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / ne0, c = i % ne0;
        out[i] = to_h<H>(x[r * ldx + c]);
    }
}

/* Rows [o0, o0+nrow) of W into OUT ([nrow][ne0]). */
template <int T, typename H>
__global__ void deq_h_kernel(const uint8_t *W, size_t nb1, int64_t ne0, int64_t o0, int64_t nrow, H *out)
{
    if (mq_is_float<T>::value) {
        const int64_t n = nrow * ne0;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
            const int64_t r = i / ne0, k = i % ne0;
            out[i] = to_h<H>(mq_float_at<T>(W + (size_t)(o0 + r) * nb1, k));
        }
    } else {
        constexpr int BB = mq_traits<T>::bytes, SUBS = mq_traits<T>::subs;
        const int64_t per_row = ne0 / 32, n = nrow * per_row;
        for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < n; u += (int64_t)gridDim.x * blockDim.x) {
            const int64_t r = u / per_row, sb = u % per_row;
            float v[32];
            mq_deq32<T>(W + (size_t)(o0 + r) * nb1 + (sb / SUBS) * BB, (int)(sb % SUBS), v);
            H *o = out + r * ne0 + sb * 32;
#pragma unroll
            for (int i = 0; i < 32; i++)
                o[i] = to_h<H>(v[i]);
        }
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
    x_to_h_kernel<H><<<memra__cuda_blocks(n_rows * ne0, 256, 65535), 256, 0, c->stream>>>(x, ldx, n_rows, ne0, xh);
    MEMRA_CUDA_LAUNCHED(be);
    const float one = 1.0f, zero = 0.0f;
    for (int64_t o0 = 0; o0 < ne1; o0 += tile) {
        const int64_t nt = ne1 - o0 < tile ? ne1 - o0 : tile;
        const int64_t units = is_float_type(w->type) ? nt * ne0 : nt * ne0 / 32;
        const unsigned blocks = memra__cuda_blocks(units, 256, 65535);
#define DEQ_CASE(T) deq_h_kernel<T, H><<<blocks, 256, 0, c->stream>>>((const uint8_t *)w->data, w->nb1, ne0, o0, nt, wh)
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

static bool fast_bf16(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("MEMRA_FAST_GEMM");
        v = e && strcmp(e, "bf16") == 0;
    }
    return v == 1;
}

memra_status_t memra__cuda_matmul(memra__backend_t *be, const memra_weight_t *w, const float *x, int64_t ldx,
                                  float *y, int64_t ldy, int64_t n_rows)
{
    memra_status_t st = memra__cuda_check_weight(be, w, "matmul");
    if (st)
        return st;
    if (n_rows < 0 || (n_rows > 0 && (!x || !y)))
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul: bad rows or buffers");
    if (n_rows > 1 && (ldx < w->ne[0] || ldy < w->ne[1]))
        return memra__fail(be->err, MEMRA_E_INVALID, "matmul: row strides ldx=%lld ldy=%lld too small",
                           (long long)ldx, (long long)ldy);
    if (n_rows == 0)
        return MEMRA_OK;
    static long max_rows = -1;
    if (max_rows < 0)
        max_rows = memra__cuda_env_long("MEMRA_MMV_MAX_ROWS", 8);
    const bool big = n_rows <= INT32_MAX && w->ne[0] <= INT32_MAX && w->ne[1] <= INT32_MAX && ldy <= INT32_MAX;
    if (be->fast && n_rows > max_rows && big)
        return fast_bf16() ? gemm_fast_t<__nv_bfloat16>(be, w, x, ldx, y, ldy, n_rows, CUDA_R_16BF)
                           : gemm_fast_t<__half>(be, w, x, ldx, y, ldy, n_rows, CUDA_R_16F);
    return matvec_rows(be, w, x, ldx, y, ldy, n_rows);
}

/* ---- get_rows ------------------------------------------------------------- */

template <int T>
__global__ void get_rows_kernel(const uint8_t *W, size_t nb1, int64_t ne0, int64_t ne1, const int32_t *ids, int64_t n,
                                float *y, int64_t ldy)
{
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
    memra_status_t st = memra__cuda_check_weight(be, w, "get_rows");
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
    get_rows_kernel<T><<<blocks, 128, 0, c->stream>>>((const uint8_t *)w->data, w->nb1, w->ne[0], w->ne[1], ids, n, \
                                                      y, ldy)
    MQ_DISPATCH(w->type, GR_CASE)
#undef GR_CASE
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}
