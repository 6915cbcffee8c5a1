/* Matvec and fast-prefill dequantizer instances (cuda/mmv.cuh) for: Q8_0. */
#include "mmv_impl.cuh"

MMV_INSTANTIATE(MEMRA_TYPE_Q8_0, _)

bool mmv_q8d_pre_fits(const mmv_args &a)
{
    size_t smem;
    int occ;
    return mmv_q8d_pre_plan<MEMRA_TYPE_Q8_0>(a, &smem, &occ);
}
