/* Matvec and fast-prefill dequantizer instances (cuda/mmv.cuh) for: Q8_0. */
#include "mmv_impl.cuh"

MMV_INSTANTIATE(MEMRA_TYPE_Q8_0, _)

bool mmv_q8x_launch(const mmv_args &a, int sm_count, cudaStream_t s)
{
    return mmv_launch_q8x<MEMRA_TYPE_Q8_0>(a, sm_count, s);
}
