/* The matvec kernels (decode, exact prefill, MoE experts) and the weight
 * dequantizer of fast prefill, as templates over the weight type.
 *
 * They are instantiated per type family in cuda/mmv_*.cu (several
 * translation units compile in parallel; one file with every type took
 * minutes); cuda/ops_matmul.cu holds the host logic and only declares the
 * launchers.
 *
 * Quantized matvec: a warp walks "items" = (virtual row, part, segment); a
 * segment is SEGB whole blocks of one weight row (64 sub-blocks of 32
 * elements, two per lane). Each warp keeps a ring of three items in shared
 * memory filled by cp.async (16-byte copies that bypass registers and L1),
 * so two items are in flight while one is decoded: enough bytes in flight
 * per SM to stream HBM without holding loads in registers. Lane l always
 * takes sub-blocks l and l+32 of a segment and a row's sum is one fixed
 * shuffle tree, so a row's result never depends on how many x rows share
 * the launch, how many weights are fused, or the grid.
 *
 * Fusions (matmul_ex, lib/backend.h): up to MMV_MAXW weights of one type
 * and width share x (their rows form one "virtual row" space); x may be
 * RMS-normalized while it is staged (row_scale, the norm kernel's own
 * arithmetic); a GLU pairs rows of two weights (y = act(W0·x) * (W1·x));
 * ADD accumulates into y. Each gives the bits of its unfused sequence. */
#ifndef MEMRA_CUDA_MMV_CUH
#define MEMRA_CUDA_MMV_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <cuda/ptx>

#include "cuda_common.cuh"
#include "fmath.h"
#include "math.cuh"
#include "quant.cuh"
#include "route.cuh"

#define MMV_WARPS 8
#define MMV_THREADS (MMV_WARPS * 32)
#define MMV_MAXW 4
#define MMV_RING_MIN 2                /* items per warp in shared memory: at least */
#define MMV_RING_MAX 8                /* ... and at most */
#define MMV_SMEM_MAX (200 * 1024)     /* dynamic shared memory per block, at most */
#define MMV_SMEM_TARGET (72 * 1024)   /* ring + x per block: Q8_0 4096-wide gets 3 items per warp at 3 blocks per SM (measured best, tools/mmv-lab.cu) */
#define MMV_Q8D_SEG (64 * 34)        /* the Q8_0 fast path's item: 64 blocks, one bulk copy */
#define MMV_Q8D_RING 3 /* items per warp: three at three blocks per SM measured best */
/* ... and up to this many where x leaves room for one block an SM only
 * (mmv_launch_q8d): rows of 16384 floats and more */
#define MMV_Q8D_RING_MAX 8
/* warps of the fast path's blocks where one 8-warp block fills an SM's
 * shared memory (x of 16384 floats and more): 16 share x, and the
 * dynamic shared memory they may take (the H200's 227 KB a block, less
 * the static barriers) */
#define MMV_Q8D_WIDE_NW 16
#define MMV_Q8D_WIDE_SMEM_MAX (225 * 1024)
/* A slot for rows that start 4, 8 or 12 bytes off a 16-byte boundary (the
 * 26B-A4B's 2112-wide rows are 2244 bytes): the copy starts at the boundary
 * below and ends on the one above the segment */
#define MMV_Q8D_SLOT_OFF (MMV_Q8D_SEG + 16)

static_assert(MMV_THREADS == MEMRA_NORM_BLOCK, "the norm prologue needs the norm kernel's block size");

struct mmv_args {
    const uint8_t *W[MMV_MAXW];
    size_t nb1[MMV_MAXW];
    float *y[MMV_MAXW];
    int64_t ldy[MMV_MAXW];
    int64_t vrow0[MMV_MAXW + 1]; /* weight i owns virtual rows [vrow0[i], vrow0[i+1]) */
    int nw;                      /* weights (glu: 2, sharing every virtual row) */
    int glu;                     /* y[0] = act(W0·x) * (W1·x) */
    int gelu;                    /* glu activation: GELU, else SiLU */
    int add;                     /* y += W·x */
    int post[MMV_MAXW];          /* STORE: memra_ew_op_t applied to each output (COPY: none) */
    const float *post_b[MMV_MAXW], *post_aux[MMV_MAXW];
    float post_s[MMV_MAXW];      /* SOFTCAP's s: only the grouped stores apply SOFTCAP (run_mmv) */
    const float *conv_w;         /* weight 0's outputs through the causal conv (one x row) */
    float *conv_state;
    int conv_k;
    int norm;                    /* x staged as rmsnorm(x) [* norm_w] */
    const float *norm_w;
    float eps;
    size_t nb2;
    int64_t ne0;
    const float *x;
    int64_t ldx;
    int64_t n_rows;     /* plain: x rows in all */
    const int32_t *ids; /* grouped: expert of problem blockIdx.y, else NULL */
    int64_t n_expert, xdiv;
    int xsm;            /* x staged in shared memory (R rows of mmv_xld(ne0)) */
    int ring;           /* quantized kernel: items per warp in shared memory */
    int probe;          /* MEMRA_MMV_PROBE=1: stream the weights, skip the dots (wrong results; timing only) */
    int tl_seq;         /* MEMRA_MMV_TIMELINE builds: the launch's number (mmv_impl.cuh: mmv_tl_note) */
    int lean;           /* Q8_0 fast path: the predecessor is latency-bound (run_mmv) */
    int rows_pb;        /* the batched Q8_0 kernel (mmv_q8b.cuh): x rows per block column */
    int ymap;           /* y is mapped host memory (cuda_backend.cu: cu_host_map): only the
                         * Q8_0 fast path's grouped stores take it (mmv_launch), which
                         * set it to the group's log2 size (1..5) */
    int q8_slot;        /* Q8_0 fast path: bytes between ring slots, MMV_Q8D_SEG, or
                         * MMV_Q8D_SLOT_OFF when some row starts off 16 bytes */
    int slot_nch;       /* fused MoE (mmv_moe.cuh): 16-byte chunks per ring slot */
    unsigned *route_ticket; /* float matvec of one x row: the blocks finished (zero between launches);
                             * the last one routes y[0] with ROUTE (memra__router); NULL: no route */
    memra_route_args_t route;
};

#ifdef MEMRA_MMV_TIMELINE
/* Diagnostic build (tools/timeline-build.sh: cuda/mmv_q8.cu compiled with
 * -DMEMRA_MMV_TIMELINE into a copy of the library): each fast-path block
 * records %globaltimer at its start, after its wait, after staging x and at
 * its end (the normalized staging also after its sum of squares and its
 * scale), for the last MMV_TL_LAUNCHES launches; dumped at exit to
 * $MEMRA_MMV_TIMELINE (tools/mmv-timeline.py reads it). */
