/* Causal / sliding-window attention with GQA (flash-decoding), and argmax.
 *
 * A block computes one (query token, head, key split): scores of a tile of
 * keys into shared memory, an online softmax over the tiles, P·V into
 * per-thread float32 accumulators. Queries with several splits are merged
 * by a second kernel. The split of a query depends only on its own key
 * range (FA_SPLIT_KEYS keys each, or a multiple of it that keeps a long
 * query at FA_SPLITS_MAX splits), never on the other queries of the call,
 * so a query's output is the same whatever the chunking; MEMRA_FA_SPLIT=N
 * instead splits every query into N parts. K and V rows of an F16, BF16
 * or Q8_0 cache are converted to float in registers as they are loaded
 * (cuda/kv_types.cuh, exact), so the arithmetic and its order are the F32
 * cache's over the same floats; the kernel is instantiated per (K, V)
 * type pair, the F32 pair being the kernel of before. */
#include <math.h>
#include <string.h>
#include <stdint.h>

#include "cuda_common.cuh"
#include "kv_types.cuh"
#include "math.cuh"

/* Threads of a block: FA_WIDE for decode and every exact-mode launch (a
 * 64-key split's scores and its P·V in one round of loads each: attention
 * at depth 512 13.2 -> 12.3 us, at depth 0 6.2 -> 4.7 us), FA_NARROW for
 * fast-mode prefill (twice the blocks per SM: the wide blocks made pp512's
 * attention 557 -> 944 us). The sums' order depends on the width, so an
 * exact engine keeps one width for decode and prefill alike (bit-identical
 * chunkings); a fast engine's prefill already differs from its decode
 * (f16 GEMMs). */
#define FA_WIDE 256
#define FA_NARROW 128
#define FA_TILE 128          /* keys per score tile */
#define FA_SPLIT_KEYS 64     /* default keys per split: decode blocks stay short */
/* Splits per (query, head), at most: beyond FA_SPLITS_MAX x FA_SPLIT_KEYS
 * keys a split takes the next multiple of FA_SPLIT_KEYS keys that keeps
 * the query within it. A decode block holds 111 registers a thread, two
 * blocks an SM: at 16384 keys the Qwen3.5-9B's 16 heads x 256 splits were
 * 15.5 waves of short blocks, each mostly its fixed cost (the wait, q,
 * the partial's write, the merge of 256 partials). MEMRA_FA_SPLITS=N
 * caps at N instead, 0 = no cap (64 keys a split at any length). Queries
 * up to 4096 keys keep 64-key splits, so their bits are as before. */
#define FA_SPLITS_MAX 64
#define FA_MAX_C4 2          /* float4 columns per thread: head_dim <= 1024 */
#define FA_WS_CAP ((size_t)256 << 20)
/* Loads in flight per round: a decode block is a chain of dependent
 * rounds (scores, then P·V), each waiting out a memory latency, so a round
 * takes many keys (the sums are the same as one key at a time). */
#define FA_QK_KEYS 8  /* keys per warp per score round (x 2 float4 columns) */
#define FA_PV_KEYS 16 /* keys per thread per P·V round */

#ifdef MEMRA_FA_TIMELINE
/* Diagnostic build (WHAT=fa tools/timeline-build.sh: this file compiled
 * with -DMEMRA_FA_TIMELINE into a copy of the library): thread 0 of each
 * block (first 1024, first query) records %globaltimer at its start, after
 * its wait, after q, the scores, P·V, the output, its split count and the
 * merge (and inside the staged merge), for the last 256 launches; one-query
 * launches are dumped at exit to $MEMRA_FA_TIMELINE (tools/fa-timeline.py). */
static __device__ unsigned long long fa_tl[256][1024][12];
static __device__ __forceinline__ unsigned long long fa_now(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define FA_TL(i)                                                                                                       \
    do {                                                                                                               \
        const int b_ = blockIdx.x + blockIdx.y * gridDim.x;                                                           \
        if (threadIdx.x == 0 && blockIdx.z == 0 && b_ < 1024)                                                          \
            fa_tl[f.tl_seq % 256][b_][i] = fa_now();                                                                   \
    } while (0)
#define FA_TLV(i, val)                                                                                                 \
    do {                                                                                                               \
        const int b_ = blockIdx.x + blockIdx.y * gridDim.x;                                                           \
        unsigned long long t_;                                                                                         \
        asm volatile("{\n\t.reg .pred p;\n\tsetp.neu.f32 p, %1, %1;\n\tmov.u64 %0, %%globaltimer;\n\t@p add.u64 %0, %0, 1;\n\t}" \
                     : "=l"(t_) : "f"(val));                                                                           \
        if (threadIdx.x == 0 && blockIdx.z == 0 && b_ < 1024)                                                          \
            fa_tl[f.tl_seq % 256][b_][i] = t_;                                                                         \
    } while (0)
#else
#define FA_TL(i) ((void)0)
#define FA_TLV(i, v) ((void)0)
#endif

struct fa_args {
    int tl_seq;          /* MEMRA_FA_TIMELINE builds: the launch's slot */
    memra_attn_args_t a;
    int64_t t0;          /* first token of this wave */
    int64_t k_rs, v_rs;  /* bytes between K (V) cache rows */
    int64_t k_hb, v_hb;  /* bytes of one KV head in a K (V) row */
    int64_t max_splits;  /* gridDim.y */
    int64_t fixed_split; /* MEMRA_FA_SPLIT, or 0 */
    int64_t split_cap;   /* FA_SPLITS_MAX or MEMRA_FA_SPLITS (0: none) */
    float *part;         /* [token of wave][head][split][hd + 2] */
    int *count;          /* [token of wave][head]: splits done (zero between launches), or NULL: merge kernel */
    int trig;            /* MEMRA_FA_TRIGGER: where the next kernel may launch: 0 at the block's start, 1 after its
                          * P·V (default), else at its exit (the merge 0.9 us shorter, tokens 0.4 % slower) */
};

/* What a block takes from its query's sequence: in fa_kernel the launch's
 * own fields of fa_args (fa_seq_of), in fa_batch_kernel its item's. Every
 * other field of fa_args is the launch's in both, read straight from the
 * kernel parameters (the batched kernel copied all of fa_args per block:
 * 172 registers against 128, or spills). */
struct fa_seq {
    const float *q, *gate;
    const void *k_cache, *v_cache;
    float *out, *part;
    int *count;
    int64_t pos0, max_splits;
    const int32_t *pos_dev; /* a replayable launch's position (memra_attn_args_t), or NULL: pos0 */
};

static __host__ __device__ __forceinline__ fa_seq fa_seq_of(const fa_args &f)
{
    return {f.a.q, f.a.gate, f.a.k_cache, f.a.v_cache, f.a.out, f.part, f.count, f.a.pos0, f.max_splits, f.a.pos_dev};
}

/* The query's first position: the device's copy where the launch has one
 * (a replay reads the step's own), else the recorded pos0. */
static __device__ __forceinline__ int64_t fa_pos0(const fa_seq &sq)
{
    return sq.pos_dev ? (int64_t)*sq.pos_dev : sq.pos0;
}

/* Keys per split of a query of LEN keys (a function of LEN alone, so a
 * query's bits do not depend on the call it is in). */
static __host__ __device__ __forceinline__ int64_t fa_chunk(int64_t len, int64_t cap)
{
    const int64_t span = FA_SPLIT_KEYS * cap;
    return cap > 0 && len > span ? FA_SPLIT_KEYS * ((len + span - 1) / span) : FA_SPLIT_KEYS;
}

static __device__ __forceinline__ void fa_range(const fa_args &f, const fa_seq &sq, int64_t t, int64_t *lo,
                                                int64_t *len, int64_t *nsplit, int64_t *chunk)
{
    const int64_t p = fa_pos0(sq) + t;
    *lo = f.a.n_swa > 0 && p - f.a.n_swa + 1 > 0 ? p - f.a.n_swa + 1 : 0;
    *len = p - *lo + 1;
    if (f.fixed_split > 0) {
        *nsplit = f.fixed_split < *len ? f.fixed_split : *len;
        *chunk = (*len + *nsplit - 1) / *nsplit;
        *nsplit = (*len + *chunk - 1) / *chunk;
    } else {
        *chunk = fa_chunk(*len, f.split_cap);
        *nsplit = (*len + *chunk - 1) / *chunk;
    }
}

#define FA_OUT_D 8 /* output elements per thread: head_dim <= 8 NT (scalar path), 4 FA_MAX_C4 NT (vector) */

/* The gate of output element D of query T, head H (0 without a gate). */
static __device__ __forceinline__ float fa_gate(const memra_attn_args_t &a, const fa_seq &sq, int64_t t, int64_t h,
                                                int d)
{
    return sq.gate ? sq.gate[t * a.gate_stride + h * a.gate_head_stride + d] : 0.0f;
}

/* An output element: V through the optional gate G (elementwise
 * MUL_SIGMOID's arithmetic, cuda/ops_norm.cu). */
static __device__ __forceinline__ float fa_out_g(const fa_seq &sq, float v, float g)
{
    return sq.gate ? (float)((double)v * d_sigmoid((double)g)) : v;
}

static __device__ __forceinline__ float fa_out(const memra_attn_args_t &a, const fa_seq &sq, int64_t t, int64_t h, int d,
                                               float v)
{
    return fa_out_g(sq, v, fa_gate(a, sq, t, h, d));
}

/* LEAD: a barrier before RED is written, for a caller that read it last
 * without one since (each barrier phase of a decode block costs about a
 * microsecond: the tile loop gives its max and its sum their own slots) */
template <int NT> static __device__ __forceinline__ float block_max(float v, float *red, bool lead = true)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lead)
        __syncthreads();
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
#pragma unroll
    for (int i = 1; i < NT / 32; i++)
        r = fmaxf(r, red[i]);
    return r;
}

