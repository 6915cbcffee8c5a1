// memra.h must be usable from C++: it compiles as C++11 with -pedantic and
// -Wold-style-cast (the params macros included), and its functions link
// with C names (extern "C"), which linking against libmemra checks.
#include <memra/memra.h>

int main()
{
    memra_engine_params_t ep;
    memra_engine_default_params(&ep);
    memra_model_params_t mp;
    memra_model_default_params(&mp);
    memra_sampler_params_t sp;
    memra_sampler_default_params(&sp);
    memra_kernel_check_params_t kp;
    memra_kernel_check_default_params(&kp);
    memra_pp_parity_params_t pp;
    memra_pp_parity_default_params(&pp);
    memra_margin_params_t gp;
    memra_margin_default_params(&gp);
    const bool sizes = ep.size == MEMRA_PARAMS_INIT(memra_engine_params_t) &&
                       mp.size == MEMRA_PARAMS_INIT(memra_model_params_t) &&
                       sp.size == MEMRA_PARAMS_INIT(memra_sampler_params_t) &&
                       kp.size == MEMRA_PARAMS_INIT(memra_kernel_check_params_t) &&
                       pp.size == MEMRA_PARAMS_INIT(memra_pp_parity_params_t) &&
                       gp.size == MEMRA_PARAMS_INIT(memra_margin_params_t);
    return sizes && memra_version_number() == MEMRA_VERSION_NUMBER && memra_strerror(MEMRA_OK) ? 0 : 1;
}
