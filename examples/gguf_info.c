/* memra-gguf-info FILE [--json]: prints a GGUF file's version, keys and
 * tensors. Text mode shortens long arrays; JSON mode prints everything:
 * {"version":3,"kv":{...},"tensors":[{"name","type","shape","offset"}]} */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "cli.h"

static void json_str(FILE *o, const char *s, size_t n)
{
    fputc('"', o);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", o); break;
        case '\\': fputs("\\\\", o); break;
        case '\n': fputs("\\n", o); break;
        case '\r': fputs("\\r", o); break;
        case '\t': fputs("\\t", o); break;
        case '\b': fputs("\\b", o); break;
        case '\f': fputs("\\f", o); break;
        default:
            if (c < 0x20)
                fprintf(o, "\\u%04x", c);
            else
                fputc(c, o);
        }
    }
    fputc('"', o);
}

static void print_float(FILE *o, double v, int is32, int json)
{
    if (json && !isfinite(v)) {
        fputs("null", o);
        return;
    }
    fprintf(o, is32 ? "%.9g" : "%.17g", v);
}

/* One value: scalar (j = -1) or array element j. */
static void print_elem(FILE *o, const memra_gguf_t *g, int64_t i, int64_t j, memra_gguf_type_t t, int json)
{
    uint64_t u;
    int64_t s;
    double f;
    const char *str;
    size_t len;
    switch (t) {
    case MEMRA_GGUF_UINT8: case MEMRA_GGUF_UINT16: case MEMRA_GGUF_UINT32: case MEMRA_GGUF_UINT64:
        if ((j < 0 ? memra_gguf_kv_u64(g, i, &u) : memra_gguf_arr_u64(g, i, (uint64_t)j, &u)) == MEMRA_OK)
            fprintf(o, "%llu", (unsigned long long)u);
        break;
    case MEMRA_GGUF_INT8: case MEMRA_GGUF_INT16: case MEMRA_GGUF_INT32: case MEMRA_GGUF_INT64:
        if ((j < 0 ? memra_gguf_kv_i64(g, i, &s) : memra_gguf_arr_i64(g, i, (uint64_t)j, &s)) == MEMRA_OK)
            fprintf(o, "%lld", (long long)s);
        break;
    case MEMRA_GGUF_FLOAT32: case MEMRA_GGUF_FLOAT64:
        if ((j < 0 ? memra_gguf_kv_f64(g, i, &f) : memra_gguf_arr_f64(g, i, (uint64_t)j, &f)) == MEMRA_OK)
            print_float(o, f, t == MEMRA_GGUF_FLOAT32, json);
        break;
    case MEMRA_GGUF_BOOL:
        if ((j < 0 ? memra_gguf_kv_u64(g, i, &u) : memra_gguf_arr_u64(g, i, (uint64_t)j, &u)) == MEMRA_OK)
            fputs(u ? "true" : "false", o);
        break;
    case MEMRA_GGUF_STRING:
        if (j < 0 ? memra_gguf_kv_str(g, i, &str, &len) == MEMRA_OK
                  : memra_gguf_arr_str(g, i, (uint64_t)j, &str, &len) == MEMRA_OK) {
            if (!json && len > 60) {
                json_str(o, str, 57);
                fputs("...", o);
            } else {
                json_str(o, str, len);
            }
        }
        break;
    default:
        fputs("null", o);
    }
}

static void print_value(FILE *o, const memra_gguf_t *g, int64_t i, int json)
{
    memra_gguf_type_t t = memra_gguf_kv_type(g, i);
    if (t != MEMRA_GGUF_ARRAY) {
        print_elem(o, g, i, -1, t, json);
        return;
    }
    memra_gguf_type_t et = memra_gguf_arr_type(g, i);
    uint64_t n = memra_gguf_arr_n(g, i);
    uint64_t shown = json || n <= 8 ? n : 8;
    fputc('[', o);
    for (uint64_t j = 0; j < shown; j++) {
        if (j)
            fputs(json ? "," : ", ", o);
        print_elem(o, g, i, (int64_t)j, et, json);
    }
    if (shown < n)
        fprintf(o, ", ... (%llu %s)", (unsigned long long)n, memra_gguf_type_name(et));
    fputc(']', o);
}