template <int NT> static __device__ __forceinline__ float block_sum(float v, float *red, bool lead = true)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lead)
        __syncthreads();
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
#pragma unroll
    for (int i = 1; i < NT / 32; i++)
        r += red[i];
    return r;
}

/* Merges query T's (wave token TW) splits of head H: the max, the rescaled
 * sums, then every output element over the splits in order. The partials
 * are read from L2 (__ldcg): in the fused path other blocks wrote them. It
 * runs after a query's last split, on the critical path: up to
 * FA_MERGE_FEW splits in registers (fa_merge_few), else staged: the
 * splits' maxima and sums loaded once into shared memory (FA_MERGE_W at a
 * time), each thread keeping U splits' loads of every element it owns in
 * flight (16 with one element per thread; 2 otherwise, which keeps the
 * narrow kernel at 96 registers). */
#define FA_MERGE_W 256

template <int NT, int D, int U>
static __device__ __forceinline__ void fa_merge_rows(const float *p, int64_t st, int hd, int ns, const float *w_s,
                                                     float v[FA_OUT_D])
{
    for (int j0 = 0; j0 < ns; j0 += U) {
        float x[D][U];
#pragma unroll
        for (int i = 0; i < D; i++) {
            const int d = threadIdx.x + i * NT;
#pragma unroll
            for (int u = 0; u < U; u++)
                x[i][u] = d < hd && j0 + u < ns ? __ldcg(p + (j0 + u) * st + d) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < D; i++)
#pragma unroll
            for (int u = 0; u < U; u++)
                if (j0 + u < ns)
                    v[i] = fmaf(x[i][u], w_s[j0 + u], v[i]);
    }
}

/* fa_merge's arithmetic when a thread owns one element and there are at
 * most FA_MERGE_FEW splits (decode to depth 1024 at 64 keys a split): each
 * thread loads every split's max, sum and its element, and the gate, at
 * once, and merges in registers: one L2 round trip and no barrier. The
 * staged merge's phases (maxima, weights, elements, gated store) took
 * 1.3-2.3 us each, 6-7 us after the last split's count at depth 512
 * (a diagnostic build's %globaltimer stamps, MEMRA_FA_TIMELINE). */
#define FA_MERGE_FEW 16

static __device__ __forceinline__ void fa_merge_few(const memra_attn_args_t &a, const fa_seq &sq, const float *p,
                                                    int64_t st, int hd,
                                                    int64_t nsplit, int64_t t, int64_t h)
{
    const int d = threadIdx.x;
    float mv[FA_MERGE_FEW], lv[FA_MERGE_FEW], x[FA_MERGE_FEW];
#pragma unroll
    for (int s = 0; s < FA_MERGE_FEW; s++) {
        const bool on = s < nsplit;
        mv[s] = on ? __ldcg(p + s * st + hd) : -INFINITY;
        lv[s] = on ? __ldcg(p + s * st + hd + 1) : 0.0f;
        x[s] = on && d < hd ? __ldcg(p + s * st + d) : 0.0f;
    }
    const float g = d < hd ? fa_gate(a, sq, t, h, d) : 0.0f;
    float M = -INFINITY; /* the max does not depend on the order */
#pragma unroll
    for (int s = 0; s < FA_MERGE_FEW; s++)
        M = fmaxf(M, mv[s]);
    float L = 0.0f, v = 0.0f;
#pragma unroll
    for (int s = 0; s < FA_MERGE_FEW; s++)
        if (s < nsplit) { /* the staged merge's sums, in the same order */
            const float w = expf(mv[s] - M);
            L = fmaf(lv[s], w, L);
            v = fmaf(x[s], w, v);
        }
    if (d < hd)
        sq.out[t * a.n_head * hd + h * hd + d] = fa_out_g(sq, v / L, g);
}

template <int NT>
static __device__ void fa_merge(const fa_args &f, const fa_seq &sq, int64_t tw, int64_t h, int64_t nsplit)
{
    __shared__ float m_s[FA_MERGE_W], l_s[FA_MERGE_W], red[32];
    const memra_attn_args_t &a = f.a;
    const int hd = (int)a.head_dim;
    const int64_t t = f.t0 + tw, st = hd + 2;
    const float *p = sq.part + (tw * a.n_head + h) * sq.max_splits * st;
    if (NT >= 256 && hd <= NT && nsplit <= FA_MERGE_FEW) {
        fa_merge_few(a, sq, p, st, hd, nsplit, t, h);
        return;
    }
    float M = -INFINITY;
    for (int64_t s = threadIdx.x; s < nsplit; s += NT) {
        const float m = __ldcg(p + s * st + hd);
        M = fmaxf(M, m);
        if (s < FA_MERGE_W) { /* the first round's, kept */
            m_s[s] = m;
            l_s[s] = __ldcg(p + s * st + hd + 1);
        }
    }
    M = block_max<NT>(M, red); /* the max does not depend on the order; its barriers publish m_s, l_s */
    FA_TL(8);
    float L = 0.0f, v[FA_OUT_D];
#pragma unroll
    for (int i = 0; i < FA_OUT_D; i++)
        v[i] = 0.0f;
    for (int64_t s0 = 0; s0 < nsplit; s0 += FA_MERGE_W) {
        const int ns = (int)min((int64_t)FA_MERGE_W, nsplit - s0);
        if (s0 > 0) {
            __syncthreads(); /* the previous round's are read */
            for (int j = threadIdx.x; j < ns; j += NT) {
                m_s[j] = __ldcg(p + (s0 + j) * st + hd);
                l_s[j] = __ldcg(p + (s0 + j) * st + hd + 1);
            }
            __syncthreads();
        }
        /* m_s becomes the weights e^(m - M): each thread its own (the ones it stored) */
        for (int j = threadIdx.x; j < ns; j += NT)
            m_s[j] = expf(m_s[j] - M);
        __syncthreads();
        for (int j = 0; j < ns; j++)
            L = fmaf(l_s[j], m_s[j], L);
        FA_TL(9);
        if (hd <= NT)
            fa_merge_rows<NT, 1, 16>(p + s0 * st, st, hd, ns, m_s, v);
        else
            fa_merge_rows<NT, FA_OUT_D, 2>(p + s0 * st, st, hd, ns, m_s, v);
        FA_TLV(10, v[0]);
    }
    float *o = sq.out + t * a.n_head * hd + h * hd;
#pragma unroll
    for (int i = 0; i < FA_OUT_D; i++) {
        const int d = threadIdx.x + i * NT;
        if (d < hd)
            o[d] = fa_out(a, sq, t, h, d, v[i] / L);
    }
}

