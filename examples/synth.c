/* memra-synth: writes a random-weight GGUF with the exact metadata, tensor
 * names, shapes and quant types of a released model (the published
 * configs, as llama.cpp's converter writes them), so engines can be
 * benchmarked without downloads.
 *
 *   memra-synth --model qwen3.5-9b --type q8_0 --out FILE [--layers N] [--vocab N] [--seed S]
 *   memra-synth --list
 *   memra-synth --model NAME --type T --dry-run   (prints parameter count and bytes)
 *
 * --type is one of k_qtypes below (q8_0, q4_k, q5_k, q6_k, q4_0): the type of
 * the weight matrices, and the type llama.cpp's llama-quantize gives the
 * output head (and a tied token embedding, which is the head) for that file
 * type. Per-layer mixes (Q4_K_M's Q6_K attn_v/ffn_down in some layers) are
 * left out: every matrix of a layer has the weight type.
 *
 * The tokenizer is a small valid GPT-2-style BPE vocabulary (the 256 byte
 * symbols, a few merges and chat specials) padded with unused tokens to the
 * model's vocabulary size. Weights are random but sane: quantized blocks
 * carry f16 scales sized so that dequantized weights have a standard
 * deviation near 0.02, norms are near 1, ssm_a is negative. --layers,
 * --vocab and --experts shrink a model for tests. Only <memra/memra.h> is used. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "cli.h"

typedef enum { QWEN35, QWEN35MOE, GEMMA4 } family_t;

typedef struct spec {
    const char *name;
    family_t fam;
    int n_layer, n_embd, n_head, n_head_kv, n_ff;
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int n_v;            /* qwen35: GDN value heads */
    int tied;
    /* gemma4 */
    int n_head_kv_full, kv_eq_v, swa_period, window, n_pl, n_kv_shared, n_ff_wide, wide_from;
    int vocab;
    int ctx;
} spec_t;

static const spec_t k_specs[] = {
    {"qwen3.5-0.8b", QWEN35, 24, 1024, 8, 2, 3584, 0, 0, 0, 0, 16, 1, .vocab = 248320, .ctx = 262144},
    {"qwen3.5-2b", QWEN35, 24, 2048, 8, 2, 6144, 0, 0, 0, 0, 16, 1, .vocab = 248320, .ctx = 262144},
    {"qwen3.5-4b", QWEN35, 32, 2560, 16, 4, 9216, 0, 0, 0, 0, 32, 1, .vocab = 248320, .ctx = 262144},
    {"qwen3.5-9b", QWEN35, 32, 4096, 16, 4, 12288, 0, 0, 0, 0, 32, 0, .vocab = 248320, .ctx = 262144},
    {"qwen3.6-27b", QWEN35, 64, 5120, 24, 4, 17408, 0, 0, 0, 0, 48, 0, .vocab = 248320, .ctx = 262144},
    {"qwen3.6-35b-a3b", QWEN35MOE, 40, 2048, 16, 2, 0, 256, 8, 512, 512, 32, 0, .vocab = 248320, .ctx = 262144},
    {"qwen3.5-122b-a10b", QWEN35MOE, 48, 3072, 32, 2, 0, 256, 8, 1024, 1024, 64, 0, .vocab = 248320, .ctx = 262144},
    {"qwen3.5-397b-a17b", QWEN35MOE, 60, 4096, 32, 2, 0, 512, 10, 1024, 1024, 64, 0, .vocab = 248320, .ctx = 262144},
    {"gemma-4-e2b", GEMMA4, 35, 1536, 8, 1, 6144, 0, 0, 0, 0, 0, 1, .n_head_kv_full = 1, .swa_period = 5,
     .window = 512, .n_pl = 256, .n_kv_shared = 20, .n_ff_wide = 12288, .wide_from = 15, .vocab = 262144, .ctx = 131072},
    {"gemma-4-e4b", GEMMA4, 42, 2560, 8, 2, 10240, 0, 0, 0, 0, 0, 1, .n_head_kv_full = 2, .swa_period = 6,
     .window = 512, .n_pl = 256, .n_kv_shared = 18, .vocab = 262144, .ctx = 131072},
    {"gemma-4-26b-a4b", GEMMA4, 30, 2816, 16, 8, 2112, 128, 8, 704, 0, 0, 1, .n_head_kv_full = 2, .kv_eq_v = 1,
     .swa_period = 6, .window = 1024, .vocab = 262144, .ctx = 262144},
    {"gemma-4-31b", GEMMA4, 60, 5376, 32, 16, 21504, 0, 0, 0, 0, 0, 1, .n_head_kv_full = 4, .kv_eq_v = 1,
     .swa_period = 6, .window = 1024, .vocab = 262144, .ctx = 262144},
};

/* ---- quantization types ------------------------------------------------------- */

