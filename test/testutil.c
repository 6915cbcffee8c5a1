#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "memra/memra.h"
#include "testutil.h"

static bool is_dir(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *tu_fixtures(void)
{
    const char *e = getenv("MEMRA_FIXTURES");
    if (e && *e)
        return is_dir(e) ? e : NULL;
    e = getenv("MEMRA_FIXTURES_DEFAULT");
    if (e && is_dir(e))
        return e;
    return is_dir("../shared/fixtures") ? "../shared/fixtures" : NULL;
}

const char *tu_fixture_path(const char *rel)
{
    static char buf[8][4096];
    static int next;
    const char *root = tu_fixtures();
    if (!root)
        return NULL;
    char *b = buf[next++ & 7];
    snprintf(b, 4096, "%s/%s", root, rel);
    return access(b, R_OK) == 0 ? b : NULL;
}

const char *tu_data_path(const char *rel)
{
    static char buf[4][4096];
    static int next;
    const char *root = getenv("MEMRA_TEST_DATA");
    char *b = buf[next++ & 3];
    snprintf(b, 4096, "%s/%s", root ? root : "test/data", rel);
    return b;
}

void *tu_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* one spare byte keeps text files NUL-terminated for strstr & co. */
    char *buf = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n > 0 ? n : 0] = '\0';
    fclose(f);
    if (buf && size)
        *size = (size_t)n;
    return buf;
}

const char *tu_write_temp(const void *data, size_t size, int slot)
{
    static char buf[4][256];
    char *b = buf[slot & 3];
    const char *tmp = getenv("TMPDIR");
    snprintf(b, 256, "%s/memra-test-%d-%d.gguf", tmp ? tmp : "/tmp", (int)getpid(), slot & 3);
    FILE *f = fopen(b, "wb");
    if (!f)
        return NULL;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return NULL;
    }
    fclose(f);
    return b;
}

uint64_t tu_rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

