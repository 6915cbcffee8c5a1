/* memra version. The library's SONAME carries MEMRA_VERSION_MAJOR; the same
 * major keeps the ABI stable. meson reads these defines, nothing else does. */
#ifndef MEMRA_VERSION_H
#define MEMRA_VERSION_H

#define MEMRA_VERSION_MAJOR 0
#define MEMRA_VERSION_MINOR 1
#define MEMRA_VERSION_PATCH 0

#define MEMRA_VERSION_NUMBER \
    (MEMRA_VERSION_MAJOR * 10000 + MEMRA_VERSION_MINOR * 100 + MEMRA_VERSION_PATCH)

#endif
