/* The command-line parser every program in examples/ and probes/ shares:
 * getopt_long over a table of options, --help and --version for each, and
 * strict numbers. libc and memra_version() only, so the probes build it too.
 *
 * A program lists its options (cli_opt_t) and describes itself (cli_prog_t),
 * then loops:
 *
 *     cli_t c;
 *     cli_init(&c, &prog, argc, argv);
 *     for (int key; (key = cli_next(&c)) != -1;)
 *         switch (key) {
 *         case 'n': n = (int)cli_long(&c, c.arg, 0, 1024); break;
 *         ...
 *         }
 *     // operands: argv[c.first_operand .. argc)
 *
 * Errors in the arguments print one line "PROG: ..." plus a pointer to
 * --help on stderr and exit with status 2; --help prints to stdout and
 * --version prints "PROG (memra) X.Y.Z", both exit 0. */
#ifndef MEMRA_EXAMPLES_CLI_H
#define MEMRA_EXAMPLES_CLI_H

#include <stdint.h>

/* Keys of options that have no short spelling start here. */
#define CLI_LONG_ONLY 256

/* One option. KEY is the short option letter when below CLI_LONG_ONLY (and
 * cli_next's return value either way; 'h' is --help's); LONG_NAME its long spelling (or
 * NULL); ARG names its value ("N", "FILE") or is NULL for a flag; HELP says
 * what it does and its default (lines after the first are indented), or is
 * NULL for an alias that --help does not list. */
typedef struct cli_opt {
    int key;
    const char *long_name;
    const char *arg;
    const char *help;
} cli_opt_t;

/* A program: NAME ("memra-run"), SYNOPSIS (the usage lines after the name,
 * '\n' between them; a line that starts with a space continues the one
 * before), ABOUT (what it does, a paragraph), its options
 * (N_OPTS of them, without --help and --version, which are added), and
 * EXAMPLES (command lines, one a line). */
typedef struct cli_prog {
    const char *name;
    const char *synopsis;
    const char *about;
    const cli_opt_t *opts;
    int n_opts;
    const char *examples;
} cli_prog_t;

typedef struct cli {
    const cli_prog_t *prog;
    int argc;
    char **argv;
    const char *arg;        /* the value of the option cli_next returned (NULL for a flag) */
    const char *cur;        /* its name, as error messages give it ("--threads", "-c", "window") */
    int first_operand;      /* after cli_next returned -1: argv[first_operand..argc) are the operands */
    char cur_buf[64];
} cli_t;

/* Prepares C for ARGV. */
void cli_init(cli_t *c, const cli_prog_t *prog, int argc, char **argv);

/* The key of the next option (its value in c->arg), or -1 at the end of the
 * options (operands may come before, between and after options). Handles
 * --help, --version, unknown options and missing values itself (exits). */
int cli_next(cli_t *c);

/* An operand "NAME=VALUE" as the option with long name NAME: returns its key
 * (c->arg = VALUE, c->cur = NAME), or -1 when ARG has no '=' or NAME is no
 * option that takes a value. */
int cli_keyval(cli_t *c, const char *arg);

/* Prints "PROG: MESSAGE" and the pointer to --help on stderr; exits 2. */
void cli_fail(const cli_t *c, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));

/* Numbers in the value S of the current option. Each accepts the whole of S
 * or exits 2 with "PROG: OPTION: bad number 'S' (...)": no leading blanks or
 * trailing text, no overflow, inside [LO, HI]. cli_long and cli_u64 read
 * decimal integers (cli_u64 no sign at all); cli_double also refuses NaN. */
long cli_long(const cli_t *c, const char *s, long lo, long hi);
uint64_t cli_u64(const cli_t *c, const char *s, uint64_t lo, uint64_t hi);
double cli_double(const cli_t *c, const char *s, double lo, double hi);

/* A comma-separated list of integers in [LO, HI], at most MAX of them, into
 * OUT: returns the count (at least 1), or exits 2 as above. */
int cli_long_list(const cli_t *c, const char *s, long lo, long hi, long *out, int max);

/* A KV cache type named S (f32, f16, bf16, q8_0: llama.cpp's names) as its
 * memra_type_t value, or exits 2 with "PROG: OPTION: bad cache type ...". */
int32_t cli_cache_type(const cli_t *c, const char *s);

/* Rewrites llama.cpp's single-dash spellings -ctk and -ctv in ARGV to
 * --cache-type-k and --cache-type-v (getopt would read them as -c tk). */
void cli_cache_type_aliases(int argc, char **argv);

#endif