static void print_json(FILE *o, const memra_gguf_t *g)
{
    fprintf(o, "{\"version\":%u,\"kv\":{", memra_gguf_version(g));
    for (int64_t i = 0; i < memra_gguf_n_kv(g); i++) {
        const char *k = memra_gguf_kv_key(g, i);
        if (i)
            fputc(',', o);
        json_str(o, k, strlen(k));
        fputc(':', o);
        print_value(o, g, i, 1);
    }
    fputs("},\"tensors\":[", o);
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        int64_t ne[4];
        uint32_t nd = memra_gguf_tensor_shape(g, i, ne);
        const char *name = memra_gguf_tensor_name(g, i);
        if (i)
            fputc(',', o);
        fputs("{\"name\":", o);
        json_str(o, name, strlen(name));
        fprintf(o, ",\"type\":\"%s\",\"shape\":[", memra_type_name(memra_gguf_tensor_type(g, i)));
        for (uint32_t d = 0; d < nd; d++)
            fprintf(o, d ? ",%lld" : "%lld", (long long)ne[d]);
        fprintf(o, "],\"offset\":%llu}", (unsigned long long)memra_gguf_tensor_offset(g, i));
    }
    fputs("]}\n", o);
}

static void print_text(FILE *o, const memra_gguf_t *g, const char *path)
{
    fprintf(o, "%s: GGUF v%u, %lld keys, %lld tensors, alignment %u, %u shard(s)\n", path,
            memra_gguf_version(g), (long long)memra_gguf_n_kv(g), (long long)memra_gguf_n_tensors(g),
            memra_gguf_alignment(g), memra_gguf_n_shards(g));
    for (int64_t i = 0; i < memra_gguf_n_kv(g); i++) {
        memra_gguf_type_t t = memra_gguf_kv_type(g, i);
        fprintf(o, "  %-48s %-8s ", memra_gguf_kv_key(g, i),
                t == MEMRA_GGUF_ARRAY ? "ARRAY" : memra_gguf_type_name(t));
        print_value(o, g, i, 0);
        fputc('\n', o);
    }
    for (int64_t i = 0; i < memra_gguf_n_tensors(g); i++) {
        int64_t ne[4];
        uint32_t nd = memra_gguf_tensor_shape(g, i, ne);
        fprintf(o, "  tensor %-40s %-7s [", memra_gguf_tensor_name(g, i),
                memra_type_name(memra_gguf_tensor_type(g, i)));
        for (uint32_t d = 0; d < nd; d++)
            fprintf(o, d ? ", %lld" : "%lld", (long long)ne[d]);
        fprintf(o, "] offset %llu\n", (unsigned long long)memra_gguf_tensor_offset(g, i));
    }
}

enum { OPT_JSON = CLI_LONG_ONLY };

static const cli_opt_t k_opts[] = {
    {OPT_JSON, "json", NULL, "print everything as one JSON object (default: text, long arrays shortened)"},
};

static const cli_prog_t k_prog = {
    "memra-gguf-info",
    "FILE.gguf [--json]",
    "Prints a GGUF file's version, keys and tensors. Text mode shortens long arrays; JSON mode\n"
    "prints everything: {\"version\":3,\"kv\":{...},\"tensors\":[{\"name\",\"type\",\"shape\",\"offset\"}]}",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "memra-gguf-info model.gguf\n"
    "memra-gguf-info model.gguf --json | python3 -m json.tool",
};

int main(int argc, char **argv)
{
    int json = 0;
    cli_t c;
    cli_init(&c, &k_prog, argc, argv);
    for (int key; (key = cli_next(&c)) != -1;)
        if (key == OPT_JSON)
            json = 1;
    if (c.first_operand >= argc)
        cli_fail(&c, "no file given");
    if (c.first_operand + 1 < argc)
        cli_fail(&c, "unexpected argument '%s' (one file at a time)", argv[c.first_operand + 1]);
    const char *path = argv[c.first_operand];
    memra_gguf_t *g = NULL;
    memra_status_t st = memra_gguf_open(path, &g);
    if (st) {
        fprintf(stderr, "%s: %s: %s\n", argv[0], memra_strerror(st), memra_last_error());
        return 1;
    }
    if (json)
        print_json(stdout, g);
    else
        print_text(stdout, g, path);
    memra_gguf_close(g);
    return 0;
}
