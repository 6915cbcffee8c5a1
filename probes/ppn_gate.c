/* memra-ppn-gate MODEL [stages=2] [P=16] [N=32] [window=3] [devices=SPEC] [splits=A,B] [extra=0|1]
 *
 * Prints memra_check_pipeline_parity's report. Positional numbers are
 * stages, P and N in that order; key=value works for every field. Exit 0 on
 * PASS, 1 on a mismatch, 2 on usage or run errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

static int usage(void)
{
    fprintf(stderr, "usage: memra-ppn-gate MODEL [stages=2] [P=16] [N=32] [window=3] [devices=cpu|cuda:N,...] "
                    "[splits=L1,L2,...] [extra=0|1]\n");
    return 2;
}

static int parse_num(const char *s, int32_t *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > 1 << 24)
        return -1;
    *out = (int32_t)v;
    return 0;
}

static int parse_splits(const char *s, int32_t *cuts, int max)
{
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0 || n == max)
            return -1;
        cuts[n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n > 0 ? 0 : -1;
}

static void print_report(const memra_pp_parity_report_t *r)
{
    printf("pipeline parity: %s, %d layers, vocab %d; reference on %s, split over %d stages on %s\n", r->arch,
           r->n_layers, r->n_vocab, r->ref_device, r->n_stages, r->devices);
    printf("stage fence:");
    for (int32_t s = 0; s < r->n_stages; s++)
        printf(" [%d,%d)", r->fence[s], r->fence[s + 1]);
    printf("  weight MiB:");
    for (int32_t s = 0; s < r->n_stages; s++)
        printf(" %.2f", (double)r->stage_bytes[s] / (1024.0 * 1024.0));
    printf("\nrows: %d prompt (prefill) + %d greedy decode steps; unsplit decode %.1f tok/s\n", r->n_prompt,
           r->n_steps, r->ref_decode_tok_s);
    printf("%-12s %7s %7s %5s %6s %8s %10s %9s  %s\n", "arm", "streams", "overlap", "shard", "window", "compared",
           "mismatched", "tok/s", "first mismatch");
    for (int32_t i = 0; i < r->n_arms; i++) {
        const memra_pp_parity_arm_t *a = &r->arms[i];
        printf("%-12s %7d %7d %5d %6d %8d %10d %9.1f  ", a->name, a->streams, a->overlap, a->shard, a->window,
               a->steps_compared, a->steps_mismatched, a->decode_tok_s);
        if (a->first_step < 0)
            printf("-\n");
        else
            printf("%s %d, index %d: reference %.9g (0x%08x), got %.9g (0x%08x)\n",
                   a->first_step < r->n_prompt ? "prompt row" : "decode step",
                   a->first_step < r->n_prompt ? a->first_step : a->first_step - r->n_prompt, a->first_index,
                   (double)a->first_ref, a->first_ref_bits, (double)a->first_got, a->first_got_bits);
    }
    printf("%s\n", r->pass ? "PASS: bit-identical" : "FAIL: split logits differ");
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-')
        return usage();
    memra_pp_parity_params_t p;
    memra_pp_parity_default_params(&p);
    int32_t *pos[] = {&p.n_stages, &p.n_prompt, &p.n_steps};
    int n_pos = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        int bad = 0;
        if (!eq) {
            bad = n_pos >= 3 || parse_num(a, pos[n_pos++]);
        } else {
            size_t k = (size_t)(eq - a);
            const char *v = eq + 1;
            if (k == 6 && !strncmp(a, "stages", k))
                bad = parse_num(v, &p.n_stages);
            else if (k == 1 && (a[0] == 'P' || a[0] == 'p'))
                bad = parse_num(v, &p.n_prompt);
            else if (k == 1 && (a[0] == 'N' || a[0] == 'n'))
                bad = parse_num(v, &p.n_steps);
            else if (k == 6 && !strncmp(a, "window", k))
                bad = parse_num(v, &p.window);
            else if (k == 7 && !strncmp(a, "devices", k))
                p.devices = v;
            else if (k == 6 && !strncmp(a, "splits", k))
                bad = parse_splits(v, p.splits, MEMRA_MAX_PP_STAGES - 1);
            else if (k == 5 && !strncmp(a, "extra", k))
                bad = parse_num(v, &p.extra_arms);
            else
                bad = 1;
        }
        if (bad) {
            fprintf(stderr, "memra-ppn-gate: bad argument '%s'\n", a);
            return usage();
        }
    }
    memra_pp_parity_report_t r = {.size = sizeof r};
    memra_status_t st = memra_check_pipeline_parity(argv[1], &p, &r);
    if (st && st != MEMRA_E_MISMATCH) {
        fprintf(stderr, "memra-ppn-gate: %s: %s\n", memra_status_name(st), memra_last_error());
        return 2;
    }
    print_report(&r);
    return st ? 1 : 0;
}
