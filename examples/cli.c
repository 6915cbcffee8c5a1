#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

/* --help and --version, added to every program's options */
#define KEY_HELP 'h'
#define KEY_VERSION 0x10000

#define MAX_OPTS 64

/* One parser per program: getopt_long's tables live here. */
static struct option g_long[MAX_OPTS + 3];
static char g_short[3 * MAX_OPTS + 8];

static const cli_opt_t k_builtin[] = {
    {KEY_HELP, "help", NULL, "print this help and exit"},
    {KEY_VERSION, "version", NULL, "print the version and exit"},
};

static void set_cur(cli_t *c, const cli_opt_t *o, int by_long)
{
    if (by_long && o->long_name)
        snprintf(c->cur_buf, sizeof c->cur_buf, "--%s", o->long_name);
    else
        snprintf(c->cur_buf, sizeof c->cur_buf, "-%c", o->key);
    c->cur = c->cur_buf;
}

static const cli_opt_t *find_key(const cli_t *c, int key)
{
    for (int i = 0; i < c->prog->n_opts; i++)
        if (c->prog->opts[i].key == key)
            return &c->prog->opts[i];
    return NULL;
}

void cli_init(cli_t *c, const cli_prog_t *prog, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->prog = prog;
    c->argc = argc;
    c->argv = argv;
    c->first_operand = argc;
    if (prog->n_opts > MAX_OPTS)
        cli_fail(c, "too many options for the parser (%d > %d)", prog->n_opts, MAX_OPTS);
    int nl = 0;
    size_t ns = 0;
    g_short[ns++] = ':'; /* a missing value returns ':', not '?' */
    for (int i = 0; i < prog->n_opts + 2; i++) {
        const cli_opt_t *o = i < prog->n_opts ? &prog->opts[i] : &k_builtin[i - prog->n_opts];
        if (o->long_name)
            g_long[nl++] = (struct option){o->long_name, o->arg ? required_argument : no_argument, NULL, o->key};
        if (o->key > 0 && o->key < CLI_LONG_ONLY) {
            g_short[ns++] = (char)o->key;
            if (o->arg)
                g_short[ns++] = ':';
        }
    }
    g_short[ns] = 0;
    g_long[nl] = (struct option){0, 0, 0, 0};
    optind = 1;
    opterr = 0;
}

void cli_fail(const cli_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", c->prog->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry '%s --help' for more information.\n", c->prog->name);
    va_end(ap);
    exit(2);
}

/* "  -m, --model FILE" padded to the help column, then HELP with its later
 * lines indented to that column. */
static void print_opt(FILE *o, const cli_opt_t *opt)
{
    enum { COL = 28 };
    char head[128];
    int n = snprintf(head, sizeof head, "  %s%c%s%s%s%s%s", opt->key < CLI_LONG_ONLY ? "-" : " ",
                     opt->key < CLI_LONG_ONLY ? opt->key : ' ', opt->key < CLI_LONG_ONLY && opt->long_name ? ", " : "  ",
                     opt->long_name ? "--" : "", opt->long_name ? opt->long_name : "", opt->arg ? " " : "",
                     opt->arg ? opt->arg : "");
    fputs(head, o);
    if (n >= COL - 1)
        fprintf(o, "\n%*s", COL, "");
    else
        fprintf(o, "%*s", COL - n, "");
    for (const char *p = opt->help; *p; p++) {
        fputc(*p, o);
        if (*p == '\n' && p[1])
            fprintf(o, "%*s", COL, "");
    }
    fputc('\n', o);
}

/* Each line of TEXT with PREFIX before it. */
static void print_lines(FILE *o, const char *prefix, const char *text)
{
    while (text && *text) {
        const char *nl = strchr(text, '\n');
        size_t len = nl ? (size_t)(nl - text) : strlen(text);
        fprintf(o, "%s%.*s\n", prefix, (int)len, text);
        text += len + (nl != NULL);
    }
}

static void print_help(const cli_prog_t *p)
{
    FILE *o = stdout;
    const char *s = p->synopsis ? p->synopsis : "[OPTIONS]";
    for (int first = 1; *s; first = 0) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        if (*s == ' ') /* a continued usage line */
            fprintf(o, "       %*s%.*s\n", (int)strlen(p->name), "", (int)len, s);
        else
            fprintf(o, "%s%s %.*s\n", first ? "usage: " : "       ", p->name, (int)len, s);
        s += len + (nl != NULL);
    }
    if (p->about) {
        fputc('\n', o);
        print_lines(o, "", p->about);
    }
    fprintf(o, "\noptions:\n");
    for (int i = 0; i < p->n_opts; i++)
        if (p->opts[i].help)
            print_opt(o, &p->opts[i]);
    for (size_t i = 0; i < sizeof k_builtin / sizeof *k_builtin; i++)
        print_opt(o, &k_builtin[i]);
    if (p->examples) {
        fprintf(o, "\nexample%s:\n", strchr(p->examples, '\n') && strchr(p->examples, '\n')[1] ? "s" : "");
        print_lines(o, "  ", p->examples);
    }
}

