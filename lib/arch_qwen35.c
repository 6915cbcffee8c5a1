/* qwen35 (dense) and qwen35moe: hybrid Gated DeltaNet + gated full attention
 * (docs/model-spec.md §5). One forward serves both archs; they differ only
 * in the FFN (dense SwiGLU vs routed experts + a sigmoid-gated shared one).
 *
 * This file is the numerical reference the GPU path is judged against, so it
 * is written op by op in the order of llama.cpp's graph (qwen35.cpp,
 * qwen35moe.cpp, delta-net-base.cpp) and talks to the device only through
 * lib/backend.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch_common.h"

typedef struct q35_layer {
    bool recurrent;
    int32_t stage;
    const float *attn_norm, *post_norm;

    /* gated full attention */
    memra_weight_t wq, wk, wv, wo;      /* wq rows: per head [q (hd) | gate (hd)] */
    const float *q_norm, *k_norm;

    /* Gated DeltaNet */
    memra_weight_t wqkv, wz, wbeta, walpha, wconv, wssm_out;
    const float *dt_bias, *ssm_a, *ssm_norm;

    /* dense FFN */
    int64_t n_ff;
    memra_weight_t ffn_gate, ffn_up, ffn_down;

    /* MoE FFN */
    memra_weight_t gate_inp, gate_exps, up_exps, gate_up_exps, down_exps;
    memra_weight_t gate_inp_shexp, gate_shexp, up_shexp, down_shexp;
} q35_layer_t;

/* A NextN (MTP) block: a full-attention layer plus its projections. Loaded
 * only with params.load_mtp, for the MTP draft head (not run here). */
typedef struct q35_mtp {
    q35_layer_t layer;
    memra_weight_t eh_proj, embed_tokens, shared_head_head;
    const float *enorm, *hnorm, *shared_head_norm;
} q35_mtp_t;

typedef struct q35 {
    bool moe;
    int64_t n_embd, n_vocab;
    int64_t n_head, n_head_kv, head_dim, n_rot;
    float eps, rope_base;
    /* Gated DeltaNet geometry */
    int64_t d_conv, d_k, d_v, n_k, n_v;
    int64_t key_dim, value_dim, conv_dim;
    /* MoE */
    int64_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int64_t n_ff_max;                   /* widest dense FFN, for the workspace */

    memra_weight_t tok_embd;            /* first stage */
    memra_weight_t output;              /* last stage (token_embd again when tied) */
    const float *output_norm;
    q35_layer_t *layers;                /* [n_layer] */
    q35_mtp_t *mtp;                     /* [n_mtp] when loaded, else NULL */
} q35_t;

/* ---- binding ------------------------------------------------------------ */

static memra_status_t cfg_dim(memra_model_t *m, const char *key, int64_t *out)
{
    uint32_t v;
    MEMRA__TRY(memra__cfg_u32(m, key, &v));
    if (v == 0)
        return memra__model_fail(m, MEMRA_E_FORMAT, "%s.%s must be > 0", m->arch_name, key);
    *out = v;
    return MEMRA_OK;
}

/* IMROPE with text positions feeds p to the t, h and w streams and 0 to e.
 * When every rotary pair falls in a t/h/w sector it is exactly NEOX; a pair
 * on the e stream would need per-pair positions, which the rope op lacks. */
static memra_status_t check_rope_sections(memra_model_t *m, const q35_t *q)
{
    int32_t s[4];
    MEMRA__TRY(memra__cfg_i32_array(m, "rope.dimension_sections", 4, s));
    int64_t sect_dims = 0;
    for (int i = 0; i < 4; i++) {
        if (s[i] < 0)
            return memra__model_fail(m, MEMRA_E_FORMAT, "%s.rope.dimension_sections has a negative entry",
                                     m->arch_name);
        sect_dims += s[i];
    }
    if (sect_dims == 0)
        return memra__model_fail(m, MEMRA_E_FORMAT, "%s.rope.dimension_sections sums to 0", m->arch_name);
    for (int64_t i = 0; i < q->n_rot / 2; i++) {
        int64_t sector = i % sect_dims;
        bool thw = (sector % 3 == 1 && sector < 3 * (int64_t)s[1]) ||
                   (sector % 3 == 2 && sector < 3 * (int64_t)s[2]) ||
                   (sector % 3 == 0 && sector < 3 * (int64_t)s[0]);
        if (!thw)
            return memra__model_fail(m, MEMRA_E_UNSUPPORTED,
                                     "%s: rope.dimension_sections [%d,%d,%d,%d] put rotary pair %lld on the "
                                     "4th position stream (unsupported for text)",
                                     m->arch_name, s[0], s[1], s[2], s[3], (long long)i);
    }
    return MEMRA_OK;
}

