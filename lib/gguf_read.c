/* GGUF reader: maps the file and validates every count, length, type,
 * shape, offset and name before the rest of the library may trust it. Any
 * problem is MEMRA_E_FORMAT with the file name, the byte offset and what was
 * being read; nothing is read outside the mapping. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_impl.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64 /* ggml's GGML_MAX_NAME, NUL included */
#define GGUF_MAX_SHARDS 1024

typedef struct cursor {
    const uint8_t *p;
    size_t size;
    size_t pos;
    const char *file;
} cursor;

static memra_status_t format_error(const cursor *c, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static memra_status_t format_error(const cursor *c, size_t at, const char *fmt, ...)
{
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return memra__fail(NULL, MEMRA_E_FORMAT, "%s: %s (at byte %zu)", c->file, what, at);
}

static bool has(const cursor *c, uint64_t n)
{
    return n <= c->size - c->pos;
}

static uint64_t rd_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static memra_status_t rd_uint(cursor *c, unsigned n, uint64_t *out, const char *what)
{
    if (!has(c, n))
        return format_error(c, c->pos, "file truncated while reading %s", what);
    *out = rd_le(c->p + c->pos, n);
    c->pos += n;
    return MEMRA_OK;
}

/* A GGUF string: u64 length, then bytes. Returns the span inside the map. */
static memra_status_t rd_span(cursor *c, const uint8_t **s, uint64_t *len, const char *what)
{
    size_t at = c->pos;
    memra_status_t st = rd_uint(c, 8, len, what);
    if (st)
        return st;
    if (!has(c, *len))
        return format_error(c, at, "%s length %llu runs past the end of the file", what,
                            (unsigned long long)*len);
    *s = c->p + c->pos;
    c->pos += (size_t)*len;
    return MEMRA_OK;
}

static size_t gguf_scalar_size(memra_gguf_type_t t)
{
    switch (t) {
    case MEMRA_GGUF_UINT8:
    case MEMRA_GGUF_INT8:
    case MEMRA_GGUF_BOOL:
        return 1;
    case MEMRA_GGUF_UINT16:
    case MEMRA_GGUF_INT16:
        return 2;
    case MEMRA_GGUF_UINT32:
    case MEMRA_GGUF_INT32:
    case MEMRA_GGUF_FLOAT32:
        return 4;
    case MEMRA_GGUF_UINT64:
    case MEMRA_GGUF_INT64:
    case MEMRA_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

/* ---- name index ---------------------------------------------------------- */

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static memra_status_t index_init(gguf_index *ix, int64_t n)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap <<= 1;
    ix->slots = malloc(cap * sizeof *ix->slots);
    if (!ix->slots)
        return memra__fail(NULL, MEMRA_E_NOMEM, "gguf: out of memory for a %llu-slot name index",
                           (unsigned long long)cap);
    memset(ix->slots, 0xff, cap * sizeof *ix->slots);
    ix->mask = cap - 1;
    return MEMRA_OK;
}

typedef const char *(*name_of_fn)(const memra_gguf_t *g, int64_t i);

static int64_t index_find(const gguf_index *ix, const memra_gguf_t *g, name_of_fn name_of,
                          const char *name)
{
    if (!ix->slots)
        return -1;
    for (uint64_t h = hash_name(name) & ix->mask;; h = (h + 1) & ix->mask) {
        int64_t i = ix->slots[h];
        if (i < 0)
            return -1;
        if (strcmp(name_of(g, i), name) == 0)
            return i;
    }
}

/* Inserts I; returns the index of an entry already holding the name, or -1. */
static int64_t index_insert(gguf_index *ix, const memra_gguf_t *g, name_of_fn name_of, int64_t i)
{
    const char *name = name_of(g, i);
    for (uint64_t h = hash_name(name) & ix->mask;; h = (h + 1) & ix->mask) {
        int64_t j = ix->slots[h];
        if (j < 0) {
            ix->slots[h] = i;
            return -1;
        }
        if (strcmp(name_of(g, j), name) == 0)
            return j;
    }
}

/* Makes room for N entries (load <= 1/2), re-inserting the first N_OLD. */
static memra_status_t index_reserve(gguf_index *ix, const memra_gguf_t *g, name_of_fn name_of,
                                    int64_t n_old, int64_t n)
{
    if (ix->slots && (uint64_t)n * 2 <= ix->mask + 1)
        return MEMRA_OK;
    gguf_index nx = {0};
    memra_status_t st = index_init(&nx, n);
    if (st)
        return st;
    free(ix->slots);
    *ix = nx;
    for (int64_t i = 0; i < n_old; i++)
        index_insert(ix, g, name_of, i);
    return MEMRA_OK;
}

static const char *kv_name(const memra_gguf_t *g, int64_t i)
{
    return g->kv[i].key;
}

static const char *tensor_name(const memra_gguf_t *g, int64_t i)
{
    return g->tensors[i].name;
}

int64_t memra__gguf_find(const memra_gguf_t *g, bool tensors, const char *name)
{
    return tensors ? index_find(&g->tensor_index, g, tensor_name, name)
                   : index_find(&g->kv_index, g, kv_name, name);
}

/* ---- header parsing ------------------------------------------------------ */

static memra_status_t copy_name(cursor *c, const uint8_t *s, uint64_t len, size_t at,
                                const char *what, char **out)
{
    if (!memra__utf8_valid((const char *)s, (size_t)len))
        return format_error(c, at, "%s is not valid UTF-8", what);
    if (memchr(s, 0, (size_t)len))
        return format_error(c, at, "%s contains a NUL byte", what);
    char *copy = malloc((size_t)len + 1);
    if (!copy)
        return memra__fail(NULL, MEMRA_E_NOMEM, "gguf: out of memory");
    memcpy(copy, s, (size_t)len);
    copy[len] = '\0';
    *out = copy;
    return MEMRA_OK;
}

static memra_status_t parse_value(cursor *c, gguf_kv *kv)
{
    size_t at = c->pos;
    if (kv->type == MEMRA_GGUF_STRING) {
        const uint8_t *s;
        uint64_t len;
        memra_status_t st = rd_span(c, &s, &len, "string value");
        if (st)
            return st;
        kv->str = malloc((size_t)len + 1);
        if (!kv->str)
            return memra__fail(NULL, MEMRA_E_NOMEM, "gguf: out of memory for a %llu-byte string",
                               (unsigned long long)len);
        memcpy(kv->str, s, (size_t)len);
        kv->str[len] = '\0';
        kv->str_len = (size_t)len;
        kv->data = s;
        return MEMRA_OK;
    }
    if (kv->type == MEMRA_GGUF_ARRAY) {
        uint64_t et = 0, n = 0;
        memra_status_t st = rd_uint(c, 4, &et, "array element type");
        if (!st)
            st = rd_uint(c, 8, &n, "array length");
        if (st)
            return st;
        if (et == MEMRA_GGUF_ARRAY)
            return format_error(c, at, "key '%s': nested arrays are not supported", kv->key);
        if (et >= MEMRA_GGUF_TYPE_COUNT)
            return format_error(c, at, "key '%s': unknown array element type %llu", kv->key,
                                (unsigned long long)et);
        kv->arr_type = (memra_gguf_type_t)et;
        kv->n = n;
        kv->data = c->p + c->pos;
        if (et == MEMRA_GGUF_STRING) {
            /* every string needs at least its 8-byte length */
            if (n > (c->size - c->pos) / 8)
                return format_error(c, at, "key '%s': array of %llu strings cannot fit in the file",
                                    kv->key, (unsigned long long)n);
            kv->strs = malloc((n ? n : 1) * sizeof *kv->strs);
            if (!kv->strs)
                return memra__fail(NULL, MEMRA_E_NOMEM, "gguf: out of memory for %llu strings",
                                   (unsigned long long)n);
            for (uint64_t j = 0; j < n; j++) {
                const uint8_t *s;
                uint64_t len;
                kv->strs[j] = c->p + c->pos;
                if ((st = rd_span(c, &s, &len, "array string")))
                    return st;
            }
            return MEMRA_OK;
        }
        size_t es = gguf_scalar_size(kv->arr_type);
        uint64_t bytes;
        if (!memra__mul_ok(n, es, &bytes) || !has(c, bytes))
            return format_error(c, at, "key '%s': array of %llu %s runs past the end of the file",
                                kv->key, (unsigned long long)n, memra_gguf_type_name(kv->arr_type));
        if (et == MEMRA_GGUF_BOOL)
            for (uint64_t j = 0; j < n; j++)
                if (c->p[c->pos + j] > 1)
                    return format_error(c, c->pos + j, "key '%s': bool element is %u", kv->key,
                                        c->p[c->pos + j]);
        c->pos += (size_t)bytes;
        return MEMRA_OK;
    }
    size_t es = gguf_scalar_size(kv->type);
    if (!has(c, es))
        return format_error(c, at, "file truncated in the value of key '%s'", kv->key);
    if (kv->type == MEMRA_GGUF_BOOL && c->p[c->pos] > 1)
        return format_error(c, at, "key '%s': bool value is %u", kv->key, c->p[c->pos]);
    kv->data = c->p + c->pos;
    c->pos += es;
    return MEMRA_OK;
}

static void free_contents(memra_gguf_t *g)
{
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str);
        free(g->kv[i].strs);
    }
    free(g->kv);
    for (int64_t i = 0; i < g->n_tensors; i++)
        free(g->tensors[i].name);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    for (uint32_t s = 0; s < g->n_shards; s++)
        if (g->shards[s].mapped)
            munmap((void *)g->shards[s].base, g->shards[s].size);
    free(g->shards);
}