#define MMV_TL_LAUNCHES 1024
#define MMV_TL_BLOCKS 512
static __device__ unsigned long long mmv_tl[MMV_TL_LAUNCHES][MMV_TL_BLOCKS][8];
static __shared__ int mmv_tl_seq_s; /* the block's launch number, for stamps inside the staging */
/* %globaltimer once V (a register the stamp must follow) is ready */
static __device__ __forceinline__ unsigned long long mmv_tl_after(double v)
{
    unsigned long long t;
    asm volatile("{\n\t.reg .pred p;\n\tsetp.neu.f64 p, %1, %1;\n\tmov.u64 %0, %%globaltimer;\n\t@p add.u64 %0, %0, 1;\n\t}"
                 : "=l"(t) : "d"(v));
    return t;
}
static __device__ __forceinline__ unsigned long long mmv_tl_now(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define MMV_TL(a, i, t)                                                                                                \
    do {                                                                                                               \
        if (threadIdx.x == 0 && blockIdx.x < MMV_TL_BLOCKS)                                                           \
            mmv_tl[(a).tl_seq % MMV_TL_LAUNCHES][blockIdx.x][i] = (t);                                                 \
    } while (0)
#else
#define MMV_TL(a, i, t) ((void)0)
#endif

/* x in shared memory: 4 floats of padding after every 32 (P64: every 64),
 * so that lanes reading 32-element runs (P64: 64-element runs) with
 * 16-byte loads hit distinct banks. Warp-wide reads of x from global
 * memory at those strides touch one L1 line per lane and were the
 * matvec's limit. Q8_0 stages x with P64 (lanes take block pairs). */
template <bool P64 = false> static __host__ __device__ __forceinline__ int64_t mmv_xp(int64_t i)
{
    return i + (i >> (P64 ? 6 : 5)) * 4;
}

template <bool P64 = false> static __host__ __device__ __forceinline__ int64_t mmv_xld(int64_t ne0)
{
    return mmv_xp<P64>((ne0 + 63) & ~(int64_t)63);
}

/* The block's problem: its x rows, how many (<= R), and the row offset of
 * its outputs. False for a bad expert id, after poisoning the problem's
 * output (ids live on the device: no error path). */
template <int R>
static __device__ __forceinline__ bool mmv_setup(const mmv_args &a, const float *&x, int &nr, int64_t &yrow,
                                                 size_t &woff)
{
    woff = 0;
    if (a.ids) {
        const int64_t p = blockIdx.y;
        const int32_t e = a.ids[p];
        yrow = p;
        if (e < 0 || e >= a.n_expert) {
            float *y = a.y[0] + p * a.ldy[0];
            for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < a.vrow0[1]; i += (int64_t)gridDim.x * blockDim.x)
                y[i] = __int_as_float(0x7fc00000);
            return false;
        }
        woff = (size_t)e * a.nb2;
        x = a.x + (p / a.xdiv) * a.ldx;
        nr = 1;
    } else {
        const int64_t r0 = (int64_t)blockIdx.y * R;
        yrow = r0;
        x = a.x + r0 * a.ldx;
        nr = (int)min((int64_t)R, a.n_rows - r0);
    }
    return true;
}

/* Q8_0 decode reads x scaled by 2^64 and turns each quant byte into the
 * float u * 2^-149 (a subnormal: u = q + 128 in the mantissa, no implicit
 * bit) with one byte permutation, so a weight costs PRMT + FFMA instead of
 * PRMT + FADD + FFMA. sum(q x) = 2^85 * (sum(u * 2^-149 * x * 2^64)
 * - 2^-78 * sum(x)): the block sums of x are staged next to x. Scaling by
 * powers of two is exact; products stay normal floats for |q x| >= 2^-41
 * (smaller ones lose relative precision at 2^-64 absolute) and x must stay
 * below 2^63 in magnitude. The GPU build keeps subnormals (no -ftz). */
#define MMV_Q8X_SCALE 0x1p64f /* x is staged times this */

template <int T> struct mmv_q8x {
    static constexpr bool on = T == MEMRA_TYPE_Q8_0;
};

/* Shared memory of NR staged x rows of NE0 floats (and Q8_0's block sums). */
template <int T> static __host__ __device__ __forceinline__ size_t mmv_x_bytes(int64_t ne0, int nr)
{
    return ((size_t)nr * mmv_xld<mmv_q8x<T>::on>(ne0) + (mmv_q8x<T>::on ? (size_t)nr * (ne0 / 32) : 0)) * sizeof(float);
}

/* Copies (normalizing, with a.norm) the block's NR x rows into XS and
 * returns where the kernel reads x from, with its row stride in *XL. With
 * SCALE (Q8_0) the copies are x * 2^64 and the per-32 sums of x * 2^-78
 * follow the R rows. Staging sits between every block's wait for its
 * predecessor and its first dot, so it is built for latency: thread t
 * takes the 4-float chunks t, t + 256, ... (16-byte loads, four in flight;
 * with the norm two, with their weight chunks), and a Q8_0 block (8 chunks, 8 adjacent lanes)
 * sums its chunk sums with a 3-step shuffle tree. The bits do not depend
 * on alignment (unaligned rows take the same values element by element). */
static __device__ __forceinline__ float4 mmv_ld4(const float *p, int64_t e, int64_t n, bool vec)
{
    if (vec)
        return __ldg((const float4 *)(p + e));
    return make_float4(e < n ? __ldg(p + e) : 0.0f, e + 1 < n ? __ldg(p + e + 1) : 0.0f,
                       e + 2 < n ? __ldg(p + e + 2) : 0.0f, e + 3 < n ? __ldg(p + e + 3) : 0.0f);
}

/* Chunk C of a staged row: T (x, normalized) scaled for Q8_0 into XR_S,
 * and with SCALE its Q8_0 block's sum (8 chunks, 8 adjacent lanes: a
 * 3-step shuffle tree; UNIFORM: the warp's lanes all take part). */
template <bool SCALE>
static __device__ __forceinline__ void mmv_stage_put(float t[4], int64_t c, int64_t nc, int64_t ne0, bool uniform,
                                                     float *xr_s, float *sums)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int q = 0; q < 4; q++)
        t[q] *= SCALE ? MMV_Q8X_SCALE : 1.0f;
    float *dst = xr_s + mmv_xp<SCALE>(4 * c);
    if (c < nc) {
        if (4 * c + 3 < ne0) {
            *(float4 *)dst = make_float4(t[0], t[1], t[2], t[3]);
        } else {
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (4 * c + q < ne0)
                    dst[q] = t[q];
        }
    }
    if (SCALE && uniform) { /* nc is a multiple of 8 */
        float b = c < nc ? ((t[0] + t[1]) + t[2]) + t[3] : 0.0f;
        b += __shfl_xor_sync(0xffffffffu, b, 1);
        b += __shfl_xor_sync(0xffffffffu, b, 2);
        b += __shfl_xor_sync(0xffffffffu, b, 4);
        if ((lane & 7) == 0 && c < nc)
            sums[c / 8] = b * 0x1p-71f * 0x1p-71f; /* 2^-78 sum(x) = 2^-142 sum(x 2^64), in two normal steps */
    }
}

/* row_scaled's arithmetic on a chunk (w = 1 without a weight). */
static __device__ __forceinline__ void mmv_scaled4(float t[4], float4 w, float s)
{
    const float wj[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int q = 0; q < 4; q++)
        t[q] = __fmul_rn(__fmul_rn(t[q], s), wj[q]);
}

/* One x row into XR_S (its block sums into SUMS): U chunks in flight per
 * thread, with NORM (scale S) their norm weight chunks too. */
template <bool SCALE, int U, bool NORM, int NT = MMV_THREADS>
static __device__ __forceinline__ void mmv_stage_row(const float *xr, const float *nw, float s, int64_t ne0, bool vec,
                                                     float *xr_s, float *sums)
{
    const int64_t nc = (ne0 + 3) >> 2;
    const int lane = threadIdx.x & 31;
    /* c0: the warp's first chunk, so that the loop and the shuffles are warp-uniform */
    for (int64_t c0 = threadIdx.x - lane; c0 < nc; c0 += U * NT) {
        float4 v[U], w[U];
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int64_t c = c0 + lane + j * NT;
            v[j] = c < nc ? mmv_ld4(xr, 4 * c, ne0, vec) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (NORM)
                w[j] = c < nc && nw ? mmv_ld4(nw, 4 * c, ne0, vec) : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            float t[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
            if (NORM)
                mmv_scaled4(t, w[j], s);
            mmv_stage_put<SCALE>(t, c0 + lane + j * NT, nc, ne0, c0 + j * NT < nc, xr_s, sums);
        }
    }
}

/* A normalized row in one read of x (ne0 <= 16 MMV_THREADS): thread t
 * loads its chunks t, t + 256, ... at once, sums their squares in
 * row_sumsq_part's order, parks them in XR_S (where they go) through the
 * block reduction (RED), then scales its own chunks in place: one round
 * trip to L2 where the scale-then-copy passes took three. The norm weight
 * is read after the reduction, from shared memory where the fast path
 * parked it before its wait (WPARK), else from global memory. */
#define MMV_ONEPASS_U 4

/* Where the fast path parks chunk C of the norm weight before its wait:
 * the ring's last slot of every warp, free until the first item is done
 * (136 chunks per slot, so ne0 <= 4352). */
#define MMV_WPARK_CHUNKS (MMV_Q8D_SEG / 16)

