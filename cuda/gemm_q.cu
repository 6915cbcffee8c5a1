/* Fast-mode tensor-core GEMMs over quantized weights (cuda/gemm_q.cuh):
 * the dense matmul of a prefill chunk (MEMRA_FAST_GEMM=mmq) and the MoE
 * experts of a chunk, grouped by expert on the device.
 *
 * MoE (memra__cuda_moe_fast): the chunk's x rows to f16; the (token, slot)
 * entries bucketed by expert in slot order (gq_bucket_kernel, one block
 * per expert, every block counting the whole histogram so that no second
 * pass or atomics order the result); one grouped GEMM for gate and up with
 * act(g)·u in its epilogue, written as f16; one grouped GEMM for down; the
 * weighted sum over slots in float64 (ops_moe.cu's moe_sum_kernel, as the
 * exact path). Each used expert's rows are read once per 64 entries. */
#include "gemm_q.cuh"

GQ_INSTANTIATE(MEMRA_TYPE_F32, _)
GQ_INSTANTIATE(MEMRA_TYPE_F16, _)
GQ_INSTANTIATE(MEMRA_TYPE_BF16, _)
GQ_INSTANTIATE(MEMRA_TYPE_Q8_0, _)
GQ_INSTANTIATE(MEMRA_TYPE_Q4_0, _)
GQ_INSTANTIATE(MEMRA_TYPE_Q4_1, _)
GQ_INSTANTIATE(MEMRA_TYPE_Q5_0, _)
GQ_INSTANTIATE(MEMRA_TYPE_Q5_1, _)
GQ_INSTANTIATE(MEMRA_TYPE_MXFP4, _)
GQ_INSTANTIATE(MEMRA_TYPE_IQ4_NL, _)
GQ_EXTERN(MEMRA_TYPE_Q2_K, _)
GQ_EXTERN(MEMRA_TYPE_Q3_K, _)
GQ_EXTERN(MEMRA_TYPE_Q4_K, _)
GQ_EXTERN(MEMRA_TYPE_Q5_K, _)
GQ_EXTERN(MEMRA_TYPE_Q6_K, _)
GQ_EXTERN(MEMRA_TYPE_IQ4_XS, _)

GQ2_TYPES(GQ2_EXTERN)

/* Whether gq2_kernel takes the grouped GEMM over W (and W2): a format of
 * 32-element blocks with an instance, K a multiple of GQ_BK, a row's k
 * tile whole 4-byte words at 4-byte aligned addresses, and a SPARSE pass:
 * at most GQ2_SPARSE entries an expert on average (the bits are the same
 * either way). Likely why: with few entries a tile the weight loads pace
 * the GEMM and gq2's copies help; with more, its extra trip through
 * shared memory costs more than they save. memra-bench pp512 on an H200,
 * 2026-12-04 (2a06568, MEMRA_MOE_GQ2=1 against 0, twice each): the
 * 35B-A3B (16 entries an expert) 7205 / 7216 against 6939 / 6930 tok/s,
 * the 26B-A4B (32) 12133 / 12138 against 12562 / 12618. MEMRA_MOE_GQ2=1
 * takes it for every pass, 0 for none. */
#define GQ2_SPARSE 16
static bool gq2_ok(const gq_args &a, bool sparse)
{
    static long on = -2;
    if (on == -2)
        on = memra__cuda_env_long("MEMRA_MOE_GQ2", -1);
    return (on > 0 || (on < 0 && sparse)) && a.tiles && a.K % GQ_BK == 0 && a.nb1 % 4 == 0 && a.nb2 % 4 == 0 &&
           (uintptr_t)a.W % 4 == 0 && (uintptr_t)a.W2 % 4 == 0;
}

