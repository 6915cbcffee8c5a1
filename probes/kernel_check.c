/* memra-kernel-check [--device=N] [--seed=S] [--test=NAME] [--bench] [--iters=N] [--small]
 *
 * Prints memra_check_kernels's report: one line per case (op, shape, max
 * |err|, NMSE, max ULP, the bound and its kind, the CUDA time with --bench),
 * then ALL GREEN or the failures. Exit 0 all green, 1 a case failed, 77 no
 * GPU or a build without CUDA (the skip code of the test harness), 2 other
 * errors: a bad argument (numbers are whole decimal numbers in range), or a
 * --test=NAME that names no case. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

static int usage(void)
{
    fprintf(stderr, "usage: memra-kernel-check [--device=N] [--seed=S] [--test=NAME] [--bench] [--iters=N] [--small]\n");
    return 2;
}

/* A whole decimal number in [lo, hi] (no sign unless lo < 0, no trailing
 * text); false otherwise. */
static bool parse_num(const char *s, unsigned long long lo, unsigned long long hi, unsigned long long *out)
{
    if (!(*s >= '0' && *s <= '9'))
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

int main(int argc, char **argv)
{
    memra_kernel_check_params_t p;
    memra_kernel_check_default_params(&p);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        unsigned long long v = 0;
        bool ok = true;
        if (strncmp(a, "--device=", 9) == 0)
            ok = parse_num(a + 9, 0, INT32_MAX, &v), p.device = (int32_t)v;
        else if (strncmp(a, "--seed=", 7) == 0)
            ok = parse_num(a + 7, 0, UINT64_MAX, &v), p.seed = v;
        else if (strncmp(a, "--test=", 7) == 0)
            p.test = a + 7;
        else if (strcmp(a, "--bench") == 0)
            p.bench = 1;
        else if (strncmp(a, "--iters=", 8) == 0)
            ok = parse_num(a + 8, 1, 1000000, &v), p.bench_iters = (int32_t)v;
        else if (strcmp(a, "--small") == 0)
            p.big = 0;
        else
            return usage();
        if (!ok) {
            fprintf(stderr, "memra-kernel-check: bad number in '%s'\n", a);
            return usage();
        }
    }
    static memra_kernel_check_report_t r; /* large: keep it off the stack */
    r.size = sizeof r;
    memra_status_t st = memra_check_kernels(&p, &r);
    if (st == MEMRA_E_NO_DEVICE) {
        printf("SKIP: %s\n", memra_last_error());
        return 77;
    }
    if (st && st != MEMRA_E_MISMATCH) {
        fprintf(stderr, "memra-kernel-check: %s: %s\n", memra_strerror(st), memra_last_error());
        return 2;
    }
    printf("device: %s, seed %llu\n", r.device_name, (unsigned long long)p.seed);
    printf("%-30s %-52s %10s %10s %9s %-5s %8s %s\n", "case", "shape", "max|err|", "nmse", "max_ulp", "bound", "", "");
    for (int i = 0; i < r.n_lines; i++) {
        const memra_kernel_check_line_t *l = &r.lines[i];
        char bound[24];
        if (strcmp(l->tol_kind, "exact") == 0)
            snprintf(bound, sizeof bound, "exact");
        else
            snprintf(bound, sizeof bound, "%s<=%.0e", l->tol_kind, l->tol);
        printf("%-30s %-52s %10.3e %10.3e %9.2f %-14s %s", l->name, l->shape, l->max_abs_err, l->nmse, l->max_ulp,
               bound, l->pass ? "ok" : "FAIL");
        if (l->bench_us > 0)
            printf("  %9.2f us", l->bench_us);
        if (l->bench_gbs > 0)
            printf(" %8.1f GB/s", l->bench_gbs);
        if (!l->pass && l->note[0])
            printf("  (%s)", l->note);
        printf("\n");
    }
    if (r.truncated)
        printf("(%d more cases did not fit the report)\n", r.truncated);
    if (r.all_green) {
        printf("ALL GREEN (%d cases)\n", r.n_lines);
        return 0;
    }
    printf("FAILED %d of %d:", r.n_failed, r.n_lines);
    for (int i = 0; i < r.n_lines; i++)
        if (!r.lines[i].pass)
            printf(" %s", r.lines[i].name);
    printf("\n");
    return 1;
}
