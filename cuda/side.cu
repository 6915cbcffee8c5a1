/* The side slot (memra_side_t, lib/backend.h): a branch of the ops on a
 * second stream. BEGIN records an event on the main stream that the side
 * stream waits for, then points the context's stream (which every launch
 * and copy takes) at the side stream; END records the side stream's event
 * and points back; JOIN makes the main stream wait for that event. While
 * on the branch the context's scratch (memra__cuda_ws) and cuBLAS's stream
 * are the side stream's, so branch and main ops never share them. A
 * recording (CUDA graphs) captures both streams: the branch joins the main
 * stream before the capture ends.
 *
 * On by default; MEMRA_SIDE_STREAM=0 runs the branch in order on the one
 * stream (the slot then changes nothing). gemma4's router and route beside
 * its dense MLP took the 26B-A4B's tg128 from 257.6 to 269.5 tok/s and its
 * batched steps up 4-6 % (3ac5034, one H200, 2026-12-03), logits bit for
 * bit as without. */
#include "cuda_common.cuh"

bool memra__cuda_side_init(memra__cuda_ctx_t *c)
{
    c->main_stream = c->stream;
    if (!memra__cuda_env_long("MEMRA_SIDE_STREAM", 1))
        return true;
    if (cudaStreamCreateWithFlags(&c->side_stream, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        c->side_stream = NULL;
        return false;
    }
    for (int i = 0; i < 2; i++)
        if (cudaEventCreateWithFlags(&c->side_ev[i], cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            memra__cuda_side_destroy(c);
            return false;
        }
    return true;
}

void memra__cuda_side_destroy(memra__cuda_ctx_t *c)
{
    if (!c->side_stream)
        return;
    cudaStreamSynchronize(c->side_stream);
    for (int i = 0; i < 2; i++)
        if (c->side_ev[i])
            cudaEventDestroy(c->side_ev[i]);
    cudaStreamDestroy(c->side_stream);
    cudaFree(c->side_ws);
    c->side_stream = NULL;
    c->side_ws = NULL;
    c->side_ev[0] = c->side_ev[1] = NULL;
}

/* The context's stream, scratch and cuBLAS stream become the side's
 * (TO_SIDE) or the main stream's. */
static void side_switch(memra__cuda_ctx_t *c, bool to_side)
{
    void *ws = c->ws;
    const size_t n = c->ws_size;
    c->ws = c->side_ws;
    c->ws_size = c->side_ws_size;
    c->side_ws = ws;
    c->side_ws_size = n;
    c->stream = to_side ? c->side_stream : c->main_stream;
    cublasSetStream(c->cublas, c->stream);
}

memra_status_t memra__cuda_side(memra__backend_t *be, memra_side_t what)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    if (!c->side_stream)
        return MEMRA_OK;
    switch (what) {
    case MEMRA_SIDE_BEGIN:
        if (c->side_state == 1)
            return memra__fail(be->err, MEMRA_E_INTERNAL, "side: a branch begun on a branch");
        if (c->side_state == 2)
            MEMRA_CUDA_TRY(be, cudaStreamWaitEvent(c->main_stream, c->side_ev[1], 0));
        MEMRA_CUDA_TRY(be, cudaEventRecord(c->side_ev[0], c->main_stream));
        MEMRA_CUDA_TRY(be, cudaStreamWaitEvent(c->side_stream, c->side_ev[0], 0));
        side_switch(c, true);
        c->side_state = 1;
        return MEMRA_OK;
    case MEMRA_SIDE_END:
        if (c->side_state != 1)
            return memra__fail(be->err, MEMRA_E_INTERNAL, "side: an end without a branch");
        side_switch(c, false);
        c->side_state = 2;
        MEMRA_CUDA_TRY(be, cudaEventRecord(c->side_ev[1], c->side_stream));
        return MEMRA_OK;
    case MEMRA_SIDE_JOIN:
        if (c->side_state == 1)
            return memra__fail(be->err, MEMRA_E_INTERNAL, "side: a join on the branch");
        if (c->side_state == 2) {
            c->side_state = 0;
            MEMRA_CUDA_TRY(be, cudaStreamWaitEvent(c->main_stream, c->side_ev[1], 0));
        }
        return MEMRA_OK;
    }
    return memra__fail(be->err, MEMRA_E_INVALID, "side: %d", (int)what);
}

memra_status_t memra__cuda_side_settle(memra__backend_t *be)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    if (c->side_state == 1) {
        side_switch(c, false);
        c->side_state = 2;
        MEMRA_CUDA_TRY(be, cudaEventRecord(c->side_ev[1], c->side_stream));
    }
    return memra__cuda_side(be, MEMRA_SIDE_JOIN);
}
