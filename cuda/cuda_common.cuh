/* Shared by every .cu file of the CUDA backend. */
#ifndef MEMRA_CUDA_COMMON_CUH
#define MEMRA_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "backend.h"
}

/* cuda_vm.cu: paged KV memory (backend.h: vm_*) */
extern "C" size_t memra__cuda_vm_granularity(memra__backend_t *be);
extern "C" void *memra__cuda_vm_arena_create(memra__backend_t *be, size_t page, int64_t n_pages);
extern "C" void memra__cuda_vm_arena_free(memra__backend_t *be, void *arena);
extern "C" void *memra__cuda_vm_reserve(memra__backend_t *be, size_t bytes);
extern "C" void memra__cuda_vm_unreserve(memra__backend_t *be, void *va, size_t bytes);
extern "C" memra_status_t memra__cuda_vm_map(memra__backend_t *be, void *arena, int64_t page, void *va);
extern "C" void memra__cuda_vm_unmap(memra__backend_t *be, void *arena, void *va);

typedef struct memra__cuda_ctx {
    int device;
    int sm_count;
    cudaStream_t stream;
    cublasHandle_t cublas;
    /* Scratch shared by the ops of this engine (stream order keeps their
     * uses apart); grown on demand, see memra__cuda_ws. */
    void *ws;
    size_t ws_size;
    /* counts the moves of ws, gs_count and map_tmp (graph_epoch): a
     * recorded step holds their addresses */
    uint64_t epoch;
    /* argmax: per-block partials on the device, the answer in pinned host memory */
    void *argmax_part;
    int32_t *argmax_host;
    /* attention: per (query, head) counts of finished key splits, zero
     * between launches (cuda/ops_attn.cu); optional: NULL merges in a
     * second kernel */
    int *fa_count;
    /* the router's route (cuda/mmv.cuh: mmv_f_route): the blocks of a
     * launch finished, zero between launches; optional: NULL routes in
     * route_kernel */
    unsigned *route_ticket;
    /* the skinny GEMM's split-K: per row tile, the slices finished (zero
     * between launches; cuda/gemm_s.cu), gs_count_n of them */
    int *gs_count;
    size_t gs_count_n;
    /* the last launch was a latency-bound step (Gated DeltaNet, attention):
     * the next matvec streams less before its wait (mmv_args.lean): one
     * item per warp instead of two, 335.1 against 332.0 tok/s at depth
     * 512 in one run (the step's own loads wait less) */
    bool after_step;
    /* small uploads (a step's token ids and positions) go through this
     * page-locked buffer, so they queue without a stream synchronize;
     * up_done marks when the last one has left it */
    void *up_host;
    cudaEvent_t up_done;
    /* cuStreamWriteValue64 (driver entry point), or NULL: uploads of up to
     * CU_UP_WORDS 8-byte words are written by the stream itself, without a
     * copy (cuda_backend.cu) */
    void *write_value64;
    /* host_map may answer (MEMRA_MAP_LOGITS, default 1); the last range it
     * mapped [map_lo, map_hi) (device addresses), which matvecs write in
     * grouped stores (memra__cuda_mapped); map_tmp: device memory for the
     * matvecs that cannot (grown on demand) */
    bool map_host;
    uintptr_t map_lo, map_hi;
    void *map_tmp;
    size_t map_tmp_bytes;
    /* peer devices whose access was already tried (bit per ordinal < 64) */
    uint64_t peer_tried;
    /* MEMRA_CUDA_PROFILE=1 (cuda/profile.cu): per-op event timing, else NULL;
     * an op may describe itself in prof_detail (e.g. weight type and shape) */
    struct memra__cuda_prof *prof;
    char prof_detail[64];
    /* the side branch (cuda/side.cu; side_stream NULL: off, with
     * MEMRA_SIDE_STREAM=0): stream is main_stream or, on a branch,
     * side_stream; the events
     * at the branch's start and end; the scratch not in use (ws is the
     * current stream's); side_state 0 none, 1 on the branch, 2 ended and
     * not joined */
    cudaStream_t main_stream, side_stream;
    cudaEvent_t side_ev[2];
    void *side_ws;
    size_t side_ws_size;
    int side_state;
} memra__cuda_ctx_t;

#define MEMRA_CUDA_FA_COUNTS 4096

/* P lies in the host memory that host_map mapped last. */
static inline bool memra__cuda_mapped(const memra__cuda_ctx_t *c, const void *p)
{
    return (uintptr_t)p >= c->map_lo && (uintptr_t)p < c->map_hi;
}

static inline memra__cuda_ctx_t *memra__cuda_ctx(memra__backend_t *be)
{
    return (memra__cuda_ctx_t *)be->ctx;
}

/* Turns a CUDA error into a status and a message on the engine, then
 * returns from the calling function (never aborts, unlike ggml's CUDA_CHECK). */