/* Block (head H, split S, wave token TW) of F: fa_kernel's whole work, and
 * fa_batch_kernel's for one item's block (the same arithmetic whichever
 * launch holds the block). */
template <bool VEC, int NT, int KT, int VT>
static __device__ __forceinline__ void fa_block(const fa_args &f, const fa_seq &sq, int64_t h, int64_t s, int64_t tw)
{
    static_assert(NT / 32 <= 16, "the tile's max and sum slots of red");
    extern __shared__ __align__(16) float fa_smem[];
    const memra_attn_args_t &a = f.a;
    const int hd = (int)a.head_dim;
    const int64_t t = f.t0 + tw;
    int64_t lo, len, nsplit, chunk;
    fa_range(f, sq, t, &lo, &len, &nsplit, &chunk);
    if (s >= nsplit)
        return;
    FA_TL(0);
    const int64_t k_begin = lo + s * chunk, k_end = min(lo + len, k_begin + chunk);
    const int64_t kvh = h / (a.n_head / a.n_kv_head);
    const char *kb = (const char *)sq.k_cache + kvh * f.k_hb, *vb = (const char *)sq.v_cache + kvh * f.v_hb;
    if (VEC) {
        /* the split's K and V rows (written tokens ago, or by the previous
         * kernel: a prefetch moves no data into the block, so it may run
         * before the wait) into L2 while the previous kernel finishes */
        for (int64_t r = threadIdx.x; r < 2 * (k_end - k_begin); r += NT)
            memra_prefetch_l2(r & 1 ? vb + (k_begin + (r >> 1)) * f.v_rs : kb + (k_begin + (r >> 1)) * f.k_rs,
                              r & 1 ? f.v_hb : f.k_hb);
    }
    if (f.trig == 0)
        memra_pdl_launch();
    memra_pdl_wait();
    FA_TL(1);
    float *q_s = fa_smem;              /* hd */
    float *sc = q_s + hd;              /* FA_TILE */
    float *red = sc + FA_TILE;         /* 32: the tile's max in [0, 16), its sum in [16, 32) */
    float *accr = red + 32;            /* reduction of the key groups: kg * hd */
    const float *q = sq.q + t * a.q_stride + h * hd;
    for (int i = threadIdx.x; i < hd; i += NT)
        q_s[i] = q[i];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nc4 = hd / 4;
    /* P·V layout: thread = (key group g, float4 column) */
    const int kg = VEC ? (nc4 >= NT ? 1 : NT / nc4) : 1;
    const int g = VEC ? (nc4 >= NT ? 0 : threadIdx.x / nc4) : 0;
    const int c4_0 = VEC ? (nc4 >= NT ? threadIdx.x : threadIdx.x % nc4) : threadIdx.x;
    const bool pv_on = g < kg;
    float4 acc[FA_MAX_C4];
    float accs[8]; /* scalar path: columns threadIdx.x + i*NT */
#pragma unroll
    for (int i = 0; i < FA_MAX_C4; i++)
        acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int i = 0; i < 8; i++)
        accs[i] = 0.f;
    float m = -INFINITY, l = 0.0f;
    __syncthreads();
    FA_TL(2);
    for (int64_t k0 = k_begin; k0 < k_end; k0 += FA_TILE) {
        const int nt = (int)min((int64_t)FA_TILE, k_end - k0);
        /* scores: a warp per key, FA_QK_KEYS keys and two of a lane's
         * columns per round, their loads in flight together; each key's
         * sum runs over the lane's columns in order */
        constexpr int NW = NT / 32, QK = FA_QK_KEYS;
        for (int kb0 = warp; kb0 < nt; kb0 += QK * NW) {
            float d[QK];
            const char *kr[QK];
#pragma unroll
            for (int j = 0; j < QK; j++) {
                d[j] = 0.0f;
                kr[j] = kb + (k0 + min(kb0 + j * NW, nt - 1)) * f.k_rs;
            }
            if (VEC) {
                for (int c = lane; c < nc4; c += 64) {
                    const bool c2 = c + 32 < nc4;
                    float4 kv[QK][2];
#pragma unroll
                    for (int j = 0; j < QK; j++) {
                        kv[j][0] = kv_load4<KT>(kr[j], c);
                        kv[j][1] = c2 ? kv_load4<KT>(kr[j], c + 32) : make_float4(0.f, 0.f, 0.f, 0.f);
                    }
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        if (u == 1 && !c2)
                            break;
                        const float4 qv = ((const float4 *)q_s)[c + 32 * u];
#pragma unroll
                        for (int j = 0; j < QK; j++) {
                            d[j] = fmaf(qv.x, kv[j][u].x, d[j]);
                            d[j] = fmaf(qv.y, kv[j][u].y, d[j]);
                            d[j] = fmaf(qv.z, kv[j][u].z, d[j]);
                            d[j] = fmaf(qv.w, kv[j][u].w, d[j]);
                        }
                    }
                }
            } else {
                for (int c = lane; c < hd; c += 32) {
                    const float qv = q_s[c];
#pragma unroll
                    for (int j = 0; j < QK; j++)
                        d[j] = fmaf(qv, kv_load1<KT>(kr[j], c), d[j]);
                }
            }
#pragma unroll
            for (int j = 0; j < QK; j++) {
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    d[j] += __shfl_xor_sync(0xffffffffu, d[j], o);
                if (lane == 0 && kb0 + j * NW < nt)
                    sc[kb0 + j * NW] = a.scale * d[j];
            }
        }
        __syncthreads();
        float tmax = -INFINITY;
        for (int kk = threadIdx.x; kk < nt; kk += NT)
            tmax = fmaxf(tmax, sc[kk]);
        const float m_new = fmaxf(m, block_max<NT>(tmax, red, false)); /* red[0, NT/32): read only before the next tile's */
        float psum = 0.0f;
        for (int kk = threadIdx.x; kk < nt; kk += NT) {
            const float p = expf(sc[kk] - m_new);
            sc[kk] = p;
            psum += p;
        }
        const float tsum = block_sum<NT>(psum, red + 16, false); /* its barrier also publishes sc */
        FA_TL(3);
        const float alpha = expf(m - m_new);
        l = l * alpha + tsum;
        m = m_new;
        if (VEC) {
            if (pv_on) {
#pragma unroll
                for (int i = 0; i < FA_MAX_C4; i++) {
                    acc[i].x *= alpha;
                    acc[i].y *= alpha;
                    acc[i].z *= alpha;
                    acc[i].w *= alpha;
                }
                /* FA_PV_KEYS keys' V rows loaded together, then accumulated
                 * in key order (the same sums as one key at a time) */
                constexpr int PV = FA_PV_KEYS;
#pragma unroll
                for (int i = 0; i < FA_MAX_C4; i++) {
                    const int c4 = c4_0 + i * NT;
                    if (c4 >= nc4)
                        continue;
                    for (int kb0 = g; kb0 < nt; kb0 += PV * kg) {
                        float4 v[PV];
#pragma unroll
                        for (int j = 0; j < PV; j++)
                            v[j] = kv_load4<VT>(vb + (k0 + min(kb0 + j * kg, nt - 1)) * f.v_rs, c4);
#pragma unroll
                        for (int j = 0; j < PV; j++) {
                            if (kb0 + j * kg < nt) {
                                const float p = sc[kb0 + j * kg];
                                acc[i].x = fmaf(p, v[j].x, acc[i].x);
                                acc[i].y = fmaf(p, v[j].y, acc[i].y);
                                acc[i].z = fmaf(p, v[j].z, acc[i].z);
                                acc[i].w = fmaf(p, v[j].w, acc[i].w);
                            }
                        }
                    }
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++)
                accs[i] *= alpha;
            for (int kk = 0; kk < nt; kk++) {
                const float p = sc[kk];
                const char *vr = vb + (k0 + kk) * f.v_rs;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const int c = threadIdx.x + i * NT;
                    if (c < hd)
                        accs[i] = fmaf(p, kv_load1<VT>(vr, c), accs[i]);
                }
            }
        }
        if (k0 + FA_TILE < k_end)
            __syncthreads(); /* sc is rewritten by the next tile (after the last, only accr is written) */
    }
    FA_TL(4);
    if (f.trig == 1)
        memra_pdl_launch();
    /* merge the key groups in a fixed order */
    if (VEC) {
        if (pv_on) {
#pragma unroll
            for (int i = 0; i < FA_MAX_C4; i++) {
                const int c4 = c4_0 + i * NT;
                if (c4 < nc4)
                    ((float4 *)(accr + g * hd))[c4] = acc[i];
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int c = threadIdx.x + i * NT;
            if (c < hd)
                accr[c] = accs[i];
        }
    }
    __syncthreads();
    const bool direct = nsplit == 1;
    float *o = direct ? sq.out + t * a.n_head * hd + h * hd
                      : sq.part + ((tw * a.n_head + h) * sq.max_splits + s) * (int64_t)(hd + 2);
#pragma unroll
    for (int i = 0; i < FA_OUT_D; i++) {
        const int d = threadIdx.x + i * NT;
        if (d >= hd)
            break;
        float v = accr[d];
        for (int gg = 1; gg < kg; gg++)
            v += accr[gg * hd + d];
        o[d] = direct ? fa_out(a, sq, t, h, d, v / l) : v;
    }
    if (!direct && threadIdx.x == 0) {
        o[hd] = m;
        o[hd + 1] = l;
    }
    FA_TL(5);
    if (direct || !sq.count)
        return;
    /* the query's last split to finish merges them all (one launch less);
     * each thread's partial writes are fenced before the count */
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int *cnt = sq.count + tw * a.n_head + h;
        last = atomicAdd(cnt, 1) == (int)nsplit - 1;
        FA_TL(6);
        if (last)
            *cnt = 0; /* every split has counted: ready for the next launch */
    }
    __syncthreads();
    if (last) {
        __threadfence();
        fa_merge<NT>(f, sq, tw, h, nsplit);
#ifdef MEMRA_FA_TIMELINE
        __syncthreads(); /* the stamp after every thread's stores */
#endif
        FA_TL(7);
    }
}