/* One --type: what llama-quantize writes for the matching LLAMA_FTYPE_MOSTLY_*
 * (llama_tensor_get_type: output.weight, or token_embd.weight when there is
 * no output.weight, becomes Q6_K unless the file type is Q8_0; an untied
 * token_embd.weight keeps the weight type). Norms and other vectors stay F32
 * whatever the type. This table drives option parsing, --help and the usage. */
typedef struct qtype {
    const char *name;      /* the --type value */
    memra_type_t weight;   /* weight matrices, and an untied token_embd.weight */
    memra_type_t head;     /* output.weight */
    memra_type_t tied_emb; /* token_embd.weight when it is also the head (no output.weight) */
    int file_type;         /* general.file_type: llama.cpp's LLAMA_FTYPE_MOSTLY_* */
    const char *desc;
} qtype_t;

static const qtype_t k_qtypes[] = {
    {"q8_0", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 7, "Q8_0 weights and head"},
    {"q4_k", MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q6_K, 15, "Q4_K_M-like: Q4_K weights, Q6_K head"},
    {"q5_k", MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q6_K, 17, "Q5_K_M-like: Q5_K weights, Q6_K head"},
    {"q6_k", MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q6_K, 18, "Q6_K weights and head"},
    {"q4_0", MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q6_K, 2, "Q4_0 weights, Q6_K head"},
};

#define N_QTYPES (sizeof k_qtypes / sizeof *k_qtypes)

static const qtype_t *find_qtype(const char *name)
{
    for (size_t k = 0; k < N_QTYPES; k++)
        if (strcmp(k_qtypes[k].name, name) == 0)
            return &k_qtypes[k];
    return NULL;
}

/* "q8_0|q4_k|..." (SEP between the names) into BUF. */
static const char *qtype_names(char *buf, size_t size, const char *sep)
{
    size_t n = 0;
    buf[0] = 0;
    for (size_t k = 0; k < N_QTYPES && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", k ? sep : "", k_qtypes[k].name);
    return buf;
}

/* ---- random numbers and f16 ------------------------------------------------ */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_u64(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform(void) { return (float)((next_u64() >> 40) * (1.0 / 16777216.0)); }

/* Positive scales only; values below the smallest normal half (block
 * scales of Q6_K/Q5_K are) become subnormals, as they would in a real file. */
static uint16_t to_f16(float f)
{
    if (f >= 6.103515625e-05f) {
        uint32_t x;
        memcpy(&x, &f, 4);
        return (uint16_t)(((((x >> 23) & 0xFF) - 112) << 10) | ((x >> 13) & 0x3FF));
    }
    return (uint16_t)(f / 5.9604644775390625e-08f + 0.5f); /* multiples of 2^-24 */
}

static void fill_bytes(uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = next_u64();
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)next_u64();
}

/* ---- tensors ---------------------------------------------------------------- */

typedef enum { FILL_WEIGHT, FILL_NORM, FILL_SMALL, FILL_NEG, FILL_ONE, FILL_ROPE } fill_t;

typedef struct tdesc {
    char name[96];
    memra_type_t type;
    int n_dims;
    int64_t ne[3];
    fill_t fill;
    float aux; /* FILL_ROPE: number of leading 1.0 entries */
} tdesc;

typedef struct plan {
    tdesc *t;
    int n, cap;
} plan;

static void add(plan *p, memra_type_t type, fill_t fill, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                const char *fmt, int il)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 256;
        p->t = realloc(p->t, (size_t)p->cap * sizeof *p->t);
    }
    tdesc *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, fmt, il);
    /* quant blocks run along ne0: fall back to Q8_0 (or F32) where it does not divide */
    if (type != MEMRA_TYPE_F32 && ne0 % memra_type_block_size(type) != 0)
        type = ne0 % 32 == 0 ? MEMRA_TYPE_Q8_0 : MEMRA_TYPE_F32;
    t->type = type;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->fill = fill;
}

/* Q4_K/Q5_K scales: eight random 6-bit sub-block scales sc in 1..63, each
 * with min m = sc, packed as ggml's quantize_row_q4_K_ref packs them (the
 * inverse of get_scale_min_k4). With dmin = d·MID (MID the middle quant,
 * 7.5 or 15.5) a value is d·sc·q − dmin·sc = d·sc·(q − MID): centred on
 * zero like a real weight, not offset by a random min. */
static void kquant_scales(uint8_t *b, float d, float mid)
{
    uint16_t hd = to_f16(d), hmin = to_f16(d * mid);
    uint8_t *s = b + 4;
    memcpy(b, &hd, 2);
    memcpy(b + 2, &hmin, 2);
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        uint8_t sc = (uint8_t)(1 + next_u64() % 63), m = sc;
        if (j < 4) {
            s[j] = sc;
            s[j + 4] = m;
        } else {
            s[j + 4] = (uint8_t)((sc & 0xF) | ((m & 0xF) << 4));
            s[j - 4] |= (uint8_t)((sc >> 4) << 6);
            s[j] |= (uint8_t)((m >> 4) << 6);
        }
    }
}