#define MEMRA_CUDA_TRY(be, expr)                                                              \
    do {                                                                                      \
        cudaError_t memra_e_ = (expr);                                                        \
        if (memra_e_ != cudaSuccess)                                                          \
            return memra__fail((be) ? (be)->err : NULL, MEMRA_E_DEVICE, "%s:%d: %s: %s",     \
                               __FILE__, __LINE__, #expr, cudaGetErrorString(memra_e_));      \
    } while (0)

/* After a kernel launch: a bad configuration shows up here, not later. */
#define MEMRA_CUDA_LAUNCHED(be) MEMRA_CUDA_TRY(be, cudaGetLastError())

/* Scratch of at least BYTES (256-byte aligned), valid until the next call;
 * NULL with the engine's error set when it cannot be had. Growing waits for
 * the stream (cudaFree), so earlier ops that read the old buffer finish. */
void *memra__cuda_ws(memra__backend_t *be, size_t bytes);

/* The side branch (cuda/side.cu): init after the main stream exists
 * (false: no side stream, the slot changes nothing), destroy, the slot,
 * and settle: the branch ended and joined (before a synchronize and around
 * a recording). */
bool memra__cuda_side_init(memra__cuda_ctx_t *c);
void memra__cuda_side_destroy(memra__cuda_ctx_t *c);
memra_status_t memra__cuda_side(memra__backend_t *be, memra_side_t what);
memra_status_t memra__cuda_side_settle(memra__backend_t *be);

/* The op profiler (cuda/profile.cu). */
bool memra__cuda_prof_wanted(void);
struct memra__cuda_prof *memra__cuda_prof_create(void);
int memra__cuda_prof_begin(memra__cuda_ctx_t *c);                  /* pair index, or -1 */
void memra__cuda_prof_end(memra__cuda_ctx_t *c, int i, const char *op);
void memra__cuda_prof_flush(memra__cuda_ctx_t *c);                 /* after the stream is idle */
void memra__cuda_prof_destroy(memra__cuda_ctx_t *c);               /* prints the table */

/* Lets an op add a detail (weight type and shape, ...) to its profile key. */
#define MEMRA_CUDA_PROF_DETAIL(c, ...)                                                        \
    do {                                                                                      \
        if ((c)->prof)                                                                        \
            snprintf((c)->prof_detail, sizeof (c)->prof_detail, __VA_ARGS__);                  \
    } while (0)

/* Env knob as an integer, DEF when unset or unparsable. */
long memra__cuda_env_long(const char *name, long def);

/* Programmatic dependent launch (sm_90). Every kernel of this backend is
 * launched with memra__launch and begins with MEMRA_PDL_ENTER: it first
 * lets its successor be scheduled, then waits for the previous grid on
 * the stream to complete (its writes visible). The successor's launch and
 * block setup thus overlap this kernel's whole run, and the matvec streams
 * weights (which no kernel writes) before its wait, into the SM room its
 * predecessor leaves. Triggering first is safe: a grid launches only when
 * every block of its predecessor has started, and each wait still covers
 * the whole chain (the predecessor completes only after its own wait).
 * MEMRA_PDL=0 launches plainly (the waits return at once). */
static __device__ __forceinline__ void memra_pdl_wait(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void memra_pdl_launch(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Bulk-prefetches into L2 the 16-byte-aligned part of the N bytes at P: a
 * hint that moves no data into the block, so it may run before the PDL
 * wait (weights, or state no kernel of the step has written yet); the
 * unaligned ends are left to the loads. */
static __device__ __forceinline__ void memra_prefetch_l2(const void *p, int64_t n)
{
#if __CUDA_ARCH__ >= 900
    const uintptr_t b = ((uintptr_t)p + 15) & ~(uintptr_t)15, e = ((uintptr_t)p + n) & ~(uintptr_t)15;
    if (e > b)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(b), "r"((unsigned)(e - b)) : "memory");
#endif
}

#define MEMRA_PDL_ENTER()                                                                     \
    do {                                                                                      \
        memra_pdl_launch();                                                                   \
        memra_pdl_wait();                                                                     \
    } while (0)

bool memra__cuda_pdl(void);

/* CLUSTER > 1: blocks in clusters of that many along x (sm_90). */
template <typename... KArgs, typename... Args>
static inline cudaError_t memra__launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                                cudaStream_t s, unsigned cluster, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (memra__cuda_pdl()) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster;
        attr[n].val.clusterDim.y = 1;
        attr[n++].val.clusterDim.z = 1;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}

template <typename... KArgs, typename... Args>
static inline cudaError_t memra__launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                        Args... args)
{
    return memra__launch_cluster(kernel, grid, block, smem, s, 1, args...);
}

