/* gemma4 forward (model-spec §6.3), written against the backend ops only:
 * it is the numerical reference the GPU path is judged against, so every
 * step is one op and reads like the spec's pseudocode.
 *
 * Carry row of a token: [ hidden x (n_embd) | pl[0] | pl[1] | ... | kv... ]
 * where pl[il] (n_pl floats, PLE models only) is layer il's per-layer input,
 * computed once in embed and read by layer il, possibly on another stage,
 * and kv holds, per source layer whose KV is shared with a later stage, its
 * K and V rows of the token (arch_gemma4.c, g4_plan_shared_kv). */
#include <math.h>

#include "arch_gemma4_impl.h"

/* ---- one-line wrappers over the ops ---------------------------------- */

static memra_status_t rms(memra__run_t *r, const float *x, int64_t xs, const float *w, float *y, int64_t ys,
                          int64_t rows, int64_t dim)
{
    const memra__g4_t *g = r->m->arch_data;
    return r->ops->norm(r->be, MEMRA_NORM_RMS, x, xs, w, y, ys, rows, dim, g->eps);
}

static memra_status_t mm(memra__run_t *r, const memra_weight_t *w, const float *x, int64_t ldx, float *y,
                         int64_t ldy, int64_t rows)
{
    return r->ops->matmul(r->be, w, x, ldx, y, ldy, rows);
}

static memra_status_t rope(memra__run_t *r, const memra__g4_layer_t *L, float *x, int64_t n_heads,
                           int64_t token_stride)
{
    const memra_rope_args_t a = {
        .x = x,
        .n_tokens = r->n,
        .n_heads = n_heads,
        .head_dim = L->hd,
        .head_stride = L->hd,
        .token_stride = token_stride,
        .n_rot = L->n_rot,
        .pos = r->pos,
        .base = L->base,
        .freq_factors = L->freq_factors,
        .mode = MEMRA_ROPE_NEOX,
    };
    return r->ops->rope(r->be, &a);
}

/* ---- embed ------------------------------------------------------------ */

memra_status_t memra__g4_embed(memra__run_t *r)
{
    const memra_model_t *m = r->m;
    const memra__g4_t *g = m->arch_data;
    const int64_t n = r->n, D = m->n_embd, cf = m->carry_floats;
    float *x = r->carry;

    /* x = token_embd[tok] * sqrt(n_embd) */
    MEMRA__TRY(r->ops->get_rows(r->be, &g->tok_embd, r->tokens, n, x, cf));
    MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_SCALE, x, cf, x, cf, NULL, 0, n, D, sqrtf((float)D)));
    if (g->n_pl == 0)
        return MEMRA_OK;

    /* Per-layer inputs. The file holds slices for every layer; only the
     * first n_layer (the ones that run) go into the carry. */
    const int64_t n_pl = g->n_pl, plf = n_pl * m->n_layer_file, pl_run = n_pl * m->n_layer;
    float *pl = x + D;
    /* a = per_layer_token_embd[tok] * sqrt(n_pl) */
    MEMRA__WS(a, n * plf);
    MEMRA__TRY(r->ops->get_rows(r->be, &g->pl_tok_embd, r->tokens, n, a, plf));
    MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_SCALE, a, plf, a, plf, NULL, 0, n, plf, sqrtf((float)n_pl)));
    /* b = rms_per_layer((per_layer_model_proj · x) / sqrt(n_embd), per_layer_proj_norm) */
    MEMRA__WS(b, n * plf);
    MEMRA__TRY(mm(r, &g->pl_model_proj, x, cf, b, plf, n));
    MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_SCALE, b, plf, b, plf, NULL, 0, n, plf, 1.0f / sqrtf((float)D)));
    MEMRA__WS(bn, n * plf);
    MEMRA__TRY(rms(r, b, n_pl, g->pl_proj_norm, bn, n_pl, n * m->n_layer_file, n_pl));
    /* pl = (a + b) / sqrt(2) */
    MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_ADD, pl, cf, bn, plf, a, plf, n, pl_run, 0.0f));
    MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_SCALE, pl, cf, pl, cf, NULL, 0, n, pl_run, 1.0f / sqrtf(2.0f)));
    return MEMRA_OK;
}

