/* Kernel check cases: the device backend's uploads and downloads, and the
 * copy roofline (--bench). */
#include "kc.h"

/* ---- transfers ---------------------------------------------------------------- */

/* Counts the bytes of GOT that differ from WANT into A (an exact line). */
static void kc_bytes(kc_acc *a, const uint8_t *want, const uint8_t *got, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (want[i] != got[i]) {
            if (!a->n_diff_bits)
                snprintf(a->note, sizeof a->note, "%s: %zu bytes, byte %zu differs", what, n, i);
            a->n_diff_bits++;
        }
}

/* The device backend's own copies, each read back bit for bit: uploads of
 * whole 8-byte words (a step's token ids and positions: written by the
 * stream, cuda/cuda_backend.cu), small staged and large plain uploads;
 * downloads into malloc and into page-locked memory. A second upload to
 * the same place must win. */
void memra__kc_transfer(kc *k)
{
    static const size_t sizes[] = {8, 16, 64, 72, 1000, 4112, (size_t)64 << 10, (size_t)1 << 20, ((size_t)1 << 20) + 4};
    memra_kernel_check_line_t *L =
        memra__kc_line(k, "transfer", "exact", 0, "uploads, downloads of 8 B to 1 MiB (malloc, page-locked)");
    if (!L)
        return;
    kc_acc a;
    memra__kc_acc_init(&a);
    memra__backend_t *be = k->gpu;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && !k->err; si++) {
        const size_t n = sizes[si];
        uint8_t *first = memra__kc_host(k, n), *src = memra__kc_host(k, n), *h = memra__kc_host(k, n);
        if (!first || !src || !h)
            return;
        for (size_t i = 0; i < n; i++) {
            first[i] = (uint8_t)memra__kc_next(k);
            src[i] = (uint8_t)memra__kc_next(k);
        }
        void *d = memra__kc_put(k, be, first, n);
        if (!d)
            return;
        memra_status_t st = be->iface->upload(be, d, src, n);
        memset(first, 0x5A, n); /* the caller may reuse its buffer at once */
        memset(h, 0xA5, n);
        if (!st)
            st = be->iface->download(be, h, d, n);
        if (!st)
            st = be->iface->synchronize(be);
        if (st) {
            memra__kc_op_failed(k, L, "cuda", st);
            return;
        }
        kc_bytes(&a, src, h, n, "malloc");
        uint8_t *pin = memra_engine_host_alloc(k->e_gpu, n);
        if (!pin) {
            memra__kc_op_failed(k, L, "cuda", MEMRA_E_NOMEM);
            return;
        }
        memset(pin, 0xA5, n);
        st = be->iface->download(be, pin, d, n);
        if (!st)
            st = be->iface->synchronize(be);
        if (!st)
            kc_bytes(&a, src, pin, n, "page-locked");
        memra_host_free(pin);
        if (st) {
            memra__kc_op_failed(k, L, "cuda", st);
            return;
        }
    }
    memra__kc_finish(k, L, &a);
}

/* The ceiling the matvec numbers are read against: a device-to-device copy
 * of 2 GiB (bytes read + bytes written). */
typedef struct cp_case {
    void *dst, *src;
    size_t n;
} cp_case;

static memra_status_t cp_run(void *c, memra__backend_t *be, int side)
{
    cp_case *p = c;
    (void)side;
    return be->iface->copy(be, p->dst, p->src, p->n);
}

void memra__kc_roofline(kc *k)
{
    if (!k->p.bench)
        return;
    memra_kernel_check_line_t *L = memra__kc_line(k, "roofline.copy", "exact", 0, "device copy of 2 GiB (read + write)");
    if (!L)
        return;
    cp_case c = {.n = (size_t)1 << 31};
    c.src = memra__kc_track(k, k->gpu, k->gpu->iface->alloc(k->gpu, c.n));
    c.dst = memra__kc_track(k, k->gpu, k->gpu->iface->alloc(k->gpu, c.n));
    if (!c.src || !c.dst)
        return;
    kc_acc a;
    memra__kc_acc_init(&a);
    memra__kc_finish(k, L, &a);
    memra__kc_bench(k, L, cp_run, &c, k->gpu, 2.0 * (double)c.n);
}
