/* The backend interface: everything a forward pass needs from a device.
 *
 * The arch forwards (lib/arch_*.c) are written once against this vtable;
 * lib/cpu/ implements it as the float32 reference and cuda/ as the fast
 * path. Forwards never include a CUDA header and cuda/ never knows about
 * architectures.
 *
 * Memory: every pointer passed to an op is a device pointer obtained from
 * `alloc` of the same backend (for the CPU backend: host memory). Ops are
 * queued in order on the engine's stream; host-visible results exist only
 * after `download` + `synchronize`. Activations are float32; weights stay in
 * their stored GGUF type. Row-major: a "row" is the fastest dimension.
 * Strides are in elements (floats) unless named *_bytes.
 */
#ifndef MEMRA_BACKEND_H
#define MEMRA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "memra/gguf.h"
#include "memra/model.h" /* MEMRA_MAX_BATCH */

#define MEMRA_BACKEND_API_VERSION 1

/* A weight on a device: ne0 elements per row (the dot dimension), ne1 rows,
 * ne2 matrices (experts). Rows are nb1 bytes apart, matrices nb2. */
typedef struct memra_weight {
    const void *data;
    memra_type_t type;
    int64_t ne[4];
    size_t nb1, nb2;
} memra_weight_t;

/* Elementwise ops: y[r*ys + c] = f(a[r*as + c], b[r*bs + c], s). Rows of
 * `cols` elements; a stride of 0 for b broadcasts one row to every row.
 * y may be a or b with the same strides (in place): each output element
 * depends only on the inputs at its own index. Ops that do not read b (or a,
 * for FILL) accept NULL there. CPU: each element in float64 from the float
 * inputs, rounded once; GELU is the exact tanh form of model-spec §3.3 (not
 * ggml's f16 table), softplus the overflow-safe log(1+e^x). */
typedef enum memra_ew_op {
    MEMRA_EW_COPY,      /* y = a */
    MEMRA_EW_ADD,       /* y = a + b */
    MEMRA_EW_MUL,       /* y = a * b */
    MEMRA_EW_SCALE,     /* y = a * s */
    MEMRA_EW_ADD_SCALED,/* y = a + b * s */
    MEMRA_EW_SILU,      /* y = a * sigmoid(a) */
    MEMRA_EW_GELU,      /* y = tanh-approx gelu(a) */
    MEMRA_EW_SIGMOID,   /* y = sigmoid(a) */
    MEMRA_EW_SWIGLU,    /* y = silu(a) * b */
    MEMRA_EW_GEGLU,     /* y = gelu(a) * b */
    MEMRA_EW_MUL_SIGMOID,/* y = a * sigmoid(b) */
    MEMRA_EW_SOFTCAP,   /* y = s * tanh(a / s) */
    MEMRA_EW_SOFTPLUS_MUL, /* y = softplus(a + b) * c[col], c = aux (per column) */
    MEMRA_EW_FILL,      /* y = s */
} memra_ew_op_t;

typedef struct memra_ew_args {
    memra_ew_op_t op;
    float *y;
    const float *a, *b;
    const float *aux;          /* per-column vector (SOFTPLUS_MUL), else NULL */
    int64_t rows, cols;
    int64_t ys, as, bs;        /* row strides in elements */
    float s;
} memra_ew_args_t;

typedef enum memra_norm_kind {
    MEMRA_NORM_RMS,            /* x / sqrt(mean(x^2) + eps) [* w] */
    MEMRA_NORM_L2,             /* x / max(||x||, eps) [* w] */
} memra_norm_kind_t;

typedef enum memra_rope_mode {
    MEMRA_ROPE_NORM,           /* adjacent pairs (llama) */
    MEMRA_ROPE_NEOX,           /* (i, i + n_rot/2) (qwen3, gemma4, qwen35 text IMROPE) */
} memra_rope_mode_t;

typedef struct memra_rope_args {
    float *x;                  /* in place */
    int64_t n_tokens, n_heads, head_dim;
    int64_t head_stride, token_stride;
    int64_t n_rot;             /* rotated dims (even, <= head_dim); the rest is left as is */
    const int32_t *pos;        /* device: position of each token */
    float base;
    const float *freq_factors; /* device, n_rot/2 entries, or NULL */
    memra_rope_mode_t mode;
} memra_rope_args_t;
/* CPU: ggml's float32 recipe bit for bit (θ_0 = p, θ_{i+1} = θ_i·powf(base,
 * -2/n_rot), cosf/sinf(θ_i / ff_i)), not a float64 angle: model-spec §3.1. */

/* Per-head RMS norm, then rope, of up to three head sets (q, k and, in
 * gemma4, v, which is only normed) of the same tokens: defined as, for each
 * part, norm(RMS, every src head row, norm_w, eps) into the dst head rows,
 * then, unless the part is no_rope, rope(dst) with the shared rope fields
 * (memra__qk_norm_rope in lib/qk_norm_rope.c runs that sequence when a
 * backend has no qk_norm_rope or declines). Head h of token t is at
 * src + t*src_token_stride + h*src_head_stride (dst likewise); dst heads
 * must not overlap src or another part's. Parts may share a src. With
 * stores, the sequence ends in memra__kv_store_batch(store, n_store): this
 * step's K and V rows into the cache (a store may read a part's dst, or
 * rows no part writes: qwen35's V). A backend's fused step must give the
 * bits of the sequence on the same backend. */
