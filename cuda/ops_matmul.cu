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
    int xsm;            /* stage x in shared memory (dynamic, R rows of mmv_xld(ne0)) */
};

/* x in shared memory: 4 floats of padding after every 32, so that lanes
 * reading 32-element runs (or 8-element runs 32 bytes apart) with 16-byte
 * loads hit distinct banks. Warp-wide reads of x from global memory at
 * those strides touch one L1 line per lane and were the matvec's limit. */
static __host__ __device__ __forceinline__ int64_t mmv_xp(int64_t i)
{
    return i + (i >> 5) * 4;
}

static __host__ __device__ __forceinline__ int64_t mmv_xld(int64_t ne0)
{
    return mmv_xp((ne0 + 31) & ~(int64_t)31);
}

/* Copies the block's NR x rows into XS (coalesced) and returns where the
 * kernel reads x from, with its row stride in *XL. */
static __device__ __forceinline__ const float *mmv_stage_x(const mmv_args &a, const float *x, int nr, float *xs,
                                                           int64_t *xl)
{
    if (!a.xsm) {
        *xl = a.ldx;
        return x;
    }
    const int64_t ld = mmv_xld(a.ne0);
    for (int r = 0; r < nr; r++)
        for (int64_t i = threadIdx.x; i < a.ne0; i += blockDim.x)
            xs[r * ld + mmv_xp(i)] = __ldg(x + r * a.ldx + i);
    __syncthreads();
    *xl = ld;
    return xs;
}

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

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Quantized types. A warp walks (row, segment) items; a segment is SEGB
 * whole blocks (64 sub-blocks, two per lane) of one row. Its bytes come in
 * with 16-byte loads into registers, go to the warp's shared memory, and
 * while the lanes decode them the next item's loads are already in flight.
 * Lane l always takes sub-blocks l and l+32 of a segment and the row sum is
 * one fixed shuffle tree, so a row's result never depends on R. */
template <int T> struct mmv_seg {
    static constexpr int qk = mq_traits<T>::qk, bb = mq_traits<T>::bytes, subs = mq_traits<T>::subs;
    static constexpr int u = 2;                          /* sub-blocks per lane per segment */
    static constexpr int segb = 32 * u / subs;           /* blocks per segment */
    /* 16-byte chunks: one more for a misaligned start, one more so word
     * reads past a segment's last block (mq_dot32<Q8_0>) stay in the buffer */
    static constexpr int nch = (segb * bb + 15) / 16 + 2;
    static constexpr int cpl = (nch + 31) / 32;          /* chunks per lane */
};

template <int T> struct mmv_item {
    const uint4 *a0; /* 16-byte aligned start */
    int off, nb, nchunk;
};

template <int T>
static __device__ __forceinline__ mmv_item<T> mmv_locate(const uint8_t *wrow, int64_t seg, int64_t nblk)
{
    using S = mmv_seg<T>;
    mmv_item<T> it;
    const uint8_t *start = wrow + seg * S::segb * S::bb;
    it.nb = (int)min((int64_t)S::segb, nblk - seg * S::segb);
    it.a0 = (const uint4 *)((uintptr_t)start & ~(uintptr_t)15);
    it.off = (int)((uintptr_t)start & 15);
    it.nchunk = (it.off + it.nb * S::bb + 15) >> 4;
    return it;
}