/* Random quants, and scales sized so that a block's values have mean ~0 and
 * std ~0.02, as the F32 and BF16 weights: a uniform quant q in 0..2^b−1 has
 * std sqrt((4^b − 1)/12) (4.61 for 4 bits, 9.23 for 5, 18.47 for 6), an
 * int8 73.9, and the K-quants' sub-block scales sc (1..63) have an rms of
 * sqrt(E[sc²]) = 36.8. */
static void fill_quant(memra_type_t type, uint8_t *p, size_t nbytes)
{
    size_t bb = memra_type_block_bytes(type);
    fill_bytes(p, nbytes);
    for (size_t off = 0; off + bb <= nbytes; off += bb) {
        uint8_t *b = p + off;
        uint16_t d;
        switch (type) {
        case MEMRA_TYPE_Q8_0: /* d·qs, qs int8 (73.6: q8_0 files stay as they were) */
            d = to_f16(0.02f / 73.6f);
            memcpy(b, &d, 2);
            break;
        case MEMRA_TYPE_Q4_0: /* d·(q − 8) */
            d = to_f16(0.02f / 4.6f);
            memcpy(b, &d, 2);
            break;
        case MEMRA_TYPE_Q4_K: kquant_scales(b, 0.02f / (36.8f * 4.61f), 7.5f); break;
        case MEMRA_TYPE_Q5_K: kquant_scales(b, 0.02f / (36.8f * 9.23f), 15.5f); break;
        case MEMRA_TYPE_Q6_K: /* d·sc·(q − 32), int8 sc; d last */
            d = to_f16(0.02f / (73.9f * 18.47f));
            memcpy(b + bb - 2, &d, 2);
            break;
        default:
            break;
        }
    }
}

static memra_status_t fill_cb(void *user, int64_t index, const char *name, void *dst, size_t nbytes)
{
    (void)name;
    const tdesc *t = &((const plan *)user)->t[index];
    if (t->type == MEMRA_TYPE_BF16) {
        uint16_t *h = dst;
        for (size_t i = 0; i < nbytes / 2; i++) {
            float f = 0.035f * (uniform() * 2.0f - 1.0f);
            uint32_t x;
            memcpy(&x, &f, 4);
            h[i] = (uint16_t)(x >> 16);
        }
        return MEMRA_OK;
    }
    if (t->type != MEMRA_TYPE_F32) {
        fill_quant(t->type, dst, nbytes);
        return MEMRA_OK;
    }
    float *f = dst;
    size_t n = nbytes / sizeof *f;
    for (size_t i = 0; i < n; i++) {
        float u = uniform() * 2.0f - 1.0f;
        switch (t->fill) {
        case FILL_NORM: f[i] = 1.0f + 0.1f * u; break;
        case FILL_NEG: f[i] = -expf(4.0f * uniform()); break;     /* ssm_a = −exp(A_log) */
        case FILL_ONE: f[i] = 1.0f; break;
        case FILL_ROPE: f[i] = (float)i < t->aux ? 1.0f : 1e30f; break;
        case FILL_SMALL: f[i] = 0.1f * u; break;
        default: f[i] = 0.035f * u; break;                        /* std 0.02 */
        }
    }
    return MEMRA_OK;
}

/* ---- model layouts ----------------------------------------------------------- */

static memra_type_t g_wtype, g_out_type, g_emb_type;

