/* memra-bench: llama-bench-like prefill and decode throughput.
 *
 *   memra-bench -m MODEL [-p 512[,2048..]] [-n 128] [-d DEPTH[,DEPTH..]] [-r 5] [--device cpu|cuda:N]
 *               [--threads N] [--chunk N] [--json] [--pageable] [--batch B[,B..]]
 *
 * For each depth D (as llama-bench -d): pp: after D tokens of context
 * (untimed), one forward over P random tokens (last-row logits), for each
 * P; tg: after D tokens of context (untimed), N single-token decode steps,
 * each returning its logits to the host (in memory of
 * memra_engine_host_alloc, as an application that cares would; with
 * --pageable in malloc'd memory). Each test runs R times after one
 * warm-up; median and standard deviation are reported. Decode is also
 * stated against the roofline this program measures itself: bytes the
 * weights make each token read, over the engine's measured copy bandwidth
 * (memra_engine_copy_bandwidth). --json prints one JSON object per depth
 * (one line each): "pp" is the first P's result, "pp_all" every P's.
 * The KV cache's bytes per token are reported, and on a GPU how many
 * sequences of 4096 and 32768 tokens (KV rows plus recurrent state, at
 * the cache types asked) fit in the device memory free after the weights
 * were loaded ("fit", null on the CPU; activations not counted).
 * --batch B[,B..] instead measures B sequences together, as
 * llama-batched-bench (examples/bench_batch.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "bench_batch.h"
#include "cli.h"
#include "common.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct stats {
    double median, stdev;
} stats;

static stats summarize(double *v, int n)
{
    stats s = {0, 0};
    double mean = 0;
    for (int i = 0; i < n; i++)
        mean += v[i] / n;
    for (int i = 0; i < n; i++)
        s.stdev += (v[i] - mean) * (v[i] - mean) / (n > 1 ? n - 1 : 1);
    s.stdev = sqrt(s.stdev);
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}

/* Bytes one decode step reads from the weights: every tensor once, except
 * the embedding table, of which only one row is read unless it is also the
 * (tied) output head. */
static double decode_bytes(const memra_gguf_t *g, const char *arch)
{
    double total = 0, used_frac = 1;
    char key[96];
    uint64_t n_exp = 0, n_used = 0;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    memra_gguf_kv_u64(g, memra_gguf_find_kv(g, key), &n_exp);
    snprintf(key, sizeof key, "%s.expert_used_count", arch);
    memra_gguf_kv_u64(g, memra_gguf_find_kv(g, key), &n_used);
    if (n_exp > 0 && n_used > 0)
        used_frac = (double)n_used / (double)n_exp; /* MoE: only the routed experts are read */
    int64_t emb = memra_gguf_find_tensor(g, "token_embd.weight");
    int tied = memra_gguf_find_tensor(g, "output.weight") < 0;
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        const char *name = memra_gguf_tensor_name(g, i);
        if (strncmp(name, "blk.", 4) == 0 && strstr(name, ".nextn."))
            continue;
        if (strcmp(name, "per_layer_token_embd.weight") == 0 || (i == emb && !tied)) {
            int64_t ne[4];
            memra_gguf_tensor_shape(g, i, ne);
            total += (double)memra_gguf_tensor_nbytes(g, i) / (double)ne[1];
            continue;
        }
        total += (double)memra_gguf_tensor_nbytes(g, i) * (strstr(name, "_exps.") ? used_frac : 1.0);
    }
    return total;
}

/* How many sequences of 4096 and 32768 tokens fit in MEM_FREE bytes of
 * device memory, each a cache of C's types: its KV rows (with --kv-pool,
 * the pages they take: sliding windows hold their window's) plus its
 * recurrent state. Activations, workspaces and allocator slack are not
 * counted: an upper bound. */
typedef struct fit {
    int known;
    uint64_t mem_free, state_bytes, seqs[2];
} fit_t;

