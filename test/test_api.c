/* Public API basics: status text, version, engines, logging. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "testutil.h"

static void test_status_text(void **state)
{
    (void)state;
    assert_string_equal(memra_strerror(MEMRA_OK), "success");
    assert_string_equal(memra_status_name(MEMRA_E_FORMAT), "E_FORMAT");
    assert_int_equal(MEMRA_E_FORMAT, -5); /* stable ABI values */
    assert_int_equal(MEMRA_E_INTERNAL, -16);
    assert_string_equal(memra_strerror((memra_status_t)-999), "unknown status");
}

static void test_version(void **state)
{
    (void)state;
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", MEMRA_VERSION_MAJOR, MEMRA_VERSION_MINOR, MEMRA_VERSION_PATCH);
    assert_string_equal(memra_version(), want);
    assert_int_equal(memra_version_number(), MEMRA_VERSION_NUMBER);
}

static void test_cpu_engine(void **state)
{
    (void)state;
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    assert_int_equal(p.size, sizeof p);
    p.n_threads = 2;
    memra_engine_t *e = NULL;
    assert_int_equal(memra_engine_create(&p, &e), MEMRA_OK);
    memra_engine_info_t info = {.size = sizeof info};
    assert_int_equal(memra_engine_get_info(e, &info), MEMRA_OK);
    assert_string_equal(info.backend_name, "cpu");
    assert_int_equal(info.n_threads, 2);
    assert_true(info.mem_total > 0);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
    assert_int_equal(memra_engine_destroy(NULL), MEMRA_OK);
}

static void test_cuda_without_gpu(void **state)
{
    (void)state;
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    assert_int_equal(memra_engine_params_set_device(&p, "cuda:0"), MEMRA_OK);
    memra_engine_t *e = NULL;
    memra_status_t st = memra_engine_create(&p, &e);
    if (memra_cuda_device_count() > 0) {
        assert_int_equal(st, MEMRA_OK);
        memra_engine_destroy(e);
        return;
    }
    assert_int_equal(st, MEMRA_E_NO_DEVICE);
    assert_null(e);
    assert_true(strlen(memra_last_error()) > 0);
    /* a nonsense ordinal is refused whatever the machine has */
    p.device = 999;
    assert_int_equal(memra_engine_create(&p, &e), MEMRA_E_NO_DEVICE);
}

/* memra_engine_host_alloc: usable, aligned memory from either engine (page
 * locked on CUDA), freed without its engine; bad sizes give NULL. */
static void host_alloc_on(const char *device)
{
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    assert_int_equal(memra_engine_params_set_device(&p, device), MEMRA_OK);
    memra_engine_t *e = NULL;
    assert_int_equal(memra_engine_create(&p, &e), MEMRA_OK);
    const size_t n = (size_t)248320 * sizeof(float);
    float *a = memra_engine_host_alloc(e, n), *b = memra_engine_host_alloc(e, 1);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal((uintptr_t)a % 64, 0);
    memset(a, 0x5a, n);
    *(char *)b = 1;
    assert_null(memra_engine_host_alloc(e, 0));
    assert_null(memra_engine_host_alloc(e, SIZE_MAX));
    memra_host_free(b);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
    assert_int_equal(((unsigned char *)a)[n - 1], 0x5a);
    memra_host_free(a); /* after its engine */
}

static void test_host_alloc(void **state)
{
    (void)state;
    assert_null(memra_engine_host_alloc(NULL, 16));
    memra_host_free(NULL);
    host_alloc_on("cpu");
    if (memra_cuda_device_count() > 0)
        host_alloc_on("cuda:0");
}

static void test_device_spec(void **state)
{
    (void)state;
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    assert_int_equal(memra_engine_params_set_device(&p, "cuda:3"), MEMRA_OK);
    assert_int_equal(p.backend, MEMRA_BACKEND_CUDA);
    assert_int_equal(p.device, 3);
    assert_int_equal(memra_engine_params_set_device(&p, "cpu"), MEMRA_OK);
    assert_int_equal(p.backend, MEMRA_BACKEND_CPU);
    assert_int_equal(memra_engine_params_set_device(&p, "gpu"), MEMRA_E_INVALID);
    assert_int_equal(memra_engine_params_set_device(&p, "cuda:x"), MEMRA_E_INVALID);
}

