/* gemma4: binding (config keys, tensors, cache geometry) and the arch
 * table. The forward itself is in arch_gemma4_forward.c; model-spec §6 is
 * the source of every rule here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch_gemma4_impl.h"
#include "quant.h"

#define G4_KEY_SUPPRESS "tokenizer.ggml.suppress_tokens"

/* ---- config ---------------------------------------------------------- */

static memra_status_t g4_read_config(memra_model_t *m, memra__g4_t *g)
{
    uint32_t n_file, n_embd, n_ctx, hd_full, hd_full_v, hd_swa, hd_swa_v, n_swa, n_shared, n_pl;
    MEMRA__TRY(memra__cfg_u32(m, "block_count", &n_file));
    if (n_file == 0 || n_file > MEMRA_MAX_LAYERS)
        return memra__model_fail(m, MEMRA_E_FORMAT, "gemma4.block_count = %u is out of range (1..%d)",
                                 n_file, MEMRA_MAX_LAYERS);
    const int32_t nl = (int32_t)n_file;
    MEMRA__TRY(memra__cfg_u32(m, "context_length", &n_ctx));
    MEMRA__TRY(memra__cfg_u32(m, "embedding_length", &n_embd));
    if (n_embd == 0)
        return memra__model_fail(m, MEMRA_E_FORMAT, "gemma4.embedding_length is 0");

    uint32_t *u = calloc((size_t)nl, sizeof *u);
    bool *swa = calloc((size_t)nl, sizeof *swa);
    int32_t *n_head = calloc((size_t)nl, sizeof *n_head), *n_kv = calloc((size_t)nl, sizeof *n_kv),
            *n_ff = calloc((size_t)nl, sizeof *n_ff);
    memra_status_t st = MEMRA_OK;
    if (!u || !swa || !n_head || !n_kv || !n_ff) {
        st = memra__model_fail(m, MEMRA_E_NOMEM, "gemma4: out of memory reading the config");
        goto done;
    }
#define G4_PER_LAYER(key, required, def, dst)                                                      \
    do {                                                                                           \
        if ((st = memra__cfg_u32_per_layer(m, key, nl, required, def, u)) != MEMRA_OK)             \
            goto done;                                                                             \
        for (int32_t i = 0; i < nl; i++)                                                           \
            (dst)[i] = (int32_t)u[i];                                                              \
    } while (0)
    G4_PER_LAYER("attention.head_count", true, 0, n_head);
    G4_PER_LAYER("attention.head_count_kv", false, 0, n_kv);
    G4_PER_LAYER("feed_forward_length", true, 0, n_ff);
    if ((st = memra__cfg_u32_per_layer(m, "attention.sliding_window_pattern", nl, true, 0, u)) != MEMRA_OK)
        goto done;
    for (int32_t i = 0; i < nl; i++)
        swa[i] = u[i] != 0;
#undef G4_PER_LAYER
    for (int32_t i = 0; i < nl; i++) {
        if (n_kv[i] == 0) /* llama.cpp: absent head_count_kv means MHA */
            n_kv[i] = n_head[i];
        if (n_head[i] <= 0 || n_kv[i] <= 0 || n_head[i] % n_kv[i] != 0) {
            st = memra__model_fail(m, MEMRA_E_FORMAT,
                                   "gemma4: layer %d has head_count %d and head_count_kv %d "
                                   "(need head_count > 0, a multiple of head_count_kv)",
                                   i, n_head[i], n_kv[i]);
            goto done;
        }
    }

    /* Head dims: key_length is the full layers', key_length_swa the
     * sliding layers'; K and V must agree (llama.cpp asserts it too). */
    if ((st = memra__cfg_u32_or(m, "attention.key_length", n_embd / (uint32_t)n_head[0], &hd_full)) ||
        (st = memra__cfg_u32_or(m, "attention.value_length", hd_full, &hd_full_v)) ||
        (st = memra__cfg_u32(m, "attention.key_length_swa", &hd_swa)) ||
        (st = memra__cfg_u32(m, "attention.value_length_swa", &hd_swa_v)) ||
        (st = memra__cfg_u32(m, "attention.sliding_window", &n_swa)) ||
        (st = memra__cfg_u32_or(m, "attention.shared_kv_layers", 0, &n_shared)) ||
        (st = memra__cfg_u32(m, "embedding_length_per_layer_input", &n_pl)))
        goto done;
    if (hd_full != hd_full_v || hd_swa != hd_swa_v || hd_full == 0 || hd_swa == 0) {
        st = memra__model_fail(m, MEMRA_E_FORMAT,
                               "gemma4: attention.key_length/value_length (%u/%u) and "
                               "key_length_swa/value_length_swa (%u/%u) must be equal and non-zero",
                               hd_full, hd_full_v, hd_swa, hd_swa_v);
        goto done;
    }
    if (n_shared >= n_file) {
        st = memra__model_fail(m, MEMRA_E_FORMAT,
                               "gemma4.attention.shared_kv_layers = %u leaves no layer owning KV "
                               "(block_count %u)", n_shared, n_file);
        goto done;
    }

    uint32_t n_rot_full, n_rot_swa;
    float base_full, base_swa, eps, softcap;
    if ((st = memra__cfg_u32_or(m, "rope.dimension_count", hd_full, &n_rot_full)) ||
        (st = memra__cfg_u32_or(m, "rope.dimension_count_swa", hd_swa, &n_rot_swa)) ||
        (st = memra__cfg_f32_pos_or(m, "rope.freq_base", 10000.0f, &base_full)) ||
        (st = memra__cfg_f32_pos_or(m, "rope.freq_base_swa", 10000.0f, &base_swa)) ||
        (st = memra__cfg_f32_pos(m, "attention.layer_norm_rms_epsilon", &eps)) ||
        /* llama.cpp caps at 30 when the key is absent; only 0 disables */
        (st = memra__cfg_f32_nonneg_or(m, "final_logit_softcapping", 30.0f, &softcap)))
        goto done;
    if (n_rot_full > hd_full || n_rot_full % 2 || n_rot_swa > hd_swa || n_rot_swa % 2) {
        st = memra__model_fail(m, MEMRA_E_FORMAT,
                               "gemma4: rope.dimension_count %u / dimension_count_swa %u must be even "
                               "and at most the head dim (%u / %u)",
                               n_rot_full, n_rot_swa, hd_full, hd_swa);
        goto done;
    }

    m->n_layer_file = nl;
    m->n_layer = (m->params.n_layers > 0 && m->params.n_layers < nl) ? m->params.n_layers : nl;
    m->n_mtp = 0;
    m->n_embd = (int32_t)n_embd;
    m->n_ctx_train = (int32_t)n_ctx;
    g->n_pl = (int32_t)n_pl;
    g->n_swa = (int32_t)n_swa;
    g->eps = eps;
    g->softcap = softcap;
    g->n_rot_full = (int32_t)n_rot_full;

    /* KV sharing, HF rule (model-spec §6.4): a shared layer reads the cache
     * of the last non-shared layer of its own type. */
    const int32_t n_kv_layers = nl - (int32_t)n_shared;
    for (int32_t il = 0; il < nl; il++) {
        memra__g4_layer_t *L = &g->layers[il];
        L->swa = swa[il];
        L->hd = (int32_t)(swa[il] ? hd_swa : hd_full);
        L->n_rot = (int32_t)(swa[il] ? n_rot_swa : n_rot_full);
        L->base = swa[il] ? base_swa : base_full;
        L->n_head = n_head[il];
        L->n_kv_head = n_kv[il];
        L->n_ff = n_ff[il];
        L->kv_src = il;
        if (il >= n_kv_layers) {
            L->kv_src = -1;
            for (int32_t j = n_kv_layers - 1; j >= 0; j--)
                if (swa[j] == swa[il]) {
                    L->kv_src = j;
                    break;
                }
            if (L->kv_src < 0) {
                st = memra__model_fail(m, MEMRA_E_FORMAT,
                                       "gemma4: KV-shared layer %d (%s) has no earlier non-shared "
                                       "layer of its type to read",
                                       il, swa[il] ? "sliding" : "full");
                goto done;
            }
            if (n_kv[L->kv_src] != n_kv[il]) {
                st = memra__model_fail(m, MEMRA_E_FORMAT,
                                       "gemma4: KV-shared layer %d has head_count_kv %d but its "
                                       "source layer %d has %d",
                                       il, n_kv[il], L->kv_src, n_kv[L->kv_src]);
                goto done;
            }
        }
    }
done:
    free(u);
    free(swa);
    free(n_head);
    free(n_kv);
    free(n_ff);
    return st;
}