static __device__ __forceinline__ uint8_t *mmv_wpark_at(uint8_t *ring, int64_t c)
{
    return ring + ((c / MMV_WPARK_CHUNKS) * MMV_Q8D_RING + MMV_Q8D_RING - 1) * MMV_Q8D_SEG + (c % MMV_WPARK_CHUNKS) * 16;
}

/* The last pass of a one-read staging: thread t's chunks t, t + 256, ...
 * (U of them) parked in XR_S read back, scaled as row_scaled does (by S,
 * then the norm weight: parked at WPARK, else NW, else none) when NORM, and
 * staged in place with their block sums. */
template <bool SCALE, int U>
static __device__ __forceinline__ void mmv_stage_parked(float *xr_s, float *sums, const float *nw, uint8_t *wpark,
                                                        bool norm, float s, int64_t nc, int64_t ne0, bool vec)
{
    const int lane = threadIdx.x & 31;
    const int64_t c0 = threadIdx.x;
#pragma unroll
    for (int j = 0; j < U; j++) {
        const int64_t c = c0 + j * MMV_THREADS;
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (c < nc) {
            const float4 v = *(const float4 *)(xr_s + mmv_xp<SCALE>(4 * c));
            t[0] = v.x, t[1] = v.y, t[2] = v.z, t[3] = v.w;
            if (norm)
                mmv_scaled4(t, wpark ? *(const float4 *)mmv_wpark_at(wpark, c)
                               : nw  ? mmv_ld4(nw, 4 * c, ne0, vec)
                                     : make_float4(1.0f, 1.0f, 1.0f, 1.0f), s);
        }
        mmv_stage_put<SCALE>(t, c, nc, ne0, c0 - lane + j * MMV_THREADS < nc, xr_s, sums);
    }
}

template <bool SCALE>
static __device__ __forceinline__ void mmv_stage_row_norm1(const float *xr, const float *nw, uint8_t *wpark, float eps,
                                                           float *red, int64_t ne0, bool vec, float *xr_s,
                                                           float *sums)
{
    const int64_t nc = (ne0 + 3) >> 2;
    const int64_t c0 = threadIdx.x;
    float sq = 0.0f;
    {
        float4 v[MMV_ONEPASS_U];
#pragma unroll
        for (int j = 0; j < MMV_ONEPASS_U; j++) {
            const int64_t c = c0 + j * MMV_THREADS;
            v[j] = c < nc ? mmv_ld4(xr, 4 * c, ne0, vec) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int j = 0; j < MMV_ONEPASS_U; j++) { /* zeros past the row add nothing */
            const int64_t c = c0 + j * MMV_THREADS;
            const float vj[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
            for (int q = 0; q < 4; q++)
                sq = row_sq_add(vj[q], sq);
            if (c < nc) /* whole chunks only: ne0 % 4 == 0 here */
                *(float4 *)(xr_s + mmv_xp<SCALE>(4 * c)) = v[j];
        }
    }
#ifdef MEMRA_MMV_TIMELINE
    if (threadIdx.x == 0 && blockIdx.x < MMV_TL_BLOCKS)
        mmv_tl[mmv_tl_seq_s % MMV_TL_LAUNCHES][blockIdx.x][4] = mmv_tl_after(sq);
#endif
    const float s = (float)row_scale_reduce(true, sq, ne0, eps, red);
#ifdef MEMRA_MMV_TIMELINE
    if (threadIdx.x == 0 && blockIdx.x < MMV_TL_BLOCKS)
        mmv_tl[mmv_tl_seq_s % MMV_TL_LAUNCHES][blockIdx.x][5] = mmv_tl_after(s);
#endif
    mmv_stage_parked<SCALE, MMV_ONEPASS_U>(xr_s, sums, nw, wpark, true, s, nc, ne0, vec);
}

template <bool SCALE>
static __device__ __forceinline__ const float *mmv_stage_x(const mmv_args &a, const float *x, int nr, float *xs,
                                                           int64_t *xl, uint8_t *wpark = NULL)
{
    __shared__ float red[MEMRA_NORM_BLOCK / 32];
    if (!a.xsm) {
        *xl = a.ldx;
        return x;
    }
    const int64_t ld = mmv_xld<SCALE>(a.ne0), ne0 = a.ne0;
    const float *nw = a.norm ? a.norm_w : NULL;
    for (int r = 0; r < nr; r++) {
        const float *xr = x + r * a.ldx;
        const bool vec = (ne0 & 3) == 0 && ((uintptr_t)xr & 15) == 0 && ((uintptr_t)nw & 15) == 0;
        float *sums = xs + (int64_t)nr * ld + r * (ne0 / 32);
        if (a.norm && vec && ne0 <= 4 * MMV_ONEPASS_U * MMV_THREADS)
            mmv_stage_row_norm1<SCALE>(xr, nw, wpark, a.eps, red, ne0, vec, xs + r * ld, sums);
        else if (a.norm) /* the scale first, then two chunks in flight with their weights */
            mmv_stage_row<SCALE, 2, true>(xr, nw, (float)row_scale(true, xr, ne0, a.eps, red), ne0, vec, xs + r * ld, sums);
        else if (ne0 > 4 * 4 * MMV_THREADS) /* ffn down: two round trips instead of three */
            mmv_stage_row<SCALE, 6, false>(xr, NULL, 1.0f, ne0, vec, xs + r * ld, sums);
        else
            mmv_stage_row<SCALE, 4, false>(xr, NULL, 1.0f, ne0, vec, xs + r * ld, sums);
    }
    __syncthreads();
    *xl = ld;
    return xs;
}

/* mmv_stage_x for a block of NT threads other than MMV_THREADS (the
 * Q8_0 fast path's wide blocks): one x row, never normalized (the norm's
 * block reduction is MEMRA_NORM_BLOCK threads'), the same chunks and sums
 * element by element, so the same staged bits. */
template <bool SCALE, int NT>
static __device__ __forceinline__ const float *mmv_stage_x_plain(const mmv_args &a, const float *x, float *xs,
                                                                 int64_t *xl)
{
    const int64_t ld = mmv_xld<SCALE>(a.ne0), ne0 = a.ne0;
    const bool vec = (ne0 & 3) == 0 && ((uintptr_t)x & 15) == 0;
    mmv_stage_row<SCALE, 4, false, NT>(x, NULL, 1.0f, ne0, vec, xs, xs + ld);
    __syncthreads();
    *xl = ld;
    return xs;
}

/* Channel C's causal conv + SiLU of this token's input G, shifting G into
 * its state: conv_kernel's arithmetic (cuda/ops_ssm.cu) for one token. */
static __device__ __forceinline__ float mmv_conv(const mmv_args &a, int64_t c, float g)
{
    const int k1 = a.conv_k - 1;
    const float *w = a.conv_w + c * a.conv_k;
    float *st = a.conv_state + c * k1;
    float sum = 0.0f;
    for (int k = 0; k < a.conv_k; k++)
        sum = __fmaf_rn(k < k1 ? st[k] : g, w[k], sum); /* explicit, as conv_kernel */
    for (int j = 0; j < k1; j++)
        st[j] = j + 1 < k1 ? st[j + 1] : g;
    return memra_siluf(sum);
}

/* The SMs a launcher spreads blocks over: the device's count, or 132 (an
 * H100's and an H200's) when it is unknown (SM_COUNT <= 0). */
static inline int64_t mmv_sms(int sm_count)
{
    return sm_count > 0 ? sm_count : 132;
}

/* Whether A's epilogue is one only the generic kernels carry: the causal
 * conv. */
static inline bool mmv_generic_epi(const mmv_args &a)
{
    return a.conv_w != NULL;
}

/* Writes one output of virtual row V (weight WI, local row LROW) for x row R.
 * CONV = false leaves the conv epilogue out (mmv_generic_epi:
 * the Q8_0 fast paths, whose launchers send those launches to the generic
 * kernel: no decode forward fuses the conv into a matvec any more, and the
 * fast path is measured to slow down with every piece of code it
 * carries). */
template <bool CONV = true>
static __device__ __forceinline__ void mmv_store(const mmv_args &a, int wi, int64_t lrow, int64_t yrow, int r, float g,
                                                 float u)
{
    if (a.glu)
        wi = 0; /* the pair's one output */
    float *y = a.y[wi] + (yrow + r) * a.ldy[wi] + lrow;
    if (a.glu)
        *y = d_glu(a.gelu, g, u);
    else if (a.add)
        *y = *y + g;
    else if (CONV && wi == 0 && a.conv_w)
        *y = mmv_conv(a, lrow, g);
    else if (a.post[wi] == MEMRA_EW_SIGMOID)
        *y = (float)d_sigmoid(g);
    else if (a.post[wi] == MEMRA_EW_SOFTPLUS_MUL)
        *y = (float)(d_softplus((double)g + (double)a.post_b[wi][lrow]) * (double)a.post_aux[wi][lrow]);
    else
        *y = g;
}

template <int T> struct mmv_seg {
    static constexpr int qk = mq_traits<T>::qk, bb = mq_traits<T>::bytes, subs = mq_traits<T>::subs;
    static constexpr int u = 2; /* sub-blocks per lane per segment (4 for Q8_0 measured no
                                 * better: 108 registers, one block less per SM) */
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
static __device__ __forceinline__ void mmv_issue_async(const mmv_item<T> &it, int lane, uint4 *slot)
{
#pragma unroll
    for (int j = 0; j < mmv_seg<T>::cpl; j++) {
        const int c = lane + 32 * j;
        if (c < it.nchunk)
            cp_async16(slot + c, it.a0 + c);
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

/* Position in a warp's item sequence: virtual row v, part p (glu: weight),
 * segment s. Advanced by counting, never by division. */
struct mmv_pos {
    int64_t v;
    int p, s;
};

static __device__ __forceinline__ void mmv_next(mmv_pos &q, int np, int64_t nseg, int64_t rstride)
{
    if (++q.s == nseg) {
        q.s = 0;
        if (++q.p == np) {
            q.p = 0;
            q.v += rstride;
        }
    }
}

/* The weight holding virtual row ROW of A's weights back to back (*LROW
 * its row in it). */
static __device__ __forceinline__ int mmv_vweight(const mmv_args &a, int64_t row, int64_t *lrow)
{
    int wi = 0;
    while (wi + 1 < a.nw && row >= a.vrow0[wi + 1])
        wi++;
    *lrow = row - a.vrow0[wi];
    return wi;
}

/* Item Q's weight (GLU: gate or up) and its row within that weight. */
static __device__ __forceinline__ int mmv_weight(const mmv_args &a, const mmv_pos &q, int64_t *lrow)
{
    if (a.glu) {
        *lrow = q.v;
        return q.p;
    }
    return mmv_vweight(a, q.v, lrow);
}

/* 32-bit shared-memory loads: pointers into dynamic shared memory reach
 * the compiler as generic addresses (x may also live in global memory), and
 * generic loads cost more issue slots and latency than LDS. */
static __device__ __forceinline__ uint32_t mmv_lds32(uint32_t a)
{
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}

static __device__ __forceinline__ float mmv_ldsf(uint32_t a)
{
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(a));
    return v;
}

static __device__ __forceinline__ float4 mmv_lds128(uint32_t a)
{
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a));
    return v;
}

static __device__ __forceinline__ uint32_t mmv_saddr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Q8_0 with x staged (x * 2^64, P64 layout, block sums at SUMS): lane L
 * takes the block pair (2L, 2L+1) of a segment of NB blocks whose bytes
 * start at the 4-byte aligned shared address SEG. The pair's 68 bytes are
 * 17 words at a 17-word lane stride (no bank conflicts), and every quant
 * is one byte permutation of the word that holds it: no funnel shifts.
 * B0 is the segment's first block in the row, NBR the blocks per row. */
template <int R>
static __device__ __forceinline__ void mmv_q8_pair(uint32_t seg, int nb, int lane, uint32_t x0, int64_t xl,
                                                   uint32_t sums, int64_t nbr, int64_t b0, int nr, float *part)
{
    const int pb = 2 * lane;
    if (pb >= nb)
        return;
    const bool two = pb + 1 < nb; /* an odd last block has no partner */
    uint32_t w[17];
#pragma unroll
    for (int i = 0; i < 17; i++)
        w[i] = mmv_lds32(seg + 68 * lane + 4 * i);
    const float da = __half2float(__ushort_as_half((unsigned short)(w[0] & 0xFFFFu))) * 0x1p85f;
    const float db = __half2float(__ushort_as_half((unsigned short)(w[8] >> 16))) * 0x1p85f;
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (r < nr) {
            const uint32_t xa = x0 + 4 * (uint32_t)(r * xl + mmv_xp<true>((b0 + pb) * 32));
            float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const float4 xv = mmv_lds128(xa + 16 * j);
                const float xx[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int i = 4 * j + c;                           /* element of the pair */
                    const int byte = i < 32 ? 2 + i : 36 + (i - 32);   /* its quant among the 68 bytes */
                    const uint32_t u = w[byte >> 2] ^ 0x80808080u;     /* u = q + 128 */
                    s[i >> 5][c] = fmaf(__int_as_float(__byte_perm(u, 0u, 0x4440 + (byte & 3))), xx[c], s[i >> 5][c]);
                }
            }
            const uint32_t sa = sums + 4 * (uint32_t)(r * nbr + b0 + pb);
            const float ta = (s[0][0] + s[0][1]) + (s[0][2] + s[0][3]);
            const float tb = (s[1][0] + s[1][1]) + (s[1][2] + s[1][3]);
            /* explicit roundings: contraction must not depend on R (a row's
             * result is the same in every launch) */
            float v = __fmul_rn(__fsub_rn(ta, mmv_ldsf(sa)), da);
            if (two)
                v = __fmaf_rn(__fsub_rn(tb, mmv_ldsf(sa + 4)), db, v);
            part[r] = __fadd_rn(part[r], v);
        }
    }
}