static void test_engine_misuse(void **state)
{
    (void)state;
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    assert_int_equal(memra_engine_create(&p, NULL), MEMRA_E_INVALID);
    memra_engine_t *e = (memra_engine_t *)0x1;
    p.size = 0;
    assert_int_equal(memra_engine_create(&p, &e), MEMRA_E_INVALID);
    assert_null(e);
    memra_engine_default_params(&p);
    p.backend = 42;
    assert_int_equal(memra_engine_create(&p, &e), MEMRA_E_INVALID);
    p.backend = MEMRA_BACKEND_CPU;
    p.n_threads = -3;
    assert_int_equal(memra_engine_create(&p, &e), MEMRA_E_INVALID);
    /* an older caller's smaller params struct is read only as far as it goes */
    memra_engine_params_t old;
    memra_engine_default_params(&old);
    old.size = (uint32_t)offsetof(memra_engine_params_t, n_threads);
    old.n_threads = -3; /* beyond the old size: must be ignored */
    assert_int_equal(memra_engine_create(&old, &e), MEMRA_OK);
    memra_engine_destroy(e);
}

/* n_threads is capped at MEMRA_CPU_THREADS_PER_CORE x the online cores:
 * 20000 threads took 17 s to create and 12 s per toy step. Above the cap
 * is MEMRA_E_INVALID at once, naming the limit; the cap itself works. */
static void test_thread_cap(void **state)
{
    (void)state;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    const int32_t cap = (int32_t)(MEMRA_CPU_THREADS_PER_CORE * cores);
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    memra_engine_t *e = (memra_engine_t *)0x1;
    const int32_t too_many[] = {cap + 1, 20000, INT32_MAX};
    for (size_t k = 0; k < sizeof too_many / sizeof too_many[0]; k++) {
        p.n_threads = too_many[k];
        time_t t0 = time(NULL);
        assert_int_equal(memra_engine_create(&p, &e), MEMRA_E_INVALID);
        assert_true(time(NULL) - t0 <= 1);
        assert_null(e);
        assert_non_null(strstr(memra_last_error(), "n_threads"));
    }
    p.n_threads = cap;
    assert_int_equal(memra_engine_create(&p, &e), MEMRA_OK);
    memra_engine_info_t info = {.size = sizeof info};
    assert_int_equal(memra_engine_get_info(e, &info), MEMRA_OK);
    assert_int_equal(info.n_threads, cap);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
}

/* MEMRA_FAST parses like every env knob: 0 or 1, unset or empty = the
 * default, else MEMRA_E_INVALID naming it (it once took any text but "0"
 * as on). */
static void test_env_fast_strict(void **state)
{
    (void)state;
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    static const char *const bad[] = {"off", "2", "1x", "-1"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memra_engine_t *e = (memra_engine_t *)0x1;
        setenv("MEMRA_FAST", bad[k], 1);
        memra_status_t st = memra_engine_create(&p, &e);
        unsetenv("MEMRA_FAST");
        assert_int_equal(st, MEMRA_E_INVALID);
        assert_null(e);
        assert_non_null(strstr(memra_last_error(), "MEMRA_FAST"));
    }
    static const char *const good[] = {"", "0", "1"};
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
        memra_engine_t *e = NULL;
        setenv("MEMRA_FAST", good[k], 1);
        memra_status_t st = memra_engine_create(&p, &e);
        unsetenv("MEMRA_FAST");
        assert_int_equal(st, MEMRA_OK);
        assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
    }
    /* an explicit params value does not read the env at all */
    setenv("MEMRA_FAST", "garbage", 1);
    p.fast = 0;
    memra_engine_t *e = NULL;
    memra_status_t st = memra_engine_create(&p, &e);
    unsetenv("MEMRA_FAST");
    assert_int_equal(st, MEMRA_OK);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
}

static int log_calls;
static void count_log(memra_log_level_t level, const char *text, void *user)
{
    (void)level;
    (void)text;
    (void)user;
    log_calls++;
}

static void test_log_callback(void **state)
{
    (void)state;
    memra_log_set(count_log, NULL, MEMRA_LOG_DEBUG);
    memra_gguf_t *g = NULL;
    assert_int_equal(memra_gguf_open("/nonexistent/file.gguf", &g), MEMRA_E_IO);
    assert_true(log_calls > 0);
    memra_log_set(NULL, NULL, MEMRA_LOG_INFO);
    int before = log_calls;
    assert_int_equal(memra_gguf_open("/nonexistent/file.gguf", &g), MEMRA_E_IO);
    assert_int_equal(log_calls, before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_text),   cmocka_unit_test(test_version),
        cmocka_unit_test(test_cpu_engine),    cmocka_unit_test(test_cuda_without_gpu),
        cmocka_unit_test(test_device_spec),   cmocka_unit_test(test_engine_misuse),
        cmocka_unit_test(test_log_callback),  cmocka_unit_test(test_host_alloc),
        cmocka_unit_test(test_thread_cap),    cmocka_unit_test(test_env_fast_strict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