static void plan_qwen35(const spec_t *s, plan *p, int n_layer, int vocab)
{
    int64_t e = s->n_embd, hd = 256, kd = 16 * 128, vd = (int64_t)s->n_v * 128, conv = 2 * kd + vd;
    add(p, g_emb_type, FILL_WEIGHT, 2, e, vocab, 1, "token_embd.weight", 0);
    add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "output_norm.weight", 0);
    if (!s->tied)
        add(p, g_out_type, FILL_WEIGHT, 2, e, vocab, 1, "output.weight", 0);
    for (int il = 0; il < n_layer; il++) {
        add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.attn_norm.weight", il);
        add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.post_attention_norm.weight", il);
        if (il % 4 == 3) {
            add(p, g_wtype, FILL_WEIGHT, 2, e, 2 * s->n_head * hd, 1, "blk.%d.attn_q.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, e, s->n_head_kv * hd, 1, "blk.%d.attn_k.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, e, s->n_head_kv * hd, 1, "blk.%d.attn_v.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, s->n_head * hd, e, 1, "blk.%d.attn_output.weight", il);
            add(p, MEMRA_TYPE_F32, FILL_NORM, 1, hd, 1, 1, "blk.%d.attn_q_norm.weight", il);
            add(p, MEMRA_TYPE_F32, FILL_NORM, 1, hd, 1, 1, "blk.%d.attn_k_norm.weight", il);
        } else {
            add(p, g_wtype, FILL_WEIGHT, 2, e, conv, 1, "blk.%d.attn_qkv.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, e, vd, 1, "blk.%d.attn_gate.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, e, s->n_v, 1, "blk.%d.ssm_beta.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, e, s->n_v, 1, "blk.%d.ssm_alpha.weight", il);
            add(p, MEMRA_TYPE_F32, FILL_SMALL, 2, 4, conv, 1, "blk.%d.ssm_conv1d.weight", il);
            add(p, MEMRA_TYPE_F32, FILL_ONE, 1, s->n_v, 1, 1, "blk.%d.ssm_dt.bias", il);
            add(p, MEMRA_TYPE_F32, FILL_NEG, 1, s->n_v, 1, 1, "blk.%d.ssm_a", il);
            add(p, MEMRA_TYPE_F32, FILL_NORM, 1, 128, 1, 1, "blk.%d.ssm_norm.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, vd, e, 1, "blk.%d.ssm_out.weight", il);
        }
        if (s->fam == QWEN35) {
            add(p, g_wtype, FILL_WEIGHT, 2, e, s->n_ff, 1, "blk.%d.ffn_gate.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, e, s->n_ff, 1, "blk.%d.ffn_up.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, s->n_ff, e, 1, "blk.%d.ffn_down.weight", il);
        } else {
            add(p, MEMRA_TYPE_F32, FILL_WEIGHT, 2, e, s->n_expert, 1, "blk.%d.ffn_gate_inp.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 3, e, s->n_ff_exp, s->n_expert, "blk.%d.ffn_gate_exps.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 3, e, s->n_ff_exp, s->n_expert, "blk.%d.ffn_up_exps.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 3, s->n_ff_exp, e, s->n_expert, "blk.%d.ffn_down_exps.weight", il);
            add(p, MEMRA_TYPE_F32, FILL_WEIGHT, 2, e, 1, 1, "blk.%d.ffn_gate_inp_shexp.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, e, s->n_ff_shexp, 1, "blk.%d.ffn_gate_shexp.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, e, s->n_ff_shexp, 1, "blk.%d.ffn_up_shexp.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, s->n_ff_shexp, e, 1, "blk.%d.ffn_down_shexp.weight", il);
        }
    }
}

static int g4_is_swa(const spec_t *s, int il) { return il % s->swa_period != s->swa_period - 1; }

static void plan_gemma4(const spec_t *s, plan *p, int n_layer, int vocab)
{
    int64_t e = s->n_embd;
    add(p, g_emb_type, FILL_WEIGHT, 2, e, vocab, 1, "token_embd.weight", 0);
    add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "output_norm.weight", 0);
    p->t[p->n - 1].fill = FILL_NORM;
    add(p, MEMRA_TYPE_F32, FILL_ROPE, 1, 256, 1, 1, "rope_freqs.weight", 0);
    p->t[p->n - 1].aux = 64;
    if (s->n_pl) {
        add(p, g_wtype, FILL_WEIGHT, 2, (int64_t)s->n_pl * n_layer, vocab, 1, "per_layer_token_embd.weight", 0);
        add(p, MEMRA_TYPE_BF16, FILL_WEIGHT, 2, e, (int64_t)s->n_pl * n_layer, 1, "per_layer_model_proj.weight", 0);
        add(p, MEMRA_TYPE_F32, FILL_NORM, 1, s->n_pl, 1, 1, "per_layer_proj_norm.weight", 0);
    }
    for (int il = 0; il < n_layer; il++) {
        int swa = g4_is_swa(s, il);
        int64_t hd = swa ? 256 : 512, kvh = swa ? s->n_head_kv : s->n_head_kv_full;
        int64_t ff = s->n_ff_wide && il >= s->wide_from ? s->n_ff_wide : s->n_ff;
        add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.attn_norm.weight", il);
        add(p, g_wtype, FILL_WEIGHT, 2, e, s->n_head * hd, 1, "blk.%d.attn_q.weight", il);
        add(p, g_wtype, FILL_WEIGHT, 2, e, kvh * hd, 1, "blk.%d.attn_k.weight", il);
        if (!(s->kv_eq_v && !swa))
            add(p, g_wtype, FILL_WEIGHT, 2, e, kvh * hd, 1, "blk.%d.attn_v.weight", il);
        add(p, g_wtype, FILL_WEIGHT, 2, s->n_head * hd, e, 1, "blk.%d.attn_output.weight", il);
        add(p, MEMRA_TYPE_F32, FILL_NORM, 1, hd, 1, 1, "blk.%d.attn_q_norm.weight", il);
        add(p, MEMRA_TYPE_F32, FILL_NORM, 1, hd, 1, 1, "blk.%d.attn_k_norm.weight", il);
        add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.post_attention_norm.weight", il);
        add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.ffn_norm.weight", il);
        add(p, g_wtype, FILL_WEIGHT, 2, e, ff, 1, "blk.%d.ffn_gate.weight", il);
        add(p, g_wtype, FILL_WEIGHT, 2, e, ff, 1, "blk.%d.ffn_up.weight", il);
        add(p, g_wtype, FILL_WEIGHT, 2, ff, e, 1, "blk.%d.ffn_down.weight", il);
        add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.post_ffw_norm.weight", il);
        add(p, MEMRA_TYPE_F32, FILL_ONE, 1, 1, 1, 1, "blk.%d.layer_output_scale.weight", il);
        if (s->n_expert) {
            add(p, MEMRA_TYPE_F32, FILL_WEIGHT, 2, e, s->n_expert, 1, "blk.%d.ffn_gate_inp.weight", il);
            add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.ffn_gate_inp.scale", il);
            add(p, g_wtype, FILL_WEIGHT, 3, e, 2 * s->n_ff_exp, s->n_expert, "blk.%d.ffn_gate_up_exps.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 3, s->n_ff_exp, e, s->n_expert, "blk.%d.ffn_down_exps.weight", il);
            add(p, MEMRA_TYPE_F32, FILL_ONE, 1, s->n_expert, 1, 1, "blk.%d.ffn_down_exps.scale", il);
            add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.pre_ffw_norm_2.weight", il);
            add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.post_ffw_norm_1.weight", il);
            add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.post_ffw_norm_2.weight", il);
        }
        if (s->n_pl) {
            add(p, g_wtype, FILL_WEIGHT, 2, e, s->n_pl, 1, "blk.%d.inp_gate.weight", il);
            add(p, g_wtype, FILL_WEIGHT, 2, s->n_pl, e, 1, "blk.%d.proj.weight", il);
            add(p, MEMRA_TYPE_F32, FILL_NORM, 1, e, 1, 1, "blk.%d.post_norm.weight", il);
        }
    }
}

/* ---- metadata ----------------------------------------------------------------- */

#define TRY(x)                     \
    do {                           \
        memra_status_t st_ = (x);  \
        if (st_)                   \
            return st_;            \
    } while (0)

/* Bytes that GPT-2's byte-to-unicode map keeps as their own code point. */
static int gpt2_printable(int b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

/* GPT-2 byte-to-unicode symbol of byte B, as UTF-8: the other bytes take
 * U+0100, U+0101, ... in byte order. */
static void byte_symbol(int b, char out[4])
{
    int cp = b;
    if (!gpt2_printable(b)) {
        cp = 256;
        for (int x = 0; x < b; x++)
            cp += !gpt2_printable(x);
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static memra_status_t add_tokenizer(memra_gguf_writer_t *w, int vocab)
{
    static const char *merges[] = {"Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r"};
    static const char *merged[] = {"Ġt", "Ġa", "he", "in", "re", "on", "Ġthe", "er"};
    char **tok = calloc((size_t)vocab, sizeof *tok);
    int32_t *type = calloc((size_t)vocab, sizeof *type);
    if (!tok || !type)
        return MEMRA_E_NOMEM;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        tok[n] = malloc(4);
        byte_symbol(b, tok[n]);
        type[n++] = 1;
    }
    for (size_t i = 0; i < sizeof merged / sizeof *merged; i++) {
        tok[n] = strdup(merged[i]);
        type[n++] = 1;
    }
    static const char *specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    int first_special = n;
    for (; n < vocab; n++) {
        char buf[32];
        if (n - first_special < 3)
            snprintf(buf, sizeof buf, "%s", specials[n - first_special]);
        else
            snprintf(buf, sizeof buf, "<|unused_%d|>", n);
        tok[n] = strdup(buf);
        type[n] = n - first_special < 3 ? 3 : 5; /* CONTROL, UNUSED */
    }
    memra_status_t st = memra_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    if (!st)
        st = memra_gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2");
    if (!st)
        st = memra_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", (const char *const *)tok, NULL, (uint64_t)vocab);
    if (!st)
        st = memra_gguf_writer_add_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, type, (uint64_t)vocab);
    if (!st)
        st = memra_gguf_writer_add_str_array(w, "tokenizer.ggml.merges", merges, NULL, sizeof merges / sizeof *merges);
    if (!st)
        st = memra_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)first_special + 2);
    if (!st)
        st = memra_gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)first_special);
    if (!st)
        st = memra_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 0);
    for (int i = 0; i < vocab; i++)
        free(tok[i]);
    free(tok);
    free(type);
    return st;
}