static memra_status_t read_config(memra_model_t *m, q35_t *q, uint32_t *n_layer_all)
{
    const char *a = m->arch_name;
    uint32_t u;

    MEMRA__TRY(memra__cfg_u32(m, "block_count", n_layer_all));
    uint32_t n_mtp;
    MEMRA__TRY(memra__cfg_u32_or(m, "nextn_predict_layers", 0, &n_mtp));
    if (*n_layer_all == 0 || *n_layer_all > MEMRA_MAX_LAYERS)
        return memra__model_fail(m, MEMRA_E_FORMAT, "%s.block_count = %u is out of range [1, %d]", a,
                                 *n_layer_all, MEMRA_MAX_LAYERS);
    if (n_mtp >= *n_layer_all)
        return memra__model_fail(m, MEMRA_E_FORMAT,
                                 "%s.nextn_predict_layers = %u must be < %s.block_count = %u", a, n_mtp,
                                 a, *n_layer_all);
    m->n_mtp = (int32_t)n_mtp;
    m->n_layer_file = (int32_t)(*n_layer_all - n_mtp);
    m->n_layer = m->params.n_layers > 0 && m->params.n_layers < m->n_layer_file ? m->params.n_layers
                                                                                 : m->n_layer_file;

    MEMRA__TRY(cfg_dim(m, "embedding_length", &q->n_embd));
    MEMRA__TRY(memra__cfg_u32(m, "context_length", &u));
    m->n_ctx_train = (int32_t)(u > INT32_MAX ? INT32_MAX : u);
    MEMRA__TRY(cfg_dim(m, "attention.head_count", &q->n_head));
    MEMRA__TRY(cfg_dim(m, "attention.head_count_kv", &q->n_head_kv));
    int64_t v_len = 0;
    MEMRA__TRY(cfg_dim(m, "attention.key_length", &q->head_dim));
    MEMRA__TRY(cfg_dim(m, "attention.value_length", &v_len));
    if (v_len != q->head_dim)
        return memra__model_fail(m, MEMRA_E_UNSUPPORTED, "%s.attention.key_length %lld != value_length %lld",
                                 a, (long long)q->head_dim, (long long)v_len);
    if (q->n_head % q->n_head_kv != 0)
        return memra__model_fail(m, MEMRA_E_FORMAT,
                                 "%s.attention.head_count %lld is not a multiple of head_count_kv %lld",
                                 a, (long long)q->n_head, (long long)q->n_head_kv);
    MEMRA__TRY(memra__cfg_f32_pos(m, "attention.layer_norm_rms_epsilon", &q->eps));
    MEMRA__TRY(memra__cfg_f32_pos(m, "rope.freq_base", &q->rope_base));
    MEMRA__TRY(cfg_dim(m, "rope.dimension_count", &q->n_rot));
    if (q->n_rot > q->head_dim || q->n_rot % 2 != 0)
        return memra__model_fail(m, MEMRA_E_FORMAT, "%s.rope.dimension_count %lld is odd or exceeds head dim %lld",
                                 a, (long long)q->n_rot, (long long)q->head_dim);
    MEMRA__TRY(check_rope_sections(m, q));

    int64_t d_inner = 0;
    MEMRA__TRY(cfg_dim(m, "ssm.conv_kernel", &q->d_conv));
    MEMRA__TRY(cfg_dim(m, "ssm.state_size", &q->d_k));
    MEMRA__TRY(cfg_dim(m, "ssm.group_count", &q->n_k));
    MEMRA__TRY(cfg_dim(m, "ssm.time_step_rank", &q->n_v));
    MEMRA__TRY(cfg_dim(m, "ssm.inner_size", &d_inner));
    if (d_inner % q->n_v != 0 || d_inner / q->n_v != q->d_k)
        return memra__model_fail(m, MEMRA_E_UNSUPPORTED,
                                 "value head dim %s.ssm.inner_size / time_step_rank = %lld / %lld must equal "
                                 "ssm.state_size %lld",
                                 a, (long long)d_inner, (long long)q->n_v, (long long)q->d_k);
    q->d_v = q->d_k;
    q->key_dim = q->n_k * q->d_k;
    q->value_dim = q->n_v * q->d_v;
    q->conv_dim = 2 * q->key_dim + q->value_dim;

    if (q->moe) {
        MEMRA__TRY(cfg_dim(m, "expert_count", &q->n_expert));
        MEMRA__TRY(cfg_dim(m, "expert_used_count", &q->n_expert_used));
        if (q->n_expert_used > q->n_expert)
            return memra__model_fail(m, MEMRA_E_FORMAT, "%s.expert_used_count %lld > expert_count %lld", a,
                                     (long long)q->n_expert_used, (long long)q->n_expert);
        /* feed_forward_length is only a fallback for the expert widths
         * (qwen35moe.cpp: n_ff_exp = n_ff / n_expert_used, n_ff_shexp = n_ff) */
        uint32_t n_ff, ff_exp, ff_shexp;
        MEMRA__TRY(memra__cfg_u32_or(m, "feed_forward_length", 0, &n_ff));
        MEMRA__TRY(memra__cfg_u32_or(m, "expert_feed_forward_length", 0, &ff_exp));
        MEMRA__TRY(memra__cfg_u32_or(m, "expert_shared_feed_forward_length", 0, &ff_shexp));
        q->n_ff_exp = ff_exp ? ff_exp : n_ff / q->n_expert_used;
        q->n_ff_shexp = ff_shexp ? ff_shexp : n_ff;
        if (q->n_ff_exp == 0 || q->n_ff_shexp == 0)
            return memra__model_fail(m, MEMRA_E_FORMAT,
                                     "%s.expert_feed_forward_length / expert_shared_feed_forward_length "
                                     "missing (and no feed_forward_length fallback)",
                                     a);
    }
    return MEMRA_OK;
}

/* Layer types (qwen35.cpp:21-27): an explicit per-layer flag array wins;
 * otherwise every interval-th layer is full attention. MTP layers are never
 * recurrent. */