void memra_gguf_close(memra_gguf_t *g)
{
    if (!g)
        return;
    free_contents(g);
    free(g);
}

/* Parses KV pairs of a shard into KV (n entries). */
static memra_status_t parse_kvs(cursor *c, gguf_kv *kv, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        size_t at = c->pos;
        const uint8_t *s;
        uint64_t len = 0, type = 0;
        memra_status_t st = rd_span(c, &s, &len, "key");
        if (st)
            return st;
        if ((st = copy_name(c, s, len, at, "key", &kv[i].key)))
            return st;
        if (len == 0)
            return format_error(c, at, "key %lld is empty", (long long)i);
        if ((st = rd_uint(c, 4, &type, "value type")))
            return st;
        if (type >= MEMRA_GGUF_TYPE_COUNT)
            return format_error(c, at, "key '%s' has unknown value type %llu", kv[i].key,
                                (unsigned long long)type);
        kv[i].type = (memra_gguf_type_t)type;
        if ((st = parse_value(c, &kv[i])))
            return st;
    }
    return MEMRA_OK;
}

typedef struct shard_header {
    uint32_t version;
    int64_t n_tensors;
    int64_t n_kv;
} shard_header;

static memra_status_t parse_header(cursor *c, shard_header *h)
{
    uint64_t magic, version = 0, nt = 0, nkv = 0;
    if (c->size < 4)
        return format_error(c, 0, "file is %zu bytes, too short for a GGUF header", c->size);
    magic = rd_le(c->p, 4);
    if (magic != GGUF_MAGIC)
        return format_error(c, 0, "bad magic 0x%08llx (not a GGUF file)", (unsigned long long)magic);
    c->pos = 4;
    memra_status_t st = rd_uint(c, 4, &version, "version");
    if (!st)
        st = rd_uint(c, 8, &nt, "tensor count");
    if (!st)
        st = rd_uint(c, 8, &nkv, "key count");
    if (st)
        return st;
    /* 0 and 1 are obsolete or garbage; a higher number may be a real
     * future version, and a byte-swapped 2 or 3 is a big-endian file. */
    if (version == 0x02000000u || version == 0x03000000u)
        return memra__fail(NULL, MEMRA_E_UNSUPPORTED,
                           "%s: GGUF version %llu: this looks like a big-endian file, which is not supported (at byte 4)",
                           c->file, (unsigned long long)version);
    if (version < 2 || version > 3)
        return memra__fail(NULL, version < 2 ? MEMRA_E_FORMAT : MEMRA_E_UNSUPPORTED,
                           "%s: GGUF version %llu is not supported (2 and 3 are) (at byte 4)",
                           c->file, (unsigned long long)version);
    /* Each key needs >= 13 bytes and each tensor info >= 32, so counts that
     * could not fit are rejected before anything is allocated for them. */
    size_t rest = c->size - c->pos;
    if (nkv > rest / 13)
        return format_error(c, 16, "key count %llu cannot fit in the file", (unsigned long long)nkv);
    if (nt > rest / 32)
        return format_error(c, 8, "tensor count %llu cannot fit in the file", (unsigned long long)nt);
    h->version = (uint32_t)version;
    h->n_tensors = (int64_t)nt;
    h->n_kv = (int64_t)nkv;
    return MEMRA_OK;
}

