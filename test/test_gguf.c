/* GGUF reader and writer: round trips, typed getters, a table of malformed
 * files, truncation and byte-flip sweeps, split models and the fixtures. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "testutil.h"
#include "fuzz/gguf_walk.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ------------------------------------------------------------- */

/* Names the table case being checked in failure messages. */
static const char *g_case = "";

static void expect_msg(const char *sub)
{
    const char *m = memra_last_error();
    if (!strstr(m, sub))
        fail_msg("%s: last error \"%s\" does not mention \"%s\"", g_case, m, sub);
}

static void expect_status(memra_status_t got, memra_status_t want)
{
    if (got != want)
        fail_msg("%s: got %s, want %s (last error: %s)", g_case, memra_status_name(got),
                 memra_status_name(want), memra_last_error());
}

static memra_gguf_writer_t *writer(void)
{
    memra_gguf_writer_t *w = NULL;
    assert_int_equal(memra_gguf_writer_create(&w), MEMRA_OK);
    return w;
}

/* Writes W to memory and destroys it. */
static uint8_t *finish(memra_gguf_writer_t *w, size_t *size)
{
    void *data = NULL;
    expect_status(memra_gguf_writer_write_memory(w, &data, size), MEMRA_OK);
    memra_gguf_writer_destroy(w);
    return data;
}

static memra_gguf_t *open_ok(const void *data, size_t size)
{
    memra_gguf_t *g = NULL;
    expect_status(memra_gguf_open_memory(data, size, &g), MEMRA_OK);
    assert_non_null(g);
    return g;
}

/* Opens an exact-size heap copy (so that sanitizers see any over-read) and
 * expects failure with STATUS and SUB in the message. */
static void expect_open_fail(const void *data, size_t size, memra_status_t status, const char *sub)
{
    uint8_t *copy = malloc(size ? size : 1);
    assert_non_null(copy);
    if (size)
        memcpy(copy, data, size);
    memra_gguf_t *g = (memra_gguf_t *)(uintptr_t)1;
    memra_status_t st = memra_gguf_open_memory(copy, size, &g);
    if (st == MEMRA_OK)
        memra_gguf_close(g);
    free(copy);
    expect_status(st, status);
    assert_null(g);
    assert_true(memra_last_error()[0] != '\0');
    if (sub)
        expect_msg(sub);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static void fill_pattern(void *dst, size_t n, uint32_t seed)
{
    uint8_t *p = dst;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 131u + seed * 7u + (i >> 8)) ^ seed);
}

/* ---- byte builder for hand-made files ------------------------------------ */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *p, size_t n)
{
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void bb_le(bb *b, uint64_t v, unsigned n)
{
    uint8_t t[8];
    for (unsigned i = 0; i < n; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    bb_put(b, t, n);
}

static void bb_u8(bb *b, uint8_t v) { bb_le(b, v, 1); }
static void bb_u32(bb *b, uint32_t v) { bb_le(b, v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_le(b, v, 8); }
static void bb_strn(bb *b, const void *s, size_t n) { bb_u64(b, n); bb_put(b, s, n); }
static void bb_str(bb *b, const char *s) { bb_strn(b, s, strlen(s)); }
static void bb_zero(bb *b, size_t n)
{
    static const uint8_t z[256];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        bb_put(b, z, k);
        n -= k;
    }
}
static void bb_align(bb *b, size_t a) { bb_zero(b, (a - b->n % a) % a); }

static void bb_hdr(bb *b, uint32_t version, uint64_t nt, uint64_t nkv)
{
    bb_u32(b, 0x46554747u);
    bb_u32(b, version);
    bb_u64(b, nt);
    bb_u64(b, nkv);
}

static void bb_key(bb *b, const char *key, uint32_t type)
{
    bb_str(b, key);
    bb_u32(b, type);
}

static void bb_tinfo(bb *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off)
{
    bb_str(b, name);
    bb_u32(b, nd);
    for (uint32_t d = 0; d < nd; d++)
        bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, off);
}

/* One tensor, no keys, DATA bytes of zeros after the aligned header. */
static void bb_1t(bb *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off,
                  size_t data)
{
    bb_hdr(b, 3, 1, 0);
    bb_tinfo(b, name, nd, ne, type, off);
    bb_align(b, 32);
    bb_zero(b, data);
}

/* One key of TYPE (the caller appends its value), no tensors. */
static void bb_1k(bb *b, const char *key, uint32_t type)
{
    bb_hdr(b, 3, 0, 1);
    bb_key(b, key, type);
}

/* ---- round trips --------------------------------------------------------- */

static void test_types(void **state)
{
    (void)state;
    assert_string_equal(memra_type_name(MEMRA_TYPE_Q8_0), "Q8_0");
    assert_int_equal(memra_type_block_size(MEMRA_TYPE_Q4_K), 256);
    assert_int_equal(memra_type_block_bytes(MEMRA_TYPE_Q4_K), 144);
    static const int holes[] = {4, 5, 31, 32, 33, 36, 37, 38, 42, 1000, -1};
    for (size_t i = 0; i < N_OF(holes); i++) {
        assert_null(memra_type_name((memra_type_t)holes[i]));
        assert_int_equal(memra_type_block_size((memra_type_t)holes[i]), 0);
        assert_int_equal(memra_type_block_bytes((memra_type_t)holes[i]), 0);
    }
    assert_string_equal(memra_gguf_type_name(MEMRA_GGUF_FLOAT64), "FLOAT64");
    assert_null(memra_gguf_type_name(MEMRA_GGUF_TYPE_COUNT));
}

static void test_roundtrip_scalars(void **state)
{
    (void)state;
    memra_gguf_writer_t *w = writer();
    uint8_t u8 = 0xAB;
    int8_t i8 = -7;
    uint16_t u16 = 0xBEEF;
    int16_t i16 = -12345;
    uint32_t u32 = 0xDEADBEEFu;
    int32_t i32 = -123456789;
    float f32 = 3.25f;
    uint8_t bl = 1;
    uint64_t u64 = 0xFEDCBA9876543210ull;
    int64_t i64 = -0x0123456789ABCDEFll;
    double f64 = -2.5e300;
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.u8", MEMRA_GGUF_UINT8, &u8), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.i8", MEMRA_GGUF_INT8, &i8), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.u16", MEMRA_GGUF_UINT16, &u16), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.i16", MEMRA_GGUF_INT16, &i16), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.u32", MEMRA_GGUF_UINT32, &u32), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.i32", MEMRA_GGUF_INT32, &i32), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.f32", MEMRA_GGUF_FLOAT32, &f32), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.bool", MEMRA_GGUF_BOOL, &bl), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.u64", MEMRA_GGUF_UINT64, &u64), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.i64", MEMRA_GGUF_INT64, &i64), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "t.f64", MEMRA_GGUF_FLOAT64, &f64), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_u32(w, "h.u32", 42), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_i32(w, "h.i32", -42), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_f32(w, "h.f32", 0.1f), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_bool(w, "h.bool", 0), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_str(w, "s.plain", "hello"), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_str(w, "s.empty", ""), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_str(w, "s.utf8", "h\xc3\xa9llo w\xc3\xb6rld \xe2\x80\x94 \xf0\x9f\x98\x80\n"), MEMRA_OK);
    /* keys may be any UTF-8 */
    assert_int_equal(memra_gguf_writer_add_u32(w, "k\xc3\xa9y.\xe2\x80\x94", 9), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "bad", MEMRA_GGUF_STRING, "x"), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "bad", MEMRA_GGUF_ARRAY, &u8), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_scalar(w, "bad", MEMRA_GGUF_UINT8, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_str(w, "bad", NULL), MEMRA_E_INVALID);
    size_t size;
    uint8_t *data = finish(w, &size);
    memra_gguf_t *g = open_ok(data, size);
    assert_int_equal(memra_gguf_version(g), 3);
    assert_int_equal(memra_gguf_alignment(g), 32);
    assert_int_equal(memra_gguf_n_shards(g), 1);
    assert_int_equal(memra_gguf_n_kv(g), 19);
    assert_int_equal(memra_gguf_n_tensors(g), 0);
    static const memra_gguf_type_t types[] = {
        MEMRA_GGUF_UINT8, MEMRA_GGUF_INT8, MEMRA_GGUF_UINT16, MEMRA_GGUF_INT16, MEMRA_GGUF_UINT32,
        MEMRA_GGUF_INT32, MEMRA_GGUF_FLOAT32, MEMRA_GGUF_BOOL, MEMRA_GGUF_UINT64, MEMRA_GGUF_INT64,
        MEMRA_GGUF_FLOAT64, MEMRA_GGUF_UINT32, MEMRA_GGUF_INT32, MEMRA_GGUF_FLOAT32, MEMRA_GGUF_BOOL,
        MEMRA_GGUF_STRING, MEMRA_GGUF_STRING, MEMRA_GGUF_STRING, MEMRA_GGUF_UINT32};
    for (int64_t i = 0; i < 19; i++)
        assert_int_equal(memra_gguf_kv_type(g, i), types[i]);
    assert_string_equal(memra_gguf_kv_key(g, 0), "t.u8");
    assert_string_equal(memra_gguf_kv_key(g, 18), "k\xc3\xa9y.\xe2\x80\x94");

    uint64_t u;
    int64_t s;
    double f;
    int b;
    assert_int_equal(memra_gguf_kv_u64(g, 0, &u), MEMRA_OK);
    assert_int_equal(u, 0xAB);
    assert_int_equal(memra_gguf_kv_i64(g, 1, &s), MEMRA_OK);
    assert_int_equal(s, -7);
    assert_int_equal(memra_gguf_kv_u64(g, 2, &u), MEMRA_OK);
    assert_int_equal(u, 0xBEEF);
    assert_int_equal(memra_gguf_kv_i64(g, 3, &s), MEMRA_OK);
    assert_int_equal(s, -12345);
    assert_int_equal(memra_gguf_kv_u64(g, 4, &u), MEMRA_OK);
    assert_int_equal(u, 0xDEADBEEFu);
    assert_int_equal(memra_gguf_kv_i64(g, 5, &s), MEMRA_OK);
    assert_int_equal(s, -123456789);
    assert_int_equal(memra_gguf_kv_f64(g, 6, &f), MEMRA_OK);
    assert_true(f == 3.25);
    assert_int_equal(memra_gguf_kv_bool(g, 7, &b), MEMRA_OK);
    assert_int_equal(b, 1);
    assert_int_equal(memra_gguf_kv_u64(g, 8, &u), MEMRA_OK);
    assert_true(u == 0xFEDCBA9876543210ull);
    assert_int_equal(memra_gguf_kv_i64(g, 9, &s), MEMRA_OK);
    assert_true(s == -0x0123456789ABCDEFll);
    assert_int_equal(memra_gguf_kv_f64(g, 10, &f), MEMRA_OK);
    assert_true(f == -2.5e300);
    assert_int_equal(memra_gguf_kv_u64(g, 11, &u), MEMRA_OK);
    assert_int_equal(u, 42);
    assert_int_equal(memra_gguf_kv_i64(g, 12, &s), MEMRA_OK);
    assert_int_equal(s, -42);
    assert_int_equal(memra_gguf_kv_f64(g, 13, &f), MEMRA_OK);
    assert_true(f == (double)0.1f);
    assert_int_equal(memra_gguf_kv_bool(g, 14, &b), MEMRA_OK);
    assert_int_equal(b, 0);
    const char *str;
    size_t len;
    assert_int_equal(memra_gguf_kv_str(g, 15, &str, &len), MEMRA_OK);
    assert_string_equal(str, "hello");
    assert_int_equal(len, 5);
    assert_int_equal(memra_gguf_kv_str(g, 16, &str, NULL), MEMRA_OK);
    assert_string_equal(str, "");
    assert_int_equal(memra_gguf_kv_str(g, 17, &str, &len), MEMRA_OK);
    assert_string_equal(str, "h\xc3\xa9llo w\xc3\xb6rld \xe2\x80\x94 \xf0\x9f\x98\x80\n");
    assert_int_equal(len, strlen(str));
    assert_int_equal(gguf_walk(g, data, size), 0);
    memra_gguf_close(g);
    memra_free(data);
}

