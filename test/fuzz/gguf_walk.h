/* Walks every key, array element and tensor of an open GGUF handle through
 * the public accessors and checks the invariants the reader promises
 * (shared by test_gguf.c's byte-flip test and the libFuzzer target).
 * Returns the number of violated invariants; BASE/SIZE is the file image the
 * handle was opened from (memory opens only). */
#ifndef MEMRA_TEST_GGUF_WALK_H
#define MEMRA_TEST_GGUF_WALK_H

#include <stdint.h>
#include <string.h>

#include "memra/memra.h"

/* Values read from the file land here, so that the reads are not optimized out. */
static volatile uint64_t gw_sink;

static int gw_inside(const void *p, size_t n, const void *base, size_t size)
{
    const uint8_t *q = p, *b = base;
    return q >= b && (size_t)(q - b) <= size && n <= size - (size_t)(q - b);
}

static int gw_status_ok(memra_status_t st)
{
    return st == MEMRA_OK || st == MEMRA_E_RANGE || st == MEMRA_E_TYPE;
}

/* Reads one element through every getter; a volatile sink keeps it alive. */
static int gw_numeric(const memra_gguf_t *g, int64_t i, int64_t j)
{
    uint64_t u = 0;
    int64_t s = 0;
    double f = 0;
    int b = 0, bad = 0;
    memra_status_t a, c, d;
    if (j < 0) {
        a = memra_gguf_kv_u64(g, i, &u);
        c = memra_gguf_kv_i64(g, i, &s);
        d = memra_gguf_kv_f64(g, i, &f);
        bad += !gw_status_ok(memra_gguf_kv_bool(g, i, &b));
    } else {
        a = memra_gguf_arr_u64(g, i, (uint64_t)j, &u);
        c = memra_gguf_arr_i64(g, i, (uint64_t)j, &s);
        d = memra_gguf_arr_f64(g, i, (uint64_t)j, &f);
    }
    bad += !gw_status_ok(a) + !gw_status_ok(c) + !gw_status_ok(d);
    /* a value readable as both must agree */
    if (a == MEMRA_OK && c == MEMRA_OK && (uint64_t)s != u)
        bad++;
    gw_sink ^= u ^ (uint64_t)s ^ (uint64_t)b;
    memcpy(&u, &f, sizeof u);
    gw_sink ^= u;
    return bad;
}

static int gguf_walk(const memra_gguf_t *g, const void *base, size_t size)
{
    int bad = 0;
    uint32_t v = memra_gguf_version(g), a = memra_gguf_alignment(g);
    bad += v < 2 || v > 3;
    bad += a == 0 || (a & (a - 1)) != 0;
    int64_t n_kv = memra_gguf_n_kv(g), n_t = memra_gguf_n_tensors(g);
    bad += n_kv < 0 || n_t < 0;
    for (int64_t i = 0; i < n_kv; i++) {
        const char *key = memra_gguf_kv_key(g, i);
        if (!key || !*key || memra_gguf_find_kv(g, key) != i) {
            bad++;
            continue;
        }
        memra_gguf_type_t t = memra_gguf_kv_type(g, i);
        if (!memra_gguf_type_name(t)) {
            bad++;
            continue;
        }
        if (t == MEMRA_GGUF_STRING) {
            const char *s = NULL;
            size_t len = 0;
            if (memra_gguf_kv_str(g, i, &s, &len) != MEMRA_OK || !s || s[len] != '\0')
                bad++;
            else if (len)
                gw_sink ^= (uint8_t)s[len - 1];
            bad += memra_gguf_kv_u64(g, i, &(uint64_t){0}) != MEMRA_E_TYPE;
            continue;
        }
        if (t != MEMRA_GGUF_ARRAY) {
            bad += gw_numeric(g, i, -1);
            bad += memra_gguf_arr_n(g, i) != 0;
            continue;
        }
        memra_gguf_type_t et = memra_gguf_arr_type(g, i);
        uint64_t n = memra_gguf_arr_n(g, i);
        if (!memra_gguf_type_name(et) || et == MEMRA_GGUF_ARRAY) {
            bad++;
            continue;
        }
        const void *data = memra_gguf_arr_data(g, i);
        if (et == MEMRA_GGUF_STRING) {
            bad += data != NULL;
            for (uint64_t j = 0; j < n; j++) {
                const char *s = NULL;
                size_t len = 0;
                if (memra_gguf_arr_str(g, i, j, &s, &len) != MEMRA_OK || !gw_inside(s, len, base, size))
                    bad++;
                else if (len)
                    gw_sink ^= (uint8_t)s[len - 1];
            }
        } else {
            static const unsigned sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
            if (!data || n > size / sz[et] || !gw_inside(data, (size_t)n * sz[et], base, size)) {
                bad++;
                continue;
            }
            for (uint64_t j = 0; j < n; j++)
                bad += gw_numeric(g, i, (int64_t)j);
            bad += memra_gguf_arr_str(g, i, 0, &(const char *){NULL}, NULL) == MEMRA_OK;
        }
        bad += memra_gguf_arr_u64(g, i, n, &(uint64_t){0}) != MEMRA_E_RANGE;
    }
    for (int64_t i = 0; i < n_t; i++) {
        const char *name = memra_gguf_tensor_name(g, i);
        if (!name || strlen(name) >= 64 || memra_gguf_find_tensor(g, name) != i) {
            bad++;
            continue;
        }
        memra_type_t t = memra_gguf_tensor_type(g, i);
        int64_t ne[4] = {-1, -1, -1, -1};
        uint32_t nd = memra_gguf_tensor_shape(g, i, ne);
        if (!memra_type_name(t) || nd < 1 || nd > 4) {
            bad++;
            continue;
        }
        uint64_t nbytes = (uint64_t)(ne[0] / memra_type_block_size(t)) * memra_type_block_bytes(t);
        for (int d = 0; d < 4; d++) {
            bad += ne[d] < 0 || (d >= (int)nd && ne[d] != 1);
            nbytes *= d ? (uint64_t)ne[d] : 1;
        }
        bad += nbytes != memra_gguf_tensor_nbytes(g, i);
        bad += memra_gguf_tensor_offset(g, i) % a != 0;
        bad += memra_gguf_tensor_shard(g, i) != 0;
        const uint8_t *p = memra_gguf_tensor_data(g, i);
        if (!p || !gw_inside(p, (size_t)nbytes, base, size)) {
            bad++;
            continue;
        }
        bad += (size_t)(p - (const uint8_t *)base) % a != 0;
        if (nbytes)
            gw_sink ^= (uint8_t)(p[0] ^ p[nbytes - 1]);
    }
    /* out-of-range indices answer neutrally */
    bad += memra_gguf_kv_key(g, n_kv) != NULL || memra_gguf_tensor_name(g, n_t) != NULL;
    bad += memra_gguf_tensor_data(g, -1) != NULL;
    (void)gw_sink;
    return bad;
}

#endif