static __device__ __forceinline__ uint4 ld_stream(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

template <int T>
static __device__ __forceinline__ void mmv_issue(const mmv_item<T> &it, int lane, uint4 *buf)
{
#pragma unroll
    for (int j = 0; j < mmv_seg<T>::cpl; j++) {
        const int c = lane + 32 * j;
        if (c < it.nchunk)
            buf[j] = ld_stream(it.a0 + c);
    }
}

template <int T>
static __device__ __forceinline__ void mmv_stash(const mmv_item<T> &it, int lane, const uint4 *buf, uint8_t *sm)
{
#pragma unroll
    for (int j = 0; j < mmv_seg<T>::cpl; j++) {
        const int c = lane + 32 * j;
        if (c < it.nchunk)
            ((uint4 *)sm)[c] = buf[j];
    }
}

static __device__ __forceinline__ void mmv_tables(float *tab)
{
    if (threadIdx.x < 16)
        tab[threadIdx.x] = (float)mq_iq4nl[threadIdx.x];
    else if (threadIdx.x < 32)
        tab[threadIdx.x] = (float)mq_mxfp4[threadIdx.x - 16];
    __syncthreads();
}

/* MB: minimum resident blocks per SM the register allocation must allow.
 * MEMRA_MMV_MINB=3 forces 3 for decode (85 registers, a few spills); on
 * the H200 the unconstrained build (default) was faster: Q8_0 4096x12288
 * 2.14 vs 1.89 TB/s, 4096x248320 3.09 vs 2.64 TB/s. */
template <int T, int R, int MB = 1>
__global__ void __launch_bounds__(MMV_WARPS * 32, MB) mmv_q_kernel(const mmv_args a)
{
    using S = mmv_seg<T>;
    __shared__ __align__(16) uint4 smem[MMV_WARPS][S::nch];
    __shared__ float tab[32];
    mmv_tables(tab);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint8_t *sm = (uint8_t *)smem[warp];
    const uint8_t *W;
    const float *x;
    float *y;
    int nr;
    if (!mmv_setup<R>(a, W, x, y, nr))
        return;
    extern __shared__ __align__(16) float mmv_xs[];
    int64_t xl;
    x = mmv_stage_x(a, x, nr, mmv_xs, &xl);
    const int64_t nblk = a.ne0 / S::qk, nseg = (nblk + S::segb - 1) / S::segb;
    const int64_t rstride = (int64_t)gridDim.x * MMV_WARPS;
    int64_t row = (int64_t)blockIdx.x * MMV_WARPS + warp, seg = 0;
    if (row >= a.ne1)
        return;
    uint4 buf[S::cpl];
    mmv_item<T> it = mmv_locate<T>(W + (size_t)row * a.nb1, 0, nblk);
    mmv_issue<T>(it, lane, buf);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f;
    for (;;) {
        mmv_stash<T>(it, lane, buf, sm);
        __syncwarp();
        /* the next item's loads fly while this one is decoded */
        int64_t nrow = row, nsg = seg + 1;
        if (nsg == nseg) {
            nsg = 0;
            nrow = row + rstride;
        }
        const mmv_item<T> cur = it;
        if (nrow < a.ne1) {
            it = mmv_locate<T>(W + (size_t)nrow * a.nb1, nsg, nblk);
            mmv_issue<T>(it, lane, buf);
        }
#pragma unroll
        for (int u = 0; u < S::u; u++) {
            const int sb = lane + 32 * u;
            if (sb < cur.nb * S::subs) {
                const int blk = sb / S::subs, sub = sb % S::subs;
                const uint8_t *p = sm + cur.off + blk * S::bb;
                const int64_t e0 = (seg * S::segb + blk) * S::qk + sub * 32;
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (r < nr)
                        acc[r] += mq_dot32<T>(p, sub, x + r * xl + (a.xsm ? mmv_xp(e0) : e0), tab);
            }
        }
        __syncwarp();
        if (seg == nseg - 1) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float s = warp_sum(acc[r]);
                if (lane == 0 && r < nr)
                    y[r * a.ldy + row] = s;
                acc[r] = 0.0f;
            }
        }
        if (nrow >= a.ne1)
            break;
        row = nrow;
        seg = nsg;
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
    extern __shared__ __align__(16) float mmv_xs[];
    int64_t xl;
    x = mmv_stage_x(a, x, nr, mmv_xs, &xl);
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
            for (int64_t c0 = lane; c0 < nv; c0 += 32 * 4) {
              uint4 uu[4];
#pragma unroll
              for (int k4 = 0; k4 < 4; k4++)
                  if (c0 + 32 * k4 < nv)
                      uu[k4] = ld_stream((const uint4 *)wrow + c0 + 32 * k4);
#pragma unroll
              for (int k4 = 0; k4 < 4; k4++) {
                const int64_t c = c0 + 32 * k4;
                if (c >= nv)
                    break;
                const uint4 u = uu[k4];
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
                        const float *xr = x + r * xl + (a.xsm ? mmv_xp(c * EPV) : c * EPV);
                        float xv[EPV];
                        if (a.xsm || (((uintptr_t)xr & 15) == 0)) {
#pragma unroll
                            for (int k = 0; k < EPV; k += 4) {
                                const float4 f = *(const float4 *)(xr + k);
                                xv[k] = f.x;
                                xv[k + 1] = f.y;
                                xv[k + 2] = f.z;
                                xv[k + 3] = f.w;
                            }
                        } else {
#pragma unroll
                            for (int k = 0; k < EPV; k++)
                                xv[k] = xr[k];
                        }
#pragma unroll
                        for (int k = 0; k < EPV; k++)
                            acc[r] = fmaf(w[k], xv[k], acc[r]);
                    }
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
                    acc[r] = fmaf(w, x[r * xl + (a.xsm ? mmv_xp(i) : i)], acc[r]);
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

#define MMV_XS_MAX (96 * 1024) /* bytes of x staged per block, at most */

/* Launches on a resident grid (the blocks that fit the SMs at once, each
 * walking many rows), so x is staged once per block; SMEM bytes of staged
 * x, or x read from global memory when that much cannot be had. */
template <int T, int R, int MB>
static void launch_mmv(mmv_args a, int64_t need, unsigned gy, int sm_count, cudaStream_t s, bool vec)
{
    const void *kernel =
        mq_is_float<T>::value ? (const void *)mmv_f_kernel<T, R> : (const void *)mmv_q_kernel<T, R, MB>;
    /* The shared-memory attribute and the occupancy are per device (and
     * per instantiation): pipeline stages launch this on several GPUs. */
    enum { MAX_DEV = 64 };
    static size_t attr_smem_dev[MAX_DEV], occ_smem_dev[MAX_DEV];
    static int occ_dev[MAX_DEV];
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev < 0 || dev >= MAX_DEV)
        dev = 0;
    size_t &attr_smem = attr_smem_dev[dev], &occ_smem = occ_smem_dev[dev];
    int &occ = occ_dev[dev];
    if (attr_smem == 0) {
        attr_smem = 48 * 1024;
        occ_smem = (size_t)-1;
        occ = 1;
    }
    size_t smem = (size_t)R * mmv_xld(a.ne0) * sizeof(float);
    if (smem > MMV_XS_MAX)
        smem = 0;
    if (smem > attr_smem) {
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, MMV_XS_MAX) == cudaSuccess)
            attr_smem = MMV_XS_MAX;
        else
            cudaGetLastError();
        if (smem > attr_smem)
            smem = 0;
    }
    a.xsm = smem > 0;
    if (occ_smem != smem) {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, MMV_WARPS * 32, smem) != cudaSuccess) {
            cudaGetLastError();
            n = 1;
        }
        occ = n > 0 ? n : 1;
        occ_smem = smem;
    }
    int64_t cap = (int64_t)occ * (sm_count > 0 ? sm_count : 132) / gy;
    if (cap < 1)
        cap = 1;
    const dim3 grid((unsigned)(need < cap ? need : cap), gy);
    if (mq_is_float<T>::value)
        mmv_f_kernel<T, R><<<grid, MMV_WARPS * 32, smem, s>>>(a, vec);
    else
        mmv_q_kernel<T, R, MB><<<grid, MMV_WARPS * 32, smem, s>>>(a);
}