static void test_roundtrip_arrays(void **state)
{
    (void)state;
    static const uint8_t a_u8[] = {0, 1, 127, 255};
    static const int8_t a_i8[] = {-128, -1, 0, 127};
    static const uint16_t a_u16[] = {0, 65535, 256};
    static const int16_t a_i16[] = {-32768, 32767, -1};
    static const uint32_t a_u32[] = {0, 0xFFFFFFFFu, 7, 1u << 31};
    static const int32_t a_i32[] = {INT32_MIN, INT32_MAX, -1, 0, 11};
    static const float a_f32[] = {1.0f, -0.5f, 1e30f, -0.0f};
    static const uint8_t a_bool[] = {1, 0, 0, 1, 1};
    static const uint64_t a_u64[] = {UINT64_MAX, 0, 1ull << 63};
    static const int64_t a_i64[] = {INT64_MIN, INT64_MAX, -2};
    static const double a_f64[] = {3.141592653589793, -1e-300, 0.0};
    struct {
        memra_gguf_type_t t;
        const void *p;
        size_t n, es;
    } arrs[] = {
        {MEMRA_GGUF_UINT8, a_u8, 4, 1},    {MEMRA_GGUF_INT8, a_i8, 4, 1},
        {MEMRA_GGUF_UINT16, a_u16, 3, 2},  {MEMRA_GGUF_INT16, a_i16, 3, 2},
        {MEMRA_GGUF_UINT32, a_u32, 4, 4},  {MEMRA_GGUF_INT32, a_i32, 5, 4},
        {MEMRA_GGUF_FLOAT32, a_f32, 4, 4}, {MEMRA_GGUF_BOOL, a_bool, 5, 1},
        {MEMRA_GGUF_UINT64, a_u64, 3, 8},  {MEMRA_GGUF_INT64, a_i64, 3, 8},
        {MEMRA_GGUF_FLOAT64, a_f64, 3, 8},
    };
    const size_t n_arrs = N_OF(arrs);
    static const char *const strs[] = {"a", "", "h\xc3\xa9llo", "x y", ""};
    static const char nul_str[] = {'a', '\0', 'b'};
    const char *const with_nul[] = {nul_str, "zz"};
    const size_t lens[] = {3, 2};

    memra_gguf_writer_t *w = writer();
    char key[32];
    for (size_t k = 0; k < n_arrs; k++) {
        snprintf(key, sizeof key, "arr.%s", memra_gguf_type_name(arrs[k].t));
        assert_int_equal(memra_gguf_writer_add_array(w, key, arrs[k].t, arrs[k].p, arrs[k].n), MEMRA_OK);
    }
    assert_int_equal(memra_gguf_writer_add_str_array(w, "arr.str", strs, NULL, 5), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_str_array(w, "arr.strlen", with_nul, lens, 2), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_array(w, "arr.empty", MEMRA_GGUF_UINT32, NULL, 0), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_str_array(w, "arr.empty_str", NULL, NULL, 0), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_array(w, "bad", MEMRA_GGUF_STRING, strs, 1), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_array(w, "bad", MEMRA_GGUF_ARRAY, a_u8, 1), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_array(w, "bad", MEMRA_GGUF_UINT8, NULL, 1), MEMRA_E_INVALID);
    size_t size;
    uint8_t *data = finish(w, &size);
    memra_gguf_t *g = open_ok(data, size);
    assert_int_equal(memra_gguf_n_kv(g), (int64_t)n_arrs + 4);
    for (size_t k = 0; k < n_arrs; k++) {
        int64_t i = (int64_t)k;
        assert_int_equal(memra_gguf_kv_type(g, i), MEMRA_GGUF_ARRAY);
        assert_int_equal(memra_gguf_arr_type(g, i), arrs[k].t);
        assert_int_equal(memra_gguf_arr_n(g, i), arrs[k].n);
        const void *raw = memra_gguf_arr_data(g, i);
        assert_non_null(raw);
        assert_memory_equal(raw, arrs[k].p, arrs[k].n * arrs[k].es);
        for (size_t j = 0; j < arrs[k].n; j++) {
            uint64_t u = 0;
            int64_t s = 0;
            double f = 0;
            memra_status_t su = memra_gguf_arr_u64(g, i, j, &u);
            memra_status_t ss = memra_gguf_arr_i64(g, i, j, &s);
            memra_status_t sf = memra_gguf_arr_f64(g, i, j, &f);
            switch (arrs[k].t) {
            case MEMRA_GGUF_UINT8: assert_int_equal(u, a_u8[j]); assert_int_equal(s, a_u8[j]); break;
            case MEMRA_GGUF_BOOL: assert_int_equal(u, a_bool[j]); break;
            case MEMRA_GGUF_UINT16: assert_int_equal(u, a_u16[j]); break;
            case MEMRA_GGUF_UINT32: assert_int_equal(u, a_u32[j]); assert_int_equal(s, a_u32[j]); break;
            case MEMRA_GGUF_UINT64:
                assert_true(u == a_u64[j]);
                expect_status(ss, a_u64[j] > INT64_MAX ? MEMRA_E_RANGE : MEMRA_OK);
                break;
            case MEMRA_GGUF_INT8: assert_int_equal(s, a_i8[j]); break;
            case MEMRA_GGUF_INT16: assert_int_equal(s, a_i16[j]); break;
            case MEMRA_GGUF_INT32:
                assert_int_equal(s, a_i32[j]);
                expect_status(su, a_i32[j] < 0 ? MEMRA_E_RANGE : MEMRA_OK);
                break;
            case MEMRA_GGUF_INT64: assert_true(s == a_i64[j]); break;
            case MEMRA_GGUF_FLOAT32:
                expect_status(sf, MEMRA_OK);
                assert_memory_equal(&(float){(float)f}, &a_f32[j], 4);
                expect_status(su, MEMRA_E_TYPE);
                expect_status(ss, MEMRA_E_TYPE);
                break;
            case MEMRA_GGUF_FLOAT64:
                expect_status(sf, MEMRA_OK);
                assert_true(f == a_f64[j]);
                break;
            default: break;
            }
            if (arrs[k].t != MEMRA_GGUF_FLOAT32 && arrs[k].t != MEMRA_GGUF_FLOAT64)
                expect_status(sf, MEMRA_E_TYPE);
        }
        const char *str;
        expect_status(memra_gguf_arr_str(g, i, 0, &str, NULL), MEMRA_E_TYPE);
        expect_status(memra_gguf_arr_u64(g, i, arrs[k].n, &(uint64_t){0}), MEMRA_E_RANGE);
        expect_msg("out of range");
    }
    int64_t i = memra_gguf_find_kv(g, "arr.str");
    assert_int_equal(i, (int64_t)n_arrs);
    assert_int_equal(memra_gguf_arr_type(g, i), MEMRA_GGUF_STRING);
    assert_int_equal(memra_gguf_arr_n(g, i), 5);
    assert_null(memra_gguf_arr_data(g, i));
    for (uint64_t j = 0; j < 5; j++) {
        const char *s;
        size_t len;
        assert_int_equal(memra_gguf_arr_str(g, i, j, &s, &len), MEMRA_OK);
        assert_int_equal(len, strlen(strs[j]));
        assert_memory_equal(s, strs[j], len);
        expect_status(memra_gguf_arr_u64(g, i, j, &(uint64_t){0}), MEMRA_E_TYPE);
    }
    i = memra_gguf_find_kv(g, "arr.strlen");
    const char *s;
    size_t len;
    assert_int_equal(memra_gguf_arr_str(g, i, 0, &s, &len), MEMRA_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(s, nul_str, 3);
    i = memra_gguf_find_kv(g, "arr.empty");
    assert_int_equal(memra_gguf_arr_type(g, i), MEMRA_GGUF_UINT32);
    assert_int_equal(memra_gguf_arr_n(g, i), 0);
    expect_status(memra_gguf_arr_u64(g, i, 0, &(uint64_t){0}), MEMRA_E_RANGE);
    i = memra_gguf_find_kv(g, "arr.empty_str");
    assert_int_equal(memra_gguf_arr_type(g, i), MEMRA_GGUF_STRING);
    assert_int_equal(memra_gguf_arr_n(g, i), 0);
    expect_status(memra_gguf_arr_str(g, i, 0, &s, &len), MEMRA_E_RANGE);
    assert_int_equal(gguf_walk(g, data, size), 0);
    memra_gguf_close(g);
    memra_free(data);
}

typedef struct tspec {
    const char *name;
    memra_type_t type;
    uint32_t nd;
    int64_t ne[4];
} tspec;

static const tspec k_tensors[] = {
    {"tok.f32", MEMRA_TYPE_F32, 1, {7}},
    {"w.f16", MEMRA_TYPE_F16, 2, {3, 5}},
    {"w.q8_0", MEMRA_TYPE_Q8_0, 3, {64, 2, 3}},
    {"w.q4_k", MEMRA_TYPE_Q4_K, 4, {256, 1, 2, 2}},
    {"w.i8", MEMRA_TYPE_I8, 4, {5, 1, 1, 1}},
    {"w.bf16", MEMRA_TYPE_BF16, 2, {1, 9}},
    {"empty", MEMRA_TYPE_F32, 2, {16, 0}},
    {"w.mxfp4", MEMRA_TYPE_MXFP4, 1, {96}},
    {"w.q1_0", MEMRA_TYPE_Q1_0, 2, {128, 3}},
    {"w.f64", MEMRA_TYPE_F64, 1, {3}},
};

static uint64_t spec_nbytes(const tspec *t)
{
    uint64_t n = (uint64_t)(t->ne[0] / memra_type_block_size(t->type)) * memra_type_block_bytes(t->type);
    for (uint32_t d = 1; d < t->nd; d++)
        n *= (uint64_t)t->ne[d];
    return n;
}

/* Writes k_tensors (data from fill_pattern) with the given version and
 * alignment, checks everything back. */
static void roundtrip_tensors(uint32_t version, uint32_t alignment)
{
    const size_t nt = N_OF(k_tensors);
    uint8_t *bufs[N_OF(k_tensors)];
    memra_gguf_writer_t *w = writer();
    assert_int_equal(memra_gguf_writer_set_version(w, version), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_str(w, "general.architecture", "test"), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_set_alignment(w, alignment), MEMRA_OK);
    for (size_t k = 0; k < nt; k++) {
        size_t n = (size_t)spec_nbytes(&k_tensors[k]);
        bufs[k] = malloc(n ? n : 1);
        fill_pattern(bufs[k], n, (uint32_t)k + 1);
        assert_int_equal(memra_gguf_writer_add_tensor(w, k_tensors[k].name, k_tensors[k].type,
                                                      k_tensors[k].nd, k_tensors[k].ne, bufs[k]),
                         MEMRA_OK);
    }
    size_t size;
    uint8_t *data = finish(w, &size);
    memra_gguf_t *g = open_ok(data, size);
    assert_int_equal(memra_gguf_version(g), version);
    assert_int_equal(memra_gguf_alignment(g), alignment);
    int64_t ka = memra_gguf_find_kv(g, "general.alignment");
    if (alignment == 32) {
        assert_int_equal(ka, -1);
    } else {
        uint64_t v;
        assert_true(ka >= 0);
        assert_int_equal(memra_gguf_kv_type(g, ka), MEMRA_GGUF_UINT32);
        assert_int_equal(memra_gguf_kv_u64(g, ka, &v), MEMRA_OK);
        assert_int_equal(v, alignment);
    }
    assert_int_equal(memra_gguf_n_tensors(g), (int64_t)nt);
    uint64_t expect_off = 0;
    for (size_t k = 0; k < nt; k++) {
        int64_t i = (int64_t)k;
        const tspec *t = &k_tensors[k];
        uint64_t nb = spec_nbytes(t);
        int64_t ne[4];
        assert_string_equal(memra_gguf_tensor_name(g, i), t->name);
        assert_int_equal(memra_gguf_find_tensor(g, t->name), i);
        assert_int_equal(memra_gguf_tensor_type(g, i), t->type);
        assert_int_equal(memra_gguf_tensor_shape(g, i, ne), t->nd);
        for (uint32_t d = 0; d < 4; d++)
            assert_int_equal(ne[d], d < t->nd ? t->ne[d] : 1);
        assert_int_equal(memra_gguf_tensor_nbytes(g, i), nb);
        assert_int_equal(memra_gguf_tensor_offset(g, i), expect_off);
        assert_int_equal(memra_gguf_tensor_shard(g, i), 0);
        const uint8_t *p = memra_gguf_tensor_data(g, i);
        assert_non_null(p);
        assert_int_equal((size_t)(p - data) % alignment, 0);
        assert_true(p + nb <= data + size);
        if (nb)
            assert_memory_equal(p, bufs[k], nb);
        expect_off += (nb + alignment - 1) / alignment * alignment;
        free(bufs[k]);
    }
    assert_int_equal(gguf_walk(g, data, size), 0);
    memra_gguf_close(g);
    memra_free(data);
}

static void test_roundtrip_tensors(void **state)
{
    (void)state;
    roundtrip_tensors(3, 32);
}

static void test_version2(void **state)
{
    (void)state;
    roundtrip_tensors(2, 32);
}

static void test_alignment(void **state)
{
    (void)state;
    roundtrip_tensors(3, 64);
    roundtrip_tensors(3, 1);
    roundtrip_tensors(2, 4096);
    memra_gguf_writer_t *w = writer();
    assert_int_equal(memra_gguf_writer_set_alignment(w, 0), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_set_alignment(w, 48), MEMRA_E_INVALID);
    /* setting it twice must still give one key */
    assert_int_equal(memra_gguf_writer_set_alignment(w, 64), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_set_alignment(w, 128), MEMRA_OK);
    size_t size;
    uint8_t *data = finish(w, &size);
    memra_gguf_t *g = open_ok(data, size);
    assert_int_equal(memra_gguf_alignment(g), 128);
    assert_int_equal(memra_gguf_n_kv(g), 1);
    memra_gguf_close(g);
    memra_free(data);
}

static void test_writer_args(void **state)
{
    (void)state;
    memra_gguf_writer_t *w = writer();
    const int64_t ne[4] = {32, 2, 1, 1};
    const int64_t neg[2] = {32, -1};
    const int64_t odd[1] = {33};
    uint8_t buf[64 * 4] = {0};
    assert_int_equal(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 0, ne, buf), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 5, ne, buf), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_tensor(w, "t", (memra_type_t)4, 1, ne, buf), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 2, neg, buf), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_Q8_0, 1, odd, buf), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_tensor(w, NULL, MEMRA_TYPE_F32, 1, ne, buf), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 1, NULL, buf), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_u32(w, NULL, 1), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_add_u32(NULL, "k", 1), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_create(NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_write_memory(w, NULL, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_write(w, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_writer_write(w, "/nonexistent-dir/x.gguf"), MEMRA_E_IO);
    /* a tensor without data and without a fill callback */
    assert_int_equal(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 2, ne, NULL), MEMRA_OK);
    void *data = NULL;
    size_t size = 0;
    expect_status(memra_gguf_writer_write_memory(w, &data, &size), MEMRA_E_INVALID);
    expect_msg("fill");
    assert_null(data);
    memra_gguf_writer_destroy(w);
    memra_gguf_writer_destroy(NULL);
    /* an empty writer writes a valid empty file */
    w = writer();
    data = finish(w, &size);
    assert_int_equal(size, 24);
    memra_gguf_t *g = open_ok(data, size);
    assert_int_equal(memra_gguf_n_kv(g), 0);
    assert_int_equal(memra_gguf_n_tensors(g), 0);
    memra_gguf_close(g);
    memra_free(data);
}