static bool gq_run(memra_type_t type, const gq_args &a, unsigned n_tiles_max, cudaStream_t s, bool sparse = false)
{
    if (gq2_ok(a, sparse)) {
#define GQ2_CASE(T)                                                                                                    \
    case T: return gq2_launch<T>(a, n_tiles_max, s);
        switch (type) {
            GQ2_TYPES(GQ2_CASE)
        default: break; /* no instance: gq_kernel */
        }
#undef GQ2_CASE
    }
    bool ok = false;
#define GQ_CASE(T) ok = gq_launch<T>(a, n_tiles_max, s)
    MQ_DISPATCH(type, GQ_CASE)
#undef GQ_CASE
    return ok;
}

/* Weights the kernel takes: whole 32-element sub-blocks per row (so every
 * x row is a multiple of 8 halves: 16-byte loads) and 2-byte aligned
 * Q8_0 blocks. */
bool memra__cuda_gq_ok(const memra_weight_t *w)
{
    if (!w || w->ne[0] % 32 || w->ne[0] > INT32_MAX)
        return false;
    switch (w->type) {
    case MEMRA_TYPE_F32: case MEMRA_TYPE_F16: case MEMRA_TYPE_BF16: case MEMRA_TYPE_Q8_0: case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1: case MEMRA_TYPE_Q5_0: case MEMRA_TYPE_Q5_1: case MEMRA_TYPE_MXFP4: case MEMRA_TYPE_IQ4_NL:
    case MEMRA_TYPE_Q2_K: case MEMRA_TYPE_Q3_K: case MEMRA_TYPE_Q4_K: case MEMRA_TYPE_Q5_K: case MEMRA_TYPE_Q6_K:
    case MEMRA_TYPE_IQ4_XS:
        break;
    default:
        return false;
    }
    return ((uintptr_t)w->data % 2) == 0 && w->nb1 % 2 == 0 && w->nb2 % 2 == 0;
}

memra_status_t memra__cuda_gemm_q(memra__backend_t *be, const memra_weight_t *w, const __half *xh, int64_t ldx,
                                  int64_t n_rows, float *y, int64_t ldy)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    gq_args a;
    memset(&a, 0, sizeof a);
    a.W = (const uint8_t *)w->data;
    a.nb1 = w->nb1;
    a.K = w->ne[0];
    a.M = w->ne[1];
    a.X = xh;
    a.ldx = ldx;
    a.xdiv = 1;
    a.n_rows = n_rows;
    a.Y = y;
    a.ldy = ldy;
    if (!gq_run(w->type, a, memra__cuda_blocks(n_rows, GQ_BN, 1u << 30), c->stream))
        return memra__fail(be->err, MEMRA_E_DEVICE, "matmul: tensor-core GEMM launch failed (type %d)", (int)w->type);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- MoE: bucket by expert, then two grouped GEMMs ------------------------- */

#define BUCKET_THREADS 256

/* Block e: the histogram of every expert (shared memory), e's offset in
 * the slot list and in the tile list, then e's entries in ascending order
 * (ballot ranks per round of 256), then e's tiles. Block 0 also writes the
 * tile count. Ids out of range join no bucket (moe_sum turns their tokens
 * into NaN). */
