/* gemma4 forward (model-spec §6.3), written against the backend ops only:
 * it is the numerical reference the GPU path is judged against, and reads
 * like the spec's pseudocode. Where a run of steps is a fused op's defining
 * sequence (lib/backend.h: matmul_ex, qk_norm_rope, norm_ex and its
 * chains) the forward calls the fused op: the CPU runs that very sequence,
 * so the logits are the bits of the one-op-per-step forward, and the CUDA
 * backend runs it in one launch (a decode layer of the g4-moe fixture: 32
 * backend ops became 13, of g4-dense 22 became 10).
 *
 * Carry row of a token: [ hidden x (n_embd) | pl[0] | pl[1] | ... | kv... | hn ]
 * where pl[il] (n_pl floats, PLE models only) is layer il's per-layer input,
 * computed once in embed and read by layer il, possibly on another stage,
 * kv holds, per source layer whose KV is shared with a later stage, its
 * K and V rows of the token (arch_gemma4.c, g4_plan_shared_kv), and hn
 * (n_embd floats, unless MEMRA_G4_NORM_AHEAD=0) the next layer's
 * rms(x, attn_norm), written by the last norm chain of the layer before
 * it (g4_last_chain). */
#include <math.h>

#include "arch_gemma4_impl.h"

/* ---- one-line wrappers over the ops ---------------------------------- */

static memra_status_t mm(memra__run_t *r, const memra_weight_t *w, const float *x, int64_t ldx, float *y,
                         int64_t ldy, int64_t rows)
{
    return r->ops->matmul(r->be, w, x, ldx, y, ldy, rows);
}

/* y = (add +) rms(x, w) (* scale), rows of n_embd: a sandwich post-norm
 * feeding the residual stream, or a norm of it (norm_ex). With an add, x
 * is the sequence's scratch (normed in place there). */