static fit_t fit_sequences(uint64_t mem_free, const memra_cache_t *c)
{
    static const uint64_t lens[2] = {4096, 32768};
    fit_t f = {.known = 1, .mem_free = mem_free, .state_bytes = memra_cache_state_bytes(c)};
    for (int i = 0; i < 2; i++) {
        uint64_t per = memra_cache_kv_bytes(c, (int64_t)lens[i]) + f.state_bytes;
        f.seqs[i] = per ? mem_free / per : 0;
    }
    return f;
}

#define MAX_LIST 8

enum { OPT_DEVICE = CLI_LONG_ONLY, OPT_CHUNK, OPT_JSON, OPT_PAGEABLE, OPT_CACHE_TYPE_K, OPT_CACHE_TYPE_V, OPT_BATCH, OPT_KV_POOL };

static const cli_opt_t k_opts[] = {
    {'m', "model", "FILE", "GGUF model (required)"},
    {'p', "n-prompt", "P[,P..]", "prefill lengths in tokens, up to 8, each 0..16777216, 0 = no prefill\n"
                                 "test (default: 512)"},
    {'n', "n-gen", "N", "decode steps of the tg test, 0..16777216, 0 = none (default: 128)"},
    {'d', "n-depth", "D[,D..]", "context depths before each test, up to 8, each 0..16777216 (default: 0)"},
    {'r', "repetitions", "R", "timed runs of each test after one warm-up, 1..1000 (default: 5)"},
    {OPT_DEVICE, "device", "DEV", "cpu, cuda or cuda:N (default: cpu)"},
    {'t', "threads", "N", "CPU threads, 0 = all cores (default: 0)"},
    {OPT_CHUNK, "chunk", "N", "prefill chunk in tokens, 0 = the model's default (env MEMRA_PRIME_CHUNK,\n"
                              "else 2048) (default: 0)"},
    {OPT_JSON, "json", NULL, "one JSON object per depth, one line each (default: a table)"},
    {OPT_PAGEABLE, "pageable", NULL, "decode logits into malloc'd memory instead of memra_engine_host_alloc\n"
                                     "(default: off)"},
    {OPT_CACHE_TYPE_K, "cache-type-k", "TYPE", "KV cache type of K (also -ctk): f32, f16, bf16 or q8_0\n"
                                               "(default: f16, as llama-bench)"},
    {OPT_CACHE_TYPE_V, "cache-type-v", "TYPE", "KV cache type of V (also -ctv): f32, f16, bf16, q8_0 or q4_0\n"
                                               "(default: f16)"},
    {OPT_KV_POOL, "kv-pool", "MIB", "a paged KV pool of this many MiB per stage (docs/BATCHING.md), 0 = none\n"
                                     "(default: 0)"},
    {OPT_BATCH, "batch", "B[,B..]", "batched mode (llama-batched-bench): for each B, up to 8, each 1..64,\n"
                                    "B sequences of P prompt tokens prefilled in one batched call, then N\n"
                                    "batched decode steps; aggregate tok/s (default: off)"},
};

static const cli_prog_t k_prog = {
    "memra-bench",
    "-m MODEL [-p 512[,2048..]] [-n 128] [-d 0[,512..]] [-r 5] [--device DEV] [--threads N]\n"
    " [--chunk N] [--json] [--pageable] [-ctk TYPE] [-ctv TYPE] [--kv-pool MIB] [--batch B[,B..]]",
    "llama-bench-like prefill and decode throughput. For each depth D: pp, one forward over P\n"
    "random tokens after D tokens of context (untimed), for each P; tg, N single-token decode steps\n"
    "after D tokens of context, each returning its logits to the host. Median and standard\n"
    "deviation over R runs; decode is also stated against the roofline measured here (bytes of\n"
    "weights read per token over the engine's copy bandwidth). With --json, \"pp\" is the first P's\n"
    "result and \"pp_all\" every P's. The KV cache's bytes per token (all layers) are reported\n"
    "with its types, and on a GPU how many 4096- and 32768-token sequences of those types\n"
    "(KV rows and recurrent state) fit in the device memory free after the weights (\"fit\";\n"
    "activations not counted). With --batch: for each B, B sequences advanced together\n"
    "(memra_forward_batch): one call prefills B prompts of P tokens, then N steps decode one token\n"
    "of each; aggregate rates (B*P, B*N tokens over the time), one JSON object per B.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "memra-bench -m model.gguf --device cuda:0 -p 512 -n 128 -d 0,512 -r 3 --json\n"
    "memra-bench -m model.gguf -p 0 -n 32 --threads 8\n"
    "memra-bench -m model.gguf --device cuda:0 --batch 1,2,4,8,16,32 -p 128 -n 128 --json",
};

