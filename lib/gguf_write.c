/* GGUF writer: keys are serialized as they are added; tensor bytes are
 * borrowed (or produced by a fill callback) and streamed at write time so
 * that multi-GB synthetic models never sit in memory twice. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "memra/gguf.h"

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

typedef struct wtensor {
    char *name;
    memra_type_t type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes;
    const void *data;
} wtensor;

struct memra_gguf_writer {
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    buf kv;
    wtensor *tensors;
    int64_t n_tensors, cap_tensors;
    memra_gguf_fill_fn fill;
    void *fill_user;
};

static bool buf_put(buf *b, const void *p, size_t n)
{
    if (n == 0) /* P may be NULL, which memcpy does not allow */
        return true;
    if (b->cap - b->n < n) {
        if (n > SIZE_MAX / 2 - b->n) /* the doubling below would wrap */
            return false;
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np)
            return false;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    return true;
}

static bool put_le(buf *b, uint64_t v, unsigned n)
{
    uint8_t tmp[8];
    for (unsigned i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    return buf_put(b, tmp, n);
}

static bool put_str(buf *b, const char *s, size_t n)
{
    return put_le(b, n, 8) && buf_put(b, s, n);
}

static size_t scalar_size(memra_gguf_type_t t)
{
    static const unsigned sz[MEMRA_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < MEMRA_GGUF_TYPE_COUNT ? sz[t] : 0;
}

static memra_status_t nomem(void)
{
    return memra__fail(NULL, MEMRA_E_NOMEM, "gguf writer: out of memory");
}

memra_status_t memra_gguf_writer_create(memra_gguf_writer_t **out)
{
    if (!out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_gguf_writer_create: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return nomem();
    (*out)->version = 3;
    (*out)->alignment = 32;
    return MEMRA_OK;
}

void memra_gguf_writer_destroy(memra_gguf_writer_t *w)
{
    if (!w)
        return;
    for (int64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv.p);
    free(w);
}

memra_status_t memra_gguf_writer_set_version(memra_gguf_writer_t *w, uint32_t version)
{
    if (!w)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: NULL writer");
    w->version = version;
    return MEMRA_OK;
}

memra_status_t memra_gguf_writer_set_alignment(memra_gguf_writer_t *w, uint32_t alignment)
{
    if (!w || alignment == 0 || (alignment & (alignment - 1)))
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: alignment must be a power of two");
    /* the general.alignment key is written by emit(), so that setting it
     * twice still gives one key */
    w->alignment = alignment;
    return MEMRA_OK;
}

void memra_gguf_writer_set_fill(memra_gguf_writer_t *w, memra_gguf_fill_fn fn, void *user)
{
    if (w) {
        w->fill = fn;
        w->fill_user = user;
    }
}

static memra_status_t begin_kv(memra_gguf_writer_t *w, const char *key, memra_gguf_type_t t)
{
    if (!w || !key)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: NULL writer or key");
    if (!put_str(&w->kv, key, strlen(key)) || !put_le(&w->kv, t, 4))
        return nomem();
    w->n_kv++;
    return MEMRA_OK;
}

/* Drops a key that failed half-way (from MARK, the key buffer's length
 * before begin_kv), so that the writer stays valid. */
static memra_status_t abort_kv(memra_gguf_writer_t *w, size_t mark, memra_status_t st)
{
    w->kv.n = mark;
    w->n_kv--;
    return st;
}

/* Arrays larger than this cannot be held in memory anyway; the limit keeps
 * n * element size far from wrapping. */
#define MAX_ARRAY_BYTES ((uint64_t)1 << 48)

memra_status_t memra_gguf_writer_add_scalar(memra_gguf_writer_t *w, const char *key,
                                            memra_gguf_type_t type, const void *value)
{
    size_t n = scalar_size(type);
    if (!n || !value)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: key '%s': not a scalar type (%d)",
                           key ? key : "?", (int)type);
    memra_status_t st = begin_kv(w, key, type);
    if (st)
        return st;
    uint64_t v = 0;
    memcpy(&v, value, n); /* little-endian host */
    return put_le(&w->kv, v, (unsigned)n) ? MEMRA_OK : nomem();
}

memra_status_t memra_gguf_writer_add_u32(memra_gguf_writer_t *w, const char *key, uint32_t v)
{
    return memra_gguf_writer_add_scalar(w, key, MEMRA_GGUF_UINT32, &v);
}

memra_status_t memra_gguf_writer_add_i32(memra_gguf_writer_t *w, const char *key, int32_t v)
{
    return memra_gguf_writer_add_scalar(w, key, MEMRA_GGUF_INT32, &v);
}

memra_status_t memra_gguf_writer_add_f32(memra_gguf_writer_t *w, const char *key, float v)
{
    return memra_gguf_writer_add_scalar(w, key, MEMRA_GGUF_FLOAT32, &v);
}

memra_status_t memra_gguf_writer_add_bool(memra_gguf_writer_t *w, const char *key, int v)
{
    uint8_t b = v != 0;
    return memra_gguf_writer_add_scalar(w, key, MEMRA_GGUF_BOOL, &b);
}

memra_status_t memra_gguf_writer_add_str(memra_gguf_writer_t *w, const char *key, const char *v)
{
    if (!v)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: key '%s': NULL string", key ? key : "?");
    memra_status_t st = begin_kv(w, key, MEMRA_GGUF_STRING);
    if (st)
        return st;
    return put_str(&w->kv, v, strlen(v)) ? MEMRA_OK : nomem();
}

memra_status_t memra_gguf_writer_add_array(memra_gguf_writer_t *w, const char *key,
                                           memra_gguf_type_t elem_type, const void *data, uint64_t n)
{
    size_t es = scalar_size(elem_type);
    if (!es || (!data && n))
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: key '%s': bad numeric array",
                           key ? key : "?");
    if (n > MAX_ARRAY_BYTES / es)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: key '%s': %llu elements of %zu bytes are too many",
                           key ? key : "?", (unsigned long long)n, es);
    size_t mark = w ? w->kv.n : 0;
    memra_status_t st = begin_kv(w, key, MEMRA_GGUF_ARRAY);
    if (st)
        return st;
    if (!put_le(&w->kv, elem_type, 4) || !put_le(&w->kv, n, 8) || !buf_put(&w->kv, data, (size_t)(n * es)))
        return abort_kv(w, mark, nomem());
    return MEMRA_OK;
}