static memra_status_t add_metadata(memra_gguf_writer_t *w, const spec_t *s, int n_layer, int vocab, int file_type)
{
    const char *arch = s->fam == QWEN35 ? "qwen35" : s->fam == QWEN35MOE ? "qwen35moe" : "gemma4";
    char k[128];
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, arch), k)
    TRY(memra_gguf_writer_add_str(w, "general.architecture", arch));
    TRY(memra_gguf_writer_add_str(w, "general.type", "model"));
    TRY(memra_gguf_writer_add_str(w, "general.name", s->name));
    TRY(memra_gguf_writer_add_u32(w, "general.file_type", (uint32_t)file_type));
    TRY(memra_gguf_writer_add_u32(w, "general.quantization_version", 2));
    TRY(memra_gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)n_layer));
    TRY(memra_gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)s->ctx));
    TRY(memra_gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd));
    TRY(memra_gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head));
    TRY(memra_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-6f));
    if (s->fam != GEMMA4) {
        int32_t sections[4] = {11, 11, 10, 0};
        if (s->fam == QWEN35)
            TRY(memra_gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff));
        TRY(memra_gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv));
        TRY(memra_gguf_writer_add_array(w, KEY("rope.dimension_sections"), MEMRA_GGUF_INT32, sections, 4));
        TRY(memra_gguf_writer_add_f32(w, KEY("rope.freq_base"), 1e7f));
        TRY(memra_gguf_writer_add_u32(w, KEY("attention.key_length"), 256));
        TRY(memra_gguf_writer_add_u32(w, KEY("attention.value_length"), 256));
        TRY(memra_gguf_writer_add_u32(w, KEY("rope.dimension_count"), 64));
        TRY(memra_gguf_writer_add_u32(w, KEY("ssm.conv_kernel"), 4));
        TRY(memra_gguf_writer_add_u32(w, KEY("ssm.state_size"), 128));
        TRY(memra_gguf_writer_add_u32(w, KEY("ssm.group_count"), 16));
        TRY(memra_gguf_writer_add_u32(w, KEY("ssm.time_step_rank"), (uint32_t)s->n_v));
        TRY(memra_gguf_writer_add_u32(w, KEY("ssm.inner_size"), (uint32_t)s->n_v * 128));
        TRY(memra_gguf_writer_add_u32(w, KEY("full_attention_interval"), 4));
        if (s->fam == QWEN35MOE) {
            TRY(memra_gguf_writer_add_u32(w, KEY("expert_count"), (uint32_t)s->n_expert));
            TRY(memra_gguf_writer_add_u32(w, KEY("expert_used_count"), (uint32_t)s->n_expert_used));
            TRY(memra_gguf_writer_add_u32(w, KEY("expert_feed_forward_length"), (uint32_t)s->n_ff_exp));
            TRY(memra_gguf_writer_add_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)s->n_ff_shexp));
        }
    } else {
        int32_t *kv = malloc((size_t)n_layer * sizeof *kv), *ff = malloc((size_t)n_layer * sizeof *ff);
        uint8_t *swa = malloc((size_t)n_layer);
        for (int il = 0; il < n_layer; il++) {
            swa[il] = (uint8_t)g4_is_swa(s, il);
            kv[il] = swa[il] ? s->n_head_kv : s->n_head_kv_full;
            ff[il] = s->n_ff_wide && il >= s->wide_from ? s->n_ff_wide : s->n_ff;
        }
        memra_status_t st = s->n_head_kv == s->n_head_kv_full
                                ? memra_gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv)
                                : memra_gguf_writer_add_array(w, KEY("attention.head_count_kv"), MEMRA_GGUF_INT32, kv,
                                                              (uint64_t)n_layer);
        if (!st)
            st = s->n_ff_wide ? memra_gguf_writer_add_array(w, KEY("feed_forward_length"), MEMRA_GGUF_INT32, ff,
                                                            (uint64_t)n_layer)
                              : memra_gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
        if (!st)
            st = memra_gguf_writer_add_array(w, KEY("attention.sliding_window_pattern"), MEMRA_GGUF_BOOL, swa,
                                             (uint64_t)n_layer);
        free(kv);
        free(ff);
        free(swa);
        TRY(st);
        /* a shrunk model keeps at least one full period of KV-owning layers,
         * so every shared layer has a source of its own type */
        int shared = s->n_kv_shared;
        if (shared > n_layer - s->swa_period)
            shared = n_layer - s->swa_period > 0 ? n_layer - s->swa_period : 0;
        TRY(memra_gguf_writer_add_f32(w, KEY("rope.freq_base"), 1e6f));
        TRY(memra_gguf_writer_add_f32(w, KEY("rope.freq_base_swa"), 1e4f));
        TRY(memra_gguf_writer_add_u32(w, KEY("attention.key_length"), 512));
        TRY(memra_gguf_writer_add_u32(w, KEY("attention.value_length"), 512));
        TRY(memra_gguf_writer_add_u32(w, KEY("attention.key_length_swa"), 256));
        TRY(memra_gguf_writer_add_u32(w, KEY("attention.value_length_swa"), 256));
        TRY(memra_gguf_writer_add_u32(w, KEY("rope.dimension_count"), 512));
        TRY(memra_gguf_writer_add_u32(w, KEY("rope.dimension_count_swa"), 256));
        TRY(memra_gguf_writer_add_u32(w, KEY("attention.sliding_window"), (uint32_t)s->window));
        TRY(memra_gguf_writer_add_u32(w, KEY("attention.shared_kv_layers"), (uint32_t)shared));
        TRY(memra_gguf_writer_add_u32(w, KEY("embedding_length_per_layer_input"), (uint32_t)s->n_pl));
        TRY(memra_gguf_writer_add_f32(w, KEY("final_logit_softcapping"), 30.0f));
        if (s->n_expert) {
            TRY(memra_gguf_writer_add_u32(w, KEY("expert_count"), (uint32_t)s->n_expert));
            TRY(memra_gguf_writer_add_u32(w, KEY("expert_used_count"), (uint32_t)s->n_expert_used));
            TRY(memra_gguf_writer_add_u32(w, KEY("expert_feed_forward_length"), (uint32_t)s->n_ff_exp));
        }
    }