/* ---- layer ------------------------------------------------------------ */

/* out = Wo · Attention(q, cache[kv_src]): the attention block up to (not
 * including) post_attention_norm. Writes this chunk's K/V rows first when
 * the layer owns its cache (or mirrors a source on an earlier stage). x:
 * hidden rows, cf apart (= r->carry). */
static memra_status_t g4_attention(memra__run_t *r, int32_t il, const float *x, float *out)
{
    const memra_model_t *m = r->m;
    const memra__g4_t *g = m->arch_data;
    const memra__g4_layer_t *L = &g->layers[il];
    const int64_t n = r->n, D = m->n_embd, cf = m->carry_floats;
    const int64_t hd = L->hd, q_dim = (int64_t)L->n_head * hd, kv_dim = (int64_t)L->n_kv_head * hd;

    MEMRA__WS(h, n * D);
    MEMRA__TRY(rms(r, x, cf, L->attn_norm, h, D, n, D));

    /* q = NEOX_rope(rms_perhead(Wq·h, q_norm)) */
    MEMRA__WS(q_raw, n * q_dim);
    MEMRA__WS(q, n * q_dim);
    MEMRA__TRY(mm(r, &L->wq, h, D, q_raw, q_dim, n));
    MEMRA__TRY(rms(r, q_raw, hd, L->q_norm, q, hd, n * L->n_head, hd));
    MEMRA__TRY(rope(r, L, q, L->n_head, q_dim));

    if (L->kv_src == il) {
        /* K and V are normed straight into this chunk's cache rows
         * pos0..pos0+n-1 of an F32 cache (a cache row is exactly
         * n_kv_head*hd floats), else into float rows converted after:
         * k = NEOX_rope(rms_perhead(Wk·h, k_norm)), v = rms_perhead(Wv·h)
         * without weight, where a layer without attn_v uses the raw K
         * projection as V (taken before the k norm). */
        MEMRA__WS(k_tmp, n * kv_dim);
        MEMRA__WS(v_tmp, n * kv_dim);
        float *k_rows = memra__kv_dst(r, il, MEMRA__KV_K, k_tmp);
        float *v_rows = memra__kv_dst(r, il, MEMRA__KV_V, v_tmp);
        MEMRA__WS(k_raw, n * kv_dim);
        MEMRA__TRY(mm(r, &L->wk, h, D, k_raw, kv_dim, n));
        const float *v_raw = k_raw;
        if (L->wv.data) {
            MEMRA__WS(v_proj, n * kv_dim);
            MEMRA__TRY(mm(r, &L->wv, h, D, v_proj, kv_dim, n));
            v_raw = v_proj;
        }
        MEMRA__TRY(rms(r, k_raw, hd, L->k_norm, k_rows, hd, n * L->n_kv_head, hd));
        MEMRA__TRY(rope(r, L, k_rows, L->n_kv_head, kv_dim));
        MEMRA__TRY(rms(r, v_raw, hd, NULL, v_rows, hd, n * L->n_kv_head, hd));
        MEMRA__TRY(memra__kv_put(r, il, MEMRA__KV_K, k_rows, kv_dim));
        MEMRA__TRY(memra__kv_put(r, il, MEMRA__KV_V, v_rows, kv_dim));
        if (L->kv_carry) { /* a reader on a later stage: send the rows along */
            float *slot = r->carry + L->kv_carry;
            MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_COPY, slot, cf, k_rows, kv_dim, NULL, 0, n, kv_dim, 0.0f));
            MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_COPY, slot + kv_dim, cf, v_rows, kv_dim, NULL, 0, n, kv_dim, 0.0f));
        }
    } else if (L->kv_fill) {
        /* the source is on an earlier stage: append its rows of this step,
         * taken from the carry, to this stage's mirror of each cache */
        const float *slot = r->carry + g->layers[L->kv_src].kv_carry;
        MEMRA__TRY(memra__kv_put(r, il, MEMRA__KV_K, slot, cf));
        MEMRA__TRY(memra__kv_put(r, il, MEMRA__KV_V, slot + kv_dim, cf));
    }

    /* A KV-shared layer reads its source's rows 0..pos0+n-1 (or the
     * mirror's, which are the same floats): the source runs earlier in the
     * same step, so this step's rows are there. */
    const int32_t src = L->kv_read;
    MEMRA__WS(attn, n * q_dim);
    memra_attn_args_t a = {
        .q = q,
        .out = attn,
        .n_head = L->n_head,
        .n_kv_head = L->n_kv_head,
        .head_dim = hd,
        .q_stride = q_dim,
        .scale = 1.0f, /* q and k are RMS-normed: no 1/sqrt(hd) */
        .n_swa = L->swa ? g->n_swa : 0,
    };
    MEMRA__TRY(memra__arch_attention(r, src, &a));
    return mm(r, &L->wo, attn, q_dim, out, D, n);
}