static memra_norm_args_t g4_norm(const memra__run_t *r, float *x, int64_t xs, const float *w, const float *add,
                                 int64_t adds, float *y, int64_t ys, float scale)
{
    const memra__g4_t *g = r->m->arch_data;
    return (memra_norm_args_t){.x = x, .xs = xs, .w = w, .eps = g->eps, .add = add, .adds = adds, .scale = scale,
                               .y = y, .ys = ys, .rows = r->n, .dim = r->m->n_embd, .tmp = add ? x : NULL};
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
    /* pl = (a + b) / sqrt(2): one norm_ex over the per-layer rows (n_pl
     * floats each). One token's rows that run lie back to back in the
     * carry, so decode writes them there; for several tokens the rows are
     * not one stride apart in the carry, so they go to a (in place) and
     * are copied over. */
    memra_norm_args_t na = {.x = b, .xs = n_pl, .w = g->pl_proj_norm, .eps = g->eps, .add = a, .adds = n_pl,
                            .scale = 1.0f / sqrtf(2.0f), .y = pl, .ys = n_pl, .rows = m->n_layer, .dim = n_pl,
                            .tmp = b};
    if (n == 1)
        return memra__norm_ex(r->be, &na);
    na.y = a;
    na.rows = n * m->n_layer_file;
    MEMRA__TRY(memra__norm_ex(r->be, &na));
    return memra__arch_ew(r, MEMRA_EW_COPY, pl, cf, a, plf, NULL, 0, n, pl_run, 0.0f);
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

    /* q (and k, v) = W · h, h = rms(x, attn_norm): one matmul_ex; after
     * the first layer h is in the carry (the previous layer's last norm
     * chain wrote it, g4_last_chain) */
    MEMRA__WS(q_raw, n * q_dim);
    MEMRA__WS(q, n * q_dim);
    const bool own_norm = il == 0 || !g->hn_carry;
    float *h = own_norm ? memra__wsf(r, n * D) : NULL;
    if (own_norm && !h)
        return MEMRA_E_INTERNAL;
    memra_mm_args_t in = {.x = own_norm ? x : r->carry + g->hn_carry, .ldx = cf, .n_rows = n, .norm = own_norm,
                          .norm_w = L->attn_norm, .eps = g->eps, .n_w = 1, .w = {&L->wq}, .y = {q_raw},
                          .ldy = {q_dim}, .x_tmp = h};
    /* q = NEOX_rope(rms_perhead(q_raw, q_norm)): part 0 of one qk_norm_rope */
    memra_qk_args_t qk = {
        .part = {{.src = q_raw, .src_head_stride = hd, .src_token_stride = q_dim, .dst = q, .dst_head_stride = hd,
                  .dst_token_stride = q_dim, .n_heads = L->n_head, .norm_w = L->q_norm}},
        .n_parts = 1, .eps = g->eps,
        .rope = {.n_tokens = n, .head_dim = hd, .n_rot = L->n_rot, .pos = r->pos, .base = L->base,
                 .freq_factors = L->freq_factors, .mode = MEMRA_ROPE_NEOX}};

    if (L->kv_src == il) {
        /* K and V are normed straight into this chunk's cache rows
         * pos0..pos0+n-1 of an F32 cache (a cache row is exactly
         * n_kv_head*hd floats), else into float rows converted after:
         * k = NEOX_rope(rms_perhead(Wk·h, k_norm)), v = rms_perhead(Wv·h)
         * without weight and without rope (qk_norm_rope's parts 1 and 2),
         * where a layer without attn_v uses the raw K projection as V
         * (taken before the k norm: both parts read k_raw). */
        MEMRA__WS(k_tmp, n * kv_dim);
        MEMRA__WS(v_tmp, n * kv_dim);
        float *k_rows = memra__kv_dst(r, il, MEMRA__KV_K, k_tmp);
        float *v_rows = memra__kv_dst(r, il, MEMRA__KV_V, v_tmp);
        MEMRA__WS(k_raw, n * kv_dim);
        in.w[in.n_w] = &L->wk;
        in.y[in.n_w] = k_raw;
        in.ldy[in.n_w++] = kv_dim;
        const float *v_raw = k_raw;
        if (L->wv.data) {
            MEMRA__WS(v_proj, n * kv_dim);
            in.w[in.n_w] = &L->wv;
            in.y[in.n_w] = v_proj;
            in.ldy[in.n_w++] = kv_dim;
            v_raw = v_proj;
        }
        MEMRA__TRY(memra__matmul_ex(r->be, &in));
        qk.part[1] = (memra_qk_part_t){.src = k_raw, .src_head_stride = hd, .src_token_stride = kv_dim,
                                       .dst = k_rows, .dst_head_stride = hd, .dst_token_stride = kv_dim,
                                       .n_heads = L->n_kv_head, .norm_w = L->k_norm};
        qk.part[2] = (memra_qk_part_t){.src = v_raw, .src_head_stride = hd, .src_token_stride = kv_dim,
                                       .dst = v_rows, .dst_head_stride = hd, .dst_token_stride = kv_dim,
                                       .n_heads = L->n_kv_head, .norm_w = NULL, .no_rope = true};
        qk.n_parts = 3;
        /* the rows' stores into the cache as the step's last ops (one
         * launch with it on CUDA) */
        memra_kv_store_args_t kv_items[MEMRA_QK_MAX_STORES];
        const bool stored = memra__kv_put_kv_with(r, il, k_rows, kv_dim, v_rows, kv_dim, &qk, kv_items);
        MEMRA__TRY(memra__qk_norm_rope(r->be, &qk));
        if (!stored)
            MEMRA__TRY(memra__kv_put_kv(r, il, k_rows, kv_dim, v_rows, kv_dim));
        if (L->kv_carry) { /* a reader on a later stage: send the rows along */
            float *slot = r->carry + L->kv_carry;
            MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_COPY, slot, cf, k_rows, kv_dim, NULL, 0, n, kv_dim, 0.0f));
            MEMRA__TRY(memra__arch_ew(r, MEMRA_EW_COPY, slot + kv_dim, cf, v_rows, kv_dim, NULL, 0, n, kv_dim, 0.0f));
        }
    } else {
        MEMRA__TRY(memra__matmul_ex(r->be, &in));
        MEMRA__TRY(memra__qk_norm_rope(r->be, &qk));
        if (L->kv_fill) {
            /* the source is on an earlier stage: append its rows of this
             * step, taken from the carry, to this stage's mirror of each
             * cache */
            const float *slot = r->carry + g->layers[L->kv_src].kv_carry;
            MEMRA__TRY(memra__kv_put_kv(r, il, slot, cf, slot + kv_dim, cf));
        }
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

/* out = down( gelu(gate·h) ⊙ up·h ), h = rms(x, ffn_norm); x and out
 * [n][n_embd]. Both halves and the GeGLU are one matmul_ex (MEMRA_ACT_GELU
 * is elementwise GEGLU's tanh-form GELU, the one gemma4's
 * gelu_pytorch_tanh is), the norm its first step unless X is h already
 * (NORMED: the norm chain after the attention wrote it); PRE (or NULL),
 * the norm_ex whose output x is, its step before. */
static memra_status_t g4_dense_mlp(memra__run_t *r, const memra__g4_layer_t *L, const float *x, bool normed,
                                   float *out, const memra_norm_args_t *pre)
{
    const memra__g4_t *g = r->m->arch_data;
    const int64_t n = r->n, D = r->m->n_embd, F = L->n_ff;
    float *h = normed ? NULL : memra__wsf(r, n * D);
    MEMRA__WS(gate, n * F);
    MEMRA__WS(up, n * F);
    MEMRA__WS(act, n * F);
    if (!normed && !h)
        return MEMRA_E_INTERNAL;
    const memra_mm_args_t gu = {.x = x, .ldx = D, .n_rows = n, .norm = !normed, .norm_w = L->ffn_norm,
                                .eps = g->eps, .n_w = 2, .w = {&L->ffn_gate, &L->ffn_up}, .y = {act}, .ldy = {F},
                                .epi = MEMRA_MM_GLU, .act = MEMRA_ACT_GELU, .x_tmp = h, .tmp = {gate, up},
                                .pre = pre};
    MEMRA__TRY(memra__matmul_ex(r->be, &gu));
    return mm(r, &L->ffn_down, act, F, out, D, n);
}

/* The router of a MoE layer and its top-k: RN (the router's input,
 * [n][n_embd]) into IDS and WEIGHTS [n][k], on a side branch
 * (memra__side): it needs only RN, so it may run beside the dense MLP
 * (CUDA: a second stream, unless MEMRA_SIDE_STREAM=0). */
static memra_status_t g4_route(memra__run_t *r, const memra__g4_layer_t *L, const float *rn, int32_t *ids,
                               float *weights)
{
    const memra__g4_t *g = r->m->arch_data;
    const int64_t n = r->n, D = r->m->n_embd, E = g->n_expert, K = g->n_expert_used;
    MEMRA__WS(logits, n * E);
    MEMRA__TRY(memra__side(r->be, MEMRA_SIDE_BEGIN));
    const memra_mm_args_t mm = {.x = rn, .ldx = D, .n_rows = n, .n_w = 1, .w = {&L->gate_inp}, .y = {logits},
                                .ldy = {E}};
    const memra_route_args_t ra = {
        .logits = logits, .ids = ids, .weights = weights, .n_tokens = n, .n_expert = E, .k = K, .norm = true,
    };
    const memra_status_t st = memra__router(r->be, &mm, &ra);
    const memra_status_t se = memra__side(r->be, MEMRA_SIDE_END);
    return st ? st : se;
}

/* The routed experts of a MoE layer, before post_ffw_norm_2: H2 the
 * experts' input, IDS and WEIGHTS g4_route's (it joins their branch). */
static memra_status_t g4_moe(memra__run_t *r, const memra__g4_layer_t *L, const float *h2, const int32_t *ids,
                             const float *weights, float *out)
{
    const memra__g4_t *g = r->m->arch_data;
    MEMRA__TRY(memra__side(r->be, MEMRA_SIDE_JOIN));
    /* the per-expert scale multiplies each expert's output (linear, so the
     * same as HF scaling the weight) */
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
        .n_tokens = r->n,
        .k = g->n_expert_used,
        .n_embd = r->m->n_embd,
        .n_ff = g->n_ff_exp,
        .act = MEMRA_ACT_GELU,
    };
    return memra__moe(r->be, &ma);
}