__global__ void __launch_bounds__(BUCKET_THREADS) gq_bucket_kernel(const int32_t *ids, int n_slots, int n_expert,
                                                                   int32_t *sorted, gq_tile *tiles, int *n_tiles)
{
    extern __shared__ int hist[];
    __shared__ int s_off, s_toff, s_warp[BUCKET_THREADS / 32];
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, e = blockIdx.x;
    for (int i = tid; i < n_expert; i += BUCKET_THREADS)
        hist[i] = 0;
    __syncthreads();
    for (int p = tid; p < n_slots; p += BUCKET_THREADS) {
        const int id = ids[p];
        if (id >= 0 && id < n_expert)
            atomicAdd(&hist[id], 1);
    }
    __syncthreads();
    if (warp == 0) {
        int off = 0, toff = 0, tall = 0;
        for (int i = lane; i < n_expert; i += 32) {
            const int t = (hist[i] + GQ_BN - 1) / GQ_BN;
            if (i < e) {
                off += hist[i];
                toff += t;
            }
            tall += t;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            off += __shfl_xor_sync(0xffffffffu, off, o);
            toff += __shfl_xor_sync(0xffffffffu, toff, o);
            tall += __shfl_xor_sync(0xffffffffu, tall, o);
        }
        if (lane == 0) {
            s_off = off;
            s_toff = toff;
            if (e == 0)
                *n_tiles = tall;
        }
    }
    __syncthreads();
    const int cnt = hist[e], off = s_off;
    if (cnt == 0)
        return;
    int base = off;
    for (int p0 = 0; p0 < n_slots; p0 += BUCKET_THREADS) {
        const int p = p0 + tid;
        const bool hit = p < n_slots && ids[p] == e;
        const unsigned bal = __ballot_sync(0xffffffffu, hit);
        if (lane == 0)
            s_warp[warp] = __popc(bal);
        __syncthreads();
        int before = 0, total = 0;
#pragma unroll
        for (int w = 0; w < BUCKET_THREADS / 32; w++) {
            before += w < warp ? s_warp[w] : 0;
            total += s_warp[w];
        }
        if (hit)
            sorted[base + before + __popc(bal & ((1u << lane) - 1u))] = p;
        __syncthreads();
        base += total;
    }
    for (int i = tid; i * GQ_BN < cnt; i += BUCKET_THREADS) {
        gq_tile t;
        t.expert = e;
        t.first = off + i * GQ_BN;
        t.count = cnt - i * GQ_BN < GQ_BN ? cnt - i * GQ_BN : GQ_BN;
        tiles[s_toff + i] = t;
    }
}

/* Chunks whose (token, slot) entries fit these bounds run in one pass. */
#define MOE_FAST_WS_CAP ((size_t)512 << 20)