#define MEMRA_QK_MAX_PARTS 3
#define MEMRA_QK_MAX_STORES 2

struct memra_kv_store_args;

typedef struct memra_qk_part {
    const float *src;
    int64_t src_head_stride, src_token_stride;
    float *dst;
    int64_t dst_head_stride, dst_token_stride;
    int64_t n_heads;
    const float *norm_w;       /* head_dim floats, or NULL */
    bool no_rope;              /* norm only (gemma4's v) */
} memra_qk_part_t;

typedef struct memra_qk_args {
    memra_qk_part_t part[MEMRA_QK_MAX_PARTS];
    int n_parts;
    float eps;
    memra_rope_args_t rope;    /* x, n_heads, head_stride, token_stride: unused (the parts') */
    const struct memra_kv_store_args *store; /* (optional) n_store items */
    int n_store;
} memra_qk_args_t;

/* RMS norm of rows with an epilogue (gemma4's sandwich post-norms, whose
 * output is added to the residual stream): defined as the sequence
 *   add == NULL: y = norm(RMS, x rows, w, eps)
 *   else:        tmp = norm(RMS, x rows, w, eps); y = ADD(add, tmp)
 *   then, when scale != 1: y = SCALE(y, scale) in place
 * (memra__norm_ex in lib/norm_ex.c runs it when a backend has no norm_ex or
 * declines). x and tmp rows are xs apart (tmp may be x: in place), y rows
 * ys, add rows adds; y may be add with ys == adds (the elementwise op's
 * in-place rule) but must not overlap x or tmp otherwise. A backend's fused
 * step must give the bits of the sequence on the same backend
 * (memra_check_kernels compares them exactly). */
typedef struct memra_norm_args {
    const float *x;
    int64_t xs;
    const float *w;            /* dim floats, or NULL */
    float eps;
    const float *add;          /* optional */
    int64_t adds;
    float scale;               /* 1: none */
    float *y;
    int64_t ys;
    int64_t rows, dim;
    float *tmp;                /* scratch of the sequence (with add) */
} memra_norm_args_t;

/* KV cache storage: a cache row is one token's K (or V) of one layer,
 * n_kv_head*head_dim elements of the cache's type (memra__kv_type_ok:
 * F32, F16, BF16 or Q8_0, and Q4_0 for V rows; ggml's block_q8_0 and
 * block_q4_0 layouts, 32 elements a block, which then never straddles a
 * head: head_dim % 32 == 0), rows a stride in bytes apart. V: whether the
 * type holds V rows (K rows keep 8 bits or more: 4-bit keys would move
 * every score). */
bool memra__kv_type_ok(memra_type_t type, bool v);
/* Whether TYPE stores 32-element blocks (Q8_0, Q4_0: head_dim % 32 == 0). */
bool memra__kv_type_blocks(memra_type_t type);

/* Causal attention of n_tokens queries at positions pos0 .. pos0+n-1 over
 * cached keys/values 0 .. pos0+n-1 of one sequence. q: [n][n_head*head_dim]
 * rows with stride q_stride; k/v cache rows: [pos][n_kv_head*head_dim] of
 * k_type / v_type; out: [n][n_head*head_dim]. GQA: query head h reads kv
 * head h / (n_head/n_kv_head). n_swa > 0 limits each query at p to keys
 * with p - pos_k < n_swa. */
typedef struct memra_attn_args {
    const float *q;
    const void *k_cache, *v_cache;
    float *out;
    int64_t n_tokens, pos0;
    int64_t n_head, n_kv_head, head_dim;
    int64_t q_stride;
    int64_t kv_stride;         /* F32 rows given no row bytes: floats between cached rows (>= n_kv_head*head_dim) */
    float scale;
    int64_t n_swa;
    const float *gate;         /* (optional) out = attention ⊙ sigmoid(gate) */
    int64_t gate_stride, gate_head_stride;
    memra_type_t k_type, v_type; /* cache storage (0 = F32) */
    size_t k_row_bytes, v_row_bytes; /* bytes between cached rows (0: kv_stride floats, F32 only) */
    /* (optional) replays (graph_begin): pos_dev is a device copy of pos0,
     * which a launch reads instead of the pos0 it was recorded with, and
     * keys_max (>= pos0 + n_tokens; 0: that) bounds the keys of any
     * query the recorded launch will be replayed for. A backend that
     * never replays may ignore both: they never change the result. */
    const int32_t *pos_dev;
    int64_t keys_max;
} memra_attn_args_t;
/* out rows are n_head*head_dim apart and must not overlap q or the cache. A
 * query's output depends only on its position and the cache, never on
 * n_tokens (CPU: bit-identical prefill and decode). With gate, element d of
 * query t, head h is the elementwise MUL_SIGMOID of the attention output
 * and gate[t*gate_stride + h*gate_head_stride + d] (qwen35's output gate),
 * the bits of that elementwise op after the plain attention. A cache of
 * another type is defined as the F32 attention over its rows dequantized
 * (exactly: every F16/BF16/Q8_0 element is a float), so a backend gives
 * the same bits as it would on an F32 cache holding those floats. */