static memra_status_t read_layer_types(memra_model_t *m, uint32_t n_layer_all, bool *recurrent)
{
    if (memra__cfg_has(m, "attention.recurrent_layers")) {
        uint32_t *flags = calloc(n_layer_all, sizeof *flags);
        if (!flags)
            return memra__model_fail(m, MEMRA_E_NOMEM, "%s: out of memory", m->arch_name);
        memra_status_t st =
            memra__cfg_u32_per_layer(m, "attention.recurrent_layers", (int32_t)n_layer_all, true, 0, flags);
        for (uint32_t il = 0; st == MEMRA_OK && il < n_layer_all; il++)
            recurrent[il] = flags[il] != 0 && (int32_t)il < m->n_layer_file;
        free(flags);
        return st;
    }
    uint32_t interval;
    MEMRA__TRY(memra__cfg_u32_or(m, "full_attention_interval", 4, &interval));
    if (interval == 0)
        return memra__model_fail(m, MEMRA_E_FORMAT, "%s.full_attention_interval must be > 0", m->arch_name);
    for (uint32_t il = 0; il < n_layer_all; il++)
        recurrent[il] = (int32_t)il < m->n_layer_file && (il + 1) % interval != 0;
    return MEMRA_OK;
}

#define SHAPE(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), ((const int64_t[]){__VA_ARGS__})