template <bool VEC, int NT, int KT, int VT> __global__ void __launch_bounds__(NT) fa_kernel(const fa_args f)
{
    fa_block<VEC, NT, KT, VT>(f, fa_seq_of(f), blockIdx.x, blockIdx.y, blockIdx.z);
}

/* The G heads' maxima (IS_MAX) or sums of V over the block, head u's in
 * RED[32 u + OFF, ...): block_max's and block_sum's arithmetic for each
 * head (the warp's xor tree, the warps' partials in order from 0), the G
 * heads behind one barrier. */
template <int NT, int G, bool IS_MAX>
static __device__ __forceinline__ void block_red_g(float (&v)[G], float *red, int off)
{
#pragma unroll
    for (int u = 0; u < G; u++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float x = __shfl_xor_sync(0xffffffffu, v[u], o);
            v[u] = IS_MAX ? fmaxf(v[u], x) : v[u] + x;
        }
        if ((threadIdx.x & 31) == 0)
            red[32 * u + off + (threadIdx.x >> 5)] = v[u];
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < G; u++) {
        float r = red[32 * u + off];
#pragma unroll
        for (int i = 1; i < NT / 32; i++)
            r = IS_MAX ? fmaxf(r, red[32 * u + off + i]) : r + red[32 * u + off + i];
        v[u] = r;
    }
}

/* Block (heads H0 .. H0 + G - 1 of one KV head, split S, wave token TW)
 * of F on the wide vector path: fa_block's work for G heads of a GQA
 * group, each K and V row loaded once for the G queries. Each head's sums
 * are fa_block's in its order (a key's score over the lane's columns, then
 * the warp's xor tree; the tile's max and sum; P·V in key order per
 * column; the key groups in order), so its bits do not depend on how many
 * heads share the block; fewer keys a round than fa_block (the same sums)
 * leave room for G accumulators. The partials are merged by
 * fa_combine_kernel (no split counters). */
#define FA_HEADS_NT FA_WIDE