/* Reads the tensor infos of one shard, appending to g->tensors from BASE. */
static memra_status_t parse_tensor_infos(cursor *c, memra_gguf_t *g, int64_t base, int64_t n,
                                         uint32_t shard)
{
    for (int64_t i = 0; i < n; i++) {
        gguf_tensor *t = &g->tensors[base + i];
        size_t at = c->pos;
        const uint8_t *s;
        uint64_t len = 0, nd = 0, type = 0, off = 0;
        memra_status_t st = rd_span(c, &s, &len, "tensor name");
        if (st)
            return st;
        if (len >= GGUF_MAX_NAME)
            return format_error(c, at, "tensor name of %llu bytes is too long (max %d)",
                                (unsigned long long)len, GGUF_MAX_NAME - 1);
        if ((st = copy_name(c, s, len, at, "tensor name", &t->name)))
            return st;
        g->n_tensors = base + i + 1; /* owns t->name from now on */
        if ((st = rd_uint(c, 4, &nd, "tensor dims")))
            return st;
        if (nd < 1 || nd > GGUF_MAX_DIMS)
            return format_error(c, at, "tensor '%s' has %llu dims (1..4 allowed)", t->name,
                                (unsigned long long)nd);
        t->n_dims = (uint32_t)nd;
        for (int d = 0; d < 4; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne = 0;
            if ((st = rd_uint(c, 8, &ne, "tensor dim")))
                return st;
            if (ne > (uint64_t)INT64_MAX)
                return format_error(c, at, "tensor '%s' dim %u is negative", t->name, d);
            t->ne[d] = (int64_t)ne;
        }
        if ((st = rd_uint(c, 4, &type, "tensor type")) || (st = rd_uint(c, 8, &off, "tensor offset")))
            return st;
        size_t bb = memra_type_block_bytes((memra_type_t)type);
        if (type >= MEMRA_TYPE_COUNT || bb == 0)
            return format_error(c, at, "tensor '%s' has unknown type %llu", t->name,
                                (unsigned long long)type);
        t->type = (memra_type_t)type;
        int64_t blck = memra_type_block_size(t->type);
        if (t->ne[0] % blck != 0)
            return format_error(c, at, "tensor '%s': ne0 = %lld is not a multiple of the %s block size %lld",
                                t->name, (long long)t->ne[0], memra_type_name(t->type), (long long)blck);
        uint64_t bytes = (uint64_t)(t->ne[0] / blck);
        bool ok = memra__mul_ok(bytes, bb, &bytes);
        for (int d = 1; d < 4 && ok; d++)
            ok = memra__mul_ok(bytes, (uint64_t)t->ne[d], &bytes);
        /* ggml counts elements in int64 too */
        uint64_t nel = 1;
        for (int d = 0; d < 4 && ok; d++)
            ok = memra__mul_ok(nel, (uint64_t)t->ne[d], &nel) && nel <= (uint64_t)INT64_MAX;
        if (!ok)
            return format_error(c, at, "tensor '%s': shape overflows", t->name);
        t->nbytes = bytes;
        t->offset = off;
        t->shard = shard;
        int64_t dup = index_insert(&g->tensor_index, g, tensor_name, base + i);
        if (dup >= 0)
            return format_error(c, at, "duplicate tensor name '%s'", t->name);
    }
    return MEMRA_OK;
}

