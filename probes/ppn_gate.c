/* memra-ppn-gate MODEL [stages=2] [P=16] [N=32] [window=3] [devices=SPEC] [splits=A,B] [extra=0|1]
 *
 * Prints memra_check_pipeline_parity's report. Positional numbers are
 * stages, P and N in that order; key=value (or --key value) works for every
 * field. Exit 0 on PASS, 1 on a mismatch, 2 on usage or run errors. */
#include <stdio.h>
#include <string.h>

#include <memra/memra.h>

#include "cli.h"

enum { OPT_STAGES = CLI_LONG_ONLY, OPT_PROMPT, OPT_STEPS, OPT_WINDOW, OPT_DEVICES, OPT_SPLITS, OPT_EXTRA };

/* The long names are the keys of the key=value operands; P/p and N/n are
 * their short keys. */
static const cli_opt_t k_opts[] = {
    {OPT_STAGES, "stages", "N", "pipeline stages of the split arms, 0..16777216 (default: 2)"},
    {OPT_PROMPT, "prompt", "P", "prompt tokens, 0..16777216 (default: 16)"},
    {OPT_STEPS, "steps", "N", "greedy decode steps, 0..16777216 (default: 32)"},
    {OPT_WINDOW, "window", "N", "deferred steps in flight in the pipelined arms, 0..16777216 (default: 3)"},
    {OPT_DEVICES, "devices", "SPEC", "cpu or cuda:N per stage, comma-separated, or one for all\n"
                                     "(default: env MEMRA_PP_DEVICES, else the library's choice)"},
    {OPT_SPLITS, "splits", "L1,L2..", "first layer of stages 2.. (default: an even split by weight bytes)"},
    {OPT_EXTRA, "extra", "0|1", "1 = also the single-slot and unsharded arms (default: 0)"},
    {OPT_PROMPT, "P", "P", NULL},
    {OPT_PROMPT, "p", "P", NULL},
    {OPT_STEPS, "N", "N", NULL},
    {OPT_STEPS, "n", "N", NULL},
};

static const cli_prog_t k_prog = {
    "memra-ppn-gate",
    "MODEL [stages] [P] [N] [stages=2] [P=16] [N=32] [window=3] [devices=cpu|cuda:N,...]\n"
    " [splits=L1,L2,...] [extra=0|1]",
    "Runs memra_check_pipeline_parity: the model unsplit and split into stages, every arm's logits\n"
    "compared bit for bit, and prints the report. Operands after MODEL: up to three numbers\n"
    "(stages, P and N in that order), or KEY=VALUE for any option (--KEY VALUE works too).\n"
    "Exit 0 on PASS, 1 on a mismatch, 2 on usage or run errors.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "memra-ppn-gate model.gguf stages=2 devices=cuda:0,cuda:1\n"
    "memra-ppn-gate model.gguf 2 16 32 --devices cpu --splits 2",
};

/* One option's value into P; exits 2 on a bad value. */
static void set(cli_t *c, int key, const char *v, memra_pp_parity_params_t *p)
{
    long cuts[MEMRA_MAX_PP_STAGES - 1];
    switch (key) {
    case OPT_STAGES: p->n_stages = (int32_t)cli_long(c, v, 0, 1 << 24); break;
    case OPT_PROMPT: p->n_prompt = (int32_t)cli_long(c, v, 0, 1 << 24); break;
    case OPT_STEPS: p->n_steps = (int32_t)cli_long(c, v, 0, 1 << 24); break;
    case OPT_WINDOW: p->window = (int32_t)cli_long(c, v, 0, 1 << 24); break;
    case OPT_DEVICES: p->devices = v; break;
    case OPT_SPLITS: {
        int n = cli_long_list(c, v, 1, 1 << 24, cuts, MEMRA_MAX_PP_STAGES - 1);
        for (int i = 0; i < n; i++)
            p->splits[i] = (int32_t)cuts[i];
        break;
    }
    case OPT_EXTRA: p->extra_arms = (int32_t)cli_long(c, v, 0, 1); break;
    }
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
    memra_pp_parity_params_t p;
    memra_pp_parity_default_params(&p);
    cli_t c;
    cli_init(&c, &k_prog, argc, argv);
    for (int key; (key = cli_next(&c)) != -1;)
        set(&c, key, c.arg, &p);
    if (c.first_operand >= argc)
        cli_fail(&c, "no model given");
    const char *model = argv[c.first_operand];
    static const int pos_keys[] = {OPT_STAGES, OPT_PROMPT, OPT_STEPS};
    static const char *const pos_names[] = {"stages", "P", "N"};
    int n_pos = 0;
    for (int i = c.first_operand + 1; i < argc; i++) {
        const char *a = argv[i];
        int key = cli_keyval(&c, a);
        if (key >= 0) {
            set(&c, key, c.arg, &p);
        } else if (strchr(a, '=')) {
            cli_fail(&c, "unknown key in '%s'", a);
        } else if (n_pos < 3) {
            c.cur = pos_names[n_pos];
            set(&c, pos_keys[n_pos++], a, &p);
        } else {
            cli_fail(&c, "unexpected argument '%s' (stages, P and N are given)", a);
        }
    }
    memra_pp_parity_report_t r = {.size = sizeof r};
    memra_status_t st = memra_check_pipeline_parity(model, &p, &r);
    if (st && st != MEMRA_E_MISMATCH) {
        fprintf(stderr, "memra-ppn-gate: %s: %s\n", memra_status_name(st), memra_last_error());
        return 2;
    }
    print_report(&r);
    return st ? 1 : 0;
}