/* A warp's N slot barriers (one arrival each: the lane that issues the
 * slot's bulk copy), initialized by lane 0 and visible to the async proxy
 * before any copy completes on them. */
static __device__ __forceinline__ void mmv_bars_init(uint64_t *bar, int n, int lane)
{
    namespace ptx = cuda::ptx;
    if (lane == 0) {
        for (int d = 0; d < n; d++)
            ptx::mbarrier_init(&bar[d], 1);
        ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    }
    __syncwarp();
}

/* The L2 policy of the weights' bulk copies: they pass through L2 once per
 * token, so first out, and they do not evict what the small kernels between
 * the matvecs read (the Gated DeltaNet state, the KV rows, activations).
 * Fast path, A/B in one run: 328.7 vs 320.4 tok/s at depth 0, 326.9 vs
 * 316.6 at 512; the K-quant launches are compute-bound (Q4_K 9B 186.5 ->
 * 186.9). */
static __device__ __forceinline__ uint64_t mmv_evict_first(void)
{
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

/* A slot filled by several bulk copies: the fence and one arrival that
 * expects all N bytes (mmv_bar_expect), then each copy (mmv_bulk_copy). */
static __device__ __forceinline__ void mmv_bar_expect(uint32_t bar, uint32_t n)
{
    asm volatile("fence.proxy.async.shared::cta;\n\t"
                 "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                 :
                 : "r"(bar), "r"(n)
                 : "memory");
}

static __device__ __forceinline__ void mmv_bulk_copy(uint32_t dst, const void *src, uint32_t n, uint32_t bar,
                                                     uint64_t policy)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1], %2, [%3], %4;"
                 :
                 : "r"(dst), "l"(src), "r"(n), "r"(bar), "l"(policy)
                 : "memory");
}

/* A slot filled by several lanes' copies: one arrival that expects all
 * N bytes (mmv_bar_arm, by one lane), then each copying lane's fence of
 * its own earlier reads of the slot and its copy (mmv_bulk_copy_f). */
static __device__ __forceinline__ void mmv_bar_arm(uint32_t bar, uint32_t n)
{
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(n) : "memory");
}

static __device__ __forceinline__ void mmv_bulk_copy_f(uint32_t dst, const void *src, uint32_t n, uint32_t bar,
                                                       uint64_t policy)
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    mmv_bulk_copy(dst, src, n, bar, policy);
}