memra_status_t memra_gguf_writer_add_str_array(memra_gguf_writer_t *w, const char *key,
                                               const char *const *strs, const size_t *lens, uint64_t n)
{
    if (!strs && n)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: key '%s': NULL strings", key ? key : "?");
    /* each string takes at least its 8-byte length */
    if (n > MAX_ARRAY_BYTES / 8)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: key '%s': %llu strings are too many",
                           key ? key : "?", (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i])
            return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: key '%s': string %llu is NULL",
                               key ? key : "?", (unsigned long long)i);
    size_t mark = w ? w->kv.n : 0;
    memra_status_t st = begin_kv(w, key, MEMRA_GGUF_ARRAY);
    if (st)
        return st;
    if (!put_le(&w->kv, MEMRA_GGUF_STRING, 4) || !put_le(&w->kv, n, 8))
        return abort_kv(w, mark, nomem());
    for (uint64_t i = 0; i < n; i++)
        if (!put_str(&w->kv, strs[i], lens ? lens[i] : strlen(strs[i])))
            return abort_kv(w, mark, nomem());
    return MEMRA_OK;
}

memra_status_t memra_gguf_writer_add_tensor(memra_gguf_writer_t *w, const char *name, memra_type_t type,
                                            uint32_t n_dims, const int64_t *ne, const void *data)
{
    if (!w || !name || !ne || n_dims < 1 || n_dims > 4)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: bad tensor arguments");
    int64_t blck = memra_type_block_size(type);
    if (blck == 0)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: tensor '%s': unknown type %d", name, (int)type);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data};
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0)
            return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: tensor '%s': negative dim", name);
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % blck)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: tensor '%s': ne0 %lld not a multiple of %lld",
                           name, (long long)t.ne[0], (long long)blck);
    uint64_t nb = (uint64_t)(t.ne[0] / blck);
    bool ok = memra__mul_ok(nb, memra_type_block_bytes(type), &nb);
    for (int d = 1; d < 4 && ok; d++)
        ok = memra__mul_ok(nb, (uint64_t)t.ne[d], &nb);
    if (!ok)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: tensor '%s': size overflows", name);
    t.nbytes = nb;
    if (w->n_tensors == w->cap_tensors) {
        int64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        wtensor *nt = realloc(w->tensors, (size_t)cap * sizeof *nt);
        if (!nt)
            return nomem();
        w->tensors = nt;
        w->cap_tensors = cap;
    }
    t.name = strdup(name);
    if (!t.name)
        return nomem();
    w->tensors[w->n_tensors++] = t;
    return MEMRA_OK;
}

/* Output sink: a FILE or a growing buffer. */
typedef struct sink {
    FILE *f;
    buf *mem;
    uint64_t pos;
} sink;