/* Rows written into a KV cache: dst row r (dst + r*dst_row_bytes) = the
 * cols floats of src row r (src + r*src_stride) converted to TYPE: F32
 * copied, F16/BF16 rounded to nearest even, Q8_0 as ggml's
 * quantize_row_q8_0_ref (per block of 32: d = max|x|/127, stored as F16;
 * q = roundf(x * (1/d)), half away from zero). Every backend gives the
 * same bits (memra__quantize_row's). cols must be whole blocks of TYPE. */
typedef struct memra_kv_store_args {
    const float *src;
    int64_t src_stride;        /* floats between src rows (>= cols) */
    void *dst;
    size_t dst_row_bytes;      /* >= memra__row_bytes(type, cols) */
    memra_type_t type;
    int64_t rows, cols;
    /* (optional) replays (graph_begin): dst is row POS's address; a launch
     * writes (*pos_dev - pos) rows further on, so a recording replayed at
     * a later position stores there. In a direct call *pos_dev == pos. */
    const int32_t *pos_dev;
    int64_t pos;
} memra_kv_store_args_t;

/* Depthwise causal conv over channels (qwen35 Gated DeltaNet), with SiLU.
 * x: [n][C] (row stride x_stride); state: [C][K-1] oldest first, updated;
 * w: [C][K] float32, w[c][K-1] multiplies the newest input; out: [n][C]. */
typedef struct memra_conv_args {
    const float *x;
    int64_t x_stride;
    float *state;
    const float *w;
    float *out;
    int64_t n_tokens, channels, kernel;
} memra_conv_args_t;
/* Output t reads [state | x_0 .. x_{n-1}] at t .. t+K-1; afterwards state is
 * the last K-1 entries of that sequence, so n tokens in one call equal n
 * one-token calls (bit for bit on CPU). out rows are `channels` apart and
 * must not overlap x or state; kernel 1 needs no state. */

/* Gated delta rule recurrence (model-spec §5.4), token by token.
 * q, k: [n][n_k*d] (already L2-normed; q NOT yet scaled), v: [n][n_v*d],
 * g: [n][n_v] (log decay, <= 0), beta: [n][n_v] (sigmoid applied),
 * state: per value head a d x d block, element (i key, m value) at
 * head*d*d + m*d + i (llama.cpp's transposed layout); out: [n][n_v*d].
 * Value head j uses key head j % n_k. Row strides in elements. */
typedef struct memra_delta_args {
    const float *q, *k, *v, *g, *beta;
    int64_t qk_stride, v_stride, gb_stride;
    float *state;
    float *out;
    int64_t n_tokens, n_k, n_v, d;
    float scale;               /* applied to q: 1/sqrt(d) */
} memra_delta_args_t;
/* out rows are n_v*d apart. Per token: S = e^g·S; u = Sᵀk; δ = β(v−u);
 * S += kδᵀ; o = Sᵀ(q·scale). The state is float32 between tokens, so a batch
 * equals one-token calls (bit for bit on CPU). */

/* One Gated DeltaNet step (qwen35): defined as the sequence (memra__gdn in
 * lib/gdn_ex.c runs it when a backend has no gdn slot or declines)
 *   with conv.w: conv(conv) first, the causal conv + SiLU of the raw
 *   projections into conv.out, where delta.q, .k and .v then point;
 *   q, k heads of delta.q / delta.k (raw) gathered into qk_tmp ([n][2·n_k·d])
 *   and L2-normed there (norm L2, eps l2_eps);
 *   o_tmp = delta(those q, k; delta.v, .g, .beta, .state) (delta.out unused);
 *   o_tmp = norm(RMS, rows of d, norm_w, norm_eps) in place;
 *   y = SWIGLU(z, o_tmp): rmsnorm(o_j)·norm_w ⊙ silu(z_j).
 * y rows are n_v·d apart, z rows z_stride apart. A backend's fused gdn must
 * give the bits of that sequence on the same backend (memra_check_kernels
 * compares them exactly). */
typedef struct memra_gdn_args {
    memra_conv_args_t conv;    /* optional (w NULL: delta reads q, k, v as they are) */
    memra_delta_args_t delta;
    float l2_eps;
    const float *norm_w;       /* d floats */
    float norm_eps;
    const float *z;
    int64_t z_stride;
    float *y;
    float *qk_tmp, *o_tmp;     /* device scratch of the sequence */
} memra_gdn_args_t;

/* MoE routing: probs = softmax(logits[t]); top-k by prob (ties: lower id);
 * w = probs[sel] (divided by max(sum, 6.103515625e-5) when norm). */