#undef KEY
    return add_tokenizer(w, vocab);
}

enum { OPT_MODEL = CLI_LONG_ONLY, OPT_TYPE, OPT_OUT, OPT_LAYERS, OPT_VOCAB, OPT_EXPERTS, OPT_SEED, OPT_DRY, OPT_LIST };

/* The --type help and the usage lines name every k_qtypes entry; main fills
 * them in before the options are parsed. */
static char g_type_help[1024], g_synopsis[512];

static const cli_opt_t k_opts[] = {
    {OPT_MODEL, "model", "NAME", "released model whose shape to write, one of --list (required)"},
    {OPT_TYPE, "type", "TYPE", g_type_help},
    {OPT_OUT, "out", "FILE", "where the GGUF goes (required unless --dry-run)"},
    {OPT_LAYERS, "layers", "N", "keep the first N layers, 0..100000, 0 = all (default: 0)"},
    {OPT_VOCAB, "vocab", "N", "vocabulary size, 0 or 512..16777216, 0 = the model's (default: 0)"},
    {OPT_EXPERTS, "experts", "N", "MoE: keep N experts, 0..65536, 0 = all (default: 0)"},
    {OPT_SEED, "seed", "S", "seed of the random weights, 0..2^64-1 (default: the built-in stream)"},
    {OPT_DRY, "dry-run", NULL, "print parameter count and tensor bytes as JSON; write nothing"},
    {OPT_LIST, "list", NULL, "print the model names and exit"},
};