template <int KT, int VT, int G>
static __device__ __forceinline__ void fa_block_heads(const fa_args &f, const fa_seq &sq, int64_t h0, int64_t s,
                                                      int64_t tw)
{
    constexpr int NT = FA_HEADS_NT, NW = NT / 32;
    constexpr int QK = FA_QK_KEYS / 2, PV = FA_PV_KEYS / 2;
    extern __shared__ __align__(16) float fa_smem[];
    const memra_attn_args_t &a = f.a;
    const int hd = (int)a.head_dim;
    const int64_t t = f.t0 + tw;
    int64_t lo, len, nsplit, chunk;
    fa_range(f, sq, t, &lo, &len, &nsplit, &chunk);
    if (s >= nsplit)
        return;
    const int64_t k_begin = lo + s * chunk, k_end = min(lo + len, k_begin + chunk);
    const int64_t kvh = h0 / (a.n_head / a.n_kv_head);
    const char *kb = (const char *)sq.k_cache + kvh * f.k_hb, *vb = (const char *)sq.v_cache + kvh * f.v_hb;
    for (int64_t r = threadIdx.x; r < 2 * (k_end - k_begin); r += NT) /* as fa_block */
        memra_prefetch_l2(r & 1 ? vb + (k_begin + (r >> 1)) * f.v_rs : kb + (k_begin + (r >> 1)) * f.k_rs,
                          r & 1 ? f.v_hb : f.k_hb);
    if (f.trig == 0)
        memra_pdl_launch();
    memra_pdl_wait();
    const int nc4 = hd / 4;
    const int kg = nc4 >= NT ? 1 : NT / nc4; /* P·V: thread = (key group g, float4 column) */
    float *q_s = fa_smem;          /* G hd */
    float *sc = q_s + G * hd;      /* G FA_TILE */
    float *red = sc + G * FA_TILE; /* 32 G: head u's tile max in [32 u, 32 u + 16), its sum after */
    float *accr = red + 32 * G;    /* the key groups' sums: G kg hd */
    const float *q = sq.q + t * a.q_stride + h0 * hd; /* the G heads' queries, adjacent */
    for (int i = threadIdx.x; i < G * hd; i += NT)
        q_s[i] = q[i];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = nc4 >= NT ? 0 : threadIdx.x / nc4;
    const int c4_0 = nc4 >= NT ? threadIdx.x : threadIdx.x % nc4;
    const bool pv_on = g < kg;
    float4 acc[G][FA_MAX_C4];
    float m[G], l[G];
#pragma unroll
    for (int u = 0; u < G; u++) {
#pragma unroll
        for (int i = 0; i < FA_MAX_C4; i++)
            acc[u][i] = make_float4(0.f, 0.f, 0.f, 0.f);
        m[u] = -INFINITY;
        l[u] = 0.0f;
    }
    __syncthreads();
    for (int64_t k0 = k_begin; k0 < k_end; k0 += FA_TILE) {
        const int nt = (int)min((int64_t)FA_TILE, k_end - k0);
        /* scores: a warp per key, QK keys and two of a lane's columns a
         * round, for the G queries */
        for (int kb0 = warp; kb0 < nt; kb0 += QK * NW) {
            float d[G][QK];
            const char *kr[QK];
#pragma unroll
            for (int j = 0; j < QK; j++) {
#pragma unroll
                for (int u = 0; u < G; u++)
                    d[u][j] = 0.0f;
                kr[j] = kb + (k0 + min(kb0 + j * NW, nt - 1)) * f.k_rs;
            }
            for (int c = lane; c < nc4; c += 64) {
                const bool c2 = c + 32 < nc4;
                float4 kv[QK][2];
#pragma unroll
                for (int j = 0; j < QK; j++) {
                    kv[j][0] = kv_load4<KT>(kr[j], c);
                    kv[j][1] = c2 ? kv_load4<KT>(kr[j], c + 32) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
#pragma unroll
                for (int w = 0; w < 2; w++) {
                    if (w == 1 && !c2)
                        break;
#pragma unroll
                    for (int u = 0; u < G; u++) {
                        const float4 qv = ((const float4 *)(q_s + u * hd))[c + 32 * w];
#pragma unroll
                        for (int j = 0; j < QK; j++) {
                            d[u][j] = fmaf(qv.x, kv[j][w].x, d[u][j]);
                            d[u][j] = fmaf(qv.y, kv[j][w].y, d[u][j]);
                            d[u][j] = fmaf(qv.z, kv[j][w].z, d[u][j]);
                            d[u][j] = fmaf(qv.w, kv[j][w].w, d[u][j]);
                        }
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < G; u++)
#pragma unroll
                for (int j = 0; j < QK; j++) {
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1)
                        d[u][j] += __shfl_xor_sync(0xffffffffu, d[u][j], o);
                    if (lane == 0 && kb0 + j * NW < nt)
                        sc[u * FA_TILE + kb0 + j * NW] = a.scale * d[u][j];
                }
        }
        __syncthreads();
        float mt[G], ps[G], alpha[G];
#pragma unroll
        for (int u = 0; u < G; u++) {
            mt[u] = -INFINITY;
            for (int kk = threadIdx.x; kk < nt; kk += NT)
                mt[u] = fmaxf(mt[u], sc[u * FA_TILE + kk]);
        }
        block_red_g<NT, G, true>(mt, red, 0); /* red's max slots: read only before the next tile's */
#pragma unroll
        for (int u = 0; u < G; u++) {
            const float m_new = fmaxf(m[u], mt[u]);
            ps[u] = 0.0f;
            for (int kk = threadIdx.x; kk < nt; kk += NT) {
                const float p = expf(sc[u * FA_TILE + kk] - m_new);
                sc[u * FA_TILE + kk] = p;
                ps[u] += p;
            }
            alpha[u] = expf(m[u] - m_new);
            m[u] = m_new;
        }
        block_red_g<NT, G, false>(ps, red, 16); /* its barrier also publishes sc */
#pragma unroll
        for (int u = 0; u < G; u++)
            l[u] = l[u] * alpha[u] + ps[u];
        if (pv_on) {
#pragma unroll
            for (int u = 0; u < G; u++) {
#pragma unroll
                for (int i = 0; i < FA_MAX_C4; i++) {
                    acc[u][i].x *= alpha[u];
                    acc[u][i].y *= alpha[u];
                    acc[u][i].z *= alpha[u];
                    acc[u][i].w *= alpha[u];
                }
            }
            /* PV keys' V rows loaded together, then accumulated in key
             * order for each query */
#pragma unroll
            for (int i = 0; i < FA_MAX_C4; i++) {
                const int c4 = c4_0 + i * NT;
                if (c4 >= nc4)
                    continue;
                for (int kb0 = g; kb0 < nt; kb0 += PV * kg) {
                    float4 v[PV];
#pragma unroll
                    for (int j = 0; j < PV; j++)
                        v[j] = kv_load4<VT>(vb + (k0 + min(kb0 + j * kg, nt - 1)) * f.v_rs, c4);
#pragma unroll
                    for (int j = 0; j < PV; j++) {
                        if (kb0 + j * kg < nt) {
#pragma unroll
                            for (int u = 0; u < G; u++) {
                                const float p = sc[u * FA_TILE + kb0 + j * kg];
                                acc[u][i].x = fmaf(p, v[j].x, acc[u][i].x);
                                acc[u][i].y = fmaf(p, v[j].y, acc[u][i].y);
                                acc[u][i].z = fmaf(p, v[j].z, acc[u][i].z);
                                acc[u][i].w = fmaf(p, v[j].w, acc[u][i].w);
                            }
                        }
                    }
                }
            }
        }
        if (k0 + FA_TILE < k_end)
            __syncthreads(); /* sc is rewritten by the next tile (after the last, only accr is written) */
    }
    if (f.trig == 1)
        memra_pdl_launch();
    /* the key groups merged in a fixed order, then each head's output or partial */
    if (pv_on) {
#pragma unroll
        for (int u = 0; u < G; u++)
#pragma unroll
            for (int i = 0; i < FA_MAX_C4; i++) {
                const int c4 = c4_0 + i * NT;
                if (c4 < nc4)
                    ((float4 *)(accr + (u * kg + g) * hd))[c4] = acc[u][i];
            }
    }
    __syncthreads();
    const bool direct = nsplit == 1;
    for (int e = threadIdx.x; e < G * hd; e += NT) {
        const int u = e / hd, d = e - u * hd;
        const int64_t h = h0 + u;
        float v = accr[u * kg * hd + d];
        for (int gg = 1; gg < kg; gg++)
            v += accr[(u * kg + gg) * hd + d];
        if (direct)
            sq.out[t * a.n_head * hd + h * hd + d] = fa_out(a, sq, t, h, d, v / l[u]);
        else
            sq.part[((tw * a.n_head + h) * sq.max_splits + s) * (int64_t)(hd + 2) + d] = v;
    }
    if (!direct && threadIdx.x == 0) {
#pragma unroll
        for (int u = 0; u < G; u++) {
            float *o = sq.part + ((tw * a.n_head + h0 + u) * sq.max_splits + s) * (int64_t)(hd + 2);
            o[hd] = m[u];
            o[hd + 1] = l[u];
        }
    }
}

/* two blocks an SM: at most 128 registers a thread, which the G
 * accumulators fit without spills */
template <int KT, int VT, int G> __global__ void __launch_bounds__(FA_HEADS_NT, 2) fa_heads_kernel(const fa_args f)
{
    fa_block_heads<KT, VT, G>(f, fa_seq_of(f), (int64_t)blockIdx.x * G, blockIdx.y, blockIdx.z);
}

template <int NT> __global__ void __launch_bounds__(NT) fa_combine_kernel(const fa_args f)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const int64_t h = blockIdx.x, tw = blockIdx.y;
    int64_t lo, len, nsplit, chunk;
    const fa_seq sq = fa_seq_of(f);
    fa_range(f, sq, f.t0 + tw, &lo, &len, &nsplit, &chunk);
    if (nsplit > 1)
        fa_merge<NT>(f, sq, tw, h, nsplit);
}

#ifdef MEMRA_FA_TIMELINE
static int fa_tl_count, fa_tl_meta[256][3];
static void fa_tl_dump(void)
{
    static unsigned long long h[256][1024][12];
    const char *path = getenv("MEMRA_FA_TIMELINE");
    FILE *fp = path ? fopen(path, "w") : NULL;
    if (!fp || cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(h, fa_tl, sizeof h) != cudaSuccess) {
        if (fp)
            fclose(fp);
        return;
    }
    const int n = fa_tl_count < 256 ? fa_tl_count : 256;
    for (int k = fa_tl_count - n; k < fa_tl_count; k++) {
        const int i = k % 256, *m = fa_tl_meta[i];
        if (m[2] != 1)
            continue;
        for (int b = 0; b < m[0] * m[1] && b < 1024; b++) {
            fprintf(fp, "%d %d %d %d", k, m[0], m[1], b);
            for (int j = 0; j < 12; j++)
                fprintf(fp, " %llu", h[i][b][j]);
            fprintf(fp, "\n");
        }
    }
    fclose(fp);
}
static int fa_tl_note(unsigned heads, unsigned splits, int64_t n_tokens)
{
    if (fa_tl_count == 0)
        atexit(fa_tl_dump);
    const int i = fa_tl_count % 256;
    fa_tl_meta[i][0] = (int)heads, fa_tl_meta[i][1] = (int)splits, fa_tl_meta[i][2] = (int)n_tokens;
    fa_tl_count++;
    return i;
}
#endif

/* The kernel for (VEC, width, K type, V type): the 4 x 5 type pairs (Q4_0
 * holds V rows only) of both widths and paths. */
template <bool VEC, int NT, int KT> static void (*fa_pick_v(int vt))(fa_args)
{
    switch (vt) {
    case KV_F16: return fa_kernel<VEC, NT, KT, KV_F16>;
    case KV_BF16: return fa_kernel<VEC, NT, KT, KV_BF16>;
    case KV_Q8_0: return fa_kernel<VEC, NT, KT, KV_Q8_0>;
    case KV_Q4_0: return fa_kernel<VEC, NT, KT, KV_Q4_0>;
    default: return fa_kernel<VEC, NT, KT, KV_F32>;
    }
}

template <bool VEC, int NT> static void (*fa_pick_k(int kt, int vt))(fa_args)
{
    switch (kt) {
    case KV_F16: return fa_pick_v<VEC, NT, KV_F16>(vt);
    case KV_BF16: return fa_pick_v<VEC, NT, KV_BF16>(vt);
    case KV_Q8_0: return fa_pick_v<VEC, NT, KV_Q8_0>(vt);
    default: return fa_pick_v<VEC, NT, KV_F32>(vt);
    }
}

static void (*fa_pick(bool vec, bool wide, int kt, int vt))(fa_args)
{
    if (wide)
        return vec ? fa_pick_k<true, FA_WIDE>(kt, vt) : fa_pick_k<false, FA_WIDE>(kt, vt);
    return vec ? fa_pick_k<true, FA_NARROW>(kt, vt) : fa_pick_k<false, FA_NARROW>(kt, vt);
}

/* The kernel of G heads a block: K and V of one type, or Q4_0 V under
 * Q8_0 or F16 K (fa_heads_pair; the other mixed pairs run one head a
 * block: fewer instantiations). */
static bool fa_heads_pair(int kt, int vt)
{
    return kt == vt || (vt == KV_Q4_0 && (kt == KV_Q8_0 || kt == KV_F16));
}

template <int G> static void (*fa_pick_heads(int kt, int vt))(fa_args)
{
    if (vt == KV_Q4_0)
        return kt == KV_Q8_0 ? fa_heads_kernel<KV_Q8_0, KV_Q4_0, G> : fa_heads_kernel<KV_F16, KV_Q4_0, G>;
    switch (kt) {
    case KV_F16: return fa_heads_kernel<KV_F16, KV_F16, G>;
    case KV_BF16: return fa_heads_kernel<KV_BF16, KV_BF16, G>;
    case KV_Q8_0: return fa_heads_kernel<KV_Q8_0, KV_Q8_0, G>;
    default: return fa_heads_kernel<KV_F32, KV_F32, G>;
    }
}

/* The tuning knobs, read once: MEMRA_FA_SPLIT (splits per query, 0 = by
 * FA_SPLIT_KEYS), MEMRA_FA_FUSE (0: merge in a second kernel, for
 * experiments), MEMRA_FA_TRIGGER (fa_args.trig), MEMRA_FA_HEADS (at most
 * this many heads of a GQA group a block: 4, 3, 2 or 1; fa_heads). */
struct fa_knobs {
    long fixed, fuse, trig, cap, heads;
};

static fa_knobs fa_knobs_get(void)
{
    static fa_knobs k = {-2, 1, 0, FA_SPLITS_MAX, 4};
    if (k.fixed == -2) {
        k.heads = memra__cuda_env_long("MEMRA_FA_HEADS", 4);
        k.cap = memra__cuda_env_long("MEMRA_FA_SPLITS", FA_SPLITS_MAX);
        k.fuse = memra__cuda_env_long("MEMRA_FA_FUSE", 1);
        k.trig = memra__cuda_env_long("MEMRA_FA_TRIGGER", 1);
        k.fixed = memra__cuda_env_long("MEMRA_FA_SPLIT", 0);
    }
    return k;
}

/* How the flash-decoding kernel runs validated A (the tensor cores having
 * declined it): the path, the block width, the shared memory, and F but
 * for tl_seq, t0, part and count. False when the kernel cannot (WHY says
 * so: a head too large, too many splits); nothing is reported, so the
 * batched op can leave such items to the one-item op, which does. */
struct fa_plan {
    bool vec;
    int nthr, kt, vt;
    size_t smem;
};

static bool fa_prepare(memra__backend_t *be, const memra_attn_args_t *a, fa_args *f, fa_plan *p, char *why,
                       size_t why_n)
{
    const int64_t hd = a->head_dim;
    p->kt = kv_code(a->k_type);
    p->vt = kv_code(a->v_type);
    const size_t k_rs = memra__attn_k_row_bytes(a), v_rs = memra__attn_v_row_bytes(a);
    p->vec = hd % 4 == 0 && kv_vec_ok(p->kt, a->k_cache, k_rs) && kv_vec_ok(p->vt, a->v_cache, v_rs);
    const int64_t hd_max = p->vec ? 4 * FA_MAX_C4 : 8; /* head_dim per thread */
    p->nthr = be->fast && !memra__rows_exact() && a->n_tokens > 1 && hd <= hd_max * FA_NARROW ? FA_NARROW : FA_WIDE;
    if (hd > hd_max * p->nthr) {
        snprintf(why, why_n, "head_dim %lld too large", (long long)hd);
        return false;
    }
    const fa_knobs k = fa_knobs_get();
    const int64_t n_keys = a->keys_max > a->pos0 + a->n_tokens ? a->keys_max : a->pos0 + a->n_tokens;
    const int64_t max_len = a->n_swa > 0 && a->n_swa < n_keys ? a->n_swa : n_keys;
    int64_t max_splits;
    if (k.fixed > 0) {
        /* every query splits into at most min(fixed, its length) parts */
        max_splits = k.fixed < max_len ? k.fixed : max_len;
    } else {
        /* every query of the call has at most this many (below 4096 keys
         * ceil(len / 64), above it at most the cap) */
        max_splits = (max_len + FA_SPLIT_KEYS - 1) / FA_SPLIT_KEYS;
        if (k.cap > 0 && max_splits > k.cap)
            max_splits = k.cap;
    }
    if (max_splits > 65535) {
        snprintf(why, why_n, "%lld key splits", (long long)max_splits);
        return false;
    }
    f->tl_seq = 0;
    f->a = *a;
    f->t0 = 0;
    f->k_rs = (int64_t)k_rs;
    f->v_rs = (int64_t)v_rs;
    f->k_hb = (int64_t)kv_head_bytes(p->kt, hd);
    f->v_hb = (int64_t)kv_head_bytes(p->vt, hd);
    f->max_splits = max_splits;
    f->fixed_split = k.fixed > 0 ? k.fixed : 0;
    f->split_cap = k.cap > 0 ? k.cap : 0;
    f->part = NULL;
    f->count = NULL;
    f->trig = (int)k.trig;
    const int kg = p->vec ? (hd / 4 >= p->nthr ? 1 : p->nthr / (int)(hd / 4)) : 1;
    p->smem = (size_t)(hd + FA_TILE + 32 + kg * hd) * sizeof(float);
    return true;
}

/* Heads a block for the one-item op (fa_block_heads' G): the first of 4, 3
 * and 2 (at most MEMRA_FA_HEADS) that divides the GQA group, on the wide
 * vector kernel with a pair of fa_pick_heads', for calls of more than
 * FA_MERGE_FEW splits; else 1. Sharing the group's K and V loads cuts the
 * blocks (and the L2 reads) of a long decode by G: at 16384 keys the
 * Qwen3.5-9B's 16 heads x 64 splits were four waves of two blocks an SM,
 * each re-reading its KV head's rows. Shorter calls keep fa_block, whose
 * last split merges in registers without a second launch (the bits are the
 * same either way). */
static int fa_heads(const memra_attn_args_t *a, const fa_plan &p, int64_t max_splits)
{
    const long cap = fa_knobs_get().heads;
    const int64_t group = a->n_head / a->n_kv_head;
    if (!p.vec || p.nthr != FA_WIDE || !fa_heads_pair(p.kt, p.vt) || max_splits <= FA_MERGE_FEW)
        return 1;
    static const int g_try[] = {4, 3, 2};
    for (int g : g_try)
        if (g <= cap && group % g == 0)
            return g;
    return 1;
}

memra_status_t memra__cuda_attention(memra__backend_t *be, const memra_attn_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_attention(be, a, &none);
    if (st || none)
        return st;
    bool done;
    st = memra__cuda_attention_tc(be, a, &done); /* fast-mode prefill: tensor cores (cuda/attn_tc.cu) */
    if (st || done)
        return st;
    fa_args f;
    fa_plan p;
    char why[64];
    if (!fa_prepare(be, a, &f, &p, why, sizeof why))
        return memra__fail(be->err, MEMRA_E_UNSUPPORTED, "attention: %s", why);
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const int64_t hd = a->head_dim, max_splits = f.max_splits;
    const int nthr = p.nthr;
#ifdef MEMRA_FA_TIMELINE
    f.tl_seq = fa_tl_note((unsigned)a->n_head, (unsigned)max_splits, a->n_tokens);
#endif
    const size_t per_token = (size_t)a->n_head * max_splits * (hd + 2) * sizeof(float);
    int64_t wave = a->n_tokens;
    if (max_splits > 1) {
        int64_t cap = (int64_t)(FA_WS_CAP / per_token);
        if (cap < 1)
            cap = 1;
        if (wave > cap)
            wave = cap;
        f.part = (float *)memra__cuda_ws(be, per_token * wave);
        if (!f.part)
            return MEMRA_E_NOMEM;
    }
    if (wave > 65535)
        wave = 65535;
    const int heads = fa_heads(a, p, max_splits);
    void (*kernel)(fa_args) = heads == 4   ? fa_pick_heads<4>(p.kt, p.vt)
                              : heads == 3 ? fa_pick_heads<3>(p.kt, p.vt)
                              : heads == 2 ? fa_pick_heads<2>(p.kt, p.vt)
                                           : fa_pick(p.vec, nthr == FA_WIDE, p.kt, p.vt);
    p.smem *= (size_t)heads; /* q, scores, reduction slots and key-group sums a head */
    if (p.smem > 48 * 1024)
        MEMRA_CUDA_TRY(be, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p.smem));
    for (int64_t t0 = 0; t0 < a->n_tokens; t0 += wave) {
        const int64_t nt = a->n_tokens - t0 < wave ? a->n_tokens - t0 : wave;
        f.t0 = t0;
        /* the splits merge themselves when the wave's counters fit */
        f.count = heads == 1 && c->fa_count && nt * a->n_head <= MEMRA_CUDA_FA_COUNTS && fa_knobs_get().fuse
                      ? c->fa_count
                      : NULL;
        const dim3 grid((unsigned)(a->n_head / heads), (unsigned)max_splits, (unsigned)nt);
        memra__launch(kernel, grid, nthr, p.smem, c->stream, f);
        MEMRA_CUDA_LAUNCHED(be);
        if (max_splits > 1 && !f.count) {
            memra__launch(nthr == FA_WIDE ? fa_combine_kernel<FA_WIDE> : fa_combine_kernel<FA_NARROW>,
                          dim3((unsigned)a->n_head, (unsigned)nt), nthr, 0, c->stream, f);
            MEMRA_CUDA_LAUNCHED(be);
        }
    }
    c->after_step = true;
    return MEMRA_OK;
}

