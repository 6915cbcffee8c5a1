/* memra-bench-tokenize: single-thread encode throughput.
 *
 *   memra-bench-tokenize [-m VOCAB.gguf] [-f TEXT_FILE] [-s MB] [-r REPEATS] [--parse-special]
 *                        [--dump FILE]
 *
 * Without -f it generates SIZE MB (default 4) of mixed text from a fixed
 * seed: Zipf-distributed pseudo-English prose with numbers and punctuation,
 * C-like code, and accented Latin, Cyrillic, Greek, CJK and emoji. Without -m
 * it uses the Qwen3 vocabulary of the fixtures. Prints the best of REPEATS
 * (default 3) runs, by wall clock and by the thread's CPU time (steadier on a
 * busy machine); MB/s means 10^6 bytes per second. --dump writes the text it
 * used to FILE. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <memra/memra.h>

#include "cli.h"
#include "common.h"

typedef struct buf {
    char *v;
    size_t n, cap;
} buf_t;

static void put(buf_t *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->v = realloc(b->v, b->cap);
        if (!b->v) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    memcpy(b->v + b->n, s, n);
    b->n += n;
}

static void puts_(buf_t *b, const char *s)
{
    put(b, s, strlen(s));
}

static unsigned long long g_rng = 0x9E3779B97F4A7C15ull;

static unsigned rnd(unsigned n)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (unsigned)((g_rng >> 11) % n);
}

/* Zipf-like pick among N items: rank r has weight about 1/(r+1). */
static unsigned zipf(unsigned n)
{
    double u = (double)(rnd(1u << 30) + 1) / (double)(1u << 30);
    unsigned r = (unsigned)pow((double)n + 1, u) - 1;
    return r < n ? r : n - 1;
}

enum { N_WORDS = 20000 };
static char g_words[N_WORDS][16];