static const cli_prog_t k_prog = {
    "memra-synth",
    g_synopsis,
    "Writes a random-weight GGUF with the exact metadata, tensor names, shapes and quant types of a\n"
    "released model, so engines can be benchmarked and tested without downloads. The tokenizer is a\n"
    "small valid GPT-2-style BPE vocabulary padded to the model's size. --layers, --vocab and\n"
    "--experts shrink a model for tests.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "memra-synth --model qwen3.5-9b --type q8_0 --out /tmp/q35-9b-q8_0.gguf\n"
    "memra-synth --model qwen3.5-9b --type q5_k --out /tmp/q35-9b-q5_k.gguf\n"
    "memra-synth --model qwen3.5-0.8b --layers 2 --vocab 1024 --out /tmp/tiny.gguf",
};

static void build_help(void)
{
    char names[128];
    qtype_names(names, sizeof names, "|");
    snprintf(g_synopsis, sizeof g_synopsis,
             "--model NAME [--type %s] --out FILE [--layers N] [--vocab N] [--experts N] [--seed S]\n"
             "--model NAME [--type %s] --dry-run\n"
             "--list",
             names, names);
    size_t n = (size_t)snprintf(g_type_help, sizeof g_type_help,
                                "quantization, as llama-quantize's file type of that name (default: q8_0);\n"
                                "norms and other vectors stay F32, a matrix whose rows do not split into\n"
                                "the type's blocks is Q8_0:");
    for (size_t k = 0; k < N_QTYPES && n < sizeof g_type_help; k++)
        n += (size_t)snprintf(g_type_help + n, sizeof g_type_help - n, "\n%-5s %s (general.file_type %d)",
                              k_qtypes[k].name, k_qtypes[k].desc, k_qtypes[k].file_type);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *type = "q8_0", *out = NULL;
    int layers = 0, vocab = 0, dry = 0, experts = 0, list = 0;
    cli_t c;
    build_help();
    cli_init(&c, &k_prog, argc, argv);
    for (int key; (key = cli_next(&c)) != -1;) {
        switch (key) {
        case OPT_MODEL: model = c.arg; break;
        case OPT_TYPE: type = c.arg; break;
        case OPT_OUT: out = c.arg; break;
        case OPT_LAYERS: layers = (int)cli_long(&c, c.arg, 0, 100000); break;
        case OPT_VOCAB:
            vocab = (int)cli_long(&c, c.arg, 0, 1 << 24);
            if (vocab > 0 && vocab < 512)
                cli_fail(&c, "--vocab: %d is below 512 (0 = the model's own)", vocab);
            break;
        case OPT_EXPERTS: experts = (int)cli_long(&c, c.arg, 0, 65536); break;
        case OPT_SEED: g_rng = cli_u64(&c, c.arg, 0, UINT64_MAX) * 0x9E3779B97F4A7C15ull + 1; break;
        case OPT_DRY: dry = 1; break;
        case OPT_LIST: list = 1; break;
        }
    }
    if (c.first_operand < argc)
        cli_fail(&c, "unexpected argument '%s'", argv[c.first_operand]);
    if (list) {
        for (size_t k = 0; k < sizeof k_specs / sizeof *k_specs; k++)
            printf("%s\n", k_specs[k].name);
        return 0;
    }
    const spec_t *s = NULL;
    for (size_t k = 0; model && k < sizeof k_specs / sizeof *k_specs; k++)
        if (strcmp(k_specs[k].name, model) == 0)
            s = &k_specs[k];
    if (!model)
        cli_fail(&c, "no model given (--model NAME; --list names them)");
    if (!s)
        cli_fail(&c, "unknown model '%s' (see --list)", model);
    if (!out && !dry)
        cli_fail(&c, "no output file given (--out FILE, or --dry-run)");
    const qtype_t *q = find_qtype(type);
    if (!q) {
        char names[128];
        cli_fail(&c, "unknown type '%s' (one of %s)", type, qtype_names(names, sizeof names, ", "));
    }
    g_wtype = q->weight;
    g_out_type = q->head;
    g_emb_type = s->tied ? q->tied_emb : q->weight;
    spec_t shrunk = *s;
    if (experts > 0 && s->n_expert > experts) {
        shrunk.n_expert = experts;
        if (shrunk.n_expert_used > experts)
            shrunk.n_expert_used = experts;
        s = &shrunk;
    }
    int n_layer = layers > 0 && layers < s->n_layer ? layers : s->n_layer;
    int n_vocab = vocab >= 512 ? vocab : s->vocab;
    plan p = {0};
    if (s->fam == GEMMA4)
        plan_gemma4(s, &p, n_layer, n_vocab);
    else
        plan_qwen35(s, &p, n_layer, n_vocab);

    if (dry) {
        /* the plan only: parameter count and tensor bytes, to compare with
         * the published sizes (test/synth_check.py holds them) */
        uint64_t params = 0, nbytes = 0;
        for (int i = 0; i < p.n; i++) {
            uint64_t ne = (uint64_t)p.t[i].ne[0] * (uint64_t)p.t[i].ne[1] * (uint64_t)p.t[i].ne[2];
            params += ne;
            nbytes += ne / (uint64_t)memra_type_block_size(p.t[i].type) * memra_type_block_bytes(p.t[i].type);
        }
        printf("{\"model\":\"%s\",\"type\":\"%s\",\"file_type\":%d,\"layers\":%d,\"vocab\":%d,\"tensors\":%d,"
               "\"params\":%llu,\"bytes\":%llu}\n",
               s->name, type, q->file_type, n_layer, n_vocab, p.n, (unsigned long long)params,
               (unsigned long long)nbytes);
        free(p.t);
        return 0;
    }
    memra_gguf_writer_t *w = NULL;
    memra_status_t st = memra_gguf_writer_create(&w);
    if (!st)
        st = add_metadata(w, s, n_layer, n_vocab, q->file_type);
    uint64_t bytes = 0;
    for (int i = 0; i < p.n && !st; i++) {
        st = memra_gguf_writer_add_tensor(w, p.t[i].name, p.t[i].type, (uint32_t)p.t[i].n_dims, p.t[i].ne, NULL);
        bytes += (uint64_t)(p.t[i].ne[0] / memra_type_block_size(p.t[i].type)) * memra_type_block_bytes(p.t[i].type) *
                 (uint64_t)p.t[i].ne[1] * (uint64_t)(p.t[i].ne[2] ? p.t[i].ne[2] : 1);
    }
    memra_gguf_writer_set_fill(w, fill_cb, &p);
    if (!st)
        st = memra_gguf_writer_write(w, out);
    memra_gguf_writer_destroy(w);
    free(p.t);
    if (st) {
        fprintf(stderr, "%s: %s: %s\n", argv[0], memra_strerror(st), memra_last_error());
        return 1;
    }
    fprintf(stderr, "%s: wrote %s (%s, %s, %d layers, vocab %d, %d tensors, %.3f GB of tensor data)\n", argv[0], out,
            s->name, type, n_layer, n_vocab, p.n, (double)bytes / 1e9);
    return 0;
}