/* N bytes from global SRC into the slot at DST, completing on BAR, by one
 * lane: the fence (the slot's earlier generic-proxy reads before the
 * write), the arrival expecting the N bytes, the copy. */
static __device__ __forceinline__ void mmv_bulk_load(uint32_t dst, const void *src, uint32_t n, uint32_t bar,
                                                     uint64_t policy)
{
    mmv_bar_expect(bar, n);
    mmv_bulk_copy(dst, src, n, bar, policy);
}

/* Lanes [0, NL) together (the MoE launches' slot forms): each lane's NB
 * bytes at P (NULL: none) into its sub-slot at DST, copied from the
 * 16-byte boundary at or below P; lane 0 first arms the slot's barrier
 * BAR with every lane's bytes. */
static __device__ __forceinline__ void mmv_issue_sub(const uint8_t *p, uint32_t nb, uint32_t bar, uint32_t dst,
                                                     int lane, int nl)
{
    const uintptr_t src = (uintptr_t)p;
    const uint32_t n = p ? ((uint32_t)(src & 15) + nb + 15) & ~15u : 0u;
    const unsigned mask = nl >= 32 ? 0xffffffffu : (1u << nl) - 1u;
    const uint32_t total = __reduce_add_sync(mask, n);
    if (lane == 0)
        mmv_bar_arm(bar, total);
    __syncwarp(mask); /* the bytes are expected before any arrives */
    if (n)
        mmv_bulk_copy_f(dst, (const void *)(src & ~(uintptr_t)15), n, bar, mmv_evict_first());
}

/* TMA: each ring slot is filled by one bulk copy (cp.async.bulk, issued by
 * lane 0, completing on the slot's mbarrier) instead of a 16-byte cp.async
 * per lane and chunk: no per-lane copy instructions in the hot loop, and
 * the copy engine keeps the bytes in flight (sm_90). */
/* Blocks per SM the register allocation must allow: the one-row Q8_0
 * matvec runs three (24 warps; two left HBM idle on long matrices, 3.3
 * against 4.3 TB/s in tools/mmv-lab.cu), in 80 registers without spills.
 * The other types would spill at that budget. */
template <int T, int R> static constexpr int mmv_min_blocks()
{
    return T == MEMRA_TYPE_Q8_0 && R == 1 ? 3 : 1;
}