typedef struct memra_route_args {
    const float *logits;       /* [n][n_expert] */
    int32_t *ids;              /* out [n][k] */
    float *weights;            /* out [n][k] */
    int64_t n_tokens, n_expert, k;
    bool norm;
} memra_route_args_t;
/* k <= n_expert. CPU: probs rounded to float before the top-k (ties are
 * compared on those floats); NaN logits are MEMRA_E_RANGE. */

typedef enum memra_act {
    MEMRA_ACT_SILU,
    MEMRA_ACT_GELU,
} memra_act_t;

/* A shared expert that every token runs beside the routed ones
 * (qwen35moe): one 2-D expert of n_ff rows, separate gate and up, the
 * routed experts' act, weighted per token by sigmoid(logit[t]). Taken by
 * memra__moe only (the moe slot rejects it). ids_tmp, w_tmp and out_tmp
 * are device scratch for the unfused sequence. */
typedef struct memra_moe_shared {
    const memra_weight_t *gate, *up, *down;
    int64_t n_ff;
    const float *logit;        /* [n] */
    int32_t *ids_tmp;          /* [n] */
    float *w_tmp;              /* [n] */
    float *out_tmp;            /* [n][n_embd] */
} memra_moe_shared_t;

/* out[t] = sum_j w[t][j] * scale[e] * down_e(act(gate_e x) * up_e x),
 * e = ids[t][j]. gate_up (fused, gate rows first) or separate gate and up. */
typedef struct memra_moe_args {
    const float *x;            /* [n][n_embd] */
    const int32_t *ids;        /* [n][k] */
    const float *weights;      /* [n][k] */
    const memra_weight_t *gate, *up, *gate_up, *down;
    const float *expert_scale; /* [n_expert] or NULL */
    float *out;                /* [n][n_embd], overwritten */
    int64_t n_tokens, k, n_embd, n_ff;
    memra_act_t act;
    const memra_moe_shared_t *shared; /* memra__moe only; NULL: none */
    /* memra__moe only: ACCUMULATE adds the sum (the shared expert's
     * included) to out's rows, out_stride floats apart (0: n_embd),
     * instead of writing it; ACC_TMP [n][n_embd] is the sequence's scratch
     * for the sum. */
    bool accumulate;
    int64_t out_stride;
    float *acc_tmp;
} memra_moe_args_t;
/* n_expert is down->ne[2]; ids must be in [0, n_expert) (CPU: MEMRA_E_RANGE).
 * CPU: exactly matmul(gate), matmul(up), elementwise SWIGLU/GEGLU,
 * matmul(down), then the float64 sum over j = 0..k-1 rounded once.
 * With a shared expert (memra__moe, lib/moe_ex.c) the op is defined as the
 * sequence of the other slots:
 *   moe(the routed experts) into out;
 *   route(logit, one expert, top 1, no norm) into ids_tmp (all 0), w_tmp;
 *   w_tmp = elementwise SIGMOID(logit);
 *   moe(x, ids_tmp, w_tmp, the shared gate/up/down, n_ff, act) into out_tmp;
 *   out = elementwise ADD(out, out_tmp).
 * With accumulate, that sequence writes acc_tmp instead of out, then
 *   out = elementwise ADD(out, acc_tmp) (out's rows out_stride apart).
 * A backend's fused moe must give the bits of that sequence on the same
 * backend (memra_check_kernels: moe.fused.* compare them exactly). */

/* Fused matmuls: up to MEMRA_MM_MAX_W weights of one width ne0 read the
 * same x rows, with an optional RMS norm of x before and an epilogue after.
 * Defined as the unfused sequence of the other slots (memra__matmul_ex in
 * lib/matmul_ex.c runs it when a backend has no matmul_ex or declines):
 *   xin   = norm ? norm(RMS, x rows, norm_w, eps) into x_tmp : x
 *   STORE y[i] = matmul(w[i], xin)                        every i < n_w
 *   ADD   tmp[0] = matmul(w[0], xin); y[0] = y[0] + tmp[0]  (n_w 1)
 *   GLU   tmp[j] = matmul(w[j], xin), j < 2; y[0] = SWIGLU/GEGLU(tmp[0], tmp[1])  (n_w 2)
 * and, with STORE, y[i] = elementwise post[i] of y[i] in place (COPY: none;
 * SIGMOID; SOFTPLUS_MUL with b = post_b[i] broadcast, aux = post_aux[i];
 * GEGLU with b = post_b[i], rows post_bs[i] apart: gemma4's per-layer
 * gate gelu(W·x) ⊙ its per-layer input row; SOFTCAP with s = post_s[i]:
 * gemma4's head).
 * With conv_w (STORE, post[0] COPY): tmp[0] = matmul(w[0], xin), then
 * y[0] = conv(tmp[0] rows; conv_state, conv_w, kernel conv_k): the causal
 * conv + SiLU of memra_conv_args_t over w[0]'s ne1 channels (y[0] rows
 * ne1 apart).
 * With pre (gemma4's post-norm feeding the next projection's input), the
 * sequence starts with norm_ex(*pre), whose y rows are x (pre->y == x,
 * pre->ys == ldx, n_rows and ne0 its rows and dim); pre->tmp is its
 * scratch (what it holds after a fused op is not the sequence's).
 * A backend's fused path must give the bits of that sequence on the same
 * backend (memra_check_kernels compares them exactly). x_tmp (n_rows x
 * ne0) and tmp (n_rows x ne1) are device scratch for the sequence; y rows
 * (ldy[i] apart) must not overlap x. */