static void make_words(void)
{
    static const char *const on[] = {"b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s",
                                     "t", "v", "w", "st", "th", "ch", "sh", "pr", "tr", "gr", "bl", ""};
    static const char *const nu[] = {"a", "e", "i", "o", "u", "ea", "ou", "io", "ai", "y"};
    static const char *const co[] = {"", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck", "m"};
    for (int w = 0; w < N_WORDS; w++) {
        char *o = g_words[w];
        int syl = 1 + (w > 50) + (w > 2000) + (int)rnd(2);
        o[0] = '\0';
        for (int s = 0; s < syl && strlen(o) < 10; s++) {
            strcat(o, on[rnd(26)]);
            strcat(o, nu[rnd(10)]);
            strcat(o, co[rnd(11)]);
        }
    }
}

static void prose(buf_t *b)
{
    int n = 8 + (int)rnd(20);
    for (int i = 0; i < n; i++) {
        const char *w = g_words[zipf(N_WORDS)];
        char tmp[32];
        snprintf(tmp, sizeof tmp, "%s", w);
        if (i == 0)
            tmp[0] = (char)(tmp[0] >= 'a' && tmp[0] <= 'z' ? tmp[0] - 32 : tmp[0]);
        if (i)
            puts_(b, " ");
        puts_(b, tmp);
        unsigned r = rnd(100);
        if (r < 6)
            puts_(b, ",");
        else if (r < 8) {
            snprintf(tmp, sizeof tmp, " %u", rnd(100000));
            puts_(b, tmp);
        } else if (r < 9)
            puts_(b, "'s");
    }
    static const char *const end[] = {". ", ". ", "? ", "! ", ".\n", ".\n\n"};
    puts_(b, end[rnd(6)]);
}

static void code(buf_t *b)
{
    static const char *const lines[] = {
        "for (int i = 0; i < n; ++i) {\n", "    sum += a[i] * b[i];\n", "}\n", "if (x == NULL)\n",
        "        return -1;\n", "def f(x):\n    return x * 2\n", "    self.value = value  # cache\n",
        "static const char *name = \"memra\";\n", "\tprintf(\"%d\\n\", count);\n", "x = [1, 2, 3, 0x7fff]\n"};
    int n = 2 + (int)rnd(6);
    for (int i = 0; i < n; i++)
        puts_(b, lines[rnd(10)]);
}

static void intl(buf_t *b)
{
    static const char *const s[] = {
        "Le café était très agréable, naïve idée. ", "Über die Brücke gehen wir schnell. ",
        "Быстрая коричневая лиса прыгает через ленивую собаку. ", "Η γρήγορη καφέ αλεπού πηδά. ",
        "我想在苹果公司工作，今天天气很好。", "日本語のテキストも少し入れます。", "한국어 문장도 있습니다. ",
        "emoji 🦙🚀 and ✅ 👩‍👩‍👧 flags 🇯🇵 ", "Ñandú, pingüino, acción — “quoted” text… "};
    int n = 1 + (int)rnd(3);
    for (int i = 0; i < n; i++)
        puts_(b, s[rnd(9)]);
}

static char *generate(size_t size, size_t *len)
{
    buf_t b = {0};
    make_words();
    while (b.n < size) {
        unsigned r = rnd(10);
        if (r < 6)
            prose(&b);
        else if (r < 8)
            code(&b);
        else
            intl(&b);
    }
    *len = b.n;
    return b.v;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *text = example_read_all(f, len);
    fclose(f);
    return text;
}

enum { OPT_PARSE = CLI_LONG_ONLY, OPT_DUMP };

static const cli_opt_t k_opts[] = {
    {'m', "model", "FILE", "GGUF file whose tokenizer to use (default:\n"
                           "$MEMRA_FIXTURES/tokenizer/vocab-qwen3.gguf, MEMRA_FIXTURES defaulting to\n"
                           "../shared/fixtures)"},
    {'f', "file", "FILE", "text to encode (default: SIZE MB of generated mixed text)"},
    {'s', "size", "MB", "generated text in MB (10^6 bytes), 0.000001..10000 (default: 4)"},
    {'r', "repeats", "N", "runs, the best is reported, 1..1000 (default: 3)"},
    {OPT_PARSE, "parse-special", NULL, "parse control tokens in the text (default: off)"},
    {OPT_DUMP, "dump", "FILE", "write the text used to FILE (default: none)"},
};

static const cli_prog_t k_prog = {
    "memra-bench-tokenize",
    "[-m VOCAB.gguf] [-f TEXT_FILE] [-s MB] [-r REPEATS] [--parse-special] [--dump FILE]",
    "Single-thread encode throughput. Without -f it generates SIZE MB of mixed text from a fixed\n"
    "seed: Zipf-distributed pseudo-English prose with numbers and punctuation, C-like code, and\n"
    "accented Latin, Cyrillic, Greek, CJK and emoji. Prints the best of REPEATS runs, by wall clock\n"
    "and by the thread's CPU time (steadier on a busy machine); MB/s means 10^6 bytes per second.",
    k_opts,
    sizeof k_opts / sizeof *k_opts,
    "MEMRA_FIXTURES=../shared/fixtures memra-bench-tokenize -r 7\n"
    "memra-bench-tokenize -m model.gguf -f corpus.txt",
};

int main(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *dump = NULL;
    double mb = 4;
    int repeats = 3;
    uint32_t flags = 0;
    cli_t cl;
    cli_init(&cl, &k_prog, argc, argv);
    for (int key; (key = cli_next(&cl)) != -1;) {
        switch (key) {
        case 'm': model = cl.arg; break;
        case 'f': file = cl.arg; break;
        case 's': mb = cli_double(&cl, cl.arg, 1e-6, 1e4); break;
        case 'r': repeats = (int)cli_long(&cl, cl.arg, 1, 1000); break;
        case OPT_PARSE: flags |= MEMRA_TOKENIZE_PARSE_SPECIAL; break;
        case OPT_DUMP: dump = cl.arg; break;
        }
    }
    if (cl.first_operand < argc)
        cli_fail(&cl, "unexpected argument '%s'", argv[cl.first_operand]);
    char def[4096];
    if (!model) {
        const char *fx = getenv("MEMRA_FIXTURES");
        snprintf(def, sizeof def, "%s/tokenizer/vocab-qwen3.gguf", fx && *fx ? fx : "../shared/fixtures");
        model = def;
    }
    double t0 = now();
    memra_tokenizer_t *tok = NULL;
    if (memra_tokenizer_load(model, &tok) != MEMRA_OK) {
        fprintf(stderr, "memra-bench-tokenize: %s\n", memra_last_error());
        return 1;
    }
    double t_load = now() - t0;
    size_t len = 0;
    char *text = file ? read_file(file, &len) : generate((size_t)(mb * 1e6), &len);
    if (!text) {
        fprintf(stderr, "memra-bench-tokenize: cannot read %s\n", file);
        return 1;
    }
    if (dump) {
        FILE *f = fopen(dump, "wb");
        if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "memra-bench-tokenize: cannot write %s\n", dump);
            return 1;
        }
    }
    int32_t n = 0;
    memra_status_t st = memra_tokenize(tok, text, len, NULL, 0, flags, &n);
    if (st != MEMRA_OK && st != MEMRA_E_RANGE) {
        fprintf(stderr, "memra-bench-tokenize: %s\n", memra_last_error());
        return 1;
    }
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < repeats; r++) {
        double t = now(), c = clock_s(CLOCK_THREAD_CPUTIME_ID);
        st = memra_tokenize(tok, text, len, ids, n, flags, &n);
        c = clock_s(CLOCK_THREAD_CPUTIME_ID) - c;
        t = now() - t;
        if (st != MEMRA_OK) {
            fprintf(stderr, "memra-bench-tokenize: %s\n", memra_last_error());
            return 1;
        }
        if (t < best)
            best = t;
        if (c < best_cpu)
            best_cpu = c;
    }
    printf("%s (%s/%s): load %.0f ms; %zu bytes -> %d tokens (%.2f bytes/token)\n"
           "best of %d: wall %.1f ms = %.1f MB/s (%.2f M tokens/s); cpu %.1f ms = %.1f MB/s\n",
           model, memra_tokenizer_model(tok), memra_tokenizer_pre(tok), t_load * 1e3, len, (int)n,
           (double)len / (n ? n : 1), repeats, best * 1e3, (double)len / best / 1e6, (double)n / best / 1e6,
           best_cpu * 1e3, (double)len / best_cpu / 1e6);
    free(ids);
    free(text);
    memra_tokenizer_free(tok);
    return 0;
}