double tu_rng_unit(uint64_t *s)
{
    return ((double)(tu_rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

float tu_rng_gauss(uint64_t *s)
{
    const double u1 = tu_rng_unit(s), u2 = tu_rng_unit(s);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

int64_t tu_rng_int(uint64_t *s, int64_t n)
{
    return (int64_t)(tu_rng_next(s) % (uint64_t)n);
}

uint32_t tu_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float tu_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int tu_fixture_models(char *names, size_t name_size, int max)
{
    const char *root = tu_fixtures();
    if (!root)
        return 0;
    char pat[1024];
    snprintf(pat, sizeof pat, "%s/models/*.gguf", root);
    glob_t g;
    int n = 0;
    if (glob(pat, 0, NULL, &g) == 0) { /* glob sorts */
        for (size_t i = 0; i < g.gl_pathc && n < max; i++, n++) {
            const char *base = strrchr(g.gl_pathv[i], '/') + 1;
            snprintf(names + (size_t)n * name_size, name_size, "%.*s", (int)(strlen(base) - 5), base);
        }
        globfree(&g);
    }
    return n;
}

memra_engine_t *tu_test_engine(const char *who)
{
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    p.n_threads = 2;
    const char *dev = getenv("MEMRA_TEST_DEVICE");
    if (dev && *dev && memra_engine_params_set_device(&p, dev) != MEMRA_OK) {
        fprintf(stderr, "%s: bad MEMRA_TEST_DEVICE %s\n", who, dev);
        return NULL;
    }
    memra_engine_t *e = NULL;
    if (memra_engine_create(&p, &e) != MEMRA_OK) {
        fprintf(stderr, "%s: engine %s: %s\n", who, dev && *dev ? dev : "cpu", memra_last_error());
        return NULL;
    }
    return e;
}

bool tu_skip_stages_on_gpu(const char *name, int32_t stages)
{
    const char *dev = getenv("MEMRA_TEST_DEVICE");
    if (stages <= 1 || !dev || !*dev || strcmp(dev, "cpu") == 0)
        return false;
    TU_SKIP("%s: the %d-stage case runs on CPU engines only (its second stage is a private CPU engine there; "
            "on a GPU it would need a second device)", name, stages);
    return true;
}

void tu_no_fixture_models(void **state)
{
    (void)state;
    TU_SKIP("no fixture models under %s/models (set MEMRA_FIXTURES)", tu_fixtures() ? tu_fixtures() : "(none)");
}

/* The group tu_run_fixture_kinds runs: its name and where its engine goes. */
static const char *g_group;
static memra_engine_t **g_group_engine;

static int group_setup(void **state)
{
    (void)state;
    *g_group_engine = tu_test_engine(g_group);
    return *g_group_engine ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    memra_engine_destroy(*g_group_engine);
    *g_group_engine = NULL;
    return 0;
}

int tu_run_fixture_kinds(const char *group, const tu_kind_t *kinds, size_t n_kinds, memra_engine_t **engine)
{
    g_group = group;
    g_group_engine = engine;
    enum { MAX_MODELS = 64 };
    static char models[MAX_MODELS][128]; /* the cases point into it */
    const int n_models = tu_fixture_models(&models[0][0], sizeof models[0], MAX_MODELS);
    const size_t total = (size_t)n_models * n_kinds + 1;
    struct CMUnitTest *tests = calloc(total, sizeof *tests);
    tu_fixture_case_t *cases = calloc(total, sizeof *cases);
    char(*names)[192] = calloc(total, sizeof *names);
    if (!tests || !cases || !names) {
        fprintf(stderr, "%s: out of memory\n", group);
        free(tests);
        free(cases);
        free(names);
        return 1;
    }
    size_t n = 0;
    for (int f = 0; f < n_models; f++)
        for (size_t k = 0; k < n_kinds; k++, n++) {
            snprintf(names[n], sizeof names[n], "%.60s/%.120s", kinds[k].name, models[f]);
            cases[n] = (tu_fixture_case_t){.name = models[f], .stages = kinds[k].stages, .streams = kinds[k].streams};
            tests[n] = (struct CMUnitTest){.name = names[n], .test_func = kinds[k].fn, .initial_state = &cases[n]};
        }
    if (n == 0)
        tests[n++] = (struct CMUnitTest){.name = "fixtures", .test_func = tu_no_fixture_models};
    const int rc = _cmocka_run_group_tests(group, tests, n, group_setup, group_teardown);
    free(tests);
    free(cases);
    free(names);
    return rc;
}

void tu_same_rows(const char *what, const float *got, const float *want, int32_t n, size_t v)
{
    for (int32_t r = 0; r < n; r++)
        if (memcmp(got + (size_t)r * v, want + (size_t)r * v, v * sizeof *got) != 0)
            fail_msg("%s: logits row %d differ", what, r);
}

memra_model_t *tu_load_fixture(const char *name, memra_engine_t *engine, int32_t chunk, int32_t stages)
{
    return tu_load_fixture_pool(name, engine, chunk, stages, 0, 0);
}

memra_model_t *tu_load_fixture_pool(const char *name, memra_engine_t *engine, int32_t chunk, int32_t stages,
                                    int64_t pool_bytes, int64_t page_bytes)
{
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    const char *path = tu_fixture_path(rel);
    assert_non_null(path);
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.engine = engine;
    if (chunk > 0)
        p.prefill_chunk = chunk;
    p.n_stages = stages;
    p.kv_pool_bytes = pool_bytes;
    p.kv_page_bytes = page_bytes;
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(path, &p, &m);
    if (st)
        fail_msg("%s: load failed: %s (%s)", name, memra_strerror(st), memra_last_error());
    if (stages > 1 && memra_model_n_stages(m) != stages)
        fail_msg("%s: %d stages loaded, %d asked", name, memra_model_n_stages(m), stages);
    return m;
}

const char *tu_kv_name(int type)
{
    return type == TU_KV_Q8_Q4 ? "q8_0/q4_0" : memra_type_name((memra_type_t)type);
}

memra_cache_t *tu_cache_typed(memra_model_t *m, int type, int32_t n_ctx)
{
    memra_cache_params_t p;
    memra_cache_default_params(&p);
    p.n_ctx = n_ctx;
    p.type_k = p.type_v = (memra_type_t)type;
    if (type == TU_KV_Q8_Q4) {
        p.type_k = MEMRA_TYPE_Q8_0;
        p.type_v = MEMRA_TYPE_Q4_0;
    }
    memra_cache_t *c = NULL;
    memra_status_t st = memra_cache_create_ex(m, &p, &c);
    if (st == MEMRA_E_UNSUPPORTED && (type == MEMRA_TYPE_Q8_0 || type == TU_KV_Q8_Q4))
        return NULL;
    if (st)
        fail_msg("cache %s: %s (%s)", tu_kv_name(type), memra_strerror(st), memra_last_error());
    return c;
}