/* The norm chain STEPS (N of them: the layer's last) followed, when a
 * layer runs after IL, by rms(x, attn_norm) of that layer into the carry
 * (g->hn_carry): the chain holds x's rows, and the next layer's q/k/v
 * matmul then needs no norm of its own (the same bits: the matmul's norm
 * is this very norm op). */
static memra_status_t g4_last_chain(memra__run_t *r, int32_t il, const memra_norm_args_t *steps, int n)
{
    const memra__g4_t *g = r->m->arch_data;
    const int64_t cf = r->m->carry_floats;
    memra_norm_args_t all[MEMRA_NORM_CHAIN_MAX];
    for (int i = 0; i < n; i++)
        all[i] = steps[i];
    if (g->hn_carry && il + 1 < r->m->n_layer)
        all[n++] = g4_norm(r, r->carry, cf, g->layers[il + 1].attn_norm, NULL, 0, r->carry + g->hn_carry, cf, 1.0f);
    return memra__norm_chain(r->be, all, n);
}

memra_status_t memra__g4_layer(memra__run_t *r, int32_t il)
{
    const memra_model_t *m = r->m;
    const memra__g4_t *g = m->arch_data;
    const memra__g4_layer_t *L = &g->layers[il];
    const int64_t n = r->n, D = m->n_embd, cf = m->carry_floats;
    float *x = r->carry;

    /* r = x + rms(attention, post_attention_norm). On MoE layers the same
     * launch (one norm chain) norms r twice more: the router's input
     * (HF Gemma4TextRouter: logits = gate_inp · (rms(r) ⊙ scale /
     * sqrt(n_embd)) with a weightless rms; the rms with the scale as its
     * weight is the weightless rms times the scale bit for bit: the norm
     * rounds x·s, then that times w, the MUL) and the experts' input
     * rms(r, pre_ffw_norm_2). Last in the chain, every layer (with
     * hn_carry, the norms written ahead): the dense MLP's input
     * rms(r, ffn_norm). */
    const bool ahead = g->hn_carry != 0;
    MEMRA__WS(attn_out, n * D);
    MEMRA__WS(resid, n * D);
    float *hf = ahead ? memra__wsf(r, n * D) : NULL;
    if (ahead && !hf)
        return MEMRA_E_INTERNAL;
    MEMRA__TRY(g4_attention(r, il, x, attn_out));
    const memra_norm_args_t post_attn = g4_norm(r, attn_out, D, L->post_attn_norm, x, cf, resid, D, 1.0f);
    const memra_norm_args_t ffn_in = g4_norm(r, resid, D, L->ffn_norm, NULL, 0, hf, D, 1.0f);
    float *h2 = NULL, *weights = NULL;
    int32_t *ids = NULL;
    if (L->moe) {
        const int64_t K = g->n_expert_used;
        float *rn = memra__wsf(r, n * D);
        h2 = memra__wsf(r, n * D);
        weights = memra__wsf(r, n * K);
        ids = memra__ws(r, (size_t)(n * K) * sizeof(int32_t));
        if (!rn || !h2 || !weights || !ids)
            return MEMRA_E_INTERNAL;
        const memra_norm_args_t steps[4] = {
            post_attn,
            g4_norm(r, resid, D, L->gate_inp_scale, NULL, 0, rn, D, 1.0f / sqrtf((float)D)),
            g4_norm(r, resid, D, L->pre_ffw_norm_2, NULL, 0, h2, D, 1.0f),
            ffn_in,
        };
        MEMRA__TRY(memra__norm_chain(r->be, steps, ahead ? 4 : 3));
        /* the router beside the dense MLP (it reads rn only) */
        MEMRA__TRY(g4_route(r, L, rn, ids, weights));
    } else if (ahead) {
        const memra_norm_args_t steps[2] = {post_attn, ffn_in};
        MEMRA__TRY(memra__norm_chain(r->be, steps, 2));
    }

    /* f = GeGLU(rms(r, ffn_norm)); on MoE layers
     * f = rms(f, post_ffw_norm_1) + rms(experts(r), post_ffw_norm_2);
     * x = r + rms(f, post_ffw_norm); then PLE; layer_output_scale scales
     * the whole residual stream after PLE: the last post-norm's scale */
    MEMRA__WS(f, n * D);
    /* without the norms ahead a dense layer's post-attention norm is the
     * GeGLU matmul's first step */
    MEMRA__TRY(ahead ? g4_dense_mlp(r, L, hf, true, f, NULL)
                     : g4_dense_mlp(r, L, resid, false, f, L->moe ? NULL : &post_attn));
    const float out_scale = L->out_scale;
    const memra_norm_args_t post_ffw = g4_norm(r, f, D, L->post_ffw_norm, resid, D, x, cf,
                                               g->n_pl > 0 ? 1.0f : out_scale);
    if (L->moe) {
        MEMRA__WS(experts, n * D);
        MEMRA__TRY(g4_moe(r, L, h2, ids, weights, experts));
        const memra_norm_args_t steps[3] = {
            g4_norm(r, f, D, L->post_ffw_norm_1, NULL, 0, f, D, 1.0f),
            g4_norm(r, experts, D, L->post_ffw_norm_2, f, D, f, D, 1.0f),
            post_ffw,
        };
        MEMRA__TRY(g->n_pl > 0 ? memra__norm_chain(r->be, steps, 3) : g4_last_chain(r, il, steps, 3));
    } else if (g->n_pl == 0) {
        MEMRA__TRY(g4_last_chain(r, il, &post_ffw, 1));
    }

    /* PLE: x += rms(proj · (gelu(inp_gate · x) ⊙ pl[il]), post_norm); a
     * dense layer's post-FFN norm is the gate matmul's first step */
    if (g->n_pl > 0) {
        const int64_t n_pl = g->n_pl;
        const float *pl = x + D + (int64_t)il * n_pl;
        MEMRA__WS(gated, n * n_pl);
        MEMRA__WS(p, n * D);
        /* gated = GEGLU(inp_gate · x, pl): the GEGLU as the matmul's post
         * op (one launch on CUDA) */
        const memra_mm_args_t gm = {.x = x, .ldx = cf, .n_rows = n, .n_w = 1, .w = {&L->inp_gate}, .y = {gated},
                                    .ldy = {n_pl}, .post = {MEMRA_EW_GEGLU}, .post_b = {pl}, .post_bs = {cf},
                                    .pre = L->moe ? NULL : &post_ffw};
        MEMRA__TRY(memra__matmul_ex(r->be, &gm));
        MEMRA__TRY(mm(r, &L->proj, gated, n_pl, p, D, n));
        const memra_norm_args_t post = g4_norm(r, p, D, L->post_norm, x, cf, x, cf, out_scale);
        MEMRA__TRY(g4_last_chain(r, il, &post, 1));
    }
    return MEMRA_OK;
}

/* ---- head ------------------------------------------------------------- */

memra_status_t memra__g4_head(memra__run_t *r)
{
    const memra_model_t *m = r->m;
    const memra__g4_t *g = m->arch_data;
    const int64_t n = r->n_out, V = m->n_vocab;

    /* logits = softcap(output · rms(x, output_norm)) */
    MEMRA__TRY(memra__arch_head(r, g->output_norm, &g->output, m->n_embd, g->eps, g->softcap));

    /* tokenizer.ggml.suppress_tokens -> -inf, one fill per run of ids (the
     * fills only write: the logits may be mapped host memory) */
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