template <int T>
static void launch_mmv_r(const mmv_args &a, int R, int64_t need, unsigned gy, int sm_count, cudaStream_t s, bool vec)
{
    static long minb = -1;
    if (minb < 0)
        minb = memra__cuda_env_long("MEMRA_MMV_MINB", 1);
    switch (R) {
    case 1:
        if (minb == 3 && !mq_is_float<T>::value)
            launch_mmv<T, 1, 3>(a, need, gy, sm_count, s, vec);
        else
            launch_mmv<T, 1, 1>(a, need, gy, sm_count, s, vec);
        break;
    case 2: launch_mmv<T, 2, 1>(a, need, gy, sm_count, s, vec); break;
    case 4: launch_mmv<T, 4, 1>(a, need, gy, sm_count, s, vec); break;
    default: launch_mmv<T, 8, 1>(a, need, gy, sm_count, s, vec); break;
    }
}

static memra_status_t run_mmv(memra__backend_t *be, memra_type_t type, const mmv_args &a, int R, unsigned gy)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const bool vec = ((uintptr_t)a.W % 16) == 0 && a.nb1 % 16 == 0 && (!a.ids || a.nb2 % 16 == 0);
    const int64_t need = (a.ne1 + MMV_WARPS - 1) / MMV_WARPS;