static memra_status_t bind_attention(memra_model_t *m, const q35_t *q, q35_layer_t *L, int32_t il)
{
    const int64_t E = q->n_embd, hd = q->head_dim;
    const int32_t s = L->stage;
    MEMRA__TRY(memra__w_get(m, s, &L->wq, MEMRA_W_REQUIRED, SHAPE(E, 2 * q->n_head * hd), "blk.%d.attn_q.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->wk, MEMRA_W_REQUIRED, SHAPE(E, q->n_head_kv * hd), "blk.%d.attn_k.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->wv, MEMRA_W_REQUIRED, SHAPE(E, q->n_head_kv * hd), "blk.%d.attn_v.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->wo, MEMRA_W_REQUIRED, SHAPE(q->n_head * hd, E), "blk.%d.attn_output.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->q_norm, MEMRA_W_REQUIRED, hd, "blk.%d.attn_q_norm.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->k_norm, MEMRA_W_REQUIRED, hd, "blk.%d.attn_k_norm.weight", il));
    return MEMRA_OK;
}

static memra_status_t bind_deltanet(memra_model_t *m, const q35_t *q, q35_layer_t *L, int32_t il)
{
    const int64_t E = q->n_embd;
    const int32_t s = L->stage;
    MEMRA__TRY(memra__w_get(m, s, &L->wqkv, MEMRA_W_REQUIRED, SHAPE(E, q->conv_dim), "blk.%d.attn_qkv.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->wz, MEMRA_W_REQUIRED, SHAPE(E, q->value_dim), "blk.%d.attn_gate.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->wbeta, MEMRA_W_REQUIRED, SHAPE(E, q->n_v), "blk.%d.ssm_beta.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->walpha, MEMRA_W_REQUIRED, SHAPE(E, q->n_v), "blk.%d.ssm_alpha.weight", il));
    MEMRA__TRY(
        memra__w_get(m, s, &L->wconv, MEMRA_W_REQUIRED, SHAPE(q->d_conv, q->conv_dim), "blk.%d.ssm_conv1d.weight", il));
    /* the conv op reads its kernel as plain float32 (llama.cpp's ssm_conv does too) */
    if (L->wconv.type != MEMRA_TYPE_F32)
        return memra__model_fail(m, MEMRA_E_UNSUPPORTED, "%s: blk.%d.ssm_conv1d.weight is %s, expected F32",
                                 m->arch_name, il, memra_type_name(L->wconv.type));
    MEMRA__TRY(memra__w_vec(m, s, &L->dt_bias, MEMRA_W_REQUIRED, q->n_v, "blk.%d.ssm_dt.bias", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->ssm_a, MEMRA_W_REQUIRED, q->n_v, "blk.%d.ssm_a", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->ssm_norm, MEMRA_W_REQUIRED, q->d_v, "blk.%d.ssm_norm.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->wssm_out, MEMRA_W_REQUIRED, SHAPE(q->value_dim, E), "blk.%d.ssm_out.weight", il));
    return MEMRA_OK;
}

static memra_status_t bind_ffn(memra_model_t *m, q35_t *q, q35_layer_t *L, int32_t il)
{
    const int64_t E = q->n_embd;
    const int32_t s = L->stage;
    if (!q->moe) {
        MEMRA__TRY(memra__w_get(m, s, &L->ffn_gate, MEMRA_W_REQUIRED, SHAPE(E, L->n_ff), "blk.%d.ffn_gate.weight", il));
        MEMRA__TRY(memra__w_get(m, s, &L->ffn_up, MEMRA_W_REQUIRED, SHAPE(E, L->n_ff), "blk.%d.ffn_up.weight", il));
        MEMRA__TRY(memra__w_get(m, s, &L->ffn_down, MEMRA_W_REQUIRED, SHAPE(L->n_ff, E), "blk.%d.ffn_down.weight", il));
        return MEMRA_OK;
    }
    const int64_t X = q->n_expert, F = q->n_ff_exp, Fs = q->n_ff_shexp;
    MEMRA__TRY(memra__w_get(m, s, &L->gate_inp, MEMRA_W_REQUIRED, SHAPE(E, X), "blk.%d.ffn_gate_inp.weight", il));
    /* the fused gate|up stack is tried first, as llama.cpp's loader does */
    MEMRA__TRY(memra__w_get(m, s, &L->gate_up_exps, MEMRA_W_OPTIONAL, SHAPE(E, 2 * F, X),
                            "blk.%d.ffn_gate_up_exps.weight", il));
    if (!L->gate_up_exps.data) {
        MEMRA__TRY(
            memra__w_get(m, s, &L->gate_exps, MEMRA_W_REQUIRED, SHAPE(E, F, X), "blk.%d.ffn_gate_exps.weight", il));
        MEMRA__TRY(memra__w_get(m, s, &L->up_exps, MEMRA_W_REQUIRED, SHAPE(E, F, X), "blk.%d.ffn_up_exps.weight", il));
    }
    MEMRA__TRY(memra__w_get(m, s, &L->down_exps, MEMRA_W_REQUIRED, SHAPE(F, E, X), "blk.%d.ffn_down_exps.weight", il));
    /* stored {n_embd, 1} by the converter: a one-row matrix */
    MEMRA__TRY(
        memra__w_get(m, s, &L->gate_inp_shexp, MEMRA_W_REQUIRED, SHAPE(E), "blk.%d.ffn_gate_inp_shexp.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->gate_shexp, MEMRA_W_REQUIRED, SHAPE(E, Fs), "blk.%d.ffn_gate_shexp.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->up_shexp, MEMRA_W_REQUIRED, SHAPE(E, Fs), "blk.%d.ffn_up_shexp.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->down_shexp, MEMRA_W_REQUIRED, SHAPE(Fs, E), "blk.%d.ffn_down_shexp.weight", il));
    return MEMRA_OK;
}

static memra_status_t bind_layer(memra_model_t *m, q35_t *q, q35_layer_t *L, int32_t il)
{
    MEMRA__TRY(memra__w_vec(m, L->stage, &L->attn_norm, MEMRA_W_REQUIRED, q->n_embd, "blk.%d.attn_norm.weight", il));
    MEMRA__TRY(
        memra__w_vec(m, L->stage, &L->post_norm, MEMRA_W_REQUIRED, q->n_embd, "blk.%d.post_attention_norm.weight", il));
    MEMRA__TRY(L->recurrent ? bind_deltanet(m, q, L, il) : bind_attention(m, q, L, il));
    return bind_ffn(m, q, L, il);
}

static memra_status_t bind_mtp(memra_model_t *m, q35_t *q, q35_mtp_t *t, int32_t il)
{
    const int64_t E = q->n_embd;
    const int32_t s = t->layer.stage;
    MEMRA__TRY(bind_layer(m, q, &t->layer, il));
    MEMRA__TRY(memra__w_get(m, s, &t->eh_proj, MEMRA_W_REQUIRED, SHAPE(2 * E, E), "blk.%d.nextn.eh_proj.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &t->enorm, MEMRA_W_REQUIRED, E, "blk.%d.nextn.enorm.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &t->hnorm, MEMRA_W_REQUIRED, E, "blk.%d.nextn.hnorm.weight", il));
    MEMRA__TRY(
        memra__w_vec(m, s, &t->shared_head_norm, MEMRA_W_OPTIONAL, E, "blk.%d.nextn.shared_head_norm.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &t->embed_tokens, MEMRA_W_OPTIONAL, SHAPE(E, q->n_vocab),
                            "blk.%d.nextn.embed_tokens.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &t->shared_head_head, MEMRA_W_OPTIONAL, SHAPE(E, q->n_vocab),
                            "blk.%d.nextn.shared_head_head.weight", il));
    return MEMRA_OK;
}

static memra_status_t bind_globals(memra_model_t *m, q35_t *q)
{
    const int32_t first = memra__first_stage(m), last = memra__last_stage(m);
    MEMRA__TRY(memra__w_get(m, first, &q->tok_embd, MEMRA_W_REQUIRED, SHAPE(q->n_embd, -1), "token_embd.weight"));
    q->n_vocab = q->tok_embd.ne[1];
    if (q->n_vocab <= 0 || q->n_vocab > INT32_MAX)
        return memra__model_fail(m, MEMRA_E_FORMAT, "%s: token_embd.weight has %lld rows", m->arch_name,
                                 (long long)q->n_vocab);
    MEMRA__TRY(memra__w_vec(m, last, &q->output_norm, MEMRA_W_REQUIRED, q->n_embd, "output_norm.weight"));
    MEMRA__TRY(memra__w_get(m, last, &q->output, MEMRA_W_OPTIONAL, SHAPE(q->n_embd, q->n_vocab), "output.weight"));
    if (!q->output.data) { /* tied head */
        if (last == first)
            q->output = q->tok_embd;
        else
            MEMRA__TRY(
                memra__w_get(m, last, &q->output, MEMRA_W_REQUIRED, SHAPE(q->n_embd, q->n_vocab), "token_embd.weight"));
    }
    return MEMRA_OK;
}

static memra_status_t bind_common(memra_model_t *m, bool moe)
{
    q35_t *q = calloc(1, sizeof *q);
    if (!q)
        return memra__model_fail(m, MEMRA_E_NOMEM, "%s: out of memory", m->arch_name);
    m->arch_data = q;
    q->moe = moe;

    uint32_t n_layer_all;
    bool recurrent[MEMRA_MAX_LAYERS];
    MEMRA__TRY(read_config(m, q, &n_layer_all));
    MEMRA__TRY(read_layer_types(m, n_layer_all, recurrent));

    uint32_t n_ff[MEMRA_MAX_LAYERS] = {0};
    if (!moe) {
        MEMRA__TRY(memra__cfg_u32_per_layer(m, "feed_forward_length", (int32_t)n_layer_all, true, 0, n_ff));
        for (uint32_t il = 0; il < n_layer_all; il++) {
            if (n_ff[il] == 0)
                return memra__model_fail(m, MEMRA_E_FORMAT, "%s.feed_forward_length is 0 for layer %u",
                                         m->arch_name, il);
            if (n_ff[il] > q->n_ff_max)
                q->n_ff_max = n_ff[il];
        }
    }

    m->n_embd = (int32_t)q->n_embd;
    m->carry_floats = q->n_embd;
    MEMRA__TRY(bind_globals(m, q));
    m->n_vocab = (int32_t)q->n_vocab;

    q->layers = calloc((size_t)m->n_layer, sizeof *q->layers);
    if (!q->layers)
        return memra__model_fail(m, MEMRA_E_NOMEM, "%s: out of memory", m->arch_name);
    for (int32_t il = 0; il < m->n_layer; il++) {
        q35_layer_t *L = &q->layers[il];
        L->recurrent = recurrent[il];
        L->stage = memra__stage_of_layer(m, il);
        L->n_ff = n_ff[il];
        m->layer_kind[il] = L->recurrent ? MEMRA_LAYER_RECURRENT : MEMRA_LAYER_ATTENTION;
        memra__layer_cache_t *lc = &m->layer_cache[il];
        memset(lc, 0, sizeof *lc);
        if (L->recurrent) {
            lc->conv_floats = (q->d_conv - 1) * q->conv_dim;
            lc->ssm_floats = q->n_v * q->d_k * q->d_v;
        } else {
            lc->k_floats = lc->v_floats = q->n_head_kv * q->head_dim;
            lc->kv_head_dim = q->head_dim;
        }
        MEMRA__TRY(bind_layer(m, q, L, il));
    }
    /* trunk layers cut off by params.n_layers */
    for (int32_t il = m->n_layer; il < m->n_layer_file; il++)
        memra__w_skip_layer(m, il);

    if (m->n_mtp > 0 && m->params.load_mtp) {
        q->mtp = calloc((size_t)m->n_mtp, sizeof *q->mtp);
        if (!q->mtp)
            return memra__model_fail(m, MEMRA_E_NOMEM, "%s: out of memory", m->arch_name);
        for (int32_t i = 0; i < m->n_mtp; i++) {
            int32_t il = m->n_layer_file + i;
            q->mtp[i].layer.stage = memra__last_stage(m); /* it reads the final hidden state */
            q->mtp[i].layer.n_ff = n_ff[il];
            MEMRA__TRY(bind_mtp(m, q, &q->mtp[i], il));
        }
    } else {
        for (int32_t i = 0; i < m->n_mtp; i++)
            memra__w_skip_layer(m, m->n_layer_file + i);
    }
    return MEMRA_OK;
}

static memra_status_t q35_bind(memra_model_t *m) { return bind_common(m, false); }
static memra_status_t q35moe_bind(memra_model_t *m) { return bind_common(m, true); }

static void q35_unbind(memra_model_t *m)
{
    q35_t *q = m->arch_data;
    if (!q)
        return;
    free(q->layers);
    free(q->mtp);
    free(q);
    m->arch_data = NULL;
}

/* ---- workspace ---------------------------------------------------------- */

/* Floats one callback bump-allocates for N tokens, per part of the layer;
 * kept next to the code that allocates them (same order). */
static int64_t ws_attention(const q35_t *q, int64_t n)
{
    const int64_t qdim = q->n_head * q->head_dim;
    return n * (2 * qdim)                        /* qg */
         + n * qdim                              /* q */
         + n * q->n_head_kv * q->head_dim        /* k before its norm */
         + n * qdim                              /* o */
         + 2 * n * q->n_head_kv * q->head_dim;   /* K and V rows before a non-F32 cache or several sequences' caches */
}

static int64_t ws_deltanet(const q35_t *q, int64_t n)
{
    return n * q->conv_dim                       /* mixed */
         + n * q->value_dim                      /* z */
         + 2 * n * q->n_v                        /* beta, alpha (g in place) */
         + n * q->conv_dim                       /* conv out */
         + n * 2 * q->key_dim                    /* q|k gathered and normed */
         + 2 * n * q->value_dim;                 /* o (normed in place), gated */
}

static int64_t ws_ffn(const q35_t *q, int64_t n)
{
    if (!q->moe)
        return 3 * n * q->n_ff_max + n * q->n_embd;
    return n * q->n_expert                       /* router logits */
         + 2 * n * q->n_expert_used              /* ids, weights */
         + 3 * n                                 /* shared gate logit; its id, weight (memra__moe scratch) */
         + n * q->n_embd;                        /* shared out (memra__moe scratch) */
}

static size_t q35_workspace_bytes(const memra_model_t *m, int32_t n_tokens)
{
    const q35_t *q = m->arch_data;
    const int64_t n = n_tokens;
    int64_t mix = ws_attention(q, n) > ws_deltanet(q, n) ? ws_attention(q, n) : ws_deltanet(q, n);
    int64_t layer = 3 * n * q->n_embd + mix + ws_ffn(q, n);
    int64_t head = n * q->n_embd;
    int64_t floats = layer > head ? layer : head;
    /* each allocation is rounded up to 256 bytes; a layer makes < 32 */
    return (size_t)floats * sizeof(float) + 32 * 256;
}

/* ---- forward ------------------------------------------------------------ */

static inline q35_t *Q(const memra__run_t *r) { return r->m->arch_data; }

static memra_status_t q35_embed(memra__run_t *r)
{
    return r->ops->get_rows(r->be, &Q(r)->tok_embd, r->tokens, r->n, r->carry, r->m->carry_floats);
}

/* Gated full attention (qwen35.cpp:255-334): per-head RMS-normed q and k,
 * NEOX rope on the first n_rot dims (IMROPE with text positions), causal GQA
 * over the KV cache, output gated by sigmoid of the per-head gate rows. */
static memra_status_t attention(memra__run_t *r, const q35_layer_t *L, int32_t il, float *x, float *h, float *delta)
{
    const q35_t *q = Q(r);
    const int64_t n = r->n, hd = q->head_dim, H = q->n_head, Hkv = q->n_head_kv, cf = r->m->carry_floats;
    const int64_t kv_w = r->m->layer_cache[il].k_floats;

    MEMRA__WS(qg, n * 2 * H * hd);
    MEMRA__WS(qn, n * H * hd);
    MEMRA__WS(kraw, n * Hkv * hd);
    MEMRA__WS(o, n * H * hd);
    MEMRA__WS(k_tmp, n * kv_w);
    MEMRA__WS(v_tmp, n * kv_w);
    /* one sequence's F32 cache rows of this step, else float rows stored
     * (converted) into each sequence's cache below */
    float *k_rows = memra__kv_dst(r, il, MEMRA__KV_K, k_tmp);
    float *v_rows = memra__kv_dst(r, il, MEMRA__KV_V, v_tmp);
    const int64_t kv_ld = kv_w;

    /* q|gate, k and v of attn_norm(x) */
    const memra_mm_args_t in = {.x = x, .ldx = cf, .n_rows = n, .norm = true, .norm_w = L->attn_norm, .eps = q->eps,
                                .n_w = 3, .w = {&L->wq, &L->wk, &L->wv}, .y = {qg, kraw, v_rows},
                                .ldy = {2 * H * hd, Hkv * hd, kv_ld}, .x_tmp = h};
    MEMRA__TRY(memra__matmul_ex(r->be, &in));

    /* per-head RMS norm + NEOX rope of q (head h: rows [2h·hd, 2h·hd+hd) of
     * qg) and of k; K is cached after its norm and rope */
    memra_qk_args_t qk = {
        .part = {{.src = qg, .src_head_stride = 2 * hd, .src_token_stride = 2 * H * hd, .dst = qn,
                  .dst_head_stride = hd, .dst_token_stride = H * hd, .n_heads = H, .norm_w = L->q_norm},
                 {.src = kraw, .src_head_stride = hd, .src_token_stride = Hkv * hd, .dst = k_rows,
                  .dst_head_stride = hd, .dst_token_stride = kv_ld, .n_heads = Hkv, .norm_w = L->k_norm}},
        .n_parts = 2, .eps = q->eps,
        .rope = {.n_tokens = n, .head_dim = hd, .n_rot = q->n_rot, .pos = r->pos, .base = q->rope_base,
                 .freq_factors = NULL, .mode = MEMRA_ROPE_NEOX}};
    /* K's and V's stores into the cache as the step's last ops (one launch
     * with it on CUDA) */
    memra_kv_store_args_t kv_items[MEMRA_QK_MAX_STORES];
    const bool stored = memra__kv_put_kv_with(r, il, k_rows, kv_w, v_rows, kv_w, &qk, kv_items);
    MEMRA__TRY(memra__qk_norm_rope(r->be, &qk));
    if (!stored)
        MEMRA__TRY(memra__kv_put_kv(r, il, k_rows, kv_w, v_rows, kv_w));

    const memra_attn_args_t at = {.q = qn, .out = o, .n_head = H, .n_kv_head = Hkv, .head_dim = hd,
                                  .q_stride = H * hd, .scale = 1.0f / sqrtf((float)hd), .n_swa = 0,
                                  /* o ⊙ sigmoid(gate): gate of head h is rows [2h·hd+hd, 2h·hd+2hd) of qg */
                                  .gate = qg + hd, .gate_stride = 2 * H * hd, .gate_head_stride = 2 * hd};
    MEMRA__TRY(memra__arch_attention(r, il, &at));
    /* x += wo · o */
    const memra_mm_args_t out = {.x = o, .ldx = H * hd, .n_rows = n, .n_w = 1, .w = {&L->wo}, .y = {x},
                                 .ldy = {cf}, .epi = MEMRA_MM_ADD, .tmp = {delta}};
    return memra__matmul_ex(r->be, &out);
}

/* Gated DeltaNet (qwen35.cpp:336-468): projections, causal depthwise conv
 * with SiLU over the q|k|v channels, L2-normed q and k, the gated delta rule
 * (value head j reads key head j mod n_k: the converter's tiled order), then
 * RMSNorm per value head gated by silu(z). */
static memra_status_t deltanet(memra__run_t *r, const q35_layer_t *L, int32_t il, float *x, float *h, float *delta)
{
    const q35_t *q = Q(r);
    const int64_t n = r->n, C = q->conv_dim, KD = q->key_dim, VD = q->value_dim, nv = q->n_v, cf = r->m->carry_floats;

    MEMRA__WS(mixed, n * C);
    MEMRA__WS(z, n * VD);
    MEMRA__WS(beta, n * nv);
    MEMRA__WS(alpha, n * nv);
    MEMRA__WS(conv, n * C);
    MEMRA__WS(qk, n * 2 * KD);
    MEMRA__WS(o, n * VD);
    MEMRA__WS(y, n * VD);

    /* the four in-projections of attn_norm(x); beta = sigmoid(·) and
     * g = softplus(alpha + dt_bias) · ssm_a (ssm_a = −exp(A_log) < 0) in place.
     * z last: a warp's last rows then have no float64 epilogue to finish */
    float *g = alpha;
    const memra_mm_args_t in = {.x = x, .ldx = cf, .n_rows = n, .norm = true, .norm_w = L->attn_norm, .eps = q->eps,
                                .n_w = 4, .w = {&L->wqkv, &L->wbeta, &L->walpha, &L->wz}, .y = {mixed, beta, alpha, z},
                                .ldy = {C, nv, nv, VD}, .x_tmp = h,
                                .post = {MEMRA_EW_COPY, MEMRA_EW_SIGMOID, MEMRA_EW_SOFTPLUS_MUL, MEMRA_EW_COPY},
                                .post_b = {NULL, NULL, L->dt_bias, NULL}, .post_aux = {NULL, NULL, L->ssm_a, NULL}};
    MEMRA__TRY(memra__matmul_ex(r->be, &in));

    /* q|k|v through the causal conv + SiLU (its state shifted), L2-normed q
     * and k heads (eps = rms eps), the delta rule (value head j reads key
     * head j mod n_k), then the gated RMSNorm per value head:
     * y = rms(o_j)·ssm_norm ⊙ silu(z_j). The conv is the step's (not the
     * in-projection's epilogue): per-row conv work at the end of the
     * matvec's rows cost ~2.5 % of a decode token (docs/PERFORMANCE.md) */
    /* each sequence through its own conv and delta-rule state, the
     * sequences in one batched call (a backend may run a step's decodes in
     * one launch) */
    memra_gdn_args_t st[MEMRA_MAX_BATCH];
    if (r->n_seg > MEMRA_MAX_BATCH)
        return memra__fail(r->be->err, MEMRA_E_INTERNAL, "deltanet: %d segments", (int)r->n_seg);
    for (int32_t i = 0; i < r->n_seg; i++) {
        const memra__seg_t *sg = &r->seg[i];
        const int64_t r0 = sg->row0;
        st[i] = (memra_gdn_args_t){
            .conv = {.x = mixed + r0 * C, .x_stride = C, .state = sg->c->conv[il], .w = (const float *)L->wconv.data,
                     .out = conv + r0 * C, .n_tokens = sg->n, .channels = C, .kernel = q->d_conv},
            .delta = {.q = conv + r0 * C, .k = conv + r0 * C + KD, .v = conv + r0 * C + 2 * KD, .g = g + r0 * nv,
                      .beta = beta + r0 * nv, .qk_stride = C, .v_stride = C, .gb_stride = nv, .state = sg->c->ssm[il],
                      .out = o + r0 * VD, .n_tokens = sg->n, .n_k = q->n_k, .n_v = nv, .d = q->d_k,
                      .scale = 1.0f / sqrtf((float)q->d_k)},
            .l2_eps = q->eps, .norm_w = L->ssm_norm, .norm_eps = q->eps, .z = z + r0 * VD, .z_stride = VD,
            .y = y + r0 * VD, .qk_tmp = qk + r0 * 2 * KD, .o_tmp = o + r0 * VD};
    }
    MEMRA__TRY(memra__gdn_batch(r->be, st, r->n_seg));
    /* x += ssm_out · y */
    const memra_mm_args_t out = {.x = y, .ldx = VD, .n_rows = n, .n_w = 1, .w = {&L->wssm_out}, .y = {x},
                                 .ldy = {cf}, .epi = MEMRA_MM_ADD, .tmp = {delta}};
    return memra__matmul_ex(r->be, &out);
}

/* x += down · (silu(gate · n) ⊙ (up · n)), n = post_norm(x) */
static memra_status_t swiglu_ffn(memra__run_t *r, const q35_layer_t *L, float *x, float *h, float *delta)
{
    const int64_t n = r->n, F = L->ffn_gate.ne[1], cf = r->m->carry_floats;
    MEMRA__WS(gt, n * F);
    MEMRA__WS(ut, n * F);
    MEMRA__WS(act, n * F);
    const memra_mm_args_t gu = {.x = x, .ldx = cf, .n_rows = n, .norm = true, .norm_w = L->post_norm,
                                .eps = Q(r)->eps, .n_w = 2, .w = {&L->ffn_gate, &L->ffn_up}, .y = {act},
                                .ldy = {F}, .epi = MEMRA_MM_GLU, .act = MEMRA_ACT_SILU, .x_tmp = h,
                                .tmp = {gt, ut}};
    MEMRA__TRY(memra__matmul_ex(r->be, &gu));
    const memra_mm_args_t down = {.x = act, .ldx = F, .n_rows = n, .n_w = 1, .w = {&L->ffn_down}, .y = {x},
                                  .ldy = {cf}, .epi = MEMRA_MM_ADD, .tmp = {delta}};
    return memra__matmul_ex(r->be, &down);
}

/* qwen35moe.cpp:494-548: softmax router, top-k, renormalized weights, SwiGLU
 * experts; plus the shared expert scaled by sigmoid(ffn_gate_inp_shexp · x).
 * Added to the residual rows RESID (carry rows) in the MoE's last launch on
 * CUDA; SUM is the sequence's scratch for the sum. */
static memra_status_t moe_ffn(memra__run_t *r, const q35_layer_t *L, const float *x, float *resid, float *sum)
{
    const q35_t *q = Q(r);
    const int64_t n = r->n, E = q->n_embd, X = q->n_expert, K = q->n_expert_used;

    MEMRA__WS(logits, n * X);
    int32_t *ids = memra__ws(r, (size_t)(n * K) * sizeof(int32_t));
    MEMRA__WS(wts, n * K);
    MEMRA__WS(sg, n);
    int32_t *sh_id = memra__ws(r, (size_t)n * sizeof(int32_t));
    MEMRA__WS(sh_w, n);
    MEMRA__WS(shared, n * E);
    if (!ids || !sh_id)
        return MEMRA_E_INTERNAL;

    /* The router's logits and the shared expert's gate (one scalar per
     * token: memra__moe weighs the shared expert's output by its sigmoid
     * and adds it to the routed sum, as a one-expert MoE, lib/moe_ex.c; one
     * launch pair on CUDA), both of x: one matmul_ex (on CUDA one float
     * matvec launch in decode), and the route of the logits (memra__router:
     * on CUDA that launch's last block, with MEMRA_ROUTE_FUSE=1) */
    const memra_mm_args_t ra = {.x = x, .ldx = E, .n_rows = n, .n_w = 2, .w = {&L->gate_inp, &L->gate_inp_shexp},
                                .y = {logits, sg}, .ldy = {X, 1}};
    const memra_route_args_t rt = {.logits = logits, .ids = ids, .weights = wts, .n_tokens = n, .n_expert = X,
                                   .k = K, .norm = true};
    MEMRA__TRY(memra__router(r->be, &ra, &rt));
    const memra_moe_shared_t sh = {.gate = &L->gate_shexp, .up = &L->up_shexp, .down = &L->down_shexp,
                                   .n_ff = q->n_ff_shexp, .logit = sg, .ids_tmp = sh_id, .w_tmp = sh_w,
                                   .out_tmp = shared};
    memra_moe_args_t mo = {.x = x, .ids = ids, .weights = wts, .down = &L->down_exps, .out = resid,
                           .n_tokens = n, .k = K, .n_embd = E, .n_ff = q->n_ff_exp, .act = MEMRA_ACT_SILU,
                           .shared = &sh, .accumulate = true, .out_stride = r->m->carry_floats, .acc_tmp = sum};
    if (L->gate_up_exps.data) {
        mo.gate_up = &L->gate_up_exps;
    } else {
        mo.gate = &L->gate_exps;
        mo.up = &L->up_exps;
    }
    return memra__moe(r->be, &mo);
}

static memra_status_t q35_layer(memra__run_t *r, int32_t il)
{
    const q35_t *q = Q(r);
    const q35_layer_t *L = &q->layers[il];
    const int64_t n = r->n, E = q->n_embd, cf = r->m->carry_floats;
    float *x = r->carry; /* hidden state: the first n_embd floats of each carry row */
    const memra__backend_i *ops = r->ops;

    /* h: a normed copy of x, delta: a branch output (scratch of the fused
     * matmuls when they run unfused) */
    MEMRA__WS(h, n * E);
    MEMRA__WS(delta, n * E);
    MEMRA__TRY(L->recurrent ? deltanet(r, L, il, x, h, delta) : attention(r, L, il, x, h, delta));
    if (!q->moe)
        return swiglu_ffn(r, L, x, h, delta);
    MEMRA__TRY(ops->norm(r->be, MEMRA_NORM_RMS, x, cf, L->post_norm, h, E, n, E, q->eps));
    return moe_ffn(r, L, h, x, delta);
}

static memra_status_t q35_head(memra__run_t *r)
{
    const q35_t *q = Q(r);
    return memra__arch_head(r, q->output_norm, &q->output, q->n_embd, q->eps, 0.0f);
}

const memra__arch_t memra__arch_qwen35 = {
    .name = "qwen35",
    .bind = q35_bind,
    .unbind = q35_unbind,
    .workspace_bytes = q35_workspace_bytes,
    .embed = q35_embed,
    .layer = q35_layer,
    .head = q35_head,
};

const memra__arch_t memra__arch_qwen35moe = {
    .name = "qwen35moe",
    .bind = q35moe_bind,
    .unbind = q35_unbind,
    .workspace_bytes = q35_workspace_bytes,
    .embed = q35_embed,
    .layer = q35_layer,
    .head = q35_head,
};
