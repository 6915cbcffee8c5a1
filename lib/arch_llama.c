/* llama and qwen3: the plain pre-norm transformer (model-spec §7).
 *
 *   x  = embed(token)
 *   per layer:  x += Wo · Attn(rope(Wq·rms(x)), rope(Wk·rms(x)), Wv·rms(x))
 *               x += FFN(rms(x))
 *   logits = output · rms(x)
 *
 * One forward serves both architectures; they differ in
 *   - RoPE pairing: llama NORM (adjacent pairs; the converter permuted the
 *     Q/K rows so that this equals HF rotate_half), qwen3 NEOX;
 *   - qwen3's per-head RMS norms of q and k, applied before RoPE;
 *   - llama's optional tensors: rope_freqs (Llama-3 freq factors), biases on
 *     the projections and the FFN, and Mixtral-style experts.
 * Optional q/k/v/o biases and a fused attn_qkv are accepted for both.
 *
 * This file is the numerical reference the GPU path is judged against: it
 * only calls backend ops and never touches activations on the host. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch_common.h"

typedef struct llama_layer {
    int64_t n_head, n_head_kv, n_ff;
    const float *attn_norm, *ffn_norm;
    memra_weight_t wq, wk, wv, wqkv, wo;   /* wqkv.data set = fused projection */
    const float *bq, *bk, *bv, *bqkv, *bo; /* optional biases */
    const float *q_norm, *k_norm;          /* qwen3: per-head RMS weights {head_dim} */
    /* dense FFN (SwiGLU) */
    memra_weight_t ffn_gate, ffn_up, ffn_down;
    const float *ffn_gate_b, *ffn_up_b, *ffn_down_b;
    /* MoE FFN (llama with expert_count > 0) */
    memra_weight_t ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps;
} llama_layer_t;

typedef struct llama_model {
    bool qk_norm;                          /* qwen3 */
    memra_rope_mode_t rope_mode;
    int64_t n_embd, head_dim, n_rot;
    int64_t n_expert, n_expert_used;
    float eps, rope_base;
    memra_weight_t tok_embd;               /* first stage */
    memra_weight_t output;                 /* last stage (token_embd when tied) */
    const float *output_norm;              /* last stage */
    const float *rope_freqs[MEMRA_MAX_STAGES]; /* per stage, NULL if absent */
    int64_t ws_layer_floats;               /* max over layers, for one token */
    llama_layer_t *layers;
} llama_model_t;

/* ---- binding -------------------------------------------------------------- */

/* RoPE scaling must be off: the rope op has no freq_scale or YaRN terms.
 * llama.cpp reads the factor whatever the type (0 and 1 mean unscaled). */
static memra_status_t check_rope_scaling(memra_model_t *m)
{
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    int64_t i = memra_gguf_find_kv(m->gguf, key);
    const char *type = "none";
    if (i >= 0 && memra_gguf_kv_str(m->gguf, i, &type, NULL) != MEMRA_OK)
        return memra__model_fail(m, MEMRA_E_FORMAT, "key %s: expected a string", key);
    float linear, factor;
    MEMRA__TRY(memra__cfg_f32_or(m, "rope.scale_linear", 0.0f, &linear));
    MEMRA__TRY(memra__cfg_f32_or(m, "rope.scaling.factor", linear, &factor));
    bool known = strcmp(type, "none") == 0 || strcmp(type, "linear") == 0;
    if (!known || (factor != 0.0f && factor != 1.0f))
        return memra__model_fail(m, MEMRA_E_UNSUPPORTED, "%s: rope scaling '%s' with factor %g is not supported",
                                 m->arch_name, type, (double)factor);
    return MEMRA_OK;
}