/* Reads the integer key KEY of type WANT; *at receives its value's offset. */
static memra_status_t find_u32(const cursor *c, const gguf_kv *kv, int64_t n, const char *key,
                               memra_gguf_type_t want, uint64_t *out, bool *found, size_t *at)
{
    *found = false;
    for (int64_t i = 0; i < n; i++) {
        if (strcmp(kv[i].key, key) != 0)
            continue;
        size_t pos = (size_t)(kv[i].data - c->p);
        if (kv[i].type != want)
            return format_error(c, pos, "key '%s' must be %s, found %s", key,
                                memra_gguf_type_name(want), memra_gguf_type_name(kv[i].type));
        *out = rd_le(kv[i].data, (unsigned)gguf_scalar_size(want));
        *found = true;
        if (at)
            *at = pos;
        return MEMRA_OK;
    }
    return MEMRA_OK;
}

/* Lays out the data section of one shard and checks every tensor of it. */
static memra_status_t place_tensors(cursor *c, memra_gguf_t *g, int64_t base, int64_t n,
                                    const uint8_t *shard_base)
{
    uint64_t a = g->alignment;
    uint64_t data_start = n > 0 ? (c->pos + a - 1) / a * a : c->pos;
    if (n > 0 && data_start > c->size)
        return format_error(c, c->pos, "file ends before the data section (needs %llu bytes)",
                            (unsigned long long)data_start);
    uint64_t expect = 0;
    for (int64_t i = 0; i < n; i++) {
        gguf_tensor *t = &g->tensors[base + i];
        if (t->offset % a != 0)
            return format_error(c, c->pos, "tensor '%s' offset %llu is not a multiple of the alignment %llu",
                                t->name, (unsigned long long)t->offset, (unsigned long long)a);
        if (t->offset != expect)
            return format_error(c, c->pos, "tensor '%s' has offset %llu, expected %llu", t->name,
                                (unsigned long long)t->offset, (unsigned long long)expect);
        uint64_t end;
        if (!memra__add_ok(data_start, t->offset, &end) || !memra__add_ok(end, t->nbytes, &end) ||
            end > c->size)
            return format_error(c, c->pos,
                                "tensor '%s' (%llu bytes at data offset %llu) runs past the end of the file (%zu bytes)",
                                t->name, (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                                c->size);
        t->data = shard_base + data_start + t->offset;
        uint64_t padded = (t->nbytes + a - 1) / a * a;
        if (!memra__add_ok(expect, padded, &expect))
            return format_error(c, c->pos, "tensor offsets overflow");
    }
    return MEMRA_OK;
}

static memra_status_t map_file(const char *path, gguf_shard *sh)
{
    /* O_NONBLOCK: opening a FIFO would otherwise wait for a writer; the
     * S_ISREG check below then refuses it. No effect on a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return memra__fail(NULL, MEMRA_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return memra__fail(NULL, MEMRA_E_IO, "%s: not a regular file", path);
    }
    if (st.st_size < 24) {
        close(fd);
        return memra__fail(NULL, MEMRA_E_FORMAT,
                           "%s: file is %lld bytes, too short for a GGUF header (at byte 0)", path,
                           (long long)st.st_size);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return memra__fail(NULL, MEMRA_E_IO, "%s: mmap failed: %s", path, strerror(errno));
    sh->base = p;
    sh->size = (size_t)st.st_size;
    sh->mapped = true;
    return MEMRA_OK;
}

/* Split naming: PREFIX-%05d-of-%05d.gguf (llama.cpp's llama_split_path). */
static bool split_prefix(const char *path, char *prefix, size_t cap, unsigned *no, unsigned *count)
{
    size_t n = strlen(path);
    const size_t tail = strlen("-00001-of-00002.gguf");
    if (n < tail)
        return false;
    const char *t = path + n - tail;
    /* exact digits: sscanf would also take signs, spaces and a wrong suffix */
    static const char shape[] = "-#####-of-#####.gguf";
    *no = *count = 0;
    for (size_t i = 0; i < tail; i++) {
        if (shape[i] != '#') {
            if (t[i] != shape[i])
                return false;
        } else if (t[i] < '0' || t[i] > '9') {
            return false;
        } else if (i < 6) {
            *no = *no * 10 + (unsigned)(t[i] - '0');
        } else {
            *count = *count * 10 + (unsigned)(t[i] - '0');
        }
    }
    if (n - tail + 1 > cap)
        return false;
    memcpy(prefix, path, n - tail);
    prefix[n - tail] = '\0';
    return true;
}

/* What the first shard says about the split. */
typedef struct split_info {
    uint64_t count;      /* split.count, 1 when absent */
    int64_t tensors;     /* split.tensors.count */
    bool has_tensors;
    size_t count_at, tensors_at;
} split_info;

/* Parses one shard's header and tensor table. For shard 0 the KVs are kept
 * and SPLIT is filled; for others they are parsed (and so validated) then
 * only split.no and general.alignment are read. */
static memra_status_t parse_shard(memra_gguf_t *g, uint32_t shard, const char *name, split_info *split)
{
    gguf_shard *sh = &g->shards[shard];
    cursor c = {.p = sh->base, .size = sh->size, .pos = 0, .file = name ? name : "<memory>"};
    shard_header h = {0};
    memra_status_t st = parse_header(&c, &h);
    if (st)
        return st;
    gguf_kv *kv = calloc(h.n_kv ? (size_t)h.n_kv : 1, sizeof *kv);
    if (!kv)
        return memra__fail(NULL, MEMRA_E_NOMEM, "gguf: out of memory");
    int64_t kv_n = h.n_kv;
    if (shard == 0) {
        g->version = h.version;
        g->kv = kv;
        g->n_kv = kv_n;
        if ((st = index_init(&g->kv_index, kv_n)))
            return st;
    }
    st = parse_kvs(&c, kv, kv_n);
    if (!st && shard == 0) {
        for (int64_t i = 0; i < kv_n && !st; i++)
            if (index_insert(&g->kv_index, g, kv_name, i) >= 0)
                st = format_error(&c, (size_t)(kv[i].data - c.p), "duplicate key '%s'", kv[i].key);
    }
    uint64_t v = 0, split_no = 0;
    size_t at = 24;
    bool found = false;
    if (!st) {
        st = find_u32(&c, kv, kv_n, "general.alignment", MEMRA_GGUF_UINT32, &v, &found, &at);
        if (!st && found && (v == 0 || (v & (v - 1)) != 0))
            st = format_error(&c, at, "general.alignment %llu is not a power of two",
                              (unsigned long long)v);
        if (!st && shard == 0)
            g->alignment = found ? (uint32_t)v : GGUF_DEFAULT_ALIGNMENT;
        else if (!st && (found ? (uint32_t)v : GGUF_DEFAULT_ALIGNMENT) != g->alignment)
            st = format_error(&c, at, "shard alignment %llu differs from the first shard's %u",
                              (unsigned long long)(found ? v : GGUF_DEFAULT_ALIGNMENT), g->alignment);
    }
    at = 24;
    if (!st)
        st = find_u32(&c, kv, kv_n, "split.no", MEMRA_GGUF_UINT16, &split_no, &found, &at);
    if (!st && split_no != shard)
        st = format_error(&c, at, "split.no is %llu, expected %u%s", (unsigned long long)split_no,
                          shard, shard == 0 ? " (open the first shard of a split model)" : "");
    if (!st && shard == 0) {
        st = find_u32(&c, kv, kv_n, "split.count", MEMRA_GGUF_UINT16, &split->count, &found,
                      &split->count_at);
        if (!st && !found)
            split->count = 1;
        uint64_t tc = 0;
        if (!st)
            st = find_u32(&c, kv, kv_n, "split.tensors.count", MEMRA_GGUF_INT32, &tc, &found,
                          &split->tensors_at);
        split->has_tensors = !st && found;
        split->tensors = (int32_t)(uint32_t)tc;
    }
    if (shard != 0) {
        for (int64_t i = 0; i < kv_n; i++) {
            free(kv[i].key);
            free(kv[i].str);
            free(kv[i].strs);
        }
        free(kv);
    }
    if (st)
        return st;
    int64_t base = g->n_tensors;
    if (h.n_tensors > 0) {
        gguf_tensor *nt = realloc(g->tensors, (size_t)(base + h.n_tensors) * sizeof *nt);
        if (!nt)
            return memra__fail(NULL, MEMRA_E_NOMEM, "gguf: out of memory for %lld tensors",
                               (long long)h.n_tensors);
        memset(nt + base, 0, (size_t)h.n_tensors * sizeof *nt);
        g->tensors = nt;
    }
    if ((st = index_reserve(&g->tensor_index, g, tensor_name, base, base + h.n_tensors)))
        return st;
    if ((st = parse_tensor_infos(&c, g, base, h.n_tensors, shard)))
        return st;
    return place_tensors(&c, g, base, h.n_tensors, sh->base);
}

static memra_status_t open_common(memra_gguf_t *g, const char *path)
{
    split_info split = {.count = 1}, unused;
    const char *file = path ? path : "<memory>";
    memra_status_t st;
    if ((st = parse_shard(g, 0, path, &split)))
        return st;
    if (split.count > 1) {
        char prefix[4096];
        unsigned no, count;
        if (!path || !split_prefix(path, prefix, sizeof prefix, &no, &count) || no != 1 ||
            count != split.count)
            return memra__fail(NULL, MEMRA_E_FORMAT,
                               "%s: split.count is %llu but the name is not PREFIX-00001-of-%05llu.gguf (at byte %zu)",
                               file, (unsigned long long)split.count,
                               (unsigned long long)split.count, split.count_at);
        if (split.count > GGUF_MAX_SHARDS)
            return memra__fail(NULL, MEMRA_E_FORMAT, "%s: split.count %llu is too large (at byte %zu)",
                               file, (unsigned long long)split.count, split.count_at);
        gguf_shard *ns = realloc(g->shards, split.count * sizeof *ns);
        if (!ns)
            return memra__fail(NULL, MEMRA_E_NOMEM, "gguf: out of memory");
        g->shards = ns;
        for (uint32_t s = 1; s < split.count; s++) {
            char name[4200];
            snprintf(name, sizeof name, "%s-%05u-of-%05u.gguf", prefix, s + 1, (unsigned)split.count);
            g->shards[s] = (gguf_shard){0};
            if ((st = map_file(name, &g->shards[s])))
                return st;
            g->n_shards = s + 1;
            if ((st = parse_shard(g, s, name, &unused)))
                return st;
        }
    }
    if (split.has_tensors && split.tensors != g->n_tensors)
        return memra__fail(NULL, MEMRA_E_FORMAT,
                           "%s: split.tensors.count is %lld but the shards hold %lld tensors (at byte %zu)",
                           file, (long long)split.tensors, (long long)g->n_tensors, split.tensors_at);
    return MEMRA_OK;
}

static memra_status_t open_shard0(gguf_shard sh, const char *path, memra_gguf_t **out)
{
    memra_gguf_t *g = calloc(1, sizeof *g);
    gguf_shard *shards = malloc(sizeof *shards);
    if (!g || !shards) {
        if (sh.mapped)
            munmap((void *)sh.base, sh.size);
        free(g);
        free(shards);
        return memra__fail(NULL, MEMRA_E_NOMEM, "gguf: out of memory");
    }
    shards[0] = sh;
    g->shards = shards;
    g->n_shards = 1;
    memra_status_t st = open_common(g, path);
    if (st) {
        memra_gguf_close(g);
        return st;
    }
    *out = g;
    return MEMRA_OK;
}

memra_status_t memra_gguf_open(const char *path, memra_gguf_t **out)
{
    if (!out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_gguf_open: out is NULL");
    *out = NULL;
    if (!path)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_gguf_open: path is NULL");
    gguf_shard sh = {0};
    memra_status_t st = map_file(path, &sh);
    if (st)
        return st;
    return open_shard0(sh, path, out);
}

memra_status_t memra_gguf_open_memory(const void *data, size_t size, memra_gguf_t **out)
{
    if (!out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_gguf_open_memory: data is NULL");
    static const uint8_t empty[1];
    gguf_shard sh = {.base = data ? data : empty, .size = size, .mapped = false};
    return open_shard0(sh, NULL, out);
}