/* ---- typed getters ------------------------------------------------------- */

static void test_getters(void **state)
{
    (void)state;
    memra_gguf_writer_t *w = writer();
    uint8_t u8 = 200;
    int8_t i8 = -5;
    uint64_t umax = UINT64_MAX;
    int64_t imin = INT64_MIN;
    uint32_t umax32 = UINT32_MAX;
    double f64 = 0.25;
    static const int32_t arr_i32[] = {3, -3};
    static const uint64_t arr_u64[] = {1, UINT64_MAX};
    assert_int_equal(memra_gguf_writer_add_scalar(w, "u8", MEMRA_GGUF_UINT8, &u8), MEMRA_OK); /* 0 */
    assert_int_equal(memra_gguf_writer_add_scalar(w, "i8", MEMRA_GGUF_INT8, &i8), MEMRA_OK);  /* 1 */
    assert_int_equal(memra_gguf_writer_add_i32(w, "neg", -1), MEMRA_OK);                      /* 2 */
    assert_int_equal(memra_gguf_writer_add_i32(w, "pos", 7), MEMRA_OK);                       /* 3 */
    assert_int_equal(memra_gguf_writer_add_scalar(w, "umax", MEMRA_GGUF_UINT64, &umax), MEMRA_OK); /* 4 */
    assert_int_equal(memra_gguf_writer_add_scalar(w, "imin", MEMRA_GGUF_INT64, &imin), MEMRA_OK);  /* 5 */
    assert_int_equal(memra_gguf_writer_add_scalar(w, "u32max", MEMRA_GGUF_UINT32, &umax32), MEMRA_OK); /* 6 */
    assert_int_equal(memra_gguf_writer_add_f32(w, "f32", 1.5f), MEMRA_OK);                  /* 7 */
    assert_int_equal(memra_gguf_writer_add_scalar(w, "f64", MEMRA_GGUF_FLOAT64, &f64), MEMRA_OK); /* 8 */
    assert_int_equal(memra_gguf_writer_add_bool(w, "flag", 1), MEMRA_OK);                    /* 9 */
    assert_int_equal(memra_gguf_writer_add_str(w, "name", "memra"), MEMRA_OK);               /* 10 */
    assert_int_equal(memra_gguf_writer_add_array(w, "ai32", MEMRA_GGUF_INT32, arr_i32, 2), MEMRA_OK); /* 11 */
    assert_int_equal(memra_gguf_writer_add_array(w, "au64", MEMRA_GGUF_UINT64, arr_u64, 2), MEMRA_OK); /* 12 */
    size_t size;
    uint8_t *data = finish(w, &size);
    memra_gguf_t *g = open_ok(data, size);
    uint64_t u;
    int64_t s;
    double f;
    int b;
    const char *str;

    /* widening */
    assert_int_equal(memra_gguf_kv_i64(g, 0, &s), MEMRA_OK);
    assert_int_equal(s, 200);
    assert_int_equal(memra_gguf_kv_i64(g, 6, &s), MEMRA_OK);
    assert_int_equal(s, UINT32_MAX);
    assert_int_equal(memra_gguf_kv_u64(g, 3, &u), MEMRA_OK);
    assert_int_equal(u, 7);
    assert_int_equal(memra_gguf_kv_i64(g, 5, &s), MEMRA_OK);
    assert_true(s == INT64_MIN);
    assert_int_equal(memra_gguf_kv_u64(g, 9, &u), MEMRA_OK); /* bool reads as 0/1 */
    assert_int_equal(u, 1);
    assert_int_equal(memra_gguf_kv_f64(g, 7, &f), MEMRA_OK);
    assert_true(f == 1.5);
    assert_int_equal(memra_gguf_kv_f64(g, 8, &f), MEMRA_OK);
    assert_true(f == 0.25);

    /* range */
    u = 12345;
    expect_status(memra_gguf_kv_u64(g, 2, &u), MEMRA_E_RANGE);
    expect_msg("'neg'");
    assert_int_equal(u, 12345); /* untouched on error */
    expect_status(memra_gguf_kv_u64(g, 1, &u), MEMRA_E_RANGE);
    expect_status(memra_gguf_kv_u64(g, 5, &u), MEMRA_E_RANGE);
    expect_status(memra_gguf_kv_i64(g, 4, &s), MEMRA_E_RANGE);
    expect_msg("'umax'");

    /* type */
    expect_status(memra_gguf_kv_u64(g, 10, &u), MEMRA_E_TYPE);
    expect_msg("'name'");
    expect_status(memra_gguf_kv_i64(g, 10, &s), MEMRA_E_TYPE);
    expect_status(memra_gguf_kv_f64(g, 10, &f), MEMRA_E_TYPE);
    expect_status(memra_gguf_kv_u64(g, 7, &u), MEMRA_E_TYPE);
    expect_msg("FLOAT32");
    expect_status(memra_gguf_kv_i64(g, 8, &s), MEMRA_E_TYPE);
    expect_status(memra_gguf_kv_f64(g, 3, &f), MEMRA_E_TYPE);
    expect_status(memra_gguf_kv_bool(g, 0, &b), MEMRA_E_TYPE);
    expect_status(memra_gguf_kv_bool(g, 10, &b), MEMRA_E_TYPE);
    expect_status(memra_gguf_kv_str(g, 3, &str, NULL), MEMRA_E_TYPE);
    expect_status(memra_gguf_kv_str(g, 11, &str, NULL), MEMRA_E_TYPE);
    expect_status(memra_gguf_kv_u64(g, 11, &u), MEMRA_E_TYPE);
    expect_msg("ARRAY");

    /* arrays */
    assert_int_equal(memra_gguf_arr_i64(g, 11, 1, &s), MEMRA_OK);
    assert_int_equal(s, -3);
    expect_status(memra_gguf_arr_u64(g, 11, 1, &u), MEMRA_E_RANGE);
    expect_status(memra_gguf_arr_i64(g, 12, 1, &s), MEMRA_E_RANGE);
    expect_status(memra_gguf_arr_f64(g, 11, 0, &f), MEMRA_E_TYPE);
    expect_status(memra_gguf_arr_u64(g, 11, 2, &u), MEMRA_E_RANGE);
    expect_status(memra_gguf_arr_u64(g, 3, 0, &u), MEMRA_E_INVALID); /* scalar */
    expect_status(memra_gguf_arr_str(g, 10, 0, &str, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_gguf_arr_type(g, 3), MEMRA_GGUF_TYPE_COUNT);
    assert_int_equal(memra_gguf_arr_n(g, 3), 0);
    assert_null(memra_gguf_arr_data(g, 3));

    /* bad index / NULL out */
    expect_status(memra_gguf_kv_u64(g, 13, &u), MEMRA_E_INVALID);
    expect_status(memra_gguf_kv_u64(g, -1, &u), MEMRA_E_INVALID);
    expect_status(memra_gguf_kv_u64(g, 0, NULL), MEMRA_E_INVALID);
    expect_msg("NULL");
    expect_status(memra_gguf_kv_i64(NULL, 0, &s), MEMRA_E_INVALID);
    expect_status(memra_gguf_kv_f64(g, 99, &f), MEMRA_E_INVALID);
    expect_status(memra_gguf_kv_bool(g, 9, NULL), MEMRA_E_INVALID);
    expect_status(memra_gguf_kv_str(g, 10, NULL, NULL), MEMRA_E_INVALID);
    expect_status(memra_gguf_kv_str(g, 99, &str, NULL), MEMRA_E_INVALID);
    expect_status(memra_gguf_arr_u64(g, 99, 0, &u), MEMRA_E_INVALID);
    expect_status(memra_gguf_arr_u64(g, 11, 0, NULL), MEMRA_E_INVALID);
    expect_msg("NULL");
    assert_null(memra_gguf_kv_key(g, 13));
    assert_null(memra_gguf_kv_key(g, -1));
    assert_int_equal(memra_gguf_kv_type(g, 13), MEMRA_GGUF_TYPE_COUNT);
    memra_gguf_close(g);
    memra_free(data);

    /* a NULL handle answers neutrally */
    assert_int_equal(memra_gguf_n_kv(NULL), 0);
    assert_int_equal(memra_gguf_n_tensors(NULL), 0);
    assert_int_equal(memra_gguf_version(NULL), 0);
    assert_int_equal(memra_gguf_find_kv(NULL, "x"), -1);
    assert_null(memra_gguf_tensor_data(NULL, 0));
    memra_gguf_close(NULL);
}

static void test_find(void **state)
{
    (void)state;
    memra_gguf_writer_t *w = writer();
    char name[64];
    /* enough entries to make the name index wrap and probe */
    for (int i = 0; i < 700; i++) {
        snprintf(name, sizeof name, "k.%d", i);
        assert_int_equal(memra_gguf_writer_add_u32(w, name, (uint32_t)i), MEMRA_OK);
    }
    static const float one = 1.0f;
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "blk.%d.w", i);
        assert_int_equal(memra_gguf_writer_add_tensor(w, name, MEMRA_TYPE_F32, 1, (int64_t[]){1}, &one), MEMRA_OK);
    }
    size_t size;
    uint8_t *data = finish(w, &size);
    memra_gguf_t *g = open_ok(data, size);
    for (int i = 0; i < 700; i++) {
        snprintf(name, sizeof name, "k.%d", i);
        int64_t k = memra_gguf_find_kv(g, name);
        assert_int_equal(k, i);
        uint64_t v;
        assert_int_equal(memra_gguf_kv_u64(g, k, &v), MEMRA_OK);
        assert_int_equal(v, (uint64_t)i);
    }
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "blk.%d.w", i);
        assert_int_equal(memra_gguf_find_tensor(g, name), i);
        assert_int_equal(memra_gguf_tensor_offset(g, i), (uint64_t)i * 32);
    }
    assert_int_equal(memra_gguf_find_kv(g, "k.700"), -1);
    assert_int_equal(memra_gguf_find_kv(g, ""), -1);
    assert_int_equal(memra_gguf_find_kv(g, "k."), -1);
    assert_int_equal(memra_gguf_find_kv(g, NULL), -1);
    assert_int_equal(memra_gguf_find_kv(g, "blk.0.w"), -1); /* separate namespaces */
    assert_int_equal(memra_gguf_find_tensor(g, "k.0"), -1);
    assert_int_equal(memra_gguf_find_tensor(g, "blk.300.w"), -1);
    assert_int_equal(memra_gguf_find_tensor(g, NULL), -1);
    assert_null(memra_gguf_tensor_name(g, 300));
    assert_int_equal(memra_gguf_tensor_type(g, 300), MEMRA_TYPE_COUNT);
    assert_int_equal(memra_gguf_tensor_shape(g, -1, NULL), 0);
    assert_int_equal(memra_gguf_tensor_nbytes(g, 300), 0);
    assert_null(memra_gguf_tensor_data(g, 300));
    memra_gguf_close(g);
    memra_free(data);
}