int main(int argc, char **argv)
{
    const char *path = NULL, *device = "cpu";
    int n = 128, reps = 5, threads = 0, chunk = 0, json = 0, pageable = 0;
    long kv_pool_mib = 0;
    int pl[MAX_LIST] = {512}, dl[MAX_LIST] = {0}, bl[MAX_LIST] = {0}, n_p = 1, n_d = 1, n_b = 0;
    long list[MAX_LIST];
    cli_t cl;
    memra_cache_params_t cp;
    memra_cache_default_params(&cp);
    cli_cache_type_aliases(argc, argv);
    cli_init(&cl, &k_prog, argc, argv);
    for (int key; (key = cli_next(&cl)) != -1;) {
        const char *v = cl.arg;
        switch (key) {
        case 'm': path = v; break;
        case 'p':
            n_p = cli_long_list(&cl, v, 0, 1 << 24, list, MAX_LIST);
            for (int i = 0; i < n_p; i++)
                pl[i] = (int)list[i];
            break;
        case 'n': n = (int)cli_long(&cl, v, 0, 1 << 24); break;
        case 'd':
            n_d = cli_long_list(&cl, v, 0, 1 << 24, list, MAX_LIST);
            for (int i = 0; i < n_d; i++)
                dl[i] = (int)list[i];
            break;
        case 'r': reps = (int)cli_long(&cl, v, 1, 1000); break;
        case OPT_DEVICE: device = v; break;
        case 't': threads = (int)cli_long(&cl, v, 0, 4096); break;
        case OPT_CHUNK: chunk = (int)cli_long(&cl, v, 0, 1 << 20); break;
        case OPT_JSON: json = 1; break;
        case OPT_PAGEABLE: pageable = 1; break;
        case OPT_CACHE_TYPE_K: cp.type_k = (memra_type_t)cli_cache_type(&cl, v); break;
        case OPT_CACHE_TYPE_V: cp.type_v = (memra_type_t)cli_cache_type(&cl, v); break;
        case OPT_KV_POOL: kv_pool_mib = cli_long(&cl, v, 0, 1L << 30); break;
        case OPT_BATCH:
            n_b = cli_long_list(&cl, v, 1, MEMRA_MAX_BATCH, list, MAX_LIST);
            for (int i = 0; i < n_b; i++)
                bl[i] = (int)list[i];
            break;
        }
    }
    if (cl.first_operand < argc)
        cli_fail(&cl, "unexpected argument '%s'", argv[cl.first_operand]);
    if (!path)
        cli_fail(&cl, "no model given (-m MODEL)");
    int p_max = 0, d_max = 0;
    if (n_b > 0 && (n_d > 1 || dl[0] != 0))
        cli_fail(&cl, "--batch takes no context depth (-d)");
    for (int i = 0; i < n_p; i++)
        p_max = pl[i] > p_max ? pl[i] : p_max;
    for (int i = 0; i < n_d; i++)
        d_max = dl[i] > d_max ? dl[i] : d_max;
    memra_engine_params_t ep;
    memra_engine_default_params(&ep);
    ep.n_threads = threads;
    memra_engine_t *e = NULL;
    memra_model_t *m = NULL;
    memra_cache_t *c = NULL;
    memra_status_t st = memra_engine_params_set_device(&ep, device);
    if (!st)
        st = memra_engine_create(&ep, &e);
    memra_model_params_t mp;
    memra_model_default_params(&mp);
    mp.engine = e;
    mp.prefill_chunk = chunk;
    mp.kv_pool_bytes = (int64_t)kv_pool_mib << 20;
    double t_load = example_seconds();
    if (!st)
        st = memra_model_load(path, &mp, &m);
    t_load = example_seconds() - t_load;
    /* device memory left after the weights, before the bench's own cache
     * and buffers take any */
    memra_engine_info_t info0 = {.size = sizeof info0};
    if (!st)
        memra_engine_get_info(e, &info0);
    int32_t ctx = d_max + (p_max > n ? p_max : n) + 8;
    cp.n_ctx = ctx;
    if (!st)
        st = memra_cache_create_ex(m, &cp, &c);
    if (st) {
        fprintf(stderr, "%s: %s: %s\n", argv[0], memra_strerror(st), memra_last_error());
        return 1;
    }
    int32_t nv = memra_model_n_vocab(m);
    int32_t len = d_max + p_max + n + 8;
    if (n_b > 0) {
        memra_cache_free(c);
        int32_t *bt = malloc((size_t)len * sizeof *bt);
        uint64_t brng = 12345;
        for (int32_t i = 0; bt && i < len; i++) {
            brng = brng * 6364136223846793005ull + 1442695040888963407ull;
            bt[i] = (int32_t)((brng >> 33) % (uint64_t)(nv > 256 ? 256 : nv)); /* ordinary byte tokens */
        }
        st = bt ? bench_batch(e, m, path, bl, n_b, pl, n_p, n, reps, json, bt) : MEMRA_E_NOMEM;
        if (!bt)
            fprintf(stderr, "%s: out of memory\n", argv[0]);
        free(bt);
        memra_model_free(m);
        memra_engine_destroy(e);
        return st ? 1 : 0;
    }
    int32_t *tok = malloc((size_t)len * sizeof *tok);
    float *logits = pageable ? malloc((size_t)nv * sizeof *logits) : memra_engine_host_alloc(e, (size_t)nv * sizeof *logits);
    uint64_t rng = 12345;
    for (int32_t i = 0; tok && i < len; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((rng >> 33) % (uint64_t)(nv > 256 ? 256 : nv)); /* ordinary byte tokens */
    }
    double *pp = calloc((size_t)reps * n_p, sizeof *pp), *tg = calloc((size_t)reps, sizeof *tg);
    if (!tok || !logits || !pp || !tg) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    double bw = 0;
    memra_engine_copy_bandwidth(e, (size_t)1 << 30, 10, &bw);
    double bytes = decode_bytes(memra_model_gguf(m), memra_model_arch(m));
    double roof = bw > 0 ? bw / bytes : 0;
    memra_engine_info_t info = {.size = sizeof info};
    memra_engine_get_info(e, &info);
    fit_t fit = {0};
    if (strcmp(info0.backend_name, "cuda") == 0)
        fit = fit_sequences(info0.mem_free, c);
    char fit_json[160] = "null";
    if (fit.known)
        snprintf(fit_json, sizeof fit_json, "{\"mem_free_bytes\":%llu,\"state_bytes\":%llu,\"seqs_4096\":%llu,"
                 "\"seqs_32768\":%llu}", (unsigned long long)fit.mem_free, (unsigned long long)fit.state_bytes,
                 (unsigned long long)fit.seqs[0], (unsigned long long)fit.seqs[1]);
    if (!json) {
        printf("model   %s (%s), %.2f GB weights read per decode token\n", path, memra_model_arch(m), bytes / 1e9);
        printf("device  %s (%s)\n", info.device_name, info.backend_name);
        printf("kv      %s K, %s V: %llu bytes per token\n", memra_type_name(cp.type_k), memra_type_name(cp.type_v),
               (unsigned long long)memra_cache_kv_bytes_per_token(c));
        if (fit.known)
            printf("fit     %llu x 4096-token, %llu x 32768-token sequences in the %.2f GiB free after the weights "
                   "(%llu bytes of recurrent state each)\n", (unsigned long long)fit.seqs[0],
                   (unsigned long long)fit.seqs[1], (double)fit.mem_free / (1u << 30),
                   (unsigned long long)fit.state_bytes);
    }
    for (int di = 0; di < n_d && !st; di++) {
        const int depth = dl[di];
        for (int r = -1; r < reps && !st; r++) { /* r = -1: warm-up */
            for (int pi = 0; pi < n_p && !st; pi++) {
                const int p = pl[pi];
                if (p == 0)
                    continue;
                memra_cache_clear(c);
                if (depth > 0)
                    st = memra_forward(m, c, tok + p_max, depth, 0, NULL);
                double t0 = example_seconds();
                if (!st)
                    st = memra_forward(m, c, tok, p, 0, logits);
                double dt = example_seconds() - t0;
                if (r >= 0)
                    pp[pi * reps + r] = p / dt;
            }
            if (!st && n > 0) {
                memra_cache_clear(c);
                if (depth > 0)
                    st = memra_forward(m, c, tok + p_max, depth, 0, NULL);
                double t0 = example_seconds();
                for (int i = 0; i < n && !st; i++)
                    st = memra_decode_step(m, c, tok[depth + i], logits);
                double dt = example_seconds() - t0;
                if (r >= 0)
                    tg[r] = n / dt;
            }
        }
        if (st)
            break;
        stats spp[MAX_LIST] = {{0, 0}}, stg = summarize(tg, reps);
        for (int pi = 0; pi < n_p; pi++)
            spp[pi] = summarize(pp + pi * reps, reps);
        if (json) {
            printf("{\"model\":\"%s\",\"arch\":\"%s\",\"device\":\"%s\",\"stages\":%d,\"load_s\":%.3f,"
                   "\"pp\":{\"n_prompt\":%d,\"depth\":%d,\"tok_s\":%.2f,\"stdev\":%.2f},\"pp_all\":[",
                   path, memra_model_arch(m), info.device_name, memra_model_n_stages(m), t_load, pl[0], depth,
                   spp[0].median, spp[0].stdev);
            for (int pi = 0; pi < n_p; pi++)
                printf("%s{\"n_prompt\":%d,\"depth\":%d,\"tok_s\":%.2f,\"stdev\":%.2f}", pi ? "," : "", pl[pi],
                       depth, spp[pi].median, spp[pi].stdev);
            printf("],\"tg\":{\"n_gen\":%d,\"depth\":%d,\"tok_s\":%.2f,\"stdev\":%.2f},\"reps\":%d,"
                   "\"decode_bytes_per_token\":%.0f,\"copy_bw_bytes_s\":%.4g,\"roofline_tok_s\":%.2f,"
                   "\"roofline_frac\":%.4f,\"type_k\":\"%s\",\"type_v\":\"%s\",\"kv_bytes_per_token\":%llu,"
                   "\"fit\":%s}\n",
                   n, depth, stg.median, stg.stdev, reps, bytes, bw, roof, roof > 0 ? stg.median / roof : 0,
                   memra_type_name(cp.type_k), memra_type_name(cp.type_v),
                   (unsigned long long)memra_cache_kv_bytes_per_token(c), fit_json);
        } else {
            for (int pi = 0; pi < n_p; pi++)
                if (pl[pi] > 0)
                    printf("pp%-5d %10.2f tok/s  ± %.2f  (depth %d)\n", pl[pi], spp[pi].median, spp[pi].stdev, depth);
            if (n > 0)
                printf("tg%-5d %10.2f tok/s  ± %.2f  (depth %d)\n", n, stg.median, stg.stdev, depth);
        }
        fflush(stdout);
    }
    if (st) {
        fprintf(stderr, "%s: %s: %s\n", argv[0], memra_strerror(st), memra_model_last_error(m));
        return 1;
    }
    if (!json)
        printf("copy bandwidth %.1f GB/s (read+write) -> roofline %.1f tok/s\n", bw / 1e9, roof);
    free(tok);
    if (pageable)
        free(logits);
    else
        memra_host_free(logits);
    free(pp);
    free(tg);
    memra_cache_free(c);
    memra_model_free(m);
    memra_engine_destroy(e);
    return 0;
}
