/* gemma4 internals shared by the binder (arch_gemma4.c) and the forward
 * (arch_gemma4_forward.c). Not installed. */
#ifndef MEMRA_ARCH_GEMMA4_IMPL_H
#define MEMRA_ARCH_GEMMA4_IMPL_H

#include "arch_common.h"

typedef struct memra__g4_layer {
    /* geometry: everything that depends on the layer type (model-spec §6.1) */
    bool swa;                  /* sliding-window layer */
    int32_t hd, n_rot, n_head, n_kv_head, n_ff;
    float base;
    int32_t kv_src;            /* layer whose KV rows this layer attends over (itself unless KV-shared) */
    /* Cross-stage KV sharing (set at bind, once stages are known). A source
     * with a reader on a later stage copies its chunk's K/V rows into the
     * carry at kv_carry ([K | V] per token row; 0 = no remote reader). On
     * each such stage the first reader of that source holds a mirror cache
     * (kv_fill: it copies the rows from the carry into its own c->k/c->v
     * before attending); kv_read is the layer whose c->k/c->v this layer
     * reads: itself (owner or mirror holder), kv_src on the same stage, or
     * the mirror holder of its stage. */
    int64_t kv_carry;
    int32_t kv_read;
    bool kv_fill;
    bool moe;

    /* attention */
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm;
    memra_weight_t wq, wk, wv, wo; /* wv.data NULL: V is the raw K projection */
    const float *freq_factors; /* full layers: rope_freqs (proportional rope), else NULL */

    /* dense MLP (on MoE layers the parallel one) */
    const float *ffn_norm, *post_ffw_norm;
    memra_weight_t ffn_gate, ffn_up, ffn_down;

    /* MoE */
    memra_weight_t gate_inp, gate_up_exps, gate_exps, up_exps, down_exps;
    const float *gate_inp_scale, *down_exps_scale;
    const float *pre_ffw_norm_2, *post_ffw_norm_1, *post_ffw_norm_2;

    /* per-layer embeddings */
    memra_weight_t inp_gate, proj;
    const float *post_norm;

    float out_scale;           /* layer_output_scale (1 when absent), read at load time */
} memra__g4_layer_t;

typedef struct memra__g4 {
    memra__g4_layer_t *layers; /* [MEMRA_MAX_LAYERS] */
    int32_t n_pl;              /* per-layer input width (0: no PLE) */
    int32_t n_swa;
    int32_t n_rot_full;
    int32_t n_expert, n_expert_used, n_ff_exp;
    float eps, softcap;
    memra_weight_t tok_embd, output; /* output = tok_embd when tied */
    const float *output_norm;
    memra_weight_t pl_tok_embd, pl_model_proj;
    const float *pl_proj_norm;
    bool rope_freqs_present;
    const float *rope_freqs[MEMRA_MAX_STAGES]; /* per stage copy */
    int32_t *suppress;         /* sorted token ids whose logits are -inf */
    int32_t n_suppress;
    /* carry offset of rms(x, attn_norm) of the layer about to run: the
     * last norm chain of layer il writes it for layer il + 1 (it holds the
     * row), so that layer's q/k/v matmul takes it un-normed (no norm step
     * of its own: on CUDA no x prep before a batched step's skinny GEMM) */
    int64_t hn_carry;
} memra__g4_t;

memra_status_t memra__g4_embed(memra__run_t *r);
memra_status_t memra__g4_layer(memra__run_t *r, int32_t il);
memra_status_t memra__g4_head(memra__run_t *r);

#endif