/* ---- fill callback, file vs memory --------------------------------------- */

typedef struct fill_log {
    int calls;
    int fail_at;
    int64_t seen[8];
} fill_log;

static memra_status_t fill_cb(void *user, int64_t index, const char *name, void *dst, size_t nbytes)
{
    fill_log *l = user;
    if (l->calls < 8)
        l->seen[l->calls] = index;
    l->calls++;
    if (index == l->fail_at)
        return MEMRA_E_IO;
    assert_int_equal(nbytes, spec_nbytes(&k_tensors[index]));
    assert_string_equal(name, k_tensors[index].name);
    fill_pattern(dst, nbytes, (uint32_t)index + 100);
    return MEMRA_OK;
}

static memra_gguf_writer_t *fill_writer(fill_log *log)
{
    memra_gguf_writer_t *w = writer();
    memra_gguf_writer_set_fill(w, fill_cb, log);
    assert_int_equal(memra_gguf_writer_add_u32(w, "general.quantization_version", 2), MEMRA_OK);
    for (size_t k = 0; k < 5; k++) {
        const tspec *t = &k_tensors[k];
        /* tensor 2 has its own bytes; the rest come from the callback */
        static uint8_t own[64 * 2 * 3 / 32 * 34];
        fill_pattern(own, sizeof own, 77);
        assert_int_equal(memra_gguf_writer_add_tensor(w, t->name, t->type, t->nd, t->ne, k == 2 ? own : NULL),
                         MEMRA_OK);
    }
    return w;
}

static void check_filled(const memra_gguf_t *g)
{
    assert_int_equal(memra_gguf_n_tensors(g), 5);
    for (int64_t i = 0; i < 5; i++) {
        size_t n = (size_t)spec_nbytes(&k_tensors[i]);
        uint8_t *want = malloc(n);
        fill_pattern(want, n, i == 2 ? 77 : (uint32_t)i + 100);
        assert_memory_equal(memra_gguf_tensor_data(g, i), want, n);
        free(want);
    }
}

static void test_fill_and_file(void **state)
{
    (void)state;
    fill_log log = {.fail_at = -1};
    memra_gguf_writer_t *w = fill_writer(&log);
    void *mem = NULL;
    size_t mem_size = 0;
    expect_status(memra_gguf_writer_write_memory(w, &mem, &mem_size), MEMRA_OK);
    assert_int_equal(log.calls, 4);
    assert_int_equal(log.seen[0], 0);
    assert_int_equal(log.seen[1], 1);
    assert_int_equal(log.seen[2], 3);
    assert_int_equal(log.seen[3], 4);
    memra_gguf_t *g = open_ok(mem, mem_size);
    check_filled(g);
    memra_gguf_close(g);

    /* the same writer to a file gives the same bytes */
    const char *path = tu_write_temp("", 0, 0);
    assert_non_null(path);
    expect_status(memra_gguf_writer_write(w, path), MEMRA_OK);
    size_t file_size = 0;
    uint8_t *file = tu_read_file(path, &file_size);
    assert_non_null(file);
    assert_int_equal(file_size, mem_size);
    assert_memory_equal(file, mem, mem_size);
    free(file);
    g = NULL;
    expect_status(memra_gguf_open(path, &g), MEMRA_OK);
    check_filled(g);
    memra_gguf_close(g);
    memra_gguf_writer_destroy(w);
    memra_free(mem);

    /* a failing callback aborts the write with its status, removing the file */
    log = (fill_log){.fail_at = 3};
    w = fill_writer(&log);
    mem = NULL;
    expect_status(memra_gguf_writer_write_memory(w, &mem, &mem_size), MEMRA_E_IO);
    assert_null(mem);
    assert_int_equal(log.calls, 3);
    expect_status(memra_gguf_writer_write(w, path), MEMRA_E_IO);
    assert_int_not_equal(access(path, F_OK), 0);
    memra_gguf_writer_destroy(w);
}

/* Arrays too large to exist, NULL strings and a failing fill callback are
 * errors with a message, and a refused key leaves nothing behind: the
 * writer still writes a file the reader accepts. The alarm turns an
 * endless loop into a failed run. */
static void test_writer_hostile(void **state)
{
    (void)state;
    memra_gguf_writer_t *w = writer();
    alarm(20);
    uint64_t big = 0;
    expect_status(memra_gguf_writer_add_array(w, "u8.max", MEMRA_GGUF_UINT8, &big, UINT64_MAX), MEMRA_E_INVALID);
    expect_msg("u8.max");
    /* 2^61 8-byte elements: the byte count wraps to 0 */
    expect_status(memra_gguf_writer_add_array(w, "u64.wrap", MEMRA_GGUF_UINT64, &big, (uint64_t)1 << 61),
                  MEMRA_E_INVALID);
    expect_msg("u64.wrap");
    const char *strs[3] = {"a", NULL, "c"};
    expect_status(memra_gguf_writer_add_str_array(w, "strs", strs, NULL, 3), MEMRA_E_INVALID);
    expect_msg("strs");
    expect_status(memra_gguf_writer_add_str_array(w, "strs", strs, NULL, UINT64_MAX), MEMRA_E_INVALID);
    alarm(0);
    /* the refused keys left no trace */
    assert_int_equal(memra_gguf_writer_add_u32(w, "ok", 7), MEMRA_OK);
    size_t size = 0;
    uint8_t *data = finish(w, &size);
    memra_gguf_t *g = open_ok(data, size);
    assert_int_equal(memra_gguf_n_kv(g), 1);
    assert_int_equal(memra_gguf_find_kv(g, "ok"), 0);
    memra_gguf_close(g);
    memra_free(data);

    /* a failing fill callback: its status, and a message naming the tensor */
    fill_log log = {.fail_at = 1};
    w = fill_writer(&log);
    void *mem = NULL;
    assert_int_equal(memra_gguf_writer_create(NULL), MEMRA_E_INVALID); /* an unrelated last error */
    expect_status(memra_gguf_writer_write_memory(w, &mem, &size), MEMRA_E_IO);
    assert_null(mem);
    expect_msg("fill callback");
    expect_msg(k_tensors[1].name);
    memra_gguf_writer_destroy(w);
}

static void test_open_args(void **state)
{
    (void)state;
    memra_gguf_t *g = (memra_gguf_t *)(uintptr_t)1;
    expect_status(memra_gguf_open(NULL, &g), MEMRA_E_INVALID);
    assert_null(g);
    expect_status(memra_gguf_open("x", NULL), MEMRA_E_INVALID);
    expect_status(memra_gguf_open("/nonexistent/memra.gguf", &g), MEMRA_E_IO);
    expect_msg("/nonexistent/memra.gguf");
    expect_status(memra_gguf_open("/", &g), MEMRA_E_IO);
    expect_status(memra_gguf_open_memory(NULL, 10, &g), MEMRA_E_INVALID);
    expect_status(memra_gguf_open_memory("GGUF", 4, NULL), MEMRA_E_INVALID);
    expect_status(memra_gguf_open_memory(NULL, 0, &g), MEMRA_E_FORMAT);
    const char *path = tu_write_temp("GGUF\3\0\0\0", 8, 1);
    expect_status(memra_gguf_open(path, &g), MEMRA_E_FORMAT);
    expect_msg(path);
    unlink(path);
}

