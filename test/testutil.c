#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
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