static bool sink_put(sink *s, const void *p, size_t n)
{
    s->pos += n;
    if (n == 0) /* P may be NULL (no keys, empty tensor) */
        return true;
    if (s->f)
        return fwrite(p, 1, n, s->f) == n;
    return buf_put(s->mem, p, n);
}

static bool sink_pad(sink *s, uint64_t a)
{
    static const uint8_t zeros[64];
    while (s->pos % a) {
        size_t k = (size_t)(a - s->pos % a);
        if (!sink_put(s, zeros, k < sizeof zeros ? k : sizeof zeros))
            return false;
    }
    return true;
}

static memra_status_t emit(memra_gguf_writer_t *w, sink *s)
{
    buf hdr = {0};
    uint64_t off = 0, a = w->alignment;
    bool ok = put_le(&hdr, 0x46554747u, 4) && put_le(&hdr, w->version, 4) &&
              put_le(&hdr, (uint64_t)w->n_tensors, 8) && put_le(&hdr, w->n_kv + (a != 32), 8);
    for (int64_t i = 0; ok && i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        ok = put_str(&hdr, t->name, strlen(t->name)) && put_le(&hdr, t->n_dims, 4);
        for (uint32_t d = 0; ok && d < t->n_dims; d++)
            ok = put_le(&hdr, (uint64_t)t->ne[d], 8);
        ok = ok && put_le(&hdr, t->type, 4) && put_le(&hdr, off, 8);
        off += (t->nbytes + a - 1) / a * a;
    }
    if (!ok) {
        free(hdr.p);
        return nomem();
    }
    /* header = magic..counts, then KVs (general.alignment last), then tensor infos */
    buf akv = {0};
    if (ok && a != 32)
        ok = put_str(&akv, "general.alignment", 17) && put_le(&akv, MEMRA_GGUF_UINT32, 4) &&
             put_le(&akv, a, 4);
    if (!ok) {
        free(hdr.p);
        free(akv.p);
        return nomem();
    }
    ok = sink_put(s, hdr.p, 24) && sink_put(s, w->kv.p, w->kv.n) && sink_put(s, akv.p, akv.n) &&
         sink_put(s, hdr.p + 24, hdr.n - 24);
    free(hdr.p);
    free(akv.p);
    if (ok && w->n_tensors)
        ok = sink_pad(s, a);
    void *scratch = NULL;
    size_t scratch_n = 0;
    memra_status_t st = MEMRA_OK;
    for (int64_t i = 0; ok && !st && i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        const void *src = t->data;
        if (!src) {
            if (!w->fill) {
                st = memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: tensor '%s' has no data and no fill callback", t->name);
                break;
            }
            if (scratch_n < t->nbytes) {
                free(scratch);
                scratch = malloc(t->nbytes ? (size_t)t->nbytes : 1);
                scratch_n = scratch ? (size_t)t->nbytes : 0;
                if (!scratch) {
                    st = nomem();
                    break;
                }
            }
            st = w->fill(w->fill_user, i, t->name, scratch, (size_t)t->nbytes);
            if (st) {
                /* the callback cannot set a message itself */
                memra_status_t fst = st < 0 ? st : MEMRA_E_INVALID;
                st = memra__fail(NULL, fst, "gguf writer: the fill callback failed (%s) for tensor '%s'",
                                 memra_status_name(st), t->name);
                break;
            }
            src = scratch;
        }
        ok = !st && sink_put(s, src, (size_t)t->nbytes) && sink_pad(s, a);
    }
    free(scratch);
    if (st)
        return st;
    return ok ? MEMRA_OK : memra__fail(NULL, MEMRA_E_IO, "gguf writer: write failed: %s", strerror(errno));
}

memra_status_t memra_gguf_writer_write(memra_gguf_writer_t *w, const char *path)
{
    if (!w || !path)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: NULL writer or path");
    FILE *f = fopen(path, "wb");
    if (!f)
        return memra__fail(NULL, MEMRA_E_IO, "%s: cannot create: %s", path, strerror(errno));
    sink s = {.f = f};
    memra_status_t st = emit(w, &s);
    if (fclose(f) != 0 && !st)
        st = memra__fail(NULL, MEMRA_E_IO, "%s: close failed: %s", path, strerror(errno));
    if (st)
        remove(path);
    return st;
}

memra_status_t memra_gguf_writer_write_memory(memra_gguf_writer_t *w, void **data, size_t *size)
{
    if (!w || !data || !size)
        return memra__fail(NULL, MEMRA_E_INVALID, "gguf writer: NULL argument");
    buf b = {0};
    sink s = {.mem = &b};
    memra_status_t st = emit(w, &s);
    if (st) {
        free(b.p);
        return st;
    }
    *data = b.p;
    *size = b.n;
    return MEMRA_OK;
}