/* out = down( gelu(gate·x) ⊙ up·x ), x and out [n][n_embd]. */
static memra_status_t g4_dense_mlp(memra__run_t *r, const memra__g4_layer_t *L, const float *x, float *out)
{
    const int64_t n = r->n, D = r->m->n_embd, F = L->n_ff;
    MEMRA__WS(gate, n * F);
    MEMRA__WS(up, n * F);
    MEMRA__WS(act, n * F);
    MEMRA__TRY(mm(r, &L->ffn_gate, x, D, gate, F, n));
    MEMRA__TRY(mm(r, &L->ffn_up, x, D, up, F, n));
    MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_GEGLU, act, F, gate, F, up, F, n, F, 0.0f));
    return mm(r, &L->ffn_down, act, F, out, D, n);
}

/* The routed experts of a MoE layer, before post_ffw_norm_2. resid is the
 * post-attention residual r [n][n_embd]. */
static memra_status_t g4_moe(memra__run_t *r, const memra__g4_layer_t *L, const float *resid, float *out)
{
    const memra__g4_t *g = r->m->arch_data;
    const int64_t n = r->n, D = r->m->n_embd, E = g->n_expert, K = g->n_expert_used;

    /* Router (HF Gemma4TextRouter): logits = gate_inp · (rms(r) ⊙ scale / sqrt(n_embd)),
     * with a weightless rms; then softmax, top-k, renormalise. */
    MEMRA__WS(rn, n * D);
    MEMRA__TRY(rms(r, resid, D, NULL, rn, D, n, D));
    MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_MUL, rn, D, rn, D, L->gate_inp_scale, 0, n, D, 0.0f));
    MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_SCALE, rn, D, rn, D, NULL, 0, n, D, 1.0f / sqrtf((float)D)));
    MEMRA__WS(logits, n * E);
    MEMRA__TRY(mm(r, &L->gate_inp, rn, D, logits, E, n));
    int32_t *ids = memra__ws(r, (size_t)(n * K) * sizeof(int32_t));
    if (!ids)
        return MEMRA_E_INTERNAL;
    MEMRA__WS(weights, n * K);
    const memra_route_args_t ra = {
        .logits = logits, .ids = ids, .weights = weights, .n_tokens = n, .n_expert = E, .k = K, .norm = true,
    };
    MEMRA__TRY(r->ops->route(r->be, &ra));

    /* Experts see rms(r, pre_ffw_norm_2); the per-expert scale multiplies
     * each expert's output (linear, so the same as HF scaling the weight). */
    MEMRA__WS(h2, n * D);
    MEMRA__TRY(rms(r, resid, D, L->pre_ffw_norm_2, h2, D, n, D));
    const memra_moe_args_t ma = {
        .x = h2,
        .ids = ids,
        .weights = weights,
        .gate = L->gate_exps.data ? &L->gate_exps : NULL,
        .up = L->up_exps.data ? &L->up_exps : NULL,
        .gate_up = L->gate_up_exps.data ? &L->gate_up_exps : NULL,
        .down = &L->down_exps,
        .expert_scale = L->down_exps_scale,
        .out = out,
        .n_tokens = n,
        .k = K,
        .n_embd = D,
        .n_ff = g->n_ff_exp,
        .act = MEMRA_ACT_GELU,
    };
    return r->ops->moe(r->be, &ma);
}