#define MEMRA_MM_MAX_W 4

typedef enum memra_mm_epi {
    MEMRA_MM_STORE,
    MEMRA_MM_ADD,
    MEMRA_MM_GLU,
} memra_mm_epi_t;

typedef struct memra_mm_args {
    const float *x;
    int64_t ldx, n_rows;
    bool norm;
    const float *norm_w;       /* may be NULL (plain RMS) */
    float eps;
    int n_w;
    const memra_weight_t *w[MEMRA_MM_MAX_W];
    float *y[MEMRA_MM_MAX_W];
    int64_t ldy[MEMRA_MM_MAX_W];
    memra_mm_epi_t epi;
    memra_act_t act;           /* GLU */
    memra_ew_op_t post[MEMRA_MM_MAX_W];
    const float *post_b[MEMRA_MM_MAX_W], *post_aux[MEMRA_MM_MAX_W];
    int64_t post_bs[MEMRA_MM_MAX_W]; /* post_b's row stride (0: one row for every row) */
    float post_s[MEMRA_MM_MAX_W];    /* SOFTCAP's s (nonzero) */
    const float *conv_w;       /* [ne1][conv_k] */
    float *conv_state;         /* [ne1][conv_k - 1] */
    int64_t conv_k;
    float *x_tmp, *tmp[2];
    const memra_norm_args_t *pre; /* (optional) */
} memra_mm_args_t;

typedef struct memra__backend memra__backend_t;

/* A side branch of a forward's ops (memra__side). BEGIN: the ops after it
 * form a branch that starts once every op issued before it is done. END:
 * the ops after it belong to the main sequence again and may run beside
 * the branch. JOIN: the ops after it wait for the branch. The results are
 * those of the ops in the order issued as long as the main ops between END
 * and JOIN neither read what the branch writes nor write what it reads or
 * writes. A BEGIN after an END without JOIN joins first. */
typedef enum memra_side {
    MEMRA_SIDE_BEGIN,
    MEMRA_SIDE_END,
    MEMRA_SIDE_JOIN,
} memra_side_t;