/* ---- several sequences' decode queries in one launch --------------------------- */

/* By value (a kernel parameter: nothing to upload, so the launch queues
 * like any other): the launch's fa_args (the first item's) and per item
 * what differs (its query, cache, output, gate, position, split count and
 * partials: its one-item launch's). Item i's blocks are rows split0[i] ..
 * split0[i+1]-1 of the grid's y, its own splits: a short sequence next to
 * a long one costs no idle blocks. */
struct fa_batch {
    fa_args base;
    fa_seq it[MEMRA_MAX_BATCH];
    int32_t split0[MEMRA_MAX_BATCH + 1];
    int32_t n;
};

/* Block (head blockIdx.x, split s) of the item whose rows hold blockIdx.y:
 * the block fa_kernel runs for that query alone (wide, vectorized: the
 * decode kernel). */
template <int KT, int VT> __global__ void __launch_bounds__(FA_WIDE) fa_batch_kernel(const __grid_constant__ fa_batch b)
{
    const int32_t y = (int32_t)blockIdx.y;
    int lo = 0, hi = b.n - 1; /* the last item with split0 <= y */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (b.split0[mid] <= y)
            lo = mid;
        else
            hi = mid - 1;
    }
    const fa_seq sq = b.it[lo];
    fa_block<true, FA_WIDE, KT, VT>(b.base, sq, blockIdx.x, y - b.split0[lo], 0);
}