int cli_next(cli_t *c)
{
    int idx = -1;
    optopt = 0;
    int k = getopt_long(c->argc, c->argv, g_short, g_long, &idx);
    c->arg = NULL;
    if (k == -1) {
        c->first_operand = optind;
        return -1;
    }
    const char *word = optind > 0 && optind <= c->argc ? c->argv[optind - 1] : "?";
    if (k == ':') {
        const cli_opt_t *o = find_key(c, optopt);
        if (o)
            set_cur(c, o, idx >= 0 || strncmp(word, "--", 2) == 0);
        cli_fail(c, "option %s needs a value (%s)", o ? c->cur : word, o && o->arg ? o->arg : "?");
    }
    if (k == '?') {
        const cli_opt_t *o = optopt ? find_key(c, optopt) : NULL;
        if (!o && optopt == KEY_VERSION)
            o = &k_builtin[1];
        if (!o && optopt == KEY_HELP)
            o = &k_builtin[0];
        if (o && strncmp(word, "--", 2) == 0)
            cli_fail(c, "option --%s takes no value ('%s')", o->long_name, word);
        if (optopt && optopt < CLI_LONG_ONLY && strncmp(word, "--", 2) != 0)
            cli_fail(c, "unknown option '-%c'", optopt);
        int len = (int)strcspn(word, "=");
        cli_fail(c, "unknown or ambiguous option '%.*s'", len, word);
    }
    if (k == KEY_HELP) {
        print_help(c->prog);
        exit(0);
    }
    if (k == KEY_VERSION) {
        printf("%s (memra) %s\n", c->prog->name, memra_version());
        exit(0);
    }
    const cli_opt_t *o = find_key(c, k);
    if (o)
        set_cur(c, o, idx >= 0);
    c->arg = optarg;
    return k;
}

int cli_keyval(cli_t *c, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq)
        return -1;
    size_t n = (size_t)(eq - arg);
    for (int i = 0; i < c->prog->n_opts; i++) {
        const cli_opt_t *o = &c->prog->opts[i];
        if (o->arg && o->long_name && strlen(o->long_name) == n && strncmp(o->long_name, arg, n) == 0) {
            snprintf(c->cur_buf, sizeof c->cur_buf, "%.*s", (int)n, arg);
            c->cur = c->cur_buf;
            c->arg = eq + 1;
            return o->key;
        }
    }
    return -1;
}

static int starts_number(const char *s, int sign_ok)
{
    if (sign_ok && (*s == '-' || *s == '+'))
        s++;
    return isdigit((unsigned char)*s);
}

long cli_long(const cli_t *c, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = starts_number(s, 1) ? strtol(s, &end, 10) : 0;
    if (!starts_number(s, 1) || errno || *end || v < lo || v > hi)
        cli_fail(c, "%s: bad number '%s' (want an integer in [%ld, %ld])", c->cur, s, lo, hi);
    return v;
}

uint64_t cli_u64(const cli_t *c, const char *s, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    unsigned long long v = starts_number(s, 0) ? strtoull(s, &end, 10) : 0;
    if (!starts_number(s, 0) || errno || *end || v < lo || v > hi)
        cli_fail(c, "%s: bad number '%s' (want an integer in [%llu, %llu])", c->cur, s, (unsigned long long)lo,
                 (unsigned long long)hi);
    return (uint64_t)v;
}

double cli_double(const cli_t *c, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    int ok = starts_number(s, 1) || ((*s == '.' || ((*s == '-' || *s == '+') && s[1] == '.')) &&
                                     isdigit((unsigned char)s[*s == '.' ? 1 : 2]));
    double v = ok ? strtod(s, &end) : 0;
    if (!ok || errno || *end || !isfinite(v) || !(v >= lo && v <= hi))
        cli_fail(c, "%s: bad number '%s' (want a number in [%g, %g])", c->cur, s, lo, hi);
    return v;
}

int cli_long_list(const cli_t *c, const char *s, long lo, long hi, long *out, int max)
{
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long v = starts_number(p, 1) ? strtol(p, &end, 10) : 0;
        if (!starts_number(p, 1) || errno || (*end && *end != ',') || v < lo || v > hi || n == max)
            cli_fail(c, "%s: bad number list '%s' (want 1 to %d comma-separated integers in [%ld, %ld])", c->cur,
                     s, max, lo, hi);
        out[n++] = v;
        if (!*end)
            return n;
        p = end + 1;
    }
}

int32_t cli_cache_type(const cli_t *c, const char *s)
{
    static const struct {
        const char *name;
        memra_type_t type;
    } k_types[] = {
        {"f32", MEMRA_TYPE_F32}, {"f16", MEMRA_TYPE_F16}, {"bf16", MEMRA_TYPE_BF16}, {"q8_0", MEMRA_TYPE_Q8_0},
        {"q4_0", MEMRA_TYPE_Q4_0},
    };
    for (size_t i = 0; i < sizeof k_types / sizeof *k_types; i++)
        if (!strcmp(s, k_types[i].name))
            return (int32_t)k_types[i].type;
    cli_fail(c, "%s: bad cache type '%s' (f32, f16, bf16, q8_0 or q4_0)", c->cur, s);
}

void cli_cache_type_aliases(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strcmp(argv[i], "-ctk"))
            argv[i] = (char *)"--cache-type-k";
        else if (!strcmp(argv[i], "-ctv"))
            argv[i] = (char *)"--cache-type-v";
    }
}