/* ---- malformed files ----------------------------------------------------- */

typedef struct bad_case {
    const char *name;
    void (*make)(bb *b);
    memra_status_t status;
    const char *msg;
} bad_case;

#define MK(fn) static void fn(bb *b)

MK(mk_bad_magic) { bb_u32(b, 0x46554746u); bb_u32(b, 3); bb_u64(b, 0); bb_u64(b, 0); }
MK(mk_lower_magic) { bb_put(b, "gguf", 4); bb_u32(b, 3); bb_u64(b, 0); bb_u64(b, 0); }
MK(mk_version0) { bb_hdr(b, 0, 0, 0); }
MK(mk_version1) { bb_hdr(b, 1, 0, 0); }
MK(mk_version4) { bb_hdr(b, 4, 0, 0); }
MK(mk_version_be) { bb_hdr(b, 0x03000000u, 0, 0); }
MK(mk_huge_nkv) { bb_hdr(b, 3, 0, UINT64_MAX); bb_zero(b, 64); }
MK(mk_huge_nkv2) { bb_hdr(b, 3, 0, 1ull << 40); bb_zero(b, 64); }
MK(mk_nkv_one_too_many) { bb_hdr(b, 3, 0, 2); bb_key(b, "a", 8); bb_str(b, "a string long enough to pass the count check"); }
MK(mk_huge_nt) { bb_hdr(b, 3, UINT64_MAX, 0); bb_zero(b, 64); }
MK(mk_huge_nt2) { bb_hdr(b, 3, 1ull << 62, 0); bb_zero(b, 64); }
MK(mk_nt_one_too_many) { bb_hdr(b, 3, 2, 0); bb_tinfo(b, "t", 1, (uint64_t[]){8}, 0, 0); bb_align(b, 32); bb_zero(b, 64); }
MK(mk_huge_key_len) { bb_hdr(b, 3, 0, 1); bb_u64(b, UINT64_MAX); bb_zero(b, 16); }
MK(mk_key_len_past_eof) { bb_hdr(b, 3, 0, 1); bb_u64(b, 20); bb_put(b, "general.nam", 11); bb_zero(b, 2); }
MK(mk_huge_str_len) { bb_1k(b, "s", 8); bb_u64(b, 1ull << 63); bb_zero(b, 8); }
MK(mk_str_past_eof) { bb_1k(b, "s", 8); bb_u64(b, 9); bb_put(b, "12345678", 8); }
MK(mk_huge_arr_len) { bb_1k(b, "a", 9); bb_u32(b, 4); bb_u64(b, 1ull << 62); bb_zero(b, 16); }
MK(mk_huge_arr_len_u64) { bb_1k(b, "a", 9); bb_u32(b, 10); bb_u64(b, UINT64_MAX / 4); bb_zero(b, 16); }
MK(mk_arr_past_eof) { bb_1k(b, "a", 9); bb_u32(b, 5); bb_u64(b, 3); bb_zero(b, 11); }
MK(mk_huge_str_arr) { bb_1k(b, "a", 9); bb_u32(b, 8); bb_u64(b, UINT64_MAX); bb_zero(b, 64); }
MK(mk_str_arr_past_eof) { bb_1k(b, "a", 9); bb_u32(b, 8); bb_u64(b, 2); bb_str(b, "x"); bb_u64(b, 5); bb_put(b, "abc", 3); }
MK(mk_nested_arr) { bb_1k(b, "a", 9); bb_u32(b, 9); bb_u64(b, 1); bb_u32(b, 0); bb_u64(b, 1); bb_u8(b, 1); }
MK(mk_unknown_type) { bb_1k(b, "k", 13); bb_zero(b, 8); }
MK(mk_unknown_type_max) { bb_1k(b, "k", 0xFFFFFFFFu); bb_zero(b, 8); }
MK(mk_unknown_elem_type) { bb_1k(b, "a", 9); bb_u32(b, 13); bb_u64(b, 1); bb_zero(b, 8); }
MK(mk_unknown_elem_type2) { bb_1k(b, "a", 9); bb_u32(b, 0x80000000u); bb_u64(b, 0); }
MK(mk_bool2) { bb_1k(b, "b", 7); bb_u8(b, 2); }
MK(mk_bool_ff) { bb_1k(b, "b", 7); bb_u8(b, 0xFF); }
MK(mk_bool_arr2) { bb_1k(b, "b", 9); bb_u32(b, 7); bb_u64(b, 3); bb_u8(b, 1); bb_u8(b, 0); bb_u8(b, 2); }
MK(mk_key_not_utf8) { bb_hdr(b, 3, 0, 1); bb_strn(b, "ab\xff", 3); bb_u32(b, 0); bb_u8(b, 0); }
MK(mk_key_overlong) { bb_hdr(b, 3, 0, 1); bb_strn(b, "\xc0\xae", 2); bb_u32(b, 0); bb_u8(b, 0); }
MK(mk_key_surrogate) { bb_hdr(b, 3, 0, 1); bb_strn(b, "\xed\xa0\x80", 3); bb_u32(b, 0); bb_u8(b, 0); }
MK(mk_key_cut_utf8) { bb_hdr(b, 3, 0, 1); bb_strn(b, "k\xe2\x80", 3); bb_u32(b, 0); bb_u8(b, 0); }
MK(mk_key_nul) { bb_hdr(b, 3, 0, 1); bb_strn(b, "gen\0eral", 8); bb_u32(b, 0); bb_u8(b, 0); }
MK(mk_key_empty) { bb_hdr(b, 3, 0, 1); bb_strn(b, "", 0); bb_u32(b, 0); bb_u8(b, 0); }
MK(mk_dup_key)
{
    bb_hdr(b, 3, 0, 3);
    bb_key(b, "general.name", 8);
    bb_str(b, "a");
    bb_key(b, "x", 0);
    bb_u8(b, 1);
    bb_key(b, "general.name", 4); /* a different type does not make it another key */
    bb_u32(b, 1);
}
MK(mk_dup_tensor)
{
    bb_hdr(b, 3, 2, 0);
    bb_tinfo(b, "w", 1, (uint64_t[]){8}, 0, 0);
    bb_tinfo(b, "w", 1, (uint64_t[]){8}, 0, 32);
    bb_align(b, 32);
    bb_zero(b, 64);
}
MK(mk_name_64)
{
    char name[65];
    memset(name, 'n', 64);
    name[64] = '\0';
    bb_1t(b, name, 1, (uint64_t[]){8}, 0, 0, 32);
}
MK(mk_name_huge) { bb_hdr(b, 3, 1, 0); bb_u64(b, 1000); bb_zero(b, 1100); }
MK(mk_name_not_utf8) { bb_1t(b, "w\x80", 1, (uint64_t[]){8}, 0, 0, 32); }
MK(mk_name_nul) { bb_hdr(b, 3, 1, 0); bb_strn(b, "a\0b", 3); bb_u32(b, 1); bb_u64(b, 8); bb_u32(b, 0); bb_u64(b, 0); bb_align(b, 32); bb_zero(b, 32); }
MK(mk_ndims0) { bb_1t(b, "w", 0, NULL, 0, 0, 32); }
MK(mk_ndims5) { bb_1t(b, "w", 5, (uint64_t[]){1, 1, 1, 1, 1}, 0, 0, 32); }
MK(mk_ndims_huge) { bb_hdr(b, 3, 1, 0); bb_str(b, "w"); bb_u32(b, 0xFFFFFFFFu); bb_zero(b, 64); }
MK(mk_dim_negative) { bb_1t(b, "w", 2, (uint64_t[]){8, UINT64_MAX}, 0, 0, 32); }
MK(mk_dims_overflow_u64) { bb_1t(b, "w", 2, (uint64_t[]){1ull << 32, 1ull << 32}, 0, 0, 32); }
MK(mk_dims_overflow_bytes) { bb_1t(b, "w", 2, (uint64_t[]){1ull << 62, 1}, 0, 0, 32); }
/* fits in uint64 bytes (Q4_0 packs 32 elements into 18 bytes) but not in int64 elements */
MK(mk_dims_overflow_i64) { bb_1t(b, "w", 4, (uint64_t[]){1ull << 62, 2, 1, 1}, 2, 0, 32); }
MK(mk_dims_overflow_late) { bb_1t(b, "w", 4, (uint64_t[]){32, 1ull << 20, 1ull << 20, 1ull << 30}, 0, 0, 32); }
MK(mk_ne0_block) { bb_1t(b, "w", 2, (uint64_t[]){33, 2}, 8, 0, 128); }
MK(mk_ne0_block_k) { bb_1t(b, "w", 1, (uint64_t[]){128}, 12, 0, 256); }
MK(mk_type4) { bb_1t(b, "w", 1, (uint64_t[]){32}, 4, 0, 256); }
MK(mk_type5) { bb_1t(b, "w", 1, (uint64_t[]){32}, 5, 0, 256); }
MK(mk_type31) { bb_1t(b, "w", 1, (uint64_t[]){32}, 31, 0, 256); }
MK(mk_type36) { bb_1t(b, "w", 1, (uint64_t[]){32}, 36, 0, 256); }
MK(mk_type42) { bb_1t(b, "w", 1, (uint64_t[]){32}, 42, 0, 256); }
MK(mk_type1000) { bb_1t(b, "w", 1, (uint64_t[]){32}, 1000, 0, 256); }
MK(mk_type_max) { bb_1t(b, "w", 1, (uint64_t[]){32}, 0xFFFFFFFFu, 0, 256); }
MK(mk_misaligned)
{
    bb_hdr(b, 3, 2, 0);
    bb_tinfo(b, "a", 1, (uint64_t[]){1}, 0, 0);
    bb_tinfo(b, "b", 1, (uint64_t[]){1}, 0, 4); /* packed, as if unaligned */
    bb_align(b, 32);
    bb_zero(b, 64);
}
MK(mk_offset_gap)
{
    bb_hdr(b, 3, 2, 0);
    bb_tinfo(b, "a", 1, (uint64_t[]){8}, 0, 0);
    bb_tinfo(b, "b", 1, (uint64_t[]){8}, 0, 64);
    bb_align(b, 32);
    bb_zero(b, 128);
}
MK(mk_offset_first) { bb_1t(b, "a", 1, (uint64_t[]){8}, 0, 32, 64); }
MK(mk_offset_overlap)
{
    bb_hdr(b, 3, 2, 0);
    bb_tinfo(b, "a", 1, (uint64_t[]){16}, 0, 0);
    bb_tinfo(b, "b", 1, (uint64_t[]){8}, 0, 32); /* a is 64 bytes */
    bb_align(b, 32);
    bb_zero(b, 128);
}
MK(mk_offset_huge) { bb_1t(b, "a", 1, (uint64_t[]){8}, 0, UINT64_MAX - 31, 64); }
MK(mk_tensor_past_eof) { bb_1t(b, "a", 2, (uint64_t[]){8, 2}, 0, 0, 63); }
MK(mk_tensor_huge) { bb_1t(b, "a", 2, (uint64_t[]){1ull << 20, 1ull << 20}, 0, 0, 64); }
MK(mk_data_section_eof) { bb_hdr(b, 3, 1, 0); bb_tinfo(b, "a", 1, (uint64_t[]){0}, 0, 0); }
MK(mk_truncated_tinfo) { bb_hdr(b, 3, 1, 0); bb_str(b, "abc"); bb_u32(b, 2); bb_u64(b, 8); bb_zero(b, 15); }
MK(mk_align_i32) { bb_1k(b, "general.alignment", 5); bb_u32(b, 64); }
MK(mk_align_u64) { bb_1k(b, "general.alignment", 10); bb_u64(b, 64); }
MK(mk_align_zero) { bb_1k(b, "general.alignment", 4); bb_u32(b, 0); }
MK(mk_align_48) { bb_1k(b, "general.alignment", 4); bb_u32(b, 48); }
MK(mk_align_huge) /* 2^31 is a power of two, but the data section cannot start that far out */
{
    bb_hdr(b, 3, 1, 1);
    bb_key(b, "general.alignment", 4);
    bb_u32(b, 1u << 31);
    bb_tinfo(b, "a", 1, (uint64_t[]){8}, 0, 0);
    bb_zero(b, 64);
}
MK(mk_split_no_nonzero) { bb_1k(b, "split.no", 2); bb_le(b, 1, 2); }
MK(mk_split_no_u32) { bb_1k(b, "split.no", 4); bb_u32(b, 0); }
MK(mk_split_count_memory) { bb_1k(b, "split.count", 2); bb_le(b, 3, 2); }
MK(mk_split_tensors) { bb_1k(b, "split.tensors.count", 5); bb_u32(b, 3); }