template <int KT> static void (*fa_batch_pick_v(int vt))(fa_batch)
{
    switch (vt) {
    case KV_F16: return fa_batch_kernel<KT, KV_F16>;
    case KV_BF16: return fa_batch_kernel<KT, KV_BF16>;
    case KV_Q8_0: return fa_batch_kernel<KT, KV_Q8_0>;
    case KV_Q4_0: return fa_batch_kernel<KT, KV_Q4_0>;
    default: return fa_batch_kernel<KT, KV_F32>;
    }
}

static void (*fa_batch_pick(int kt, int vt))(fa_batch)
{
    switch (kt) {
    case KV_F16: return fa_batch_pick_v<KV_F16>(vt);
    case KV_BF16: return fa_batch_pick_v<KV_BF16>(vt);
    case KV_Q8_0: return fa_batch_pick_v<KV_Q8_0>(vt);
    default: return fa_batch_pick_v<KV_F32>(vt);
    }
}

/* X and Y (prepared) run the same kernel with the same arguments but for
 * their fa_seq. */
static bool fa_same_shape(const fa_args &x, const fa_plan &px, const fa_args &y, const fa_plan &py)
{
    const memra_attn_args_t &a = x.a, &b = y.a;
    return px.vec == py.vec && px.nthr == py.nthr && px.kt == py.kt && px.vt == py.vt && px.smem == py.smem &&
           a.n_tokens == b.n_tokens && a.n_head == b.n_head && a.n_kv_head == b.n_kv_head &&
           a.head_dim == b.head_dim && a.q_stride == b.q_stride && a.kv_stride == b.kv_stride &&
           memcmp(&a.scale, &b.scale, sizeof a.scale) == 0 && a.n_swa == b.n_swa && !a.gate == !b.gate &&
           a.gate_stride == b.gate_stride && a.gate_head_stride == b.gate_head_stride && a.k_type == b.k_type &&
           a.v_type == b.v_type && x.k_rs == y.k_rs && x.v_rs == y.v_rs && x.k_hb == y.k_hb && x.v_hb == y.v_hb &&
           x.fixed_split == y.fixed_split && x.trig == y.trig;
}