memra_status_t memra__g4_layer(memra__run_t *r, int32_t il)
{
    const memra_model_t *m = r->m;
    const memra__g4_t *g = m->arch_data;
    const memra__g4_layer_t *L = &g->layers[il];
    const int64_t n = r->n, D = m->n_embd, cf = m->carry_floats;
    float *x = r->carry;

    /* r = x + rms(attention, post_attention_norm) */
    MEMRA__WS(attn_out, n * D);
    MEMRA__WS(resid, n * D);
    MEMRA__TRY(g4_attention(r, il, x, attn_out));
    MEMRA__TRY(rms(r, attn_out, D, L->post_attn_norm, attn_out, D, n, D));
    MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_ADD, resid, D, x, cf, attn_out, D, n, D, 0.0f));

    /* f = GeGLU(rms(r, ffn_norm)); on MoE layers
     * f = rms(f, post_ffw_norm_1) + rms(experts(r), post_ffw_norm_2) */
    MEMRA__WS(hf, n * D);
    MEMRA__WS(f, n * D);
    MEMRA__TRY(rms(r, resid, D, L->ffn_norm, hf, D, n, D));
    MEMRA__TRY(g4_dense_mlp(r, L, hf, f));
    if (L->moe) {
        MEMRA__WS(experts, n * D);
        MEMRA__TRY(g4_moe(r, L, resid, experts));
        MEMRA__TRY(rms(r, f, D, L->post_ffw_norm_1, f, D, n, D));
        MEMRA__TRY(rms(r, experts, D, L->post_ffw_norm_2, experts, D, n, D));
        MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_ADD, f, D, f, D, experts, D, n, D, 0.0f));
    }

    /* x = r + rms(f, post_ffw_norm) */
    MEMRA__TRY(rms(r, f, D, L->post_ffw_norm, f, D, n, D));
    MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_ADD, x, cf, resid, D, f, D, n, D, 0.0f));

    /* PLE: x += rms(proj · (gelu(inp_gate · x) ⊙ pl[il]), post_norm) */
    if (g->n_pl > 0) {
        const int64_t n_pl = g->n_pl;
        const float *pl = x + D + (int64_t)il * n_pl;
        MEMRA__WS(gate, n * n_pl);
        MEMRA__WS(gated, n * n_pl);
        MEMRA__WS(p, n * D);
        MEMRA__TRY(mm(r, &L->inp_gate, x, cf, gate, n_pl, n));
        MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_GEGLU, gated, n_pl, gate, n_pl, pl, cf, n, n_pl, 0.0f));
        MEMRA__TRY(mm(r, &L->proj, gated, n_pl, p, D, n));
        MEMRA__TRY(rms(r, p, D, L->post_norm, p, D, n, D));
        MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_ADD, x, cf, x, cf, p, D, n, D, 0.0f));
    }

    /* layer_output_scale scales the whole residual stream, after PLE */
    if (L->out_scale != 1.0f)
        MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_SCALE, x, cf, x, cf, NULL, 0, n, D, L->out_scale));
    return MEMRA_OK;
}

/* ---- head ------------------------------------------------------------- */

memra_status_t memra__g4_head(memra__run_t *r)
{
    const memra_model_t *m = r->m;
    const memra__g4_t *g = m->arch_data;
    const int64_t n = r->n_out, V = m->n_vocab;

    /* logits = softcap(output · rms(x, output_norm)) */
    MEMRA__TRY(memra__arch_head(r, g->output_norm, &g->output, m->n_embd, g->eps));
    if (g->softcap > 0.0f)
        MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_SOFTCAP, r->logits, V, r->logits, V, NULL, 0, n, V, g->softcap));

    /* tokenizer.ggml.suppress_tokens -> -inf, one fill per run of ids */
    for (int32_t i = 0; i < g->n_suppress;) {
        int32_t j = i + 1;
        while (j < g->n_suppress && g->suppress[j] == g->suppress[j - 1] + 1)
            j++;
        MEMRA__TRY(
            memra__arch_ew(r, MEMRA_EW_FILL, r->logits + g->suppress[i], V, NULL, 0, NULL, 0, n, j - i, -INFINITY));
        i = j;
    }
    return MEMRA_OK;
}