static const bad_case k_bad[] = {
    {"bad magic", mk_bad_magic, MEMRA_E_FORMAT, "bad magic"},
    {"lower-case magic", mk_lower_magic, MEMRA_E_FORMAT, "bad magic"},
    {"version 0", mk_version0, MEMRA_E_FORMAT, "version 0"},
    {"version 1", mk_version1, MEMRA_E_FORMAT, "version 1"},
    {"version 4", mk_version4, MEMRA_E_UNSUPPORTED, "version 4"},
    {"big-endian file", mk_version_be, MEMRA_E_UNSUPPORTED, "big-endian"},
    {"n_kv 2^64-1", mk_huge_nkv, MEMRA_E_FORMAT, "key count"},
    {"n_kv 2^40", mk_huge_nkv2, MEMRA_E_FORMAT, "key count"},
    {"n_kv one too many", mk_nkv_one_too_many, MEMRA_E_FORMAT, "truncated"},
    {"n_tensors 2^64-1", mk_huge_nt, MEMRA_E_FORMAT, "tensor count"},
    {"n_tensors 2^62", mk_huge_nt2, MEMRA_E_FORMAT, "tensor count"},
    {"n_tensors one too many", mk_nt_one_too_many, MEMRA_E_FORMAT, "tensor"},
    {"key length 2^64-1", mk_huge_key_len, MEMRA_E_FORMAT, "key length"},
    {"key past EOF", mk_key_len_past_eof, MEMRA_E_FORMAT, "past the end"},
    {"string length 2^63", mk_huge_str_len, MEMRA_E_FORMAT, "string value length"},
    {"string past EOF", mk_str_past_eof, MEMRA_E_FORMAT, "past the end"},
    {"u32 array length 2^62", mk_huge_arr_len, MEMRA_E_FORMAT, "past the end"},
    {"u64 array length overflow", mk_huge_arr_len_u64, MEMRA_E_FORMAT, "past the end"},
    {"array past EOF", mk_arr_past_eof, MEMRA_E_FORMAT, "past the end"},
    {"string array 2^64-1", mk_huge_str_arr, MEMRA_E_FORMAT, "cannot fit"},
    {"string array past EOF", mk_str_arr_past_eof, MEMRA_E_FORMAT, "past the end"},
    {"nested array", mk_nested_arr, MEMRA_E_FORMAT, "nested"},
    {"value type 13", mk_unknown_type, MEMRA_E_FORMAT, "unknown value type 13"},
    {"value type 2^32-1", mk_unknown_type_max, MEMRA_E_FORMAT, "unknown value type"},
    {"array element type 13", mk_unknown_elem_type, MEMRA_E_FORMAT, "unknown array element type"},
    {"array element type 2^31", mk_unknown_elem_type2, MEMRA_E_FORMAT, "unknown array element type"},
    {"bool 2", mk_bool2, MEMRA_E_FORMAT, "bool value is 2"},
    {"bool 255", mk_bool_ff, MEMRA_E_FORMAT, "bool"},
    {"bool array element 2", mk_bool_arr2, MEMRA_E_FORMAT, "bool element"},
    {"key not UTF-8", mk_key_not_utf8, MEMRA_E_FORMAT, "UTF-8"},
    {"key overlong UTF-8", mk_key_overlong, MEMRA_E_FORMAT, "UTF-8"},
    {"key surrogate", mk_key_surrogate, MEMRA_E_FORMAT, "UTF-8"},
    {"key cut UTF-8", mk_key_cut_utf8, MEMRA_E_FORMAT, "UTF-8"},
    {"key with NUL", mk_key_nul, MEMRA_E_FORMAT, "NUL"},
    {"empty key", mk_key_empty, MEMRA_E_FORMAT, "empty"},
    {"duplicate key", mk_dup_key, MEMRA_E_FORMAT, "duplicate key 'general.name'"},
    {"duplicate tensor", mk_dup_tensor, MEMRA_E_FORMAT, "duplicate tensor name 'w'"},
    {"tensor name 64 bytes", mk_name_64, MEMRA_E_FORMAT, "too long"},
    {"tensor name 1000 bytes", mk_name_huge, MEMRA_E_FORMAT, "too long"},
    {"tensor name not UTF-8", mk_name_not_utf8, MEMRA_E_FORMAT, "UTF-8"},
    {"tensor name with NUL", mk_name_nul, MEMRA_E_FORMAT, "NUL"},
    {"n_dims 0", mk_ndims0, MEMRA_E_FORMAT, "0 dims"},
    {"n_dims 5", mk_ndims5, MEMRA_E_FORMAT, "5 dims"},
    {"n_dims 2^32-1", mk_ndims_huge, MEMRA_E_FORMAT, "dims"},
    {"negative dim", mk_dim_negative, MEMRA_E_FORMAT, "negative"},
    {"dims overflow uint64", mk_dims_overflow_u64, MEMRA_E_FORMAT, "overflow"},
    {"bytes overflow uint64", mk_dims_overflow_bytes, MEMRA_E_FORMAT, "overflow"},
    {"elements overflow int64", mk_dims_overflow_i64, MEMRA_E_FORMAT, "overflow"},
    {"dims overflow in ne3", mk_dims_overflow_late, MEMRA_E_FORMAT, "overflow"},
    {"Q8_0 ne0 33", mk_ne0_block, MEMRA_E_FORMAT, "block size"},
    {"Q4_K ne0 128", mk_ne0_block_k, MEMRA_E_FORMAT, "block size"},
    {"tensor type 4", mk_type4, MEMRA_E_FORMAT, "unknown type 4"},
    {"tensor type 5", mk_type5, MEMRA_E_FORMAT, "unknown type 5"},
    {"tensor type 31", mk_type31, MEMRA_E_FORMAT, "unknown type 31"},
    {"tensor type 36", mk_type36, MEMRA_E_FORMAT, "unknown type 36"},
    {"tensor type 42", mk_type42, MEMRA_E_FORMAT, "unknown type 42"},
    {"tensor type 1000", mk_type1000, MEMRA_E_FORMAT, "unknown type 1000"},
    {"tensor type 2^32-1", mk_type_max, MEMRA_E_FORMAT, "unknown type"},
    {"misaligned offset", mk_misaligned, MEMRA_E_FORMAT, "alignment"},
    {"offset gap", mk_offset_gap, MEMRA_E_FORMAT, "expected 32"},
    {"first offset not 0", mk_offset_first, MEMRA_E_FORMAT, "expected 0"},
    {"overlapping offsets", mk_offset_overlap, MEMRA_E_FORMAT, "expected 64"},
    {"offset near 2^64", mk_offset_huge, MEMRA_E_FORMAT, "offset"},
    {"tensor past EOF", mk_tensor_past_eof, MEMRA_E_FORMAT, "past the end"},
    {"4 TiB tensor", mk_tensor_huge, MEMRA_E_FORMAT, "past the end"},
    {"data section past EOF", mk_data_section_eof, MEMRA_E_FORMAT, "data section"},
    {"truncated tensor info", mk_truncated_tinfo, MEMRA_E_FORMAT, "truncated"},
    {"alignment INT32", mk_align_i32, MEMRA_E_FORMAT, "UINT32"},
    {"alignment UINT64", mk_align_u64, MEMRA_E_FORMAT, "UINT32"},
    {"alignment 0", mk_align_zero, MEMRA_E_FORMAT, "power of two"},
    {"alignment 48", mk_align_48, MEMRA_E_FORMAT, "power of two"},
    {"alignment 2^31", mk_align_huge, MEMRA_E_FORMAT, "data section"},
    {"split.no 1 in a single file", mk_split_no_nonzero, MEMRA_E_FORMAT, "open the first shard"},
    {"split.no UINT32", mk_split_no_u32, MEMRA_E_FORMAT, "UINT16"},
    {"split.count 3 from memory", mk_split_count_memory, MEMRA_E_FORMAT, "split.count"},
    {"split.tensors.count wrong", mk_split_tensors, MEMRA_E_FORMAT, "split.tensors.count"},
};

static void test_malformed(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_OF(k_bad); k++) {
        bb b = {0};
        k_bad[k].make(&b);
        g_case = k_bad[k].name;
        expect_open_fail(b.p, b.n, k_bad[k].status, k_bad[k].msg);
        if (k_bad[k].status == MEMRA_E_FORMAT)
            expect_msg("at byte");
        free(b.p);
    }
    g_case = "";
}

/* The hand-made cases are not rejected for an unrelated reason: nearby
 * valid variants open. */
static void test_malformed_controls(void **state)
{
    (void)state;
    char name63[64];
    memset(name63, 'n', 63);
    name63[63] = '\0';
    bb b = {0};
    bb_1t(&b, name63, 1, (uint64_t[]){8}, 0, 0, 32);
    memra_gguf_t *g = open_ok(b.p, b.n);
    assert_string_equal(memra_gguf_tensor_name(g, 0), name63);
    memra_gguf_close(g);
    free(b.p);

    b = (bb){0};
    bb_1t(&b, "w", 4, (uint64_t[]){32, 1, 1, 1}, 8, 0, 34);
    g = open_ok(b.p, b.n);
    memra_gguf_close(g);
    free(b.p);

    b = (bb){0};
    bb_hdr(&b, 3, 2, 0);
    bb_tinfo(&b, "a", 1, (uint64_t[]){8}, 0, 0);
    bb_tinfo(&b, "b", 1, (uint64_t[]){8}, 0, 32);
    bb_align(&b, 32);
    bb_zero(&b, 64);
    g = open_ok(b.p, b.n);
    assert_int_equal(memra_gguf_tensor_offset(g, 1), 32);
    memra_gguf_close(g);
    free(b.p);

    b = (bb){0};
    bb_1k(&b, "b", 9);
    bb_u32(&b, 7);
    bb_u64(&b, 2);
    bb_u8(&b, 1);
    bb_u8(&b, 0);
    g = open_ok(b.p, b.n);
    memra_gguf_close(g);
    free(b.p);

    /* a dim of 0 anywhere makes an empty tensor, whatever the other dims */
    b = (bb){0};
    bb_1t(&b, "z", 4, (uint64_t[]){0, 1ull << 40, 1ull << 40, 7}, 0, 0, 0);
    g = open_ok(b.p, b.n);
    assert_int_equal(memra_gguf_tensor_nbytes(g, 0), 0);
    memra_gguf_close(g);
    free(b.p);

    /* zero tensors: no data section, no padding needed */
    b = (bb){0};
    bb_1k(&b, "general.alignment", 4);
    bb_u32(&b, 64);
    g = open_ok(b.p, b.n);
    assert_int_equal(memra_gguf_alignment(g), 64);
    memra_gguf_close(g);
    free(b.p);
}