memra_status_t memra__cuda_moe_fast(memra__backend_t *be, const memra_moe_args_t *a, int64_t n_expert, bool *done)
{
    *done = false;
    const memra_weight_t *wg = a->gate_up ? a->gate_up : a->gate;
    /* float32 experts keep the float32 matvecs: the fast tier never
     * computes below a weight's own precision (f16 operands shifted the
     * g4-moe fixture's routing in later layers: logits off by 1.28) */
    if (wg->type == MEMRA_TYPE_F32 || a->down->type == MEMRA_TYPE_F32 || !memra__cuda_gq_ok(wg) ||
        !memra__cuda_gq_ok(a->down) || (a->up && !memra__cuda_gq_ok(a->up)) ||
        (a->up && (a->up->type != wg->type || a->up->nb1 != wg->nb1 || a->up->nb2 != wg->nb2)) ||
        n_expert > 16384 || a->n_ff % 32 || a->n_embd % 32)
        return MEMRA_OK;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const int64_t k = a->k, n_ff = a->n_ff, n_embd = a->n_embd;
    /* per token: x in f16, k entries of h (f16) and y (float), slot list and tiles */
    const size_t per_tok = (size_t)n_embd * 2 + (size_t)k * ((size_t)n_ff * 2 + (size_t)n_embd * 4 + 4 + sizeof(gq_tile));
    const size_t fixed = ((size_t)n_expert + 1) * sizeof(gq_tile) + 4096;
    int64_t pass = (int64_t)((MOE_FAST_WS_CAP - fixed) / per_tok);
    if (pass > a->n_tokens)
        pass = a->n_tokens;
    if (pass * k > INT32_MAX / 2)
        pass = INT32_MAX / 2 / k;
    if (pass < 1)
        return MEMRA_OK;
    const int64_t np_max = pass * k;
    const int64_t tiles_max = np_max / GQ_BN + (np_max < n_expert ? np_max : n_expert) + 1;
    size_t off = 0;
    auto carve = [&](size_t bytes) {
        const size_t o = off;
        off += (bytes + 255) & ~(size_t)255;
        return o;
    };
    const size_t o_xh = carve((size_t)pass * n_embd * 2), o_hh = carve((size_t)np_max * n_ff * 2),
                 o_y = carve((size_t)np_max * n_embd * 4), o_sorted = carve((size_t)np_max * 4),
                 o_tiles = carve((size_t)tiles_max * sizeof(gq_tile)), o_nt = carve(sizeof(int));
    uint8_t *ws = (uint8_t *)memra__cuda_ws(be, off);
    if (!ws)
        return MEMRA_E_NOMEM;
    __half *xh = (__half *)(ws + o_xh), *hh = (__half *)(ws + o_hh);
    float *y = (float *)(ws + o_y);
    int32_t *sorted = (int32_t *)(ws + o_sorted);
    gq_tile *tiles = (gq_tile *)(ws + o_tiles);
    int *n_tiles = (int *)(ws + o_nt);
    const size_t hist_bytes = (size_t)n_expert * sizeof(int);
    if (hist_bytes > 48 * 1024)
        MEMRA_CUDA_TRY(be, cudaFuncSetAttribute(gq_bucket_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)hist_bytes));
    MEMRA_CUDA_PROF_DETAIL(c, "%s %lldx%lld e%lld k%lld n%lld mmq", memra_type_name(wg->type), (long long)n_embd,
                           (long long)n_ff, (long long)n_expert, (long long)k, (long long)a->n_tokens);
    for (int64_t t0 = 0; t0 < a->n_tokens; t0 += pass) {
        const int64_t nt = a->n_tokens - t0 < pass ? a->n_tokens - t0 : pass, np = nt * k;
        const int32_t *ids = a->ids + t0 * k;
        memra_status_t st = memra__cuda_to_f16(be, a->x + t0 * n_embd, n_embd, nt, n_embd, xh);
        if (st)
            return st;
        memra__launch(gq_bucket_kernel, (unsigned)n_expert, BUCKET_THREADS, hist_bytes, c->stream, ids, (int)np,
                      (int)n_expert, sorted, tiles, n_tiles);
        MEMRA_CUDA_LAUNCHED(be);
        const unsigned tmax = (unsigned)(np / GQ_BN + (np < n_expert ? np : n_expert) + 1);
        const bool sparse = np <= GQ2_SPARSE * n_expert;
        gq_args g;
        memset(&g, 0, sizeof g);
        g.W = (const uint8_t *)wg->data;
        g.W2 = a->gate_up ? g.W + (size_t)n_ff * wg->nb1 : (const uint8_t *)a->up->data;
        g.nb1 = wg->nb1;
        g.nb2 = wg->nb2;
        g.K = n_embd;
        g.M = n_ff;
        g.X = xh;
        g.ldx = n_embd;
        g.xdiv = k;
        g.slots = sorted;
        g.tiles = tiles;
        g.n_tiles = n_tiles;
        g.Yh = hh;
        g.ldy = n_ff;
        g.gelu = a->act == MEMRA_ACT_GELU;
        if (!gq_run(wg->type, g, tmax, c->stream, sparse))
            return memra__fail(be->err, MEMRA_E_DEVICE, "moe: grouped GEMM launch failed");
        MEMRA_CUDA_LAUNCHED(be);
        gq_args d;
        memset(&d, 0, sizeof d);
        d.W = (const uint8_t *)a->down->data;
        d.nb1 = a->down->nb1;
        d.nb2 = a->down->nb2;
        d.K = n_ff;
        d.M = n_embd;
        d.X = hh;
        d.ldx = n_ff;
        d.xdiv = 1;
        d.slots = sorted;
        d.tiles = tiles;
        d.n_tiles = n_tiles;
        d.Y = y;
        d.ldy = n_embd;
        if (!gq_run(a->down->type, d, tmax, c->stream, sparse))
            return memra__fail(be->err, MEMRA_E_DEVICE, "moe: grouped GEMM launch failed");
        MEMRA_CUDA_LAUNCHED(be);
        st = memra__cuda_moe_sum(be, y, ids, a->weights + t0 * k, a->expert_scale, n_expert, a->out + t0 * n_embd, nt,
                                 k, n_embd);
        if (st)
            return st;
    }
    *done = true;
    return MEMRA_OK;
}
