#define _POSIX_C_SOURCE 200809L /* readlink, access, clock_gettime */
#include "common.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int readable(const char *p) { return p && *p && access(p, R_OK) == 0; }

const char *default_model_path(void)
{
    static char buf[PATH_MAX + 64];
    const char *env = getenv("MEMRA_DEFAULT_MODEL");
    if (env && *env)
        return env; /* taken as given: the caller reports it if it cannot be opened */
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(buf, sizeof buf, "%s/default.gguf", exe);
            if (readable(buf))
                return buf;
            snprintf(buf, sizeof buf, "%s/../share/memra/default.gguf", exe);
            if (readable(buf))
                return buf;
        }
    }
#ifdef MEMRA_DEFAULT_MODEL
    if (readable(MEMRA_DEFAULT_MODEL))
        return MEMRA_DEFAULT_MODEL;
#endif
    return NULL;
}

int example_load(const char *prog, const char *path, const char *device, int32_t threads, int32_t chunk,
                 memra_progress_fn progress, void *user, memra_engine_t **engine, memra_model_t **model)
{
    *engine = NULL;
    *model = NULL;
    memra_engine_params_t ep;
    memra_engine_default_params(&ep);
    ep.n_threads = threads;
    if (memra_engine_params_set_device(&ep, device) || memra_engine_create(&ep, engine)) {
        fprintf(stderr, "%s: device %s: %s\n", prog, device, memra_last_error());
        return -1;
    }
    memra_model_params_t mp;
    memra_model_default_params(&mp);
    mp.engine = *engine;
    mp.prefill_chunk = chunk;
    mp.progress = progress;
    mp.progress_user = user;
    if (memra_model_load(path, &mp, model)) {
        fprintf(stderr, "%s: %s\n", prog, memra_last_error());
        memra_engine_destroy(*engine);
        *engine = NULL;
        return -1;
    }
    return 0;
}

int example_tokenize(const char *prog, const memra_tokenizer_t *tok, const char *text, size_t len, uint32_t flags,
                     int32_t **ids, int32_t *n)
{
    *ids = NULL;
    *n = 0;
    /* a size query first: MEMRA_E_RANGE with the count needed */
    memra_status_t st = memra_tokenize(tok, text, len, NULL, 0, flags, n);
    if (st == MEMRA_OK || st == MEMRA_E_RANGE) {
        if (!(*ids = malloc(((size_t)*n + 1) * sizeof **ids))) {
            fprintf(stderr, "%s: out of memory for token ids\n", prog);
            return -1;
        }
        st = memra_tokenize(tok, text, len, *ids, *n, flags, n);
    }
    if (st != MEMRA_OK) {
        fprintf(stderr, "%s: %s\n", prog, memra_last_error()); /* names memra_tokenize */
        free(*ids);
        *ids = NULL;
        return -1;
    }
    return 0;
}

int example_parse_ids(const char *s, int32_t min, int32_t **ids, int32_t *n, const char **bad)
{
    size_t cap = 1024, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    while (v) {
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == ',')
            s++;
        if (!*s)
            break;
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < min || x > INT32_MAX || k == INT32_MAX) {
            *bad = s;
            free(v);
            return 1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv)
                free(v);
            v = nv;
            cap *= 2;
            if (!v)
                break;
        }
        v[k++] = (int32_t)x;
        s = end;
    }
    if (!v)
        return -1;
    *ids = v;
    *n = (int32_t)k;
    return 0;
}

double example_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

char *example_read_all(FILE *f, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) {
            if (ferror(f)) {
                free(b);
                return NULL;
            }
            break;
        }
        char *nb = realloc(b, cap * 2);
        if (!nb)
            free(b);
        b = nb;
        cap *= 2;
    }
    *len = n;
    return b;
}