template <int T, int R, bool TMA> __global__ void __launch_bounds__(MMV_THREADS, mmv_min_blocks<T, R>()) mmv_q_kernel(const mmv_args a)
{
    namespace ptx = cuda::ptx;
    using S = mmv_seg<T>;
    extern __shared__ __align__(16) uint4 mmv_dyn[];
    __shared__ float tab[32];
    __shared__ __align__(8) uint64_t bars[TMA ? MMV_WARPS : 1][TMA ? MMV_RING_MAX : 1];
    if (a.ids)
        MEMRA_PDL_ENTER(); /* expert ids come from the previous kernel */
    mmv_tables(tab);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *x;
    int nr;
    int64_t yrow;
    size_t woff;
    if (!mmv_setup<R>(a, x, nr, yrow, woff))
        return;
    const int D = a.ring;
    uint4 *ring = mmv_dyn + (size_t)warp * D * S::nch;

    const int64_t nblk = a.ne0 / S::qk, nseg = (nblk + S::segb - 1) / S::segb;
    const int np = a.glu ? 2 : 1;
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t rstride = (int64_t)gridDim.x * MMV_WARPS;
    const int64_t v0 = (int64_t)blockIdx.x * MMV_WARPS + warp;
    const int64_t n_items = v0 < nv ? (nv - v0 + rstride - 1) / rstride * np * nseg : 0;

    uint64_t *bar = bars[TMA ? warp : 0];
    uint32_t phase = 0; /* TMA: the parity each slot's barrier completes next, a bit per slot */
    const uint64_t policy = TMA ? mmv_evict_first() : 0;
    if (TMA)
        mmv_bars_init(bar, D, lane);

    /* the issue side runs D-1 items ahead of the compute side */
    mmv_pos iq = {v0, 0, 0}, cq = {v0, 0, 0};
    int64_t issued = 0;
    auto issue = [&](int slot) {
        if (issued < n_items) {
            int64_t lrow;
            const int wi = mmv_weight(a, iq, &lrow);
            const mmv_item<T> it = mmv_locate<T>(a.W[wi] + woff + (size_t)lrow * a.nb1[wi], iq.s, nblk);
            if (TMA) {
                if (lane == 0)
                    mmv_bulk_load(mmv_saddr(ring + slot * S::nch), it.a0, (uint32_t)it.nchunk * 16u,
                                  mmv_saddr(&bar[slot]), policy);
            } else {
                mmv_issue_async<T>(it, lane, ring + slot * S::nch);
            }
            mmv_next(iq, np, nseg, rstride);
            issued++;
        }
        if (!TMA)
            cp_async_commit(); /* an empty group keeps the wait counts uniform */
    };
    /* weights (which no kernel writes) start streaming before the previous
     * kernel has finished; x is its output */
    for (int d = 0; d < D - 1; d++)
        issue(d);
    if (!a.ids)
        MEMRA_PDL_ENTER();
    int64_t xl;
    x = mmv_stage_x<mmv_q8x<T>::on>(a, x, nr, (float *)(mmv_dyn + (size_t)MMV_WARPS * D * S::nch), &xl);
    const float *xsum = x + (int64_t)nr * xl; /* Q8_0 with x staged: the block sums */
    float acc0[R], acc1[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc0[r] = acc1[r] = 0.0f;
    int slot = 0;
    for (int64_t k = 0; k < n_items; k++) {
        if (TMA) {
            while (!ptx::mbarrier_try_wait_parity(&bar[slot], (phase >> slot) & 1u)) {
            }
            phase ^= 1u << slot;
        } else {
            cp_async_wait_n(D - 2); /* item k has landed (this lane's part) */
            __syncwarp();           /* ... and every lane's */
        }
        issue(slot == 0 ? D - 1 : slot - 1);
        int64_t lrow;
        const int wi = mmv_weight(a, cq, &lrow);
        const uint8_t *wrow = a.W[wi] + woff + (size_t)lrow * a.nb1[wi];
        const uint8_t *sm = (const uint8_t *)(ring + slot * S::nch);
        const mmv_item<T> cur = mmv_locate<T>(wrow, cq.s, nblk);
        float part[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            part[r] = 0.0f;
        if (a.probe) {
            part[0] = (float)sm[cur.off + lane];
        } else if (mmv_q8x<T>::on && a.xsm && (cur.off & 3) == 0) {
            mmv_q8_pair<R>(mmv_saddr(sm) + cur.off, cur.nb, lane, mmv_saddr(x), xl, mmv_saddr(xsum), a.ne0 / 32,
                           (int64_t)cq.s * S::segb, nr, part);
        } else {
#pragma unroll
            for (int u = 0; u < S::u; u++) {
                const int sb = lane + 32 * u;
                if (sb < cur.nb * S::subs) {
                    const int blk = sb / S::subs, sub = sb % S::subs;
                    const uint8_t *p = sm + cur.off + blk * S::bb;
                    const int e0 = (cq.s * S::segb + blk) * S::qk + sub * 32; /* rows are < 2^31 elements */
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        if (r < nr) {
                            if (mmv_q8x<T>::on && a.xsm)
                                part[r] += mq_dot32_q8x(p, x + r * xl + mmv_xp<true>(e0), xsum[r * (a.ne0 / 32) + e0 / 32]);
                            else
                                part[r] += mq_dot32<T>(p, sub, x + r * xl + (a.xsm ? mmv_xp<mmv_q8x<T>::on>(e0) : e0), tab);
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (cq.p == 0)
                acc0[r] += part[r];
            else
                acc1[r] += part[r];
        }
        __syncwarp(); /* the slot is refilled by the next iteration's issue */
        if (cq.s == nseg - 1 && cq.p == np - 1) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float g = warp_sum(acc0[r]);
                const float u = a.glu ? warp_sum(acc1[r]) : 0.0f;
                if (lane == 0 && r < nr)
                    mmv_store(a, wi, lrow, yrow, r, g, u);
                acc0[r] = acc1[r] = 0.0f;
            }
        }
        mmv_next(cq, np, nseg, rstride);
        slot = slot == D - 1 ? 0 : slot + 1;
    }
    if (!TMA)
        cp_async_wait<0>();
}

/* The router's route (memra__router: a float matvec of one x row, no
 * expert ids, a.route_ticket set): every block takes a ticket once its
 * rows are stored, and the last one routes the logits (y[0]) with
 * route_kernel's code (route_block_token) from shared memory, read from
 * L2 after the others' stores; it leaves the ticket at zero for the next
 * launch. The ids and weights are route_kernel's bits: the same block of
 * ROUTE_THREADS, the same sums, the same picks. */
static_assert(MMV_THREADS == ROUTE_THREADS, "the router's route runs route_kernel's block");
static __device__ __forceinline__ void mmv_f_route(const mmv_args &a)
{
    extern __shared__ __align__(16) uint4 mmv_dyn[];
    __shared__ int last;
    __shared__ double red[ROUTE_THREADS / 32];
    __threadfence(); /* this thread's stores, before the block's ticket */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(a.route_ticket, 1u) == gridDim.x * gridDim.y - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const int64_t ne = a.route.n_expert;
    float *l = (float *)mmv_dyn, *p = l + ne; /* x is no longer read: its staging space */
    for (int64_t t = 0; t < a.route.n_tokens; t++) {
        for (int64_t e = threadIdx.x; e < ne; e += MMV_THREADS)
            l[e] = __ldcg(a.route.logits + t * ne + e);
        __syncthreads();
        route_block_token(a.route, t, l, p, red);
    }
    if (threadIdx.x == 0)
        atomicExch(a.route_ticket, 0u);
}

/* Rows a warp of the float matvec bulk-prefetches into L2 before its wait
 * (the first ones it takes; more would only queue ahead of the loads). */
#define MMV_F_PREFETCH_ROWS 2

/* Float weights: 16-byte loads straight from global memory when every row
 * is 16-byte aligned (VEC), else element by element. Several weights
 * (matmul_ex's STORE of float weights: a MoE router and its shared
 * expert's gate) are virtual rows back to back, each row's dot the same
 * whatever launch holds it. Without expert ids each warp's first rows are
 * prefetched into L2 before the wait for the predecessor (x): a MoE
 * router's 16-32 blocks otherwise pay a chain of round trips to HBM after
 * it (the 26B-A4B's 2816-wide rows are six 16-byte loads a lane apart). */
template <int T, int R>
__global__ void __launch_bounds__(MMV_THREADS) mmv_f_kernel(const mmv_args a, const bool vec)
{
    memra_pdl_launch(); /* cuda_common.cuh: MEMRA_PDL_ENTER, split around the prefetch */
    if (!a.ids && blockIdx.y == 0 && (threadIdx.x & 31) == 0) {
        const int64_t nrows = a.vrow0[a.nw > 1 ? a.nw : 1], step = (int64_t)gridDim.x * MMV_WARPS;
        int64_t row = (int64_t)blockIdx.x * MMV_WARPS + (threadIdx.x >> 5);
        for (int i = 0; i < MMV_F_PREFETCH_ROWS && row < nrows; i++, row += step) {
            int64_t lrow;
            const int wi = mmv_vweight(a, row, &lrow);
            memra_prefetch_l2(a.W[wi] + (size_t)lrow * a.nb1[wi], a.ne0 * (T == MEMRA_TYPE_F32 ? 4 : 2));
        }
    }
    memra_pdl_wait();
    constexpr int EPV = T == MEMRA_TYPE_F32 ? 4 : 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *x;
    int nr;
    int64_t yrow;
    size_t woff;
    if (!mmv_setup<R>(a, x, nr, yrow, woff))
        return;
    extern __shared__ __align__(16) uint4 mmv_dyn[];
    int64_t xl;
    x = mmv_stage_x<false>(a, x, nr, (float *)mmv_dyn, &xl);
    const int64_t ne0 = a.ne0, ne1 = a.vrow0[a.nw > 1 ? a.nw : 1];
    for (int64_t row = (int64_t)blockIdx.x * MMV_WARPS + warp; row < ne1; row += (int64_t)gridDim.x * MMV_WARPS) {
        int64_t lrow;
        const int wi = mmv_vweight(a, row, &lrow);
        const uint8_t *wrow = a.W[wi] + woff + (size_t)lrow * a.nb1[wi];
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
                mmv_store(a, wi, lrow, yrow, r, s, 0.0f);
        }
    }
    if (a.route_ticket)
        mmv_f_route(a);
}

/* Q8_0 one-row matvec (decode), the fast path of mmv_q_kernel<Q8_0, 1>: the
 * same items, dot (mmv_q8_pair) and sums in the same order, so the same
 * bits, without the generic kernel's per-item bookkeeping (which made it
 * ~25 % slower, tools/mmv-lab.cu). Requires x staged, NE0 a multiple of
 * 2048 (whole 64-block segments) and 16-byte aligned rows, no expert ids:
 * every segment is one 2176-byte bulk copy to a 4-byte aligned slot.
 * The slots are 128-byte aligned (2176 = 17 x 128 from a 128-aligned
 * base): with the base only 16-byte aligned the same kernel ran the vocab
 * matvec at 3.8 instead of 4.27 TB/s (tools/mmv-lab.cu). */

/* The ring's shared-memory side in 32-bit addresses: the generic pointers
 * of cuda::ptx cost an address conversion (and SR reads) per item. */
static __device__ __forceinline__ bool mmv_bar_try_wait(uint32_t bar, uint32_t parity)
{
    uint32_t ok;
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok != 0;
}

/* Waits for ring slot SLOT of a warp's ring (barriers from BAR0, 8 bytes
 * apart) to fill, and flips the slot's bit of PHASE (one bit a slot: the
 * parity its next fill completes). */
static __device__ __forceinline__ void mmv_ring_wait(uint32_t bar0, int slot, uint32_t &phase)
{
    while (!mmv_bar_try_wait(bar0 + 8 * slot, (phase >> slot) & 1u)) {
    }
    phase ^= 1u << slot;
}

/* Rows of a grouped launch's warp GW of NWT: groups of 2^GS consecutive
 * rows gw, gw + nwt, ... of the NV rows. */
static __device__ __forceinline__ int64_t mmv_group_rows(int64_t nv, int64_t gw, int64_t nwt, int gs)
{
    const int64_t g = (int64_t)1 << gs, ng = (nv + g - 1) >> gs;
    if (gw >= ng)
        return 0;
    int64_t rows = ((ng - 1 - gw) / nwt + 1) << gs;
    if ((nv & (g - 1)) && (ng - 1 - gw) % nwt == 0) /* the short last group is this warp's */
        rows -= g - (nv & (g - 1));
    return rows;
}

/* GROUPED (a.ymap = GS > 0): each warp walks groups of 2^GS consecutive
 * rows and writes each group's outputs in one store of up to 128 bytes
 * (one plain weight, no epilogue but SOFTCAP): for y in mapped host memory, where the
 * default pattern (one 4-byte store per row, rows a grid apart) crosses
 * PCIe as 248320 small writes and slowed the Qwen3.5-9B head from 258 to
 * 351 us. The launcher picks the largest group that keeps the warps' row
 * counts even: at 32 rows the busiest warps did 96 rows against 78 and
 * the head took 290 us. Each row's dot and sum are those of the default
 * pattern, so the bits are the same. */
/* SPLIT (MODE 2; rows of two 2048-wide segments, one weight row per
 * output, no GLU): the block's warps pair up, each pair taking one row per
 * round, its even warp segment 0 and its odd warp segment 1; the odd warp
 * hands its lanes' partial sums over through shared memory and the even
 * warp adds them in the default order ((0 + p0) + p1 per lane, then the
 * warp sum), so the bits are the same. The 10240 rows of attention's
 * in-projections on 3168 warps then take at most seven items per warp
 * instead of eight (the busiest warps' chain of items sets a small
 * launch's time). With GLU (any width) the pair's even warp walks a
 * virtual row's gate part, its odd warp the up part, every segment in
 * order; the odd warp hands its part's warp sum over and the even warp
 * stores the pair (each part's sum is the default's, so the same bits):
 * the E4B's 10240 GeGLU rows on 3168 warps, 4 rows (8 parts) for the
 * busiest warp where the mean is 3.2, then take 7 parts. */
#define MMV_Q8D_DEFAULT 0
#define MMV_Q8D_GROUPED 1
#define MMV_Q8D_SPLIT 2
/* SPREAD: DEFAULT's walk with the grid's warps ranked across blocks first
 * (rank = warp * gridDim.x + block), so that rows short of a full round
 * spread over every block (and SM) instead of filling the first blocks;
 * the launcher pairs it with a grid of every block that fits
 * (mmv_q8d_spread, mmv_impl.cuh). Only the warp walking a row changes, so
 * the same bits. */
#define MMV_Q8D_SPREAD 3

/* One instantiation per MODE serves every fused epilogue (mmv_store's
 * runtime branches): variants specialized per epilogue (GLU, ADD, conv;
 * 033baf5) each measured 3-8 % slower per token although each launch
 * ran less code, and so did loading a row's epilogue inputs when the row
 * starts. The modes only re-map rows to warps; DEFAULT's code is as it was. */
template <int T, int MODE, int NW = MMV_WARPS>
__global__ void __launch_bounds__(NW * 32, NW == MMV_WARPS ? 3 : 1) mmv_q8d_kernel(const mmv_args a)
{
    static_assert(T == MEMRA_TYPE_Q8_0, "the fast path is Q8_0's");
    static_assert(NW == MMV_WARPS || MODE == MMV_Q8D_DEFAULT || MODE == MMV_Q8D_SPREAD,
                  "wide blocks walk the default rows");
    constexpr bool GROUPED = MODE == MMV_Q8D_GROUPED, SPLIT = MODE == MMV_Q8D_SPLIT, SPREAD = MODE == MMV_Q8D_SPREAD;
    constexpr int SEG = MMV_Q8D_SEG;
    const int D = a.ring; /* MMV_Q8D_RING, deeper at one block an SM */
    extern __shared__ __align__(128) uint8_t mmv_q8d_dyn[];
    __shared__ __align__(8) uint64_t bars[NW][MMV_Q8D_RING_MAX];
#ifdef MEMRA_MMV_TIMELINE
    const unsigned long long tl0 = mmv_tl_now();
#endif
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* the block column's x row and output row: a batched step's small
     * matvecs run one x row a column (mmv_launch_q8d; ungrouped only), a
     * decode matvec has one column */
    const int64_t col = blockIdx.y;
    /* segments of 64 blocks, the last one short when ne0 is not a multiple
     * of 2048 (Gemma 4's 2560, 2816 and 5376, the 27B's 5120): the generic
     * kernel's items (mmv_locate), so the same dots */
    const int64_t nbr = a.ne0 / 32;
    const int nseg = (int)((nbr + 63) / 64), np = a.glu ? 2 : 1;
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t nwt = (int64_t)gridDim.x * NW, gw = (int64_t)blockIdx.x * NW + warp;
    const int SL = a.q8_slot; /* bytes between slots */
    /* GROUPED walks v = 0, 1, ... over the warp's own rows (vrow); SPLIT
     * walks its pair's rows, one segment of each */
    const int pair = warp >> 1, half = warp & 1;
    const bool gsplit = SPLIT && a.glu; /* SPLIT's GLU form: a part per warp */
    const int64_t rstride = GROUPED ? 1 : SPLIT ? (int64_t)gridDim.x * (MMV_WARPS / 2) : nwt;
    const int64_t v0 = GROUPED  ? 0
                       : SPLIT  ? (int64_t)blockIdx.x * (MMV_WARPS / 2) + pair
                       : SPREAD ? (int64_t)warp * gridDim.x + blockIdx.x
                                : gw;
    const int gs = a.ymap, gm = (1 << gs) - 1;
    const int64_t n_items = GROUPED ? mmv_group_rows(nv, gw, nwt, gs) * nseg
                            : v0 < nv ? (nv - v0 + rstride - 1) / rstride * (gsplit ? nseg : SPLIT ? 1 : np * nseg)
                                      : 0;
    __shared__ float xch[SPLIT ? MMV_WARPS * 32 : 1]; /* SPLIT: per pair, two rounds' partials */
    auto next = [&](mmv_pos &q) {
        if (gsplit) {
            if (++q.s == nseg) {
                q.s = 0;
                q.v += rstride;
            }
        } else if (SPLIT) {
            q.v += rstride;
        } else {
            mmv_next(q, np, nseg, rstride);
        }
    };
    auto vrow = [&](mmv_pos q) {
        if (GROUPED)
            q.v = (((q.v >> gs) * nwt + gw) << gs) + (q.v & gm);
        return q;
    };
    uint8_t *ring = mmv_q8d_dyn + (size_t)warp * D * SL;
    mmv_bars_init(bars[warp], D, lane);
    const uint32_t bar0 = mmv_saddr(bars[warp]), ring0 = mmv_saddr(ring);

    const uint64_t policy = mmv_evict_first();
    /* issue side: the current (row, part)'s bytes, found once per row part */
    mmv_pos iq = {v0, gsplit ? half : 0, SPLIT && !gsplit ? half : 0};
    auto row_src = [&](const mmv_pos &q) {
        int64_t lrow;
        const int wi = mmv_weight(a, vrow(q), &lrow);
        return a.W[wi] + (size_t)lrow * a.nb1[wi];
    };
    const uint8_t *src = n_items ? row_src(iq) : NULL;
    int64_t issued = 0;
    auto issue = [&](int slot) {
        if (issued == n_items)
            return;
        if (lane == 0) {
            const mmv_item<T> it = mmv_locate<T>(src, iq.s, nbr);
            mmv_bulk_load(ring0 + slot * SL, it.a0, (uint32_t)it.nchunk * 16u, bar0 + 8 * slot, policy);
        }
        if (++issued < n_items) {
            next(iq);
            if ((SPLIT && !gsplit) || iq.s == 0) /* a new row part */
                src = row_src(iq);
        }
    };
    /* LEAN: one item per warp before the wait, the rest once x is staged,
     * so that fewer of this launch's loads queue ahead of its
     * latency-bound predecessor's (issued before the staging instead, they
     * slowed it: 331.7 against 335.1 tok/s) */
    const int pre = a.lean ? 1 : D - 1;
    for (int d = 0; d < pre; d++)
        issue(d);
    /* the norm weight (no kernel writes it) into the ring's free slots,
     * asynchronously: the copies overlap the wait */
    const bool wpark = NW == MMV_WARPS && a.norm && a.norm_w && (a.ne0 & 3) == 0 && ((uintptr_t)a.norm_w & 15) == 0 &&
                       a.ne0 <= 4 * MMV_WPARK_CHUNKS * MMV_WARPS && SL == SEG && D == MMV_Q8D_RING;
    if (wpark) {
        for (int64_t c = threadIdx.x; 4 * c < a.ne0; c += MMV_THREADS)
            cp_async16(mmv_wpark_at(mmv_q8d_dyn, c), (const float4 *)a.norm_w + c);
        cp_async_commit();
    }
    MEMRA_PDL_ENTER(); /* x is the previous kernel's output */
#ifdef MEMRA_MMV_TIMELINE
    MMV_TL(a, 0, tl0);
    MMV_TL(a, 1, mmv_tl_now());
    if (threadIdx.x == 0)
        mmv_tl_seq_s = a.tl_seq;
    __syncthreads();
#endif
    cp_async_wait<0>(); /* this thread's parked chunks (the staging's barriers publish them) */
    int64_t xl;
    float *xs = (float *)(mmv_q8d_dyn + (size_t)NW * D * SL);
    const float *x;
    if constexpr (NW == MMV_WARPS)
        x = mmv_stage_x<true>(a, a.x + col * a.ldx, 1, xs, &xl, wpark ? mmv_q8d_dyn : NULL);
    else
        x = mmv_stage_x_plain<true, NW * 32>(a, a.x + col * a.ldx, xs, &xl);
#ifdef MEMRA_MMV_TIMELINE
    MMV_TL(a, 2, mmv_tl_now());
#endif
    for (int d = pre; d < D - 1; d++)
        issue(d);
    const uint32_t xa = mmv_saddr(x), sa = mmv_saddr(x + xl), rs = mmv_saddr(ring);
    mmv_pos cq = {v0, gsplit ? half : 0, SPLIT && !gsplit ? half : 0};
    /* the compute side's row start modulo 16 (rows off 16 bytes only) */
    auto row_off = [&](const mmv_pos &q) { return SL == SEG ? 0u : (uint32_t)((uintptr_t)row_src(q) & 15); };
    uint32_t coff = n_items ? row_off(cq) : 0u;
    float acc0 = 0.0f, acc1 = 0.0f, yg = 0.0f;
    int64_t round = 0; /* gsplit: rows done */
    uint32_t phase = 0;
    int slot = 0;
    for (int64_t k = 0; k < n_items; k++) {
        mmv_ring_wait(bar0, slot, phase);
        issue(slot == 0 ? D - 1 : slot - 1);
        float part = 0.0f;
        const int nb = cq.s == nseg - 1 ? (int)(nbr - (int64_t)cq.s * 64) : 64;
        mmv_q8_pair<1>(rs + slot * SL + coff, nb, lane, xa, xl, sa, nbr, (int64_t)cq.s * 64, 1, &part);
        if (cq.p == 0)
            acc0 += part;
        else
            acc1 += part;
        __syncwarp(); /* the slot is refilled by the next iteration's issue */
        if (gsplit) {
            if (cq.s == nseg - 1) {
                /* rounds alternate halves of the pair's buffer: no overwrite before the read */
                float *x2 = xch + pair * 64 + (int)(round & 1) * 32;
                const float g = warp_sum(half ? acc1 : acc0);
                if (half && lane == 0)
                    x2[0] = g;
                asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory");
                if (!half && lane == 0) {
                    int64_t lrow;
                    const int wi = mmv_weight(a, cq, &lrow);
                    mmv_store<false>(a, wi, lrow, col, 0, g, x2[0]);
                }
                acc0 = acc1 = 0.0f;
                round++;
            }
        } else if (SPLIT) {
            float *x2 = xch + pair * 64 + (int)(k & 1) * 32; /* two rounds: no overwrite before the read */
            if (half)
                x2[lane] = part;
            asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory");
            if (!half) {
                const float g = warp_sum((0.0f + part) + x2[lane]);
                if (lane == 0) {
                    int64_t lrow;
                    const int wi = mmv_weight(a, cq, &lrow);
                    mmv_store<false>(a, wi, lrow, col, 0, g, 0.0f);
                }
            }
        } else if (GROUPED && cq.s == nseg - 1) {
            /* every lane holds the same sum (xor butterfly) */
            const float g = warp_sum(acc0);
            const int j = (int)(cq.v & gm);
            if (lane == j)
                yg = a.post[0] == MEMRA_EW_SOFTCAP ? d_softcap(g, a.post_s[0]) : g;
            if (j == gm || k + 1 == n_items) {
                if (lane <= j)
                    a.y[0][vrow(cq).v - j + lane] = yg;
            }
            acc0 = 0.0f;
        } else if (!GROUPED && cq.s == nseg - 1 && cq.p == np - 1) {
            const float g = warp_sum(acc0);
            const float u = a.glu ? warp_sum(acc1) : 0.0f;
            if (lane == 0) {
                int64_t lrow;
                const int wi = mmv_weight(a, cq, &lrow);
                mmv_store<false>(a, wi, lrow, col, 0, g, u);
            }
            acc0 = acc1 = 0.0f;
        }
        next(cq);
        if (SL != SEG && ((SPLIT && !gsplit) || cq.s == 0) && k + 1 < n_items)
            coff = row_off(cq);
        slot = slot == D - 1 ? 0 : slot + 1;
    }
#ifdef MEMRA_MMV_TIMELINE
    __syncthreads();
    MMV_TL(a, 3, mmv_tl_now());
#endif
}

/* Shared memory of a quantized launch besides x: the warps' rings of D
 * items (of NCH 16-byte chunks each: mmv_seg<T>::nch, or fewer for rows
 * shorter than a segment, mmv_item_nch). */
template <int T> static constexpr size_t mmv_ring_bytes(int d, int nch = mmv_seg<T>::nch)
{
    return mq_is_float<T>::value ? 0 : (size_t)MMV_WARPS * d * nch * sizeof(uint4);
}

/* 16-byte chunks an item of a row of NE0 elements can span: its blocks,
 * one chunk more for a misaligned start and one for word reads past its
 * last block (as mmv_seg<T>::nch for a whole segment). */
template <int T> static constexpr int mmv_item_nch(int64_t ne0)
{
    using S = mmv_seg<T>;
    const int64_t nb = ne0 / S::qk < S::segb ? ne0 / S::qk : S::segb;
    return (int)((nb * S::bb + 15) / 16 + 2);
}

/* Launches on a resident grid (the blocks that fit the SMs at once, each
 * walking many rows), so x is staged once per block. Stages x in shared
 * memory when it fits (always with a.norm; the host checks mmv_x_fits).
 * Returns false when the launch could not be configured. */
template <int T> bool mmv_launch(mmv_args a, int R, unsigned gy, int sm_count, cudaStream_t s, bool vec);

/* x rows of NE0 floats, R of them, fit next to type T's ring. */
template <int T> static inline bool mmv_x_fits(int64_t ne0, int R)
{
    return mmv_ring_bytes<T>(MMV_RING_MIN) + mmv_x_bytes<T>(ne0, R) <= MMV_SMEM_MAX;
}

/* Two floats as the bits of an H pair (round to nearest): the fast
 * prefill's f16 (bf16) tiles and x. */
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

/* One float as an H (round to nearest). */
template <typename H> static __device__ __forceinline__ H to_h(float v);
template <> __device__ __forceinline__ __half to_h<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 to_h<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* Fast-prefill dequantization: rows [o0, o0+nrow) of W into OUT
 * ([nrow][ne0], f16 or bf16). */
template <int T, typename H>
void mmv_dequant(const uint8_t *W, size_t nb1, int64_t ne0, int64_t o0, int64_t nrow, H *out, int sm_count,
                 cudaStream_t s);

#define MMV_FOR_TYPES(M, ...)                                                                                          \
    M(MEMRA_TYPE_F32, __VA_ARGS__) M(MEMRA_TYPE_F16, __VA_ARGS__) M(MEMRA_TYPE_BF16, __VA_ARGS__)                      \
    M(MEMRA_TYPE_Q4_0, __VA_ARGS__) M(MEMRA_TYPE_Q4_1, __VA_ARGS__) M(MEMRA_TYPE_Q5_0, __VA_ARGS__)                    \
    M(MEMRA_TYPE_Q5_1, __VA_ARGS__) M(MEMRA_TYPE_Q8_0, __VA_ARGS__) M(MEMRA_TYPE_MXFP4, __VA_ARGS__)                   \
    M(MEMRA_TYPE_IQ4_NL, __VA_ARGS__) M(MEMRA_TYPE_Q2_K, __VA_ARGS__) M(MEMRA_TYPE_Q3_K, __VA_ARGS__)                  \
    M(MEMRA_TYPE_Q4_K, __VA_ARGS__) M(MEMRA_TYPE_Q5_K, __VA_ARGS__) M(MEMRA_TYPE_Q6_K, __VA_ARGS__)                    \
    M(MEMRA_TYPE_IQ4_XS, __VA_ARGS__)

#define MMV_EXTERN(T, _)                                                                                               \
    extern template bool mmv_launch<T>(mmv_args, int, unsigned, int, cudaStream_t, bool);                              \
    extern template void mmv_dequant<T, __half>(const uint8_t *, size_t, int64_t, int64_t, int64_t, __half *, int,     \
                                                cudaStream_t);                                                         \
    extern template void mmv_dequant<T, __nv_bfloat16>(const uint8_t *, size_t, int64_t, int64_t, int64_t,             \
                                                       __nv_bfloat16 *, int, cudaStream_t);

#endif