static inline unsigned memra__cuda_blocks(int64_t work, int64_t per_block, int64_t cap)
{
    int64_t b = (work + per_block - 1) / per_block;
    if (b < 1)
        b = 1;
    if (b > cap)
        b = cap;
    return (unsigned)b;
}

/* The op slots (cuda/ops_*.cu); semantics in lib/backend.h. */
memra_status_t memra__cuda_matmul(memra__backend_t *be, const memra_weight_t *w, const float *x, int64_t ldx,
                                  float *y, int64_t ldy, int64_t n_rows);
memra_status_t memra__cuda_matmul_ex(memra__backend_t *be, const memra_mm_args_t *a, bool *done);
memra_status_t memra__cuda_get_rows(memra__backend_t *be, const memra_weight_t *w, const int32_t *ids, int64_t n,
                                    float *y, int64_t ldy);
memra_status_t memra__cuda_norm(memra__backend_t *be, memra_norm_kind_t kind, const float *x, int64_t xs,
                                const float *w, float *y, int64_t ys, int64_t n_rows, int64_t dim, float eps);
memra_status_t memra__cuda_norm_ex(memra__backend_t *be, const memra_norm_args_t *a, int n, bool *done);
/* A norm_ex chain with its rows in shared memory (cuda/norm_chain.cu);
 * *done = false: not taken, nothing queued. */
memra_status_t memra__cuda_norm_chain_smem(memra__backend_t *be, const memra_norm_args_t *a, int n, bool *done);
memra_status_t memra__cuda_elementwise(memra__backend_t *be, const memra_ew_args_t *a);
memra_status_t memra__cuda_rope(memra__backend_t *be, const memra_rope_args_t *a);
memra_status_t memra__cuda_attention(memra__backend_t *be, const memra_attn_args_t *a);
/* Fast-mode prefill attention on tensor cores (cuda/attn_tc.cu); *done =
 * false: not taken (exact mode, decode-sized calls, other head sizes). */
memra_status_t memra__cuda_attention_tc(memra__backend_t *be, const memra_attn_args_t *a, bool *done);
memra_status_t memra__cuda_kv_store(memra__backend_t *be, const memra_kv_store_args_t *a);
memra_status_t memra__cuda_conv(memra__backend_t *be, const memra_conv_args_t *a);
memra_status_t memra__cuda_delta(memra__backend_t *be, const memra_delta_args_t *a);
memra_status_t memra__cuda_gdn(memra__backend_t *be, const memra_gdn_args_t *a, bool *done);
/* The batched slots (lib/backend.h): one launch over the items of one
 * shape that the one-item op would run on the same kernel. */
memra_status_t memra__cuda_attention_batch(memra__backend_t *be, const memra_attn_args_t *a, int32_t n, bool *done);
memra_status_t memra__cuda_kv_store_batch(memra__backend_t *be, const memra_kv_store_args_t *a, int32_t n, bool *done);
memra_status_t memra__cuda_gdn_batch(memra__backend_t *be, const memra_gdn_args_t *a, int32_t n, bool *done);
memra_status_t memra__cuda_qk_norm_rope(memra__backend_t *be, const memra_qk_args_t *a, bool *done);
memra_status_t memra__cuda_route(memra__backend_t *be, const memra_route_args_t *a);
memra_status_t memra__cuda_moe(memra__backend_t *be, const memra_moe_args_t *a);
memra_status_t memra__cuda_moe_fused(memra__backend_t *be, const memra_moe_args_t *a, bool *done);
memra_status_t memra__cuda_router(memra__backend_t *be, const memra_mm_args_t *m, const memra_route_args_t *rt,
                                  bool *done);
memra_status_t memra__cuda_argmax(memra__backend_t *be, const float *x, int64_t n, int32_t *out);

/* Grouped matvec shared by matmul and moe (cuda/ops_matmul.cu): problem p
 * computes y_p[row] = W_{ids[p]}[row] · x_{p / xdiv} for every row < ne1. */
memra_status_t memra__cuda_matvec_grouped(memra__backend_t *be, const memra_weight_t *w, const int32_t *ids,
                                          int64_t n_expert, int64_t n_problems, const float *x, int64_t ldx,
                                          int64_t xdiv, float *y, int64_t ldy);

/* Decode-sized row counts (at most this many x rows, MEMRA_MMV_MAX_ROWS,
 * default 8) run the matvec kernels even in fast mode (ops_matmul.cu). */
int64_t memra__cuda_mmv_max_rows(void);

/* Whether N_ROWS rows take the fast tier's kernels (f16 GEMMs, grouped MoE
 * GEMMs), whose rows depend on the row count: a fast engine above the
 * matvec row limit, unless the forward asks for per-row-exact rows (a
 * batched decode step: memra__rows_exact in lib/backend.h); in a batched
 * step of the fast tier (memra__rows_batch) from two rows up. */
