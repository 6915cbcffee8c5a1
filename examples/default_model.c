#define _POSIX_C_SOURCE 200809L /* readlink, access */
#include "default_model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
