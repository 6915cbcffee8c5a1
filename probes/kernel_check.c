/* memra-kernel-check [--device=N] [--seed=S] [--test=NAME] [--bench] [--iters=N] [--small]
 *
 * Prints memra_check_kernels's report: one line per case (op, shape, max
 * |err|, NMSE, max ULP, the bound and its kind, the CUDA time with --bench),
 * then ALL GREEN or the failures. Exit 0 all green, 1 a case failed, 77 no
 * GPU or a build without CUDA (the skip code of the test harness), 2 other
 * errors: a bad argument (numbers are whole decimal numbers in range), or a
 * --test=NAME that names no case. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <memra/memra.h>

#include "cli.h"

enum { OPT_DEVICE = CLI_LONG_ONLY, OPT_SEED, OPT_TEST, OPT_BENCH, OPT_ITERS, OPT_SMALL };

static const cli_opt_t k_opts[] = {
    {OPT_DEVICE, "device", "N", "CUDA device ordinal, 0..2147483647 (default: 0)"},
    {OPT_SEED, "seed", "S", "seed of the random inputs, 0..2^64-1 (default: 1)"},
    {OPT_TEST, "test", "NAME", "run only the cases whose name starts with NAME, e.g. matmul or\n"
                                   "attention.swa (default: all)"},
    {OPT_BENCH, "bench", NULL, "also time each case on the GPU (default: off)"},
    {OPT_ITERS, "iters", "N", "calls timed per case with --bench, 1..1000000 (default: 20)"},
    {OPT_SMALL, "small", NULL, "fixture shapes only (default: the real-model shapes too)"},
};

static const cli_prog_t k_prog = {
    "memra-kernel-check",
    "[--device=N] [--seed=S] [--test=NAME] [--bench] [--iters=N] [--small]",
    "Runs memra_check_kernels (every CUDA op against the CPU reference) and prints one line per\n"
    "case: op, shape, max |err|, NMSE, max ULP, the bound and its kind, the CUDA time with --bench;\n"
    "then ALL GREEN or the failures. Exit 0 all green, 1 a case failed, 77 no GPU or a build\n"
    "without CUDA, 2 a bad argument or a --test=NAME that names no case.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "memra-kernel-check --small\n"
    "memra-kernel-check --device=1 --test=matmul --bench --iters=200",
};

int main(int argc, char **argv)
{
    memra_kernel_check_params_t p;
    memra_kernel_check_default_params(&p);
    cli_t c;
    cli_init(&c, &k_prog, argc, argv);
    for (int key; (key = cli_next(&c)) != -1;) {
        switch (key) {
        case OPT_DEVICE: p.device = (int32_t)cli_u64(&c, c.arg, 0, INT32_MAX); break;
        case OPT_SEED: p.seed = cli_u64(&c, c.arg, 0, UINT64_MAX); break;
        case OPT_TEST: p.test = c.arg; break;
        case OPT_BENCH: p.bench = 1; break;
        case OPT_ITERS: p.bench_iters = (int32_t)cli_u64(&c, c.arg, 1, 1000000); break;
        case OPT_SMALL: p.big = 0; break;
        }
    }
    if (c.first_operand < argc)
        cli_fail(&c, "unexpected argument '%s'", argv[c.first_operand]);
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
    if (r.truncated) { /* cases past the report did not run: never all green */
        printf("INCOMPLETE: %d more cases did not fit the report of %d lines\n", r.truncated,
               MEMRA_KERNEL_CHECK_MAX_LINES);
        return 1;
    }
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