/* Launches the M items of B (whose base, it[] and n the caller filled)
 * with their partials laid out back to back in the workspace. */
static memra_status_t fa_batch_launch(memra__backend_t *be, fa_batch &b, const fa_plan &p)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const int64_t hd = b.base.a.head_dim, n_head = b.base.a.n_head;
    size_t floats = 0;
    b.split0[0] = 0;
    for (int i = 0; i < b.n; i++) {
        b.split0[i + 1] = b.split0[i] + (int32_t)b.it[i].max_splits;
        if (b.it[i].max_splits > 1)
            floats += (size_t)(n_head * b.it[i].max_splits * (hd + 2));
    }
    float *ws = NULL;
    if (floats && !(ws = (float *)memra__cuda_ws(be, floats * sizeof(float))))
        return MEMRA_E_NOMEM;
    for (int i = 0; i < b.n; i++) {
        const bool split = b.it[i].max_splits > 1;
        b.it[i].part = split ? ws : NULL;
        b.it[i].count = c->fa_count + i * n_head; /* a query's counters: n_head of them */
        ws += split ? n_head * b.it[i].max_splits * (hd + 2) : 0;
    }
#ifdef MEMRA_FA_TIMELINE
    b.base.tl_seq = fa_tl_note((unsigned)n_head, (unsigned)b.split0[b.n], 1);
#endif
    void (*kernel)(fa_batch) = fa_batch_pick(p.kt, p.vt);
    if (p.smem > 48 * 1024)
        MEMRA_CUDA_TRY(be, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p.smem));
    memra__launch(kernel, dim3((unsigned)n_head, (unsigned)b.split0[b.n]), FA_WIDE, p.smem, c->stream, b);
    MEMRA_CUDA_LAUNCHED(be);
    c->after_step = true;
    return MEMRA_OK;
}

/* The one-query items that the one-item op would run on the wide,
 * vectorized flash-decoding kernel, of the first such item's shape, in as
 * few launches as the split counters (MEMRA_CUDA_FA_COUNTS), the grid
 * (65535 rows of splits) and the partials' workspace cap (FA_WS_CAP)
 * allow; the rest is left to the one-item op. */
memra_status_t memra__cuda_attention_batch(memra__backend_t *be, const memra_attn_args_t *a, int32_t n, bool *done)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    /* the one-item op would take a one-query fast call to the tensor
     * cores only when MEMRA_MMV_MAX_ROWS is 0; without the fused merge it
     * merges in a second kernel: both stay one-item */
    if ((be->fast && memra__cuda_mmv_max_rows() < 1) || !c->fa_count || !fa_knobs_get().fuse)
        return MEMRA_OK;
    fa_batch b = {}; /* every byte defined: the whole struct is the kernel parameter */
    fa_plan p0;
    int idx[MEMRA_MAX_BATCH], m = 0, n_ok = 0;
    bool ok[MEMRA_MAX_BATCH];
    fa_args f[MEMRA_MAX_BATCH];
    fa_plan pl[MEMRA_MAX_BATCH];
    const fa_args *f0 = NULL;
    for (int32_t i = 0; i < n && i < MEMRA_MAX_BATCH; i++) {
        char why[64];
        ok[i] = a[i].n_tokens == 1 && fa_prepare(be, &a[i], &f[i], &pl[i], why, sizeof why) && pl[i].vec &&
                pl[i].nthr == FA_WIDE && (!f0 || fa_same_shape(*f0, p0, f[i], pl[i]));
        if (ok[i] && !f0) {
            f0 = &f[i];
            p0 = pl[i];
        }
        n_ok += ok[i];
    }
    if (n_ok < 2)
        return MEMRA_OK; /* one query: the one-item op launches the same blocks */
    const int64_t n_head = f0->a.n_head, per_split = n_head * (f0->a.head_dim + 2);
    const int max_items = (int)(MEMRA_CUDA_FA_COUNTS / n_head < MEMRA_MAX_BATCH ? MEMRA_CUDA_FA_COUNTS / n_head
                                                                                : MEMRA_MAX_BATCH);
    if (max_items < 1)
        return MEMRA_OK; /* more heads than counters: the one-item op merges in a second kernel */
    b.base = *f0;
    b.n = 0;
    int64_t splits = 0, floats = 0;
    for (int32_t i = 0; i < n && i < MEMRA_MAX_BATCH; i++) {
        if (!ok[i])
            continue;
        const int64_t ms = f[i].max_splits, fl = ms > 1 ? ms * per_split : 0;
        if (b.n > 0 && (b.n == max_items || splits + ms > 65535 || (size_t)(floats + fl) * sizeof(float) > FA_WS_CAP)) {
            memra_status_t st = fa_batch_launch(be, b, p0);
            if (st)
                return st;
            for (int j = 0; j < m; j++)
                done[idx[j]] = true;
            b.n = m = 0;
            splits = floats = 0;
        }
        b.it[b.n++] = fa_seq_of(f[i]); /* part and count: fa_batch_launch */
        idx[m++] = i;
        splits += ms;
        floats += fl;
    }
    memra_status_t st = fa_batch_launch(be, b, p0);
    if (st)
        return st;
    for (int j = 0; j < m; j++)
        done[idx[j]] = true;
    return MEMRA_OK;
}

/* ---- argmax ------------------------------------------------------------------ */

#define AM_BLOCKS 64
#define AM_THREADS 512

struct am_pair {
    float v;
    int32_t i;
};


static __device__ __forceinline__ void am_block(float &bv, int32_t &bi, am_pair *red)
{
    d_warp_best(bv, bi);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = {bv, bi};
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (d_better(red[w].v, red[w].i, bv, bi)) {
                bv = red[w].v;
                bi = red[w].i;
            }
    }
}

__global__ void argmax_part_kernel(const float *x, int64_t n, am_pair *part)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    __shared__ am_pair red[AM_THREADS / 32];
    float bv = -INFINITY;
    int32_t bi = -1;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        if (!isnan(v) && d_better(v, (int32_t)i, bv, bi)) {
            bv = v;
            bi = (int32_t)i;
        }
    }
    am_block(bv, bi, red);
    if (threadIdx.x == 0)
        part[blockIdx.x] = {bv, bi};
}

__global__ void argmax_final_kernel(const am_pair *part, int n_part, int32_t *out)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    __shared__ am_pair red[32];
    float bv = -INFINITY;
    int32_t bi = -1;
    for (int i = threadIdx.x; i < n_part; i += blockDim.x)
        if (d_better(part[i].v, part[i].i, bv, bi)) {
            bv = part[i].v;
            bi = part[i].i;
        }
    am_block(bv, bi, red);
    if (threadIdx.x == 0)
        *out = bi < 0 ? 0 : bi;
}

memra_status_t memra__cuda_argmax(memra__backend_t *be, const float *x, int64_t n, int32_t *out)
{
    if (!x || !out || n <= 0 || n > INT32_MAX)
        return memra__fail(be->err, MEMRA_E_INVALID, "argmax: bad input");
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const unsigned blocks = memra__cuda_blocks(n, AM_THREADS * 4, AM_BLOCKS);
    am_pair *part = (am_pair *)c->argmax_part;
    int32_t *res = (int32_t *)(part + AM_BLOCKS);
    memra__launch(argmax_part_kernel, blocks, AM_THREADS, 0, c->stream, x, n, part);
    MEMRA_CUDA_LAUNCHED(be);
    memra__launch(argmax_final_kernel, 1, 64, 0, c->stream, part, (int)blocks, res);
    MEMRA_CUDA_LAUNCHED(be);
    MEMRA_CUDA_TRY(be, cudaMemcpyAsync(c->argmax_host, res, sizeof(int32_t), cudaMemcpyDeviceToHost, c->stream));
    MEMRA_CUDA_TRY(be, cudaStreamSynchronize(c->stream));
    *out = *c->argmax_host;
    return MEMRA_OK;
}
