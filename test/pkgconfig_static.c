/* Linked by test/meson.build against libmemra.a with nothing but the flags
 * of `pkg-config --static memra`: the private libraries must be complete
 * (a CUDA build needs the CUDA library directory and the C++ runtime). */
#include <memra/memra.h>

int main(void)
{
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    memra_engine_t *e = 0;
    if (memra_engine_create(&p, &e) != MEMRA_OK)
        return 1;
    memra_engine_destroy(e);
    return memra_cuda_device_count() >= 0 && memra_version_number() == MEMRA_VERSION_NUMBER ? 0 : 1;
}