static inline bool memra__cuda_fast_rows(const memra__backend_t *be, int64_t n_rows)
{
    if (!be->fast || memra__rows_exact())
        return false;
    return n_rows > memra__cuda_mmv_max_rows() || (memra__rows_batch() && n_rows >= 2);
}

/* Whether the MoE A (n_tokens tokens, k of n_expert experts each) takes
 * the grouped tensor-core GEMMs of fast prefill rather than the per-token
 * fused MoE matvecs of decode: the fast tier's rows, except in a batched
 * decode step of fewer slots than half the experts (2 n_tokens k <
 * n_expert; MEMRA_BATCH_MOE_DIV=D puts the line at n_expert / D). There a
 * few tokens spread over many experts (8 of 256 each: ~1.1 tokens per
 * active expert at 8 tokens) leave the GEMMs' 64-entry tiles nearly empty
 * while the matvecs stream each slot's expert at the decode rate, and give
 * each row the bits of its sequence decoded alone (H200, Qwen3.6-35B-A3B,
 * 2026-12-02: 511 vs 261 tok/s at 4 sequences, 695 vs 481 at 8, 840 vs 864
 * at 16, 923 vs 1361 at 32). From half the experts the GEMMs read each
 * routed expert once where the matvecs read it once a slot: on an H100
 * (2026-12-05, aggregate tok/s, matvecs against GEMMs) the 26B-A4B (128
 * experts, top 8) 573.5 / 509.7 at 4 sequences, 772.8 / 896.5 at 8; the
 * 35B-A3B (256) 873.7 / 641.8 at 8, 1076.4 / 1092.7 at 16.
 * MEMRA_BATCH_MOE_GEMM=0 or 1 sends every batched step to the matvecs or
 * to the GEMMs (A/B). */
static inline bool memra__cuda_moe_gemm_rows(const memra__backend_t *be, const memra_moe_args_t *a)
{
    static long knob = -2;
    if (knob == -2)
        knob = memra__cuda_env_long("MEMRA_BATCH_MOE_GEMM", -1);
    if (!memra__cuda_fast_rows(be, a->n_tokens))
        return false;
    if (!memra__rows_batch() || knob == 1)
        return true;
    static long div = -1;
    if (div < 0)
        div = memra__cuda_env_long("MEMRA_BATCH_MOE_DIV", 2);
    const int64_t n_expert = a->down->ne[2] > 0 ? a->down->ne[2] : 1;
    return knob != 0 && a->n_tokens * a->k * (div > 0 ? div : 1) >= n_expert;
}

/* The skinny tensor-core GEMM (cuda/gemm_s.cu) for a matmul or fused matmul
 * of a batched step's rows: *done = false when it does not take the case
 * (not a batched fast step, a weight type or shape it has no tiles for). */
memra_status_t memra__cuda_gemm_s(memra__backend_t *be, const memra_mm_args_t *m, bool *done);

/* OUT[r][i] = (f16) X[r*ldx + i], r < n_rows, i < ne0 (ops_matmul.cu). */
memra_status_t memra__cuda_to_f16(memra__backend_t *be, const float *x, int64_t ldx, int64_t n_rows, int64_t ne0,
                                  __half *out);

/* out[t][i] = Σ_j w[t][j]·scale[e]·y[t*k+j][i] in float64, slot order; NaN
 * for a token with an expert id out of range (ops_moe.cu). */
memra_status_t memra__cuda_moe_sum(memra__backend_t *be, const float *y, const int32_t *ids, const float *w,
                                   const float *scale, int64_t n_expert, float *out, int64_t n_tokens, int64_t k,
                                   int64_t n_embd);

/* Fast-mode tensor-core GEMMs (cuda/gemm_q.cu): which weights they take;
 * the dense Y = W·X of f16 x rows; the MoE experts of a chunk (*done =
 * false: not taken, nothing queued). */
bool memra__cuda_gq_ok(const memra_weight_t *w);
memra_status_t memra__cuda_gemm_q(memra__backend_t *be, const memra_weight_t *w, const __half *xh, int64_t ldx,
                                  int64_t n_rows, float *y, int64_t ldy);
memra_status_t memra__cuda_moe_fast(memra__backend_t *be, const memra_moe_args_t *a, int64_t n_expert, bool *done);

/* 16-byte asynchronous copies global -> shared (cp.async: they bypass
 * registers and L1), their groups and the waits on them (the matvec rings,
 * the skinny GEMM's ring). */
static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> static __device__ __forceinline__ void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Waits until at most N of this thread's groups are pending (N < 8). */
static __device__ __forceinline__ void cp_async_wait_n(int n)
{
    switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    default: cp_async_wait<6>(); break;
    }
}

#endif