/* Every prefix 0..23 of a valid header. */
static void test_truncated_header(void **state)
{
    (void)state;
    bb b = {0};
    bb_hdr(&b, 3, 0, 0);
    assert_int_equal(b.n, 24);
    for (size_t n = 0; n < 24; n++) {
        expect_open_fail(b.p, n, MEMRA_E_FORMAT, NULL);
        const char *m = memra_last_error();
        if (!strstr(m, "too short") && !strstr(m, "truncated"))
            fail_msg("prefix %zu: \"%s\"", n, m);
    }
    memra_gguf_t *g = open_ok(b.p, 24);
    memra_gguf_close(g);
    free(b.p);
}

/* A few cases through a real file. */
static void test_malformed_files(void **state)
{
    (void)state;
    static void (*const makers[])(bb *) = {mk_bad_magic, mk_version4, mk_dup_key, mk_tensor_past_eof,
                                           mk_huge_str_arr, mk_data_section_eof};
    static const memra_status_t want[] = {MEMRA_E_FORMAT, MEMRA_E_UNSUPPORTED, MEMRA_E_FORMAT,
                                          MEMRA_E_FORMAT, MEMRA_E_FORMAT, MEMRA_E_FORMAT};
    for (size_t k = 0; k < N_OF(makers); k++) {
        bb b = {0};
        makers[k](&b);
        const char *path = tu_write_temp(b.p, b.n, 2);
        assert_non_null(path);
        memra_gguf_t *g = (memra_gguf_t *)(uintptr_t)1;
        expect_status(memra_gguf_open(path, &g), want[k]);
        assert_null(g);
        expect_msg(path);
        unlink(path);
        free(b.p);
    }
}

/* A small valid file: keys of several kinds, a string array, 2 tensors.
 * The last tensor's size is a multiple of the alignment, so the file has no
 * trailing padding and every proper prefix is short of something. */
static uint8_t *small_file(size_t *size)
{
    static const char *const toks[] = {"<s>", "", "h\xc3\xa9", "\xe2\x96\x81the"};
    static const int32_t types[] = {3, 1, 1, 1};
    static float w0[5] = {1, 2, 3, 4, 5};
    static uint8_t w1[34 * 2 * 8];
    fill_pattern(w1, sizeof w1, 5);
    memra_gguf_writer_t *w = writer();
    assert_int_equal(memra_gguf_writer_add_str(w, "general.architecture", "llama"), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_u32(w, "llama.block_count", 2), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_f32(w, "llama.eps", 1e-6f), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 1), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", toks, NULL, 4), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, types, 4), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_tensor(w, "norm.weight", MEMRA_TYPE_F32, 1, (int64_t[]){5}, w0), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_tensor(w, "token_embd.weight", MEMRA_TYPE_Q8_0, 2, (int64_t[]){64, 8}, w1), MEMRA_OK);
    return finish(w, size);
}

static void test_truncation_sweep(void **state)
{
    (void)state;
    size_t size;
    uint8_t *data = small_file(&size);
    memra_gguf_t *g = open_ok(data, size);
    assert_int_equal(memra_gguf_n_tensors(g), 2);
    assert_int_equal(memra_gguf_tensor_nbytes(g, 1) % 32, 0);
    assert_int_equal(gguf_walk(g, data, size), 0);
    memra_gguf_close(g);
    for (size_t n = 0; n < size; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, data, n);
        g = (memra_gguf_t *)(uintptr_t)1;
        memra_status_t st = memra_gguf_open_memory(copy, n, &g);
        if (st != MEMRA_E_FORMAT)
            fail_msg("prefix %zu of %zu: %s (%s)", n, size, memra_status_name(st), memra_last_error());
        assert_null(g);
        free(copy);
    }
    memra_free(data);
}

static void test_byte_flips(void **state)
{
    (void)state;
    size_t size;
    uint8_t *data = small_file(&size);
    memra_gguf_t *g = open_ok(data, size);
    size_t meta = (size_t)((const uint8_t *)memra_gguf_tensor_data(g, 0) - data);
    memra_gguf_close(g);
    uint8_t *copy = malloc(size);
    rng_state = 0x2545F4914F6CDD1Dull;
    int opened = 0;
    for (int it = 0; it < 4000; it++) {
        memcpy(copy, data, size);
        int flips = 1 + (int)(rng() % 4);
        for (int f = 0; f < flips; f++) {
            /* mostly the header, where the structure is */
            size_t at = rng() % 8 ? rng() % meta : rng() % size;
            uint64_t r = rng();
            copy[at] = r & 1 ? (uint8_t)(copy[at] ^ (1u << ((r >> 1) % 8))) : (uint8_t)(r >> 8);
        }
        g = NULL;
        memra_status_t st = memra_gguf_open_memory(copy, size, &g);
        if (st == MEMRA_OK) {
            opened++;
            int bad = gguf_walk(g, copy, size);
            if (bad)
                fail_msg("iteration %d: %d invariants broken", it, bad);
            memra_gguf_close(g);
        } else {
            assert_true(st == MEMRA_E_FORMAT || st == MEMRA_E_UNSUPPORTED);
            assert_null(g);
            assert_true(memra_last_error()[0] != '\0');
        }
    }
    print_message("  %d of 4000 mutants opened\n", opened);
    free(copy);
    memra_free(data);
}

/* ---- split files --------------------------------------------------------- */

typedef struct split_dir {
    char dir[256];
    char path[3][320];
} split_dir;

static void shard_path(const split_dir *sd, char *out, size_t cap, int no, int count)
{
    snprintf(out, cap, "%s/model-%05d-of-%05d.gguf", sd->dir, no, count);
}

static float k_split_data[5][16];

/* Writes 3 shards as llama.cpp's gguf-split does: shard s holds split.no=s
 * (UINT16), split.count (UINT16) and split.tensors.count (INT32); metadata
 * only in the first. SPLIT_NO_OF[s] overrides split.no. */
static void write_split(split_dir *sd, const uint16_t split_no_of[3], int32_t tensors_count)
{
    static const int first[4] = {0, 2, 3, 5};
    for (int s = 0; s < 3; s++) {
        memra_gguf_writer_t *w = writer();
        uint16_t no = split_no_of[s], count = 3;
        assert_int_equal(memra_gguf_writer_add_scalar(w, "split.no", MEMRA_GGUF_UINT16, &no), MEMRA_OK);
        assert_int_equal(memra_gguf_writer_add_scalar(w, "split.count", MEMRA_GGUF_UINT16, &count), MEMRA_OK);
        assert_int_equal(memra_gguf_writer_add_i32(w, "split.tensors.count", tensors_count), MEMRA_OK);
        if (s == 0)
            assert_int_equal(memra_gguf_writer_add_str(w, "general.architecture", "llama"), MEMRA_OK);
        else
            assert_int_equal(memra_gguf_writer_add_str(w, "shard.only", "x"), MEMRA_OK);
        for (int t = first[s]; t < first[s + 1]; t++) {
            char name[32];
            snprintf(name, sizeof name, "t%d", t);
            for (int e = 0; e < 16; e++)
                k_split_data[t][e] = (float)(t * 100 + e);
            assert_int_equal(memra_gguf_writer_add_tensor(w, name, MEMRA_TYPE_F32, 2, (int64_t[]){8, 2},
                                                          k_split_data[t]), MEMRA_OK);
        }
        shard_path(sd, sd->path[s], sizeof sd->path[s], s + 1, 3);
        expect_status(memra_gguf_writer_write(w, sd->path[s]), MEMRA_OK);
        memra_gguf_writer_destroy(w);
    }
}

static void split_setup(split_dir *sd)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(sd->dir, sizeof sd->dir, "%s/memra-split-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(sd->dir));
}

