// memra.h must be usable from C++: it compiles as C++11 and its functions
// link with C names (extern "C"), which linking against libmemra checks.
#include <memra/memra.h>

int main()
{
    return memra_version_number() == MEMRA_VERSION_NUMBER && memra_strerror(MEMRA_OK) ? 0 : 1;
}