static memra_status_t bind_layer(memra_model_t *m, llama_model_t *lm, int32_t il)
{
    llama_layer_t *L = &lm->layers[il];
    const int32_t s = memra__stage_of_layer(m, il);
    const int64_t E = lm->n_embd, hd = lm->head_dim;
    const int64_t nq = L->n_head * hd, nkv = L->n_head_kv * hd, ff = L->n_ff;

    MEMRA__TRY(memra__w_vec(m, s, &L->attn_norm, MEMRA_W_REQUIRED, E, "blk.%d.attn_norm.weight", il));
    if (memra__w_exists(m, "blk.%d.attn_qkv.weight", il)) {
        MEMRA__TRY(memra__w_get(m, s, &L->wqkv, MEMRA_W_REQUIRED, 2, (int64_t[]){E, nq + 2 * nkv},
                                "blk.%d.attn_qkv.weight", il));
        MEMRA__TRY(memra__w_vec(m, s, &L->bqkv, MEMRA_W_OPTIONAL, nq + 2 * nkv, "blk.%d.attn_qkv.bias", il));
    } else {
        MEMRA__TRY(memra__w_get(m, s, &L->wq, MEMRA_W_REQUIRED, 2, (int64_t[]){E, nq}, "blk.%d.attn_q.weight", il));
        MEMRA__TRY(memra__w_get(m, s, &L->wk, MEMRA_W_REQUIRED, 2, (int64_t[]){E, nkv}, "blk.%d.attn_k.weight", il));
        MEMRA__TRY(memra__w_get(m, s, &L->wv, MEMRA_W_REQUIRED, 2, (int64_t[]){E, nkv}, "blk.%d.attn_v.weight", il));
        MEMRA__TRY(memra__w_vec(m, s, &L->bq, MEMRA_W_OPTIONAL, nq, "blk.%d.attn_q.bias", il));
        MEMRA__TRY(memra__w_vec(m, s, &L->bk, MEMRA_W_OPTIONAL, nkv, "blk.%d.attn_k.bias", il));
        MEMRA__TRY(memra__w_vec(m, s, &L->bv, MEMRA_W_OPTIONAL, nkv, "blk.%d.attn_v.bias", il));
    }
    MEMRA__TRY(memra__w_get(m, s, &L->wo, MEMRA_W_REQUIRED, 2, (int64_t[]){nq, E}, "blk.%d.attn_output.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->bo, MEMRA_W_OPTIONAL, E, "blk.%d.attn_output.bias", il));
    if (lm->qk_norm) {
        MEMRA__TRY(memra__w_vec(m, s, &L->q_norm, MEMRA_W_REQUIRED, hd, "blk.%d.attn_q_norm.weight", il));
        MEMRA__TRY(memra__w_vec(m, s, &L->k_norm, MEMRA_W_REQUIRED, hd, "blk.%d.attn_k_norm.weight", il));
    }

    MEMRA__TRY(memra__w_vec(m, s, &L->ffn_norm, MEMRA_W_REQUIRED, E, "blk.%d.ffn_norm.weight", il));
    if (lm->n_expert == 0) {
        MEMRA__TRY(
            memra__w_get(m, s, &L->ffn_gate, MEMRA_W_REQUIRED, 2, (int64_t[]){E, ff}, "blk.%d.ffn_gate.weight", il));
        MEMRA__TRY(memra__w_get(m, s, &L->ffn_up, MEMRA_W_REQUIRED, 2, (int64_t[]){E, ff}, "blk.%d.ffn_up.weight", il));
        MEMRA__TRY(
            memra__w_get(m, s, &L->ffn_down, MEMRA_W_REQUIRED, 2, (int64_t[]){ff, E}, "blk.%d.ffn_down.weight", il));
        MEMRA__TRY(memra__w_vec(m, s, &L->ffn_gate_b, MEMRA_W_OPTIONAL, ff, "blk.%d.ffn_gate.bias", il));
        MEMRA__TRY(memra__w_vec(m, s, &L->ffn_up_b, MEMRA_W_OPTIONAL, ff, "blk.%d.ffn_up.bias", il));
        MEMRA__TRY(memra__w_vec(m, s, &L->ffn_down_b, MEMRA_W_OPTIONAL, E, "blk.%d.ffn_down.bias", il));
    } else {
        const int64_t ne = lm->n_expert;
        MEMRA__TRY(memra__w_get(m, s, &L->ffn_gate_inp, MEMRA_W_REQUIRED, 2, (int64_t[]){E, ne},
                                "blk.%d.ffn_gate_inp.weight", il));
        MEMRA__TRY(memra__w_get(m, s, &L->ffn_gate_exps, MEMRA_W_REQUIRED, 3, (int64_t[]){E, ff, ne},
                                "blk.%d.ffn_gate_exps.weight", il));
        MEMRA__TRY(memra__w_get(m, s, &L->ffn_up_exps, MEMRA_W_REQUIRED, 3, (int64_t[]){E, ff, ne},
                                "blk.%d.ffn_up_exps.weight", il));
        MEMRA__TRY(memra__w_get(m, s, &L->ffn_down_exps, MEMRA_W_REQUIRED, 3, (int64_t[]){ff, E, ne},
                                "blk.%d.ffn_down_exps.weight", il));
    }
    return MEMRA_OK;
}

/* Floats of workspace one token needs in layer L (attention_block + ffn_block). */
static int64_t layer_ws_floats(const llama_model_t *lm, const llama_layer_t *L)
{
    const int64_t nq = L->n_head * lm->head_dim, nkv = L->n_head_kv * lm->head_dim;
    int64_t attn = 2 * lm->n_embd + 2 * (nq + 2 * nkv) + nq;
    int64_t ffn = 2 * lm->n_embd + (lm->n_expert ? 2 * lm->n_expert_used + lm->n_expert : 2 * L->n_ff);
    return attn + ffn;
}

static memra_status_t bind_common(memra_model_t *m, bool qwen3)
{
    llama_model_t *lm = calloc(1, sizeof *lm);
    if (!lm)
        return memra__model_fail(m, MEMRA_E_NOMEM, "%s: out of memory", m->arch_name);
    m->arch_data = lm;
    lm->qk_norm = qwen3;
    lm->rope_mode = qwen3 ? MEMRA_ROPE_NEOX : MEMRA_ROPE_NORM;

    uint32_t n_layer, n_embd, n_ctx;
    MEMRA__TRY(memra__cfg_u32(m, "block_count", &n_layer));
    MEMRA__TRY(memra__cfg_u32(m, "embedding_length", &n_embd));
    MEMRA__TRY(memra__cfg_u32(m, "context_length", &n_ctx));
    if (n_layer == 0 || n_layer > MEMRA_MAX_LAYERS || n_embd == 0)
        return memra__model_fail(m, MEMRA_E_FORMAT, "%s: block_count %u / embedding_length %u out of range",
                                 m->arch_name, n_layer, n_embd);
    m->n_layer_file = (int32_t)n_layer;
    m->n_layer = m->params.n_layers > 0 && m->params.n_layers < (int32_t)n_layer ? m->params.n_layers
                                                                                 : (int32_t)n_layer;
    m->n_embd = (int32_t)n_embd;
    m->n_ctx_train = (int32_t)n_ctx;
    m->carry_floats = n_embd;
    lm->n_embd = n_embd;

    lm->layers = calloc(n_layer, sizeof *lm->layers);
    uint32_t *head = calloc(n_layer, sizeof *head), *head_kv = calloc(n_layer, sizeof *head_kv),
             *ff = calloc(n_layer, sizeof *ff);
    memra_status_t st = MEMRA_OK;
    if (!lm->layers || !head || !head_kv || !ff)
        st = memra__model_fail(m, MEMRA_E_NOMEM, "%s: out of memory", m->arch_name);
    if (!st)
        st = memra__cfg_u32_per_layer(m, "attention.head_count", (int32_t)n_layer, true, 0, head);
    if (!st && memra__cfg_has(m, "attention.head_count_kv"))
        st = memra__cfg_u32_per_layer(m, "attention.head_count_kv", (int32_t)n_layer, true, 0, head_kv);
    else if (!st)
        memcpy(head_kv, head, n_layer * sizeof *head);
    if (!st)
        st = memra__cfg_u32_per_layer(m, "feed_forward_length", (int32_t)n_layer, true, 0, ff);
    for (uint32_t il = 0; !st && il < n_layer; il++) {
        if (head[il] == 0 || head_kv[il] == 0 || head[il] % head_kv[il] != 0 || ff[il] == 0)
            st = memra__model_fail(m, MEMRA_E_FORMAT,
                                   "%s: layer %u: head_count %u, head_count_kv %u, feed_forward_length %u invalid",
                                   m->arch_name, il, head[il], head_kv[il], ff[il]);
        else {
            lm->layers[il].n_head = head[il];
            lm->layers[il].n_head_kv = head_kv[il];
            lm->layers[il].n_ff = ff[il];
        }
    }
    free(head);
    free(head_kv);
    free(ff);
    MEMRA__TRY(st);

    /* llama.cpp: head dims default to n_embd / n_head of layer 0, n_rot to
     * the key head dim, and both archs require full rotary. */
    uint32_t hd_k, hd_v, n_rot;
    const uint32_t hd_def = n_embd / (uint32_t)lm->layers[0].n_head;
    MEMRA__TRY(memra__cfg_u32_or(m, "attention.key_length", hd_def, &hd_k));
    MEMRA__TRY(memra__cfg_u32_or(m, "attention.value_length", hd_def, &hd_v));
    MEMRA__TRY(memra__cfg_u32_or(m, "rope.dimension_count", hd_k, &n_rot));
    if (hd_k == 0 || hd_k != hd_v)
        return memra__model_fail(m, MEMRA_E_UNSUPPORTED, "%s: key_length %u != value_length %u", m->arch_name,
                                 hd_k, hd_v);
    if (n_rot != hd_k)
        return memra__model_fail(m, MEMRA_E_FORMAT, "%s: invalid n_rot: rope.dimension_count %u != head dim %u",
                                 m->arch_name, n_rot, hd_k);
    lm->head_dim = hd_k;
    lm->n_rot = n_rot;
    MEMRA__TRY(memra__cfg_f32_pos(m, "attention.layer_norm_rms_epsilon", &lm->eps));
    MEMRA__TRY(memra__cfg_f32_pos_or(m, "rope.freq_base", 10000.0f, &lm->rope_base));
    MEMRA__TRY(check_rope_scaling(m));

    uint32_t n_expert = 0, n_used = 0;
    if (!qwen3) {
        MEMRA__TRY(memra__cfg_u32_or(m, "expert_count", 0, &n_expert));
        MEMRA__TRY(memra__cfg_u32_or(m, "expert_used_count", 0, &n_used));
        if (n_expert > 0 && (n_used == 0 || n_used > n_expert))
            return memra__model_fail(m, MEMRA_E_FORMAT, "%s: expert_used_count %u invalid for expert_count %u",
                                     m->arch_name, n_used, n_expert);
    }
    lm->n_expert = n_expert;
    lm->n_expert_used = n_used;

    /* global tensors: embedding on the first stage, head on the last */
    const int32_t first = memra__first_stage(m), last = memra__last_stage(m);
    MEMRA__TRY(
        memra__w_get(m, first, &lm->tok_embd, MEMRA_W_REQUIRED, 2, (int64_t[]){n_embd, -1}, "token_embd.weight"));
    const int64_t n_vocab = lm->tok_embd.ne[1];
    m->n_vocab = (int32_t)n_vocab;
    uint32_t vocab_key;
    MEMRA__TRY(memra__cfg_u32_or(m, "vocab_size", (uint32_t)n_vocab, &vocab_key));
    if (vocab_key != n_vocab)
        return memra__model_fail(m, MEMRA_E_FORMAT, "%s: vocab_size %u != token_embd.weight rows %lld",
                                 m->arch_name, vocab_key, (long long)n_vocab);
    MEMRA__TRY(memra__w_vec(m, last, &lm->output_norm, MEMRA_W_REQUIRED, n_embd, "output_norm.weight"));
    MEMRA__TRY(memra__w_get(m, last, &lm->output, MEMRA_W_OPTIONAL, 2, (int64_t[]){n_embd, n_vocab}, "output.weight"));
    if (!lm->output.data && last == first)
        lm->output = lm->tok_embd; /* tied */
    else if (!lm->output.data)
        MEMRA__TRY(
            memra__w_get(m, last, &lm->output, MEMRA_W_REQUIRED, 2, (int64_t[]){n_embd, n_vocab}, "token_embd.weight"));
    if (!qwen3) {
        for (int32_t s = 0; s < m->n_stages; s++)
            MEMRA__TRY(memra__w_vec(m, s, &lm->rope_freqs[s], MEMRA_W_OPTIONAL, n_rot / 2, "rope_freqs.weight"));
    }

    for (int32_t il = 0; il < (int32_t)n_layer; il++) {
        if (il >= m->n_layer) {
            memra__w_skip_layer(m, il);
            continue;
        }
        llama_layer_t *L = &lm->layers[il];
        MEMRA__TRY(bind_layer(m, lm, il));
        m->layer_kind[il] = MEMRA_LAYER_ATTENTION;
        m->layer_cache[il].k_floats = L->n_head_kv * lm->head_dim;
        m->layer_cache[il].v_floats = L->n_head_kv * lm->head_dim;
        m->layer_cache[il].kv_head_dim = lm->head_dim;
        int64_t w = layer_ws_floats(lm, L);
        if (w > lm->ws_layer_floats)
            lm->ws_layer_floats = w;
    }
    return MEMRA_OK;
}

static memra_status_t bind_llama(memra_model_t *m) { return bind_common(m, false); }
static memra_status_t bind_qwen3(memra_model_t *m) { return bind_common(m, true); }

static void llama_unbind(memra_model_t *m)
{
    llama_model_t *lm = m->arch_data;
    if (lm)
        free(lm->layers);
    free(lm);
    m->arch_data = NULL;
}

static size_t llama_workspace_bytes(const memra_model_t *m, int32_t n_tokens)
{
    const llama_model_t *lm = m->arch_data;
    int64_t per_token = lm->ws_layer_floats > lm->n_embd ? lm->ws_layer_floats : lm->n_embd;
    /* + alignment slack: every memra__ws block is rounded up to 256 bytes */
    return (size_t)n_tokens * (size_t)per_token * sizeof(float) + 16 * 256;
}

/* ---- forward -------------------------------------------------------------- */

/* y[t][0..cols) += b (one bias row broadcast to every token). */
static memra_status_t add_bias(memra__run_t *r, float *y, int64_t ldy, const float *b, int64_t n, int64_t cols)
{
    if (!b)
        return MEMRA_OK;
    return memra__arch_ew(r, MEMRA_EW_ADD, y, ldy, y, ldy, b, 0, n, cols, 0.0f);
}

/* y = W·x (+ b) for N rows. */
static memra_status_t linear(memra__run_t *r, const memra_weight_t *w, const float *b, const float *x, int64_t ldx,
                             float *y, int64_t ldy, int64_t n)
{
    MEMRA__TRY(r->ops->matmul(r->be, w, x, ldx, y, ldy, n));
    return add_bias(r, y, ldy, b, n, w->ne[1]);
}

/* Strided column block copy: y[t][0..cols) = a[t][0..cols). */
static memra_status_t copy_cols(memra__run_t *r, float *y, int64_t ldy, const float *a, int64_t lda, int64_t n,
                                int64_t cols)
{
    return memra__arch_ew(r, MEMRA_EW_COPY, y, ldy, a, lda, NULL, 0, n, cols, 0.0f);
}

/* x[t] += y[t] (the residual add into the carry). */
static memra_status_t residual(memra__run_t *r, const float *y, int64_t ldy)
{
    const int64_t cf = r->m->carry_floats;
    return memra__arch_ew(r, MEMRA_EW_ADD, r->carry, cf, r->carry, cf, y, ldy, r->n, r->m->n_embd, 0.0f);
}

static memra_status_t llama_embed(memra__run_t *r)
{
    const llama_model_t *lm = r->m->arch_data;
    return r->ops->get_rows(r->be, &lm->tok_embd, r->tokens, r->n, r->carry, r->m->carry_floats);
}

/* Self-attention block: carry += Wo · Attn(...) over the chunk's tokens. */
static memra_status_t attention_block(memra__run_t *r, int32_t il)
{
    const memra_model_t *m = r->m;
    const llama_model_t *lm = m->arch_data;
    const llama_layer_t *L = &lm->layers[il];
    const memra__backend_i *ops = r->ops;
    memra__backend_t *be = r->be;
    const int64_t n = r->n, E = lm->n_embd, hd = lm->head_dim;
    const int64_t nq = L->n_head * hd, nkv = L->n_head_kv * hd;

    MEMRA__WS(xn, n * E);
    MEMRA__WS(q, n * nq);
    MEMRA__WS(k, n * nkv);
    MEMRA__WS(v, n * nkv);
    MEMRA__TRY(ops->norm(be, MEMRA_NORM_RMS, r->carry, m->carry_floats, L->attn_norm, xn, E, n, E, lm->eps));

    if (L->wqkv.data) {
        const int64_t w = nq + 2 * nkv;
        MEMRA__WS(qkv, n * w);
        MEMRA__TRY(linear(r, &L->wqkv, L->bqkv, xn, E, qkv, w, n));
        MEMRA__TRY(copy_cols(r, q, nq, qkv, w, n, nq));
        MEMRA__TRY(copy_cols(r, k, nkv, qkv + nq, w, n, nkv));
        MEMRA__TRY(copy_cols(r, v, nkv, qkv + nq + nkv, w, n, nkv));
    } else {
        MEMRA__TRY(linear(r, &L->wq, L->bq, xn, E, q, nq, n));
        MEMRA__TRY(linear(r, &L->wk, L->bk, xn, E, k, nkv, n));
        MEMRA__TRY(linear(r, &L->wv, L->bv, xn, E, v, nkv, n));
    }

    if (lm->qk_norm) { /* every head is a row of hd floats */
        MEMRA__TRY(ops->norm(be, MEMRA_NORM_RMS, q, hd, L->q_norm, q, hd, n * L->n_head, hd, lm->eps));
        MEMRA__TRY(ops->norm(be, MEMRA_NORM_RMS, k, hd, L->k_norm, k, hd, n * L->n_head_kv, hd, lm->eps));
    }

    const int32_t stage = (int32_t)(r->st - m->stages);
    memra_rope_args_t ra = {.x = q, .n_tokens = n, .n_heads = L->n_head, .head_dim = hd, .head_stride = hd,
                            .token_stride = nq, .n_rot = lm->n_rot, .pos = r->pos, .base = lm->rope_base,
                            .freq_factors = lm->rope_freqs[stage], .mode = lm->rope_mode};
    MEMRA__TRY(ops->rope(be, &ra));
    ra.x = k;
    ra.n_heads = L->n_head_kv;
    ra.token_stride = nkv;
    MEMRA__TRY(ops->rope(be, &ra));

    /* Each sequence's cache keeps its rows' K after norm and RoPE, from
     * its position on; attention runs per sequence over its own cache. */
    MEMRA__TRY(memra__kv_put_kv(r, il, k, nkv, v, nkv));

    MEMRA__WS(att, n * nq);
    memra_attn_args_t aa = {.q = q, .out = att, .n_head = L->n_head, .n_kv_head = L->n_head_kv, .head_dim = hd,
                            .q_stride = nq, .scale = 1.0f / sqrtf((float)hd), .n_swa = 0};
    MEMRA__TRY(memra__arch_attention(r, il, &aa));

    MEMRA__WS(y, n * E);
    MEMRA__TRY(linear(r, &L->wo, L->bo, att, nq, y, E, n));
    return residual(r, y, E);
}

/* Feed-forward block: carry += SwiGLU FFN (dense or mixture of experts). */
static memra_status_t ffn_block(memra__run_t *r, int32_t il)
{
    const memra_model_t *m = r->m;
    const llama_model_t *lm = m->arch_data;
    const llama_layer_t *L = &lm->layers[il];
    const memra__backend_i *ops = r->ops;
    memra__backend_t *be = r->be;
    const int64_t n = r->n, E = lm->n_embd, ff = L->n_ff;

    MEMRA__WS(xn, n * E);
    MEMRA__WS(y, n * E);
    MEMRA__TRY(ops->norm(be, MEMRA_NORM_RMS, r->carry, m->carry_floats, L->ffn_norm, xn, E, n, E, lm->eps));

    if (lm->n_expert == 0) {
        MEMRA__WS(g, n * ff);
        MEMRA__WS(u, n * ff);
        MEMRA__TRY(linear(r, &L->ffn_gate, L->ffn_gate_b, xn, E, g, ff, n));
        MEMRA__TRY(linear(r, &L->ffn_up, L->ffn_up_b, xn, E, u, ff, n));
        MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_SWIGLU, g, ff, g, ff, u, ff, n, ff, 0.0f));
        MEMRA__TRY(linear(r, &L->ffn_down, L->ffn_down_b, g, ff, y, E, n));
    } else {
        /* Mixtral routing (llama.cpp build_moe_ffn): softmax gate, top-k,
         * weights renormalized over the selected experts. */
        const int64_t ne = lm->n_expert, k = lm->n_expert_used;
        MEMRA__WS(logits, n * ne);
        MEMRA__WS(w, n * k);
        int32_t *ids = memra__ws(r, (size_t)(n * k) * sizeof(int32_t));
        if (!ids)
            return MEMRA_E_INTERNAL;
        MEMRA__TRY(ops->matmul(be, &L->ffn_gate_inp, xn, E, logits, ne, n));
        memra_route_args_t ra = {.logits = logits, .ids = ids, .weights = w, .n_tokens = n, .n_expert = ne,
                                 .k = k, .norm = true};
        MEMRA__TRY(ops->route(be, &ra));
        memra_moe_args_t ma = {.x = xn, .ids = ids, .weights = w, .gate = &L->ffn_gate_exps,
                               .up = &L->ffn_up_exps, .down = &L->ffn_down_exps, .out = y, .n_tokens = n,
                               .k = k, .n_embd = E, .n_ff = ff, .act = MEMRA_ACT_SILU};
        MEMRA__TRY(memra__moe(be, &ma));
    }
    return residual(r, y, E);
}

static memra_status_t llama_layer(memra__run_t *r, int32_t il)
{
    MEMRA__TRY(attention_block(r, il));
    return ffn_block(r, il);
}

static memra_status_t llama_head(memra__run_t *r)
{
    const llama_model_t *lm = r->m->arch_data;
    return memra__arch_head(r, lm->output_norm, &lm->output, lm->n_embd, lm->eps, 0.0f);
}

const memra__arch_t memra__arch_llama = {
    .name = "llama",
    .bind = bind_llama,
    .unbind = llama_unbind,
    .workspace_bytes = llama_workspace_bytes,
    .embed = llama_embed,
    .layer = llama_layer,
    .head = llama_head,
};

const memra__arch_t memra__arch_qwen3 = {
    .name = "qwen3",
    .bind = bind_qwen3,
    .unbind = llama_unbind,
    .workspace_bytes = llama_workspace_bytes,
    .embed = llama_embed,
    .layer = llama_layer,
    .head = llama_head,
};