#define MMV_CASE(T) launch_mmv_r<T>(a, R, need, gy, c->sm_count, c->stream, vec)
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
                      y + r0 * ldy, ldy, n, NULL, 0, 1, 0};
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
                      y + p0 * ldy, ldy, 0, ids + p0, n_expert, xdiv, 0};
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

static __device__ __forceinline__ uint32_t pack2(__half, float a, float b)
{
    const __half2 h = __floats2half2_rn(a, b);
    return *(const uint32_t *)&h;
}

static __device__ __forceinline__ uint32_t pack2(__nv_bfloat16, float a, float b)
{
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(const uint32_t *)&h;
}

/* Quantized rows [o0, o0+nrow) of W into OUT ([nrow][ne0]): the matvec's
 * staged, pipelined walk over (row, segment), then 16-byte stores. */
template <int T, typename H>
__global__ void __launch_bounds__(MMV_WARPS * 32)
    deq_hq_kernel(const uint8_t *W, size_t nb1, int64_t ne0, int64_t o0, int64_t nrow, H *out)
{
    using S = mmv_seg<T>;
    __shared__ __align__(16) uint4 smem[MMV_WARPS][S::nch];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint8_t *sm = (uint8_t *)smem[warp];
    const int64_t nblk = ne0 / S::qk, nseg = (nblk + S::segb - 1) / S::segb;
    const int64_t rstride = (int64_t)gridDim.x * MMV_WARPS;
    int64_t row = (int64_t)blockIdx.x * MMV_WARPS + warp, seg = 0;
    if (row >= nrow)
        return;
    W += (size_t)o0 * nb1;
    uint4 buf[S::cpl];
    mmv_item<T> it = mmv_locate<T>(W + (size_t)row * nb1, 0, nblk);
    mmv_issue<T>(it, lane, buf);
    for (;;) {
        mmv_stash<T>(it, lane, buf, sm);
        __syncwarp();
        int64_t nrw = row, nsg = seg + 1;
        if (nsg == nseg) {
            nsg = 0;
            nrw = row + rstride;
        }
        const mmv_item<T> cur = it;
        if (nrw < nrow) {
            it = mmv_locate<T>(W + (size_t)nrw * nb1, nsg, nblk);
            mmv_issue<T>(it, lane, buf);
        }
#pragma unroll
        for (int u = 0; u < S::u; u++) {
            const int sb = lane + 32 * u;
            if (sb < cur.nb * S::subs) {
                const int blk = sb / S::subs, sub = sb % S::subs;
                float v[32];
                mq_deq32<T>(sm + cur.off + blk * S::bb, sub, v);
                uint4 *o = (uint4 *)(out + row * ne0 + (seg * S::segb + blk) * S::qk + sub * 32);
#pragma unroll
                for (int q = 0; q < 4; q++)
                    o[q] = make_uint4(pack2(H(), v[8 * q], v[8 * q + 1]), pack2(H(), v[8 * q + 2], v[8 * q + 3]),
                                      pack2(H(), v[8 * q + 4], v[8 * q + 5]), pack2(H(), v[8 * q + 6], v[8 * q + 7]));
            }
        }
        __syncwarp();
        if (nrw >= nrow)
            break;
        row = nrw;
        seg = nsg;
    }
}

/* Float-type rows [o0, o0+nrow) of W into OUT ([nrow][ne0]). */
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
#define DEQ_CASE(T)                                                                                              \
    if (mq_is_float<T>::value)                                                                                   \
        deq_h_kernel<T, H><<<blocks, 256, 0, c->stream>>>((const uint8_t *)w->data, w->nb1, ne0, o0, nt, wh);    \
    else                                                                                                         \
        deq_hq_kernel<T, H><<<memra__cuda_blocks(nt, MMV_WARPS, 8 * (int64_t)c->sm_count), MMV_WARPS * 32, 0,    \
                              c->stream>>>((const uint8_t *)w->data, w->nb1, ne0, o0, nt, wh)
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
    /* narrow outputs (routers, gates) stay exact: no GEMM pays off there,
     * and a rounded router logit can flip an expert choice */
    static long min_out = -1;
    if (min_out < 0)
        min_out = memra__cuda_env_long("MEMRA_FAST_MIN_OUT", 512);
    if (be->fast && n_rows > max_rows && w->ne[1] > min_out && big)
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