static void split_cleanup(split_dir *sd)
{
    DIR *d = opendir(sd->dir);
    if (d) {
        struct dirent *e;
        char p[600];
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(p, sizeof p, "%s/%s", sd->dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(sd->dir);
}

static void test_split(void **state)
{
    (void)state;
    split_dir sd;
    split_setup(&sd);
    write_split(&sd, (const uint16_t[]){0, 1, 2}, 5);
    memra_gguf_t *g = NULL;
    expect_status(memra_gguf_open(sd.path[0], &g), MEMRA_OK);
    assert_int_equal(memra_gguf_n_shards(g), 3);
    assert_int_equal(memra_gguf_n_tensors(g), 5);
    /* keys come from the first shard only */
    assert_true(memra_gguf_find_kv(g, "general.architecture") >= 0);
    assert_int_equal(memra_gguf_find_kv(g, "shard.only"), -1);
    static const uint32_t shard_of[5] = {0, 0, 1, 2, 2};
    static const uint64_t off_of[5] = {0, 64, 0, 0, 64};
    for (int t = 0; t < 5; t++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", t);
        int64_t i = memra_gguf_find_tensor(g, name);
        assert_int_equal(i, t);
        assert_int_equal(memra_gguf_tensor_shard(g, i), shard_of[t]);
        assert_int_equal(memra_gguf_tensor_offset(g, i), off_of[t]);
        assert_int_equal(memra_gguf_tensor_nbytes(g, i), 64);
        assert_memory_equal(memra_gguf_tensor_data(g, i), k_split_data[t], 64);
    }
    memra_gguf_close(g);

    /* opening a later shard directly */
    g = (memra_gguf_t *)(uintptr_t)1;
    expect_status(memra_gguf_open(sd.path[1], &g), MEMRA_E_FORMAT);
    assert_null(g);
    expect_msg("open the first shard");

    /* wrong split.tensors.count */
    write_split(&sd, (const uint16_t[]){0, 1, 2}, 6);
    expect_status(memra_gguf_open(sd.path[0], &g), MEMRA_E_FORMAT);
    expect_msg("split.tensors.count");

    /* wrong split.no in shard 2 */
    write_split(&sd, (const uint16_t[]){0, 2, 2}, 5);
    expect_status(memra_gguf_open(sd.path[0], &g), MEMRA_E_FORMAT);
    expect_msg("split.no is 2, expected 1");
    expect_msg(sd.path[1]);

    /* the first shard under a name without the split pattern */
    write_split(&sd, (const uint16_t[]){0, 1, 2}, 5);
    char other[400];
    snprintf(other, sizeof other, "%s/model.gguf", sd.dir);
    assert_int_equal(rename(sd.path[0], other), 0);
    expect_status(memra_gguf_open(other, &g), MEMRA_E_FORMAT);
    expect_msg("split.count");
    /* ... or one that only looks like it */
    static const char *const near[] = {"model-00001-of-00003.ggux", "model-0001x-of-00003.gguf",
                                       "model-+0001-of-00003.gguf", "model-00001-of- 0003.gguf",
                                       "model-00001_of-00003.gguf"};
    for (size_t k = 0; k < N_OF(near); k++) {
        char prev[400];
        snprintf(prev, sizeof prev, "%s", other);
        snprintf(other, sizeof other, "%s/%s", sd.dir, near[k]);
        assert_int_equal(rename(prev, other), 0);
        g_case = near[k];
        expect_status(memra_gguf_open(other, &g), MEMRA_E_FORMAT);
        expect_msg("split.count");
    }
    g_case = "";
    assert_int_equal(rename(other, sd.path[0]), 0);

    /* a missing shard */
    unlink(sd.path[2]);
    expect_status(memra_gguf_open(sd.path[0], &g), MEMRA_E_IO);
    assert_null(g);
    expect_msg("00003-of-00003");
    split_cleanup(&sd);
}

/* A tensor name seen in two shards is a duplicate too. */
/* A FIFO (or any non-regular file) as the model or as a later shard fails
 * at once with MEMRA_E_IO; open() itself must not wait for a writer. The
 * alarm turns a blocked open into a failed run instead of a hang. */
static void test_fifo_paths(void **state)
{
    (void)state;
    split_dir sd;
    split_setup(&sd);
    char fifo[400];
    snprintf(fifo, sizeof fifo, "%s/model.gguf", sd.dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    memra_gguf_t *g = (memra_gguf_t *)(uintptr_t)1;
    alarm(20);
    expect_status(memra_gguf_open(fifo, &g), MEMRA_E_IO);
    assert_null(g);
    expect_msg("not a regular file");
    memra_model_t *m = NULL;
    expect_status(memra_model_load(fifo, NULL, &m), MEMRA_E_IO);
    assert_null(m);

    write_split(&sd, (const uint16_t[]){0, 1, 2}, 5);
    assert_int_equal(unlink(sd.path[1]), 0);
    assert_int_equal(mkfifo(sd.path[1], 0600), 0);
    expect_status(memra_gguf_open(sd.path[0], &g), MEMRA_E_IO);
    expect_msg("not a regular file");
    expect_msg(sd.path[1]);
    alarm(0);
    split_cleanup(&sd);
}

static void test_split_duplicate(void **state)
{
    (void)state;
    split_dir sd;
    split_setup(&sd);
    for (int s = 0; s < 2; s++) {
        memra_gguf_writer_t *w = writer();
        uint16_t no = (uint16_t)s, count = 2;
        memra_gguf_writer_add_scalar(w, "split.no", MEMRA_GGUF_UINT16, &no);
        memra_gguf_writer_add_scalar(w, "split.count", MEMRA_GGUF_UINT16, &count);
        if (s == 1)
            memra_gguf_writer_set_alignment(w, 64);
        assert_int_equal(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 1, (int64_t[]){8},
                                                      k_split_data[0]), MEMRA_OK);
        shard_path(&sd, sd.path[s], sizeof sd.path[s], s + 1, 2);
        expect_status(memra_gguf_writer_write(w, sd.path[s]), MEMRA_OK);
        memra_gguf_writer_destroy(w);
    }
    memra_gguf_t *g = NULL;
    expect_status(memra_gguf_open(sd.path[0], &g), MEMRA_E_FORMAT);
    expect_msg("alignment");
    /* same alignment: now the duplicate name is what fails */
    memra_gguf_writer_t *w = writer();
    uint16_t no = 1, count = 2;
    memra_gguf_writer_add_scalar(w, "split.no", MEMRA_GGUF_UINT16, &no);
    memra_gguf_writer_add_scalar(w, "split.count", MEMRA_GGUF_UINT16, &count);
    memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 1, (int64_t[]){8}, k_split_data[0]);
    expect_status(memra_gguf_writer_write(w, sd.path[1]), MEMRA_OK);
    memra_gguf_writer_destroy(w);
    expect_status(memra_gguf_open(sd.path[0], &g), MEMRA_E_FORMAT);
    expect_msg("duplicate tensor name 't'");
    split_cleanup(&sd);
}

/* Later shards with many tensors make the name index grow and rehash. */
static void test_split_many(void **state)
{
    (void)state;
    split_dir sd;
    split_setup(&sd);
    static const int per_shard[2] = {1, 40};
    int next = 0;
    for (int s = 0; s < 2; s++) {
        memra_gguf_writer_t *w = writer();
        uint16_t no = (uint16_t)s, count = 2;
        memra_gguf_writer_add_scalar(w, "split.no", MEMRA_GGUF_UINT16, &no);
        memra_gguf_writer_add_scalar(w, "split.count", MEMRA_GGUF_UINT16, &count);
        memra_gguf_writer_add_i32(w, "split.tensors.count", 41);
        for (int t = 0; t < per_shard[s]; t++, next++) {
            char name[32];
            snprintf(name, sizeof name, "blk.%d.w", next);
            assert_int_equal(memra_gguf_writer_add_tensor(w, name, MEMRA_TYPE_F32, 1, (int64_t[]){4},
                                                          k_split_data[next % 5]), MEMRA_OK);
        }
        shard_path(&sd, sd.path[s], sizeof sd.path[s], s + 1, 2);
        expect_status(memra_gguf_writer_write(w, sd.path[s]), MEMRA_OK);
        memra_gguf_writer_destroy(w);
    }
    memra_gguf_t *g = NULL;
    expect_status(memra_gguf_open(sd.path[0], &g), MEMRA_OK);
    assert_int_equal(memra_gguf_n_tensors(g), 41);
    for (int t = 0; t < 41; t++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.w", t);
        assert_int_equal(memra_gguf_find_tensor(g, name), t);
        assert_int_equal(memra_gguf_tensor_shard(g, t), t == 0 ? 0 : 1);
        assert_int_equal(memra_gguf_tensor_offset(g, t), t == 0 ? 0 : (uint64_t)(t - 1) * 32);
        assert_memory_equal(memra_gguf_tensor_data(g, t), k_split_data[t % 5], 16);
    }
    assert_int_equal(memra_gguf_find_tensor(g, "blk.41.w"), -1);
    memra_gguf_close(g);
    split_cleanup(&sd);

    /* more shards than the reader accepts */
    split_setup(&sd);
    memra_gguf_writer_t *w = writer();
    uint16_t count = 2000;
    memra_gguf_writer_add_scalar(w, "split.count", MEMRA_GGUF_UINT16, &count);
    shard_path(&sd, sd.path[0], sizeof sd.path[0], 1, 2000);
    expect_status(memra_gguf_writer_write(w, sd.path[0]), MEMRA_OK);
    memra_gguf_writer_destroy(w);
    expect_status(memra_gguf_open(sd.path[0], &g), MEMRA_E_FORMAT);
    expect_msg("too large");
    split_cleanup(&sd);
}

/* The committed fuzz seeds (test/fuzz/seeds) stay valid files. */
static void test_fuzz_seeds(void **state)
{
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tu_data_path("../fuzz/seeds"));
    DIR *d = opendir(dir);
    if (!d)
        TU_SKIP("%s not found", dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t size = 0;
        uint8_t *data = tu_read_file(path, &size);
        assert_non_null(data);
        g_case = e->d_name;
        memra_gguf_t *g = open_ok(data, size);
        assert_int_equal(gguf_walk(g, data, size), 0);
        memra_gguf_close(g);
        free(data);
        n++;
    }
    closedir(d);
    g_case = "";
    assert_true(n > 0);
}

/* ---- fixtures ------------------------------------------------------------ */

static int check_fixture(const char *path)
{
    size_t size = 0;
    uint8_t *data = tu_read_file(path, &size);
    assert_non_null(data);
    memra_gguf_t *gm = NULL, *gf = NULL;
    memra_status_t st = memra_gguf_open_memory(data, size, &gm);
    if (st)
        fail_msg("%s: %s", path, memra_last_error());
    expect_status(memra_gguf_open(path, &gf), MEMRA_OK);
    assert_int_equal(memra_gguf_version(gm), 3);
    if (gguf_walk(gm, data, size))
        fail_msg("%s: invariants broken", path);
    assert_int_equal(memra_gguf_n_kv(gf), memra_gguf_n_kv(gm));
    assert_int_equal(memra_gguf_n_tensors(gf), memra_gguf_n_tensors(gm));
    assert_true(memra_gguf_find_kv(gm, "general.architecture") >= 0);
    for (int64_t i = 0; i < memra_gguf_n_tensors(gm); i++) {
        const uint8_t *p = memra_gguf_tensor_data(gm, i);
        uint64_t nb = memra_gguf_tensor_nbytes(gm, i);
        assert_true(p >= data && p + nb <= data + size);
        assert_int_equal(memra_gguf_tensor_nbytes(gf, i), nb);
        assert_memory_equal(memra_gguf_tensor_data(gf, i), p, nb);
    }
    int64_t n = memra_gguf_n_tensors(gm);
    memra_gguf_close(gm);
    memra_gguf_close(gf);
    free(data);
    return (int)n;
}

static void test_fixtures(void **state)
{
    (void)state;
    const char *root = tu_fixtures();
    if (!root)
        TU_SKIP("fixtures not found (set MEMRA_FIXTURES)");
    static const char *const subdirs[] = {"models", "tokenizer", "quant"};
    int files = 0;
    for (size_t k = 0; k < N_OF(subdirs); k++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", root, subdirs[k]);
        DIR *d = opendir(dir);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t n = strlen(e->d_name);
            if (n < 5 || strcmp(e->d_name + n - 5, ".gguf") != 0)
                continue;
            char rel[600];
            snprintf(rel, sizeof rel, "%s/%s", subdirs[k], e->d_name);
            const char *path = tu_fixture_path(rel);
            assert_non_null(path);
            int nt = check_fixture(path);
            /* vocab files have no tensors; models and quant vectors do */
            if (k == 1)
                assert_int_equal(nt, 0);
            else
                assert_true(nt > 0);
            files++;
        }
        closedir(d);
    }
    if (files == 0)
        TU_SKIP("no GGUF files under %s", root);
    print_message("  %d fixture GGUFs opened\n", files);

    /* a few facts from fixtures/README.md */
    const char *q35 = tu_fixture_path("models/q35-dense.f32.gguf");
    if (!q35)
        TU_SKIP("models/q35-dense.f32.gguf not found");
    memra_gguf_t *g = NULL;
    expect_status(memra_gguf_open(q35, &g), MEMRA_OK);
    assert_int_equal(memra_gguf_n_tensors(g), 109);
    const char *arch;
    assert_int_equal(memra_gguf_kv_str(g, memra_gguf_find_kv(g, "general.architecture"), &arch, NULL), MEMRA_OK);
    assert_string_equal(arch, "qwen35");
    int64_t i = memra_gguf_find_kv(g, "tokenizer.ggml.tokens");
    assert_int_equal(memra_gguf_arr_type(g, i), MEMRA_GGUF_STRING);
    assert_int_equal(memra_gguf_arr_n(g, i), 3026);
    i = memra_gguf_find_kv(g, "qwen35.rope.dimension_sections");
    assert_int_equal(memra_gguf_arr_type(g, i), MEMRA_GGUF_INT32);
    int64_t s;
    assert_int_equal(memra_gguf_arr_i64(g, i, 2, &s), MEMRA_OK);
    assert_int_equal(s, 10);
    memra_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_roundtrip_scalars),
        cmocka_unit_test(test_roundtrip_arrays),
        cmocka_unit_test(test_roundtrip_tensors),
        cmocka_unit_test(test_version2),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_writer_args),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_fill_and_file),
        cmocka_unit_test(test_writer_hostile),
        cmocka_unit_test(test_open_args),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_malformed_controls),
        cmocka_unit_test(test_truncated_header),
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_truncation_sweep),
        cmocka_unit_test(test_byte_flips),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_duplicate),
        cmocka_unit_test(test_fifo_paths),
        cmocka_unit_test(test_split_many),
        cmocka_unit_test(test_fuzz_seeds),
        cmocka_unit_test(test_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