/* One slot per op; "(optional)" slots may be NULL. */
typedef struct memra__backend_i {
    int api_version;
    const char *name;
    /* Device pointers are host pointers (CPU backend): weights are used in
     * place from the file mapping instead of being copied. */
    bool host_memory;

    /* memory */
    void *(*alloc)(memra__backend_t *be, size_t nbytes);            /* NULL on failure */
    void (*free)(memra__backend_t *be, void *p);
    memra_status_t (*upload)(memra__backend_t *be, void *dst, const void *src, size_t n);
    memra_status_t (*download)(memra__backend_t *be, void *dst, const void *src, size_t n);
    memra_status_t (*copy)(memra__backend_t *be, void *dst, const void *src, size_t n);
    memra_status_t (*synchronize)(memra__backend_t *be);
    /* (optional) an address under which ops may write the N bytes of host
     * memory at HOST directly (CUDA: page-locked memory mapped into the
     * device), or NULL when there is none. Writes land by the next
     * synchronize. The forward then has the head write a decode step's
     * logits there instead of downloading them. */
    void *(*host_map)(memra__backend_t *be, void *host, size_t n);
    /* (optional, all or none) paged KV memory (lib/kv_pool.c): an arena of
     * N_PAGES physical pages of PAGE bytes (a multiple of vm_granularity),
     * each page mapped at page-aligned addresses of ranges reserved with
     * vm_reserve; one page may be mapped at several addresses (shared
     * copy-on-write by the pool). vm_map and vm_unmap take one page;
     * vm_unmap of an address nothing maps is a no-op. Ops see a mapped
     * range as ordinary memory. */
    size_t (*vm_granularity)(memra__backend_t *be);
    void *(*vm_arena_create)(memra__backend_t *be, size_t page, int64_t n_pages); /* NULL on failure */
    void (*vm_arena_free)(memra__backend_t *be, void *arena);
    void *(*vm_reserve)(memra__backend_t *be, size_t bytes); /* NULL on failure */
    void (*vm_unreserve)(memra__backend_t *be, void *va, size_t bytes);
    memra_status_t (*vm_map)(memra__backend_t *be, void *arena, int64_t page, void *va);
    void (*vm_unmap)(memra__backend_t *be, void *arena, void *va);

    /* y[r][0..ne1) = W · x[r], r < n_rows. x rows ldx apart, y rows ldy.
     * Matrix 0 of a 3-D W; y must not overlap x. y[r][o] depends only on
     * W row o and x[r], never on n_rows (CPU: (float) of the sequential
     * float64 dot, = memra__dot_row), so any prefill chunking gives the
     * same bits. */
    memra_status_t (*matmul)(memra__backend_t *be, const memra_weight_t *w, const float *x,
                             int64_t ldx, float *y, int64_t ldy, int64_t n_rows);
    /* (optional) the fused matmuls of memra_mm_args_t (validated by
     * memra__matmul_ex); *done = false declines the case, which then runs
     * unfused. */
    memra_status_t (*matmul_ex)(memra__backend_t *be, const memra_mm_args_t *a, bool *done);
    /* y[r] = dequantized row ids[r] of W (ids on the device, in [0, ne1);
     * the CPU backend checks: MEMRA_E_RANGE). */
    memra_status_t (*get_rows)(memra__backend_t *be, const memra_weight_t *w, const int32_t *ids,
                               int64_t n, float *y, int64_t ldy);
    /* Rows of `dim`: y = norm(x) [* w], x rows xs apart, y rows ys. w may be NULL.
     * y may be x (in place, xs == ys). */
    memra_status_t (*norm)(memra__backend_t *be, memra_norm_kind_t kind, const float *x, int64_t xs,
                           const float *w, float *y, int64_t ys, int64_t n_rows, int64_t dim, float eps);
    /* (optional) the fused step of memra_norm_args_t (validated by
     * memra__norm_ex); *done = false declines the case. */
    /* (optional) N steps (1..MEMRA_NORM_CHAIN_MAX) of memra_norm_args_t
     * in order over the same rows (validated by memra__norm_chain: each
     * row of a step touches only that row of every buffer the chain
     * shares, so one block a row may run all steps); *done = false
     * declines the case. */
    memra_status_t (*norm_ex)(memra__backend_t *be, const memra_norm_args_t *a, int n, bool *done);
    memra_status_t (*elementwise)(memra__backend_t *be, const memra_ew_args_t *a);
    memra_status_t (*rope)(memra__backend_t *be, const memra_rope_args_t *a);
    /* (optional) the fused step of memra_qk_args_t (validated by
     * memra__qk_norm_rope); *done = false declines the case. */
    memra_status_t (*qk_norm_rope)(memra__backend_t *be, const memra_qk_args_t *a, bool *done);
    memra_status_t (*attention)(memra__backend_t *be, const memra_attn_args_t *a);
    memra_status_t (*kv_store)(memra__backend_t *be, const memra_kv_store_args_t *a);
    memra_status_t (*conv)(memra__backend_t *be, const memra_conv_args_t *a);
    memra_status_t (*delta)(memra__backend_t *be, const memra_delta_args_t *a);
    /* (optional) the fused step of memra_gdn_args_t (validated by
     * memra__gdn); *done = false declines the case. */
    memra_status_t (*gdn)(memra__backend_t *be, const memra_gdn_args_t *a, bool *done);
    /* (optional) Batched forms of attention, kv_store and gdn: the N items
     * of A (N <= MEMRA_MAX_BATCH) are one op each, of N sequences of a
     * step, already validated (memra__attention_batch, memra__kv_store_batch,
     * memra__gdn_batch) and independent: no item writes memory that another
     * reads or writes, so they may run in any order or at once. The backend
     * queues the items it runs together (CUDA: one launch over the one-token
     * items of one shape) and sets done[i] for each (done[] is all false on
     * entry); the wrapper runs the others through the one-item slot. Each
     * item's results must be the bits of its one-item call on the same
     * backend (memra_check_kernels: attention.batch.*, kv_store.batch.*,
     * gdn.batch.* compare them exactly). On an error nothing is defined. */
    memra_status_t (*attention_batch)(memra__backend_t *be, const memra_attn_args_t *a, int32_t n, bool *done);
    memra_status_t (*kv_store_batch)(memra__backend_t *be, const memra_kv_store_args_t *a, int32_t n, bool *done);
    memra_status_t (*gdn_batch)(memra__backend_t *be, const memra_gdn_args_t *a, int32_t n, bool *done);
    memra_status_t (*route)(memra__backend_t *be, const memra_route_args_t *a);
    memra_status_t (*moe)(memra__backend_t *be, const memra_moe_args_t *a);
    /* (optional) moe in fewer launches, the shared expert included (CUDA
     * decode: gate/up + act in one launch, down + slot sum + the shared
     * expert's add in another), validated by memra__moe; *done = false
     * declines the case, which then runs as the sequence. */
    memra_status_t (*moe_fused)(memra__backend_t *be, const memra_moe_args_t *a, bool *done);
    /* (optional) a MoE router's matmul_ex and the route of its first
     * weight's outputs as one step (CUDA decode: the matvec's last block
     * routes), validated by memra__router; *done = false declines the
     * case, which then runs as the sequence (matmul_ex, then route). The
     * logits, ids and weights must be the sequence's bits. */
    memra_status_t (*router)(memra__backend_t *be, const memra_mm_args_t *m, const memra_route_args_t *rt,
                             bool *done);
    /* (optional) index of the max of x[0..n) into *out (host). Ties: the
     * lowest index; NaN entries never win (all NaN: 0). */
    memra_status_t (*argmax)(memra__backend_t *be, const float *x, int64_t n, int32_t *out);

    /* Pipeline transport between stages (lib/pipeline.c). Host-memory
     * backends need none of these: a boundary is a memcpy there.
     * (optional) copy_peer queues on SRC_BE's stream a copy of N bytes from
     * SRC (SRC_BE's device) to DST (DST_BE's device). Without it the driver
     * bounces through host memory. */
    memra_status_t (*copy_peer)(memra__backend_t *src_be, void *dst, memra__backend_t *dst_be, const void *src,
                                size_t n);
    /* (optional, all four or none) events. event_record marks the end of the
     * work queued so far on BE; event_wait makes work queued later on BE wait
     * for EV, which may have been recorded on another backend's device; a
     * wait on an event never recorded returns at once (CUDA's rule). The
     * driver records before it signals the other stage's thread. Without
     * them the driver synchronizes a stage before handing a boundary slot
     * over. Stage workers call a backend from their own threads (one thread
     * at a time per engine): a device backend must make its device current
     * in every slot, not only in alloc. */
    void *(*event_create)(memra__backend_t *be);                    /* NULL on failure */
    void (*event_destroy)(memra__backend_t *be, void *ev);
    memra_status_t (*event_record)(memra__backend_t *be, void *ev);
    memra_status_t (*event_wait)(memra__backend_t *be, void *ev);

    /* (optional, all five or none) Recorded steps (CUDA graphs): after
     * graph_begin the ops of the calling thread are recorded, not run,
     * until graph_end, which gives a replayable recording in *graph (an
     * existing one is updated in place when it can be) or fails (nothing
     * ran; *graph is left as it was). graph_launch queues a replay: the
     * same launches with the same arguments, so everything that changes
     * between replays must be read from device memory (pos_dev above).
     * graph_epoch changes whenever memory the backend gives ops internally
     * (scratch) moves: a recording made in another epoch is stale. */
    memra_status_t (*graph_begin)(memra__backend_t *be);
    memra_status_t (*graph_end)(memra__backend_t *be, void **graph);
    memra_status_t (*graph_launch)(memra__backend_t *be, void *graph);
    void (*graph_free)(memra__backend_t *be, void *graph);
    uint64_t (*graph_epoch)(memra__backend_t *be);

    /* (optional) the points of a side branch (memra_side_t, memra__side);
     * NULL: the ops run in the order issued. */
    memra_status_t (*side)(memra__backend_t *be, memra_side_t what);
} memra__backend_i;