/* ---- tensors --------------------------------------------------------- */

/* A 1-element parameter read on the host at load time: the elementwise
 * ops take scalars from the host, and the device copy (made to mark the
 * tensor used) is never read. */
static memra_status_t g4_host_scalar(memra_model_t *m, const char *name, float *out)
{
    const int64_t ti = memra_gguf_find_tensor(m->gguf, name);
    if (ti < 0)
        return memra__model_fail(m, MEMRA_E_FORMAT, "missing tensor '%s'", name);
    const memra_type_t t = memra_gguf_tensor_type(m->gguf, ti);
    if (memra_type_block_size(t) != 1 || !memra__dequantize_row(t, memra_gguf_tensor_data(m->gguf, ti), out, 1))
        return memra__model_fail(m, MEMRA_E_UNSUPPORTED, "tensor '%s' has type %s (expected a float scalar)", name,
                                 memra_type_name(t));
    return MEMRA_OK;
}

static memra_status_t g4_bind_moe(memra_model_t *m, memra__g4_t *g, int32_t il, int32_t s)
{
    memra__g4_layer_t *L = &g->layers[il];
    const int64_t E = g->n_expert, F = g->n_ff_exp, D = m->n_embd;
    MEMRA__TRY(
        memra__w_get(m, s, &L->gate_inp, MEMRA_W_REQUIRED, 2, (int64_t[]){D, E}, "blk.%d.ffn_gate_inp.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->gate_inp_scale, MEMRA_W_REQUIRED, D, "blk.%d.ffn_gate_inp.scale", il));
    /* fused gate+up (what the converter writes) first, as llama.cpp does */
    if (memra__w_exists(m, "blk.%d.ffn_gate_up_exps.weight", il)) {
        MEMRA__TRY(memra__w_get(m, s, &L->gate_up_exps, MEMRA_W_REQUIRED, 3, (int64_t[]){D, 2 * F, E},
                                "blk.%d.ffn_gate_up_exps.weight", il));
    } else {
        MEMRA__TRY(memra__w_get(m, s, &L->gate_exps, MEMRA_W_REQUIRED, 3, (int64_t[]){D, F, E},
                                "blk.%d.ffn_gate_exps.weight", il));
        MEMRA__TRY(memra__w_get(m, s, &L->up_exps, MEMRA_W_REQUIRED, 3, (int64_t[]){D, F, E},
                                "blk.%d.ffn_up_exps.weight", il));
    }
    MEMRA__TRY(memra__w_get(m, s, &L->down_exps, MEMRA_W_REQUIRED, 3, (int64_t[]){F, D, E},
                            "blk.%d.ffn_down_exps.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->down_exps_scale, MEMRA_W_OPTIONAL, E, "blk.%d.ffn_down_exps.scale", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->pre_ffw_norm_2, MEMRA_W_REQUIRED, D, "blk.%d.pre_ffw_norm_2.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->post_ffw_norm_1, MEMRA_W_REQUIRED, D, "blk.%d.post_ffw_norm_1.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->post_ffw_norm_2, MEMRA_W_REQUIRED, D, "blk.%d.post_ffw_norm_2.weight", il));
    return MEMRA_OK;
}

static memra_status_t g4_bind_layer(memra_model_t *m, memra__g4_t *g, int32_t il)
{
    memra__g4_layer_t *L = &g->layers[il];
    const int32_t s = memra__stage_of_layer(m, il);
    const int64_t D = m->n_embd, q_dim = (int64_t)L->n_head * L->hd, kv_dim = (int64_t)L->n_kv_head * L->hd;
    const bool owns_kv = L->kv_src == il;

    MEMRA__TRY(memra__w_vec(m, s, &L->attn_norm, MEMRA_W_REQUIRED, D, "blk.%d.attn_norm.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->wq, MEMRA_W_REQUIRED, 2, (int64_t[]){D, q_dim}, "blk.%d.attn_q.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->q_norm, MEMRA_W_REQUIRED, L->hd, "blk.%d.attn_q_norm.weight", il));
    /* K/V tensors on a KV-shared layer are optional and unused (llama.cpp
     * loads them as "not required" above n_layer_kv_from_start). */
    const unsigned kv_flag = owns_kv ? MEMRA_W_REQUIRED : MEMRA_W_OPTIONAL;
    MEMRA__TRY(memra__w_get(m, s, &L->wk, kv_flag, 2, (int64_t[]){D, kv_dim}, "blk.%d.attn_k.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->wv, MEMRA_W_OPTIONAL, 2, (int64_t[]){D, kv_dim}, "blk.%d.attn_v.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->k_norm, kv_flag, L->hd, "blk.%d.attn_k_norm.weight", il));
    MEMRA__TRY(memra__w_get(m, s, &L->wo, MEMRA_W_REQUIRED, 2, (int64_t[]){q_dim, D}, "blk.%d.attn_output.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->post_attn_norm, MEMRA_W_REQUIRED, D, "blk.%d.post_attention_norm.weight", il));

    MEMRA__TRY(memra__w_vec(m, s, &L->ffn_norm, MEMRA_W_REQUIRED, D, "blk.%d.ffn_norm.weight", il));
    MEMRA__TRY(
        memra__w_get(m, s, &L->ffn_gate, MEMRA_W_REQUIRED, 2, (int64_t[]){D, L->n_ff}, "blk.%d.ffn_gate.weight", il));
    MEMRA__TRY(
        memra__w_get(m, s, &L->ffn_up, MEMRA_W_REQUIRED, 2, (int64_t[]){D, L->n_ff}, "blk.%d.ffn_up.weight", il));
    MEMRA__TRY(
        memra__w_get(m, s, &L->ffn_down, MEMRA_W_REQUIRED, 2, (int64_t[]){L->n_ff, D}, "blk.%d.ffn_down.weight", il));
    MEMRA__TRY(memra__w_vec(m, s, &L->post_ffw_norm, MEMRA_W_REQUIRED, D, "blk.%d.post_ffw_norm.weight", il));

    L->moe = memra__w_exists(m, "blk.%d.ffn_gate_inp.weight", il);
    if (L->moe) {
        if (g->n_expert == 0)
            return memra__model_fail(m, MEMRA_E_FORMAT,
                                     "gemma4: blk.%d.ffn_gate_inp.weight is present but "
                                     "gemma4.expert_count is missing or 0", il);
        MEMRA__TRY(g4_bind_moe(m, g, il, s));
    }

    if (g->n_pl > 0) {
        MEMRA__TRY(memra__w_get(m, s, &L->inp_gate, MEMRA_W_REQUIRED, 2, (int64_t[]){D, g->n_pl},
                                "blk.%d.inp_gate.weight", il));
        MEMRA__TRY(
            memra__w_get(m, s, &L->proj, MEMRA_W_REQUIRED, 2, (int64_t[]){g->n_pl, D}, "blk.%d.proj.weight", il));
        MEMRA__TRY(memra__w_vec(m, s, &L->post_norm, MEMRA_W_REQUIRED, D, "blk.%d.post_norm.weight", il));
    }

    const float *scale_dev;
    MEMRA__TRY(memra__w_vec(m, s, &scale_dev, MEMRA_W_OPTIONAL, 1, "blk.%d.layer_output_scale.weight", il));
    L->out_scale = 1.0f;
    if (scale_dev) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.layer_output_scale.weight", il);
        MEMRA__TRY(g4_host_scalar(m, name, &L->out_scale));
    }

    /* rope_freqs: full layers only, one copy per stage (model-spec §6.2). */
    if (!L->swa && g->rope_freqs_present) {
        if (!g->rope_freqs[s])
            MEMRA__TRY(memra__w_vec(m, s, &g->rope_freqs[s], MEMRA_W_REQUIRED, g->n_rot_full / 2, "rope_freqs.weight"));
        L->freq_factors = g->rope_freqs[s];
    }

    m->layer_kind[il] = (int8_t)(L->swa ? MEMRA_LAYER_SLIDING : MEMRA_LAYER_ATTENTION);
    if (owns_kv) {
        m->layer_cache[il].k_floats = kv_dim;
        m->layer_cache[il].v_floats = kv_dim;
        m->layer_cache[il].kv_head_dim = L->hd;
        m->layer_cache[il].swa = L->swa ? g->n_swa : 0;
    }
    return MEMRA_OK;
}

/* KV sharing across a stage boundary (model-spec §6.4 gives who reads
 * whom). A shared layer on another stage than its source cannot see the
 * source's cache, so the source's fresh K/V rows of each chunk travel in the
 * carry, appended after CF floats, and the first reader of that source on
 * each stage keeps a mirror cache of them; later readers on that stage read
 * the mirror. The mirror holds the very rows the source wrote, so the
 * attention runs over identical data. Readers on the source's own stage
 * read its cache as before (no mirror, no carry slot). Returns the carry
 * width. */
static int64_t g4_plan_shared_kv(memra_model_t *m, memra__g4_t *g, int64_t cf)
{
    for (int32_t il = 0; il < m->n_layer; il++) {
        memra__g4_layer_t *L = &g->layers[il];
        const int32_t src = L->kv_src, s = memra__stage_of_layer(m, il);
        L->kv_read = src;
        if (src == il || memra__stage_of_layer(m, src) == s)
            continue;
        memra__g4_layer_t *S = &g->layers[src];
        const memra__layer_cache_t *sc = &m->layer_cache[src];
        if (!S->kv_carry) {
            S->kv_carry = cf;
            cf += sc->k_floats + sc->v_floats;
        }
        int32_t holder = il;
        for (int32_t j = il - 1; j >= 0 && memra__stage_of_layer(m, j) == s; j--) {
            if (g->layers[j].kv_fill && g->layers[j].kv_src == src) {
                holder = j;
                break;
            }
        }
        L->kv_read = holder;
        if (holder == il) {
            L->kv_fill = true;
            m->layer_cache[il].k_floats = sc->k_floats;
            m->layer_cache[il].v_floats = sc->v_floats;
            m->layer_cache[il].kv_head_dim = sc->kv_head_dim;
            m->layer_cache[il].swa = sc->swa;
        }
    }
    return cf;
}

/* tokenizer.ggml.suppress_tokens, sorted, deduplicated and clipped to the
 * vocabulary (ids beyond it have no logit to suppress). */
static memra_status_t g4_read_suppress(memra_model_t *m, memra__g4_t *g)
{
    const int64_t ki = memra_gguf_find_kv(m->gguf, G4_KEY_SUPPRESS);
    if (ki < 0)
        return MEMRA_OK;
    if (memra_gguf_kv_type(m->gguf, ki) != MEMRA_GGUF_ARRAY ||
        (memra_gguf_arr_type(m->gguf, ki) != MEMRA_GGUF_INT32 && memra_gguf_arr_type(m->gguf, ki) != MEMRA_GGUF_UINT32))
        return memra__model_fail(m, MEMRA_E_FORMAT, "key %s has wrong type (want an INT32/UINT32 array)",
                                 G4_KEY_SUPPRESS);
    const uint64_t n = memra_gguf_arr_n(m->gguf, ki);
    g->suppress = calloc(n ? n : 1, sizeof *g->suppress);
    if (!g->suppress)
        return memra__model_fail(m, MEMRA_E_NOMEM, "gemma4: out of memory reading %s", G4_KEY_SUPPRESS);
    bool *seen = calloc((size_t)m->n_vocab, sizeof *seen);
    if (!seen)
        return memra__model_fail(m, MEMRA_E_NOMEM, "gemma4: out of memory reading %s", G4_KEY_SUPPRESS);
    for (uint64_t j = 0; j < n; j++) {
        int64_t id;
        if (memra_gguf_arr_i64(m->gguf, ki, j, &id) == MEMRA_OK && id >= 0 && id < m->n_vocab)
            seen[id] = true;
    }
    for (int32_t id = 0; id < m->n_vocab; id++)
        if (seen[id])
            g->suppress[g->n_suppress++] = id;
    free(seen);
    return MEMRA_OK;
}

static void g4_unbind(memra_model_t *m)
{
    memra__g4_t *g = m->arch_data;
    if (!g)
        return;
    free(g->layers);
    free(g->suppress);
    free(g);
    m->arch_data = NULL;
}

static memra_status_t g4_bind(memra_model_t *m)
{
    memra__g4_t *g = calloc(1, sizeof *g);
    if (!g)
        return memra__model_fail(m, MEMRA_E_NOMEM, "gemma4: out of memory");
    m->arch_data = g;
    g->layers = calloc(MEMRA_MAX_LAYERS, sizeof *g->layers);
    if (!g->layers)
        return memra__model_fail(m, MEMRA_E_NOMEM, "gemma4: out of memory");
    MEMRA__TRY(g4_read_config(m, g));

    /* MoE geometry is read only when some layer has a router. */
    bool any_moe = false;
    for (int32_t il = 0; il < m->n_layer; il++)
        any_moe = any_moe || memra__w_exists(m, "blk.%d.ffn_gate_inp.weight", il);
    if (any_moe) {
        uint32_t E, K, F;
        MEMRA__TRY(memra__cfg_u32(m, "expert_count", &E));
        MEMRA__TRY(memra__cfg_u32(m, "expert_used_count", &K));
        MEMRA__TRY(memra__cfg_u32(m, "expert_feed_forward_length", &F));
        if (E == 0 || K == 0 || K > E || F == 0)
            return memra__model_fail(m, MEMRA_E_FORMAT,
                                     "gemma4: expert_count %u, expert_used_count %u, "
                                     "expert_feed_forward_length %u are inconsistent", E, K, F);
        g->n_expert = (int32_t)E;
        g->n_expert_used = (int32_t)K;
        g->n_ff_exp = (int32_t)F;
    }

    /* Globals. The token embedding is the LM head when output.weight is
     * absent, so the last stage then needs it as well. */
    const int32_t s0 = memra__first_stage(m), sl = memra__last_stage(m);
    const int64_t D = m->n_embd;
    MEMRA__TRY(memra__w_get(m, s0, &g->tok_embd, MEMRA_W_REQUIRED, 2, (int64_t[]){D, -1}, "token_embd.weight"));
    m->n_vocab = (int32_t)g->tok_embd.ne[1];
    MEMRA__TRY(memra__w_vec(m, sl, &g->output_norm, MEMRA_W_REQUIRED, D, "output_norm.weight"));
    MEMRA__TRY(memra__w_get(m, sl, &g->output, MEMRA_W_OPTIONAL, 2, (int64_t[]){D, m->n_vocab}, "output.weight"));
    if (!g->output.data) {
        if (sl == s0)
            g->output = g->tok_embd;
        else
            MEMRA__TRY(
                memra__w_get(m, sl, &g->output, MEMRA_W_REQUIRED, 2, (int64_t[]){D, m->n_vocab}, "token_embd.weight"));
    }
    if (g->n_pl > 0) {
        const int64_t plf = (int64_t)g->n_pl * m->n_layer_file;
        MEMRA__TRY(memra__w_get(m, s0, &g->pl_tok_embd, MEMRA_W_REQUIRED, 2, (int64_t[]){plf, m->n_vocab},
                                "per_layer_token_embd.weight"));
        MEMRA__TRY(memra__w_get(m, s0, &g->pl_model_proj, MEMRA_W_REQUIRED, 2, (int64_t[]){D, plf},
                                "per_layer_model_proj.weight"));
        MEMRA__TRY(memra__w_vec(m, s0, &g->pl_proj_norm, MEMRA_W_REQUIRED, g->n_pl, "per_layer_proj_norm.weight"));
    }

    g->rope_freqs_present = memra__w_exists(m, "rope_freqs.weight");
    for (int32_t il = 0; il < m->n_layer; il++)
        MEMRA__TRY(g4_bind_layer(m, g, il));
    for (int32_t il = m->n_layer; il < m->n_layer_file; il++)
        memra__w_skip_layer(m, il);
    /* Still consumed when no full layer runs (n_layers truncation). */
    if (g->rope_freqs_present && !g->rope_freqs[s0]) {
        const float *unused;
        MEMRA__TRY(memra__w_vec(m, s0, &unused, MEMRA_W_REQUIRED, g->n_rot_full / 2, "rope_freqs.weight"));
    }

    m->carry_floats = g4_plan_shared_kv(m, g, D + (int64_t)m->n_layer * g->n_pl);
    /* each layer's last norm chain writes the next layer's normed input
     * (memra__g4_t.hn_carry; the same bits either way): the 26B-A4B Q8_0
     * decoded +2.7 % at one row and +5.7 % at four (H100, 2026-12-07);
     * MEMRA_G4_NORM_AHEAD=0 keeps each matmul's own norm */
    int32_t ahead = 1;
    memra_status_t st = memra__env_int("MEMRA_G4_NORM_AHEAD", 0, 1, 1, &ahead);
    if (st)
        return memra__model_fail(m, st, "%s", memra_last_error());
    g->hn_carry = ahead ? m->carry_floats : 0;
    m->carry_floats += ahead ? D : 0;
    return g4_read_suppress(m, g);
}

/* Upper bound of the bump allocations of embed, layer and head for n
 * tokens: mirrors arch_gemma4_forward.c buffer by buffer. */
static size_t g4_workspace_bytes(const memra_model_t *m, int32_t n_tokens)
{
    const memra__g4_t *g = m->arch_data;
    int64_t q_max = 0, kv_max = 0, ff_max = 0;
    for (int32_t il = 0; il < m->n_layer; il++) {
        const memra__g4_layer_t *L = &g->layers[il];
        const int64_t q = (int64_t)L->n_head * L->hd, kv = (int64_t)L->n_kv_head * L->hd;
        q_max = q > q_max ? q : q_max;
        kv_max = kv > kv_max ? kv : kv_max;
        ff_max = L->n_ff > ff_max ? L->n_ff : ff_max;
    }
    const int64_t D = m->n_embd, n = n_tokens, plf = (int64_t)g->n_pl * m->n_layer_file;
    /* 4 kv rows: k, v raw and, before a non-F32 cache's conversion or in a
     * step of several sequences, before their caches */
    const int64_t layer = 3 * q_max + 4 * kv_max + 3 * ff_max + 10 * D + 2 * g->n_pl +
                          2 * (int64_t)g->n_expert_used + g->n_expert;
    const int64_t embed = 3 * plf;
    const int64_t head = D;
    int64_t per_token = layer > embed ? layer : embed;
    per_token = per_token > head ? per_token : head;
    /* 32 buffers at most per callback, each padded to 256 bytes */
    return (size_t)(n * per_token) * sizeof(float) + 32 * 256;
}

const memra__arch_t memra__arch_gemma4 = {
    .name = "gemma4",
    .bind = g4_bind,
    .unbind = g4_unbind,
    .workspace_bytes = g4_workspace_bytes,
    .embed = memra__g4_embed,
    .layer = memra__g4_layer,
    .head = memra__g4_head,
};