struct memra__backend {
    const memra__backend_i *iface;
    void *ctx;
    memra__err_t *err; /* the owning engine's error slot */
    /* The engine's effective "fast" setting (memra__engine_fast): the CUDA
     * backend may then run prefill matmuls with f16/bf16 inputs. */
    bool fast;
};

/* WHAT of a side branch on BE (memra_side_t): the backend's side slot, or
 * nothing (the ops then run in the order issued). */
static inline memra_status_t memra__side(memra__backend_t *be, memra_side_t what)
{
    return be->iface->side ? be->iface->side(be, what) : MEMRA_OK;
}

/* How the rows of the running step may be computed (a thread-local set by
 * the forward, lib/forward.c): ANY, the engine's own choice by row count;
 * EXACT, a step of several sequences' one-row items that must stay
 * per-row exact: a backend runs every row on its decode kernels, even when
 * `fast` would pick a kernel whose rows depend on the row count (CUDA: f16
 * GEMMs above MEMRA_MMV_MAX_ROWS rows, grouped MoE GEMMs, narrow attention
 * blocks), so a batched decode row equals that sequence's decode alone;
 * BATCH, such a step on a fast engine that may take the fast tier's
 * batched kernels (CUDA: the skinny tensor-core GEMM, grouped MoE GEMMs)
 * from two rows up: a row then stays within the fast tier's bound of its
 * decode alone, and does not depend on the other rows of the step. */
enum { MEMRA__ROWS_ANY, MEMRA__ROWS_EXACT, MEMRA__ROWS_BATCH };
bool memra__rows_exact(void);
bool memra__rows_batch(void);

/* Argument checks of the op slots shared by every backend (lib/op_check.c):
 * an error status with its message, or MEMRA_OK with *none set when the op
 * has nothing to do. */
memra_status_t memra__check_weight(memra__backend_t *be, const memra_weight_t *w, const char *op);
memra_status_t memra__check_matmul(memra__backend_t *be, const memra_weight_t *w, const float *x, int64_t ldx,
                                   const float *y, int64_t ldy, int64_t n_rows, bool *none);
memra_status_t memra__check_norm(memra__backend_t *be, memra_norm_kind_t kind, const float *x, int64_t xs,
                                 const float *y, int64_t ys, int64_t n_rows, int64_t dim, float eps, bool *none);
memra_status_t memra__check_ew(memra__backend_t *be, const memra_ew_args_t *a, bool *none);
memra_status_t memra__check_rope(memra__backend_t *be, const memra_rope_args_t *a, bool *none);
memra_status_t memra__check_attention(memra__backend_t *be, const memra_attn_args_t *a, bool *none);
memra_status_t memra__check_kv_store(memra__backend_t *be, const memra_kv_store_args_t *a, bool *none);
/* The byte strides of A's K and V rows (k_row_bytes / v_row_bytes, or
 * kv_stride floats when 0), after memra__check_attention. */
size_t memra__attn_k_row_bytes(const memra_attn_args_t *a);
size_t memra__attn_v_row_bytes(const memra_attn_args_t *a);
memra_status_t memra__check_conv(memra__backend_t *be, const memra_conv_args_t *a, bool *none);
memra_status_t memra__check_delta(memra__backend_t *be, const memra_delta_args_t *a, bool *none);
memra_status_t memra__check_route(memra__backend_t *be, const memra_route_args_t *a, bool *none);
memra_status_t memra__check_moe(memra__backend_t *be, const memra_moe_args_t *a, bool *none);
/* Elementwise ops that read b (cuda/ops_norm.cu keeps a device copy). */
bool memra__ew_reads_b(memra_ew_op_t op);

/* Runs A on BE: validates it, then the backend's fused matmul_ex or, when
 * there is none or it declines, the unfused sequence (lib/matmul_ex.c). */
memra_status_t memra__matmul_ex(memra__backend_t *be, const memra_mm_args_t *a);

/* Runs A on BE: validates it (the shared expert too), then the backend's
 * fused moe or the sequence (lib/moe_ex.c). */
memra_status_t memra__moe(memra__backend_t *be, const memra_moe_args_t *a);

/* Runs A on BE: validates it, then the backend's fused gdn or the sequence
 * (lib/gdn_ex.c). */
memra_status_t memra__gdn(memra__backend_t *be, const memra_gdn_args_t *a);

/* The per-sequence ops of a step's N segments (0..MEMRA_MAX_BATCH): every
 * item validated as its one-item slot validates it, and the items' outputs
 * checked not to overlap, before anything is queued (an error queues
 * nothing); then the backend's batched slot for the items it takes and the
 * one-item slot (gdn: memra__gdn's fused step or sequence) for the rest.
 * Each item gets the bits of its one-item call (lib/batch_ops.c,
 * lib/gdn_ex.c). */
memra_status_t memra__attention_batch(memra__backend_t *be, const memra_attn_args_t *a, int32_t n);
memra_status_t memra__kv_store_batch(memra__backend_t *be, const memra_kv_store_args_t *a, int32_t n);
memra_status_t memra__gdn_batch(memra__backend_t *be, const memra_gdn_args_t *a, int32_t n);

/* Whether the byte ranges [P, P+N) and [Q, Q+M) share a byte (empty ranges
 * never do); the batch wrappers' independence check. */
bool memra__ranges_overlap(const void *p, size_t n, const void *q, size_t m);

/* Runs A on BE: validates it, then the backend's fused qk_norm_rope or the
 * sequence (lib/qk_norm_rope.c). */
memra_status_t memra__qk_norm_rope(memra__backend_t *be, const memra_qk_args_t *a);

/* Runs A on BE: validates it, then the backend's fused norm_ex or the
 * sequence (lib/norm_ex.c). */
memra_status_t memra__norm_ex(memra__backend_t *be, const memra_norm_args_t *a);

/* N norm_ex steps (1..MEMRA_NORM_CHAIN_MAX) in order, all of the same rows:
 * the sequence of memra__norm_ex calls, which a backend may run as one
 * launch. Buffers that two steps share (one of them writing it: y, or
 * tmp, which the sequence writes) must be the same rows: the same address
 * and stride, and no step may read what an earlier one uses as tmp (its
 * contents after a fused step are not the sequence's). Otherwise
 * MEMRA_E_INVALID. */
#define MEMRA_NORM_CHAIN_MAX 4
memra_status_t memra__norm_chain(memra__backend_t *be, const memra_norm_args_t *steps, int n);

/* A MoE router (lib/router.c): M's matmul_ex, then the route RT of its
 * first weight's outputs (RT's logits are M's y[0], n_rows tokens of
 * n_expert = the first weight's rows, packed), in one step where the
 * backend has one (the router slot), else as the two ops. */
memra_status_t memra__router(memra__backend_t *be, const memra_mm_args_t *m, const memra_route_args_t *rt);

/* The CPU reference backend (lib/cpu/). n_threads 0 = all cores. */
memra_status_t memra__cpu_backend_create(int n_threads, memra__backend_t **out);
void memra__cpu_backend_destroy(memra__backend_t *be);

/* The CUDA backend (cuda/; absent without a CUDA build). */
#include "memra/engine.h"
int memra__cuda_device_count(void);
memra_status_t memra__cuda_backend_create(int device, memra__backend_t **out);
void memra__cuda_backend_destroy(memra__backend_t *be);
memra_status_t memra__cuda_device_info(int device, memra_engine_info_t *info);
void *memra__cuda_host_alloc(int device, size_t bytes); /* page-locked, NULL on failure */
void memra__cuda_host_free(void *p);

#endif
