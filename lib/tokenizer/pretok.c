/* Pre-tokenizers of byte-level BPE vocabularies: the `tokenizer.ggml.pre`
 * names llama.cpp knows (for the supported families), their regex lists and
 * flags, compiled with PCRE2 (UTF + UCP, JIT when available).
 *
 * Semantics follow llama.cpp's unicode_regex_split: the regexes run in turn,
 * each one only inside the pieces the previous one produced (a lookahead
 * never sees past a piece); text between two matches becomes a piece of its
 * own. llama.cpp runs these regexes through std::regex over a "collapsed"
 * copy of the text or through hand-written matchers; both equal ordinary
 * backtracking semantics with Unicode general categories, which PCRE2 gives
 * directly. The most common regexes also have hand-written matchers
 * (split.c), used unless a caller asks for PCRE2 only. Two details of the
 * regexes below are spelled out by hand:
 *  - `\s` is llama.cpp's whitespace set (the Unicode White_Space property),
 *    written as an explicit class, because PCRE2's UCP `\s` also takes
 *    U+180E;
 *  - `$` in a regex means the end of the piece (ECMAScript), written `\z`. */
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tok_impl.h"

/* llama.cpp's whitespace set, for use inside a character class. */
#define WS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define SP "[" WS "]"   /* \s */
#define NSP "[^" WS "]" /* \S */

#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" SP "+(?!" NSP ")"

/* The llama-3 family; DIGITS is the number alternative. */
#define RE_LLAMA3_LIKE(DIGITS)                                                               \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" DIGITS "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" SP \
                 "*[\\r\\n]+|" SP "+(?!" NSP ")|" SP "+"

#define RE_QWEN35                                                                                    \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" SP \
                 "*[\\r\\n]+|" SP "+(?!" NSP ")|" SP "+"

#define RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

/* deepseek-llm's letter class (its tokenizer.json lists the cased letters). */
#define RE_DS_LETTERS                                                                              \
    SP "?[\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"       \
       "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}"         \
       "\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}" \
       "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"    \
       "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"                 \
       "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"                 \
       "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"         \
       "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"        \
       "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"                 \
       "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"         \
       "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"         \
       "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"                   \
       "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"                  \
       "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"                 \
       "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"                 \
       "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"            \
       "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"         \
       "\\x{1E900}-\\x{1E943}]+"

#define RE_DS_PUNCT                                                                               \
    SP "?[\\x{21}-\\x{2F}\\x{3A}-\\x{7E}\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}" \
       "\\x{3000}-\\x{3002}]+"

enum { MAX_RE = 6 };

typedef struct regex_set {
    const char *id;
    const char *re[MAX_RE]; /* NULL-terminated */
    memra__split_kind_t kind[MAX_RE]; /* hand-written matcher of the same regex, if any */
} regex_set_t;

static const regex_set_t SET_DEFAULT = {
    "default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, {0, MEMRA__SPLIT_GPT2}};
static const regex_set_t SET_GPT2 = {"gpt-2", {RE_GPT2}, {MEMRA__SPLIT_GPT2}};
static const regex_set_t SET_LLAMA3 = {"llama3", {RE_LLAMA3_LIKE("\\p{N}{1,3}")}, {MEMRA__SPLIT_LLAMA3}};
static const regex_set_t SET_QWEN2 = {"qwen2", {RE_LLAMA3_LIKE("\\p{N}")}, {MEMRA__SPLIT_QWEN2}};
static const regex_set_t SET_QWEN35 = {"qwen35", {RE_QWEN35}, {MEMRA__SPLIT_QWEN35}};
static const regex_set_t SET_STARCODER = {"starcoder", {"\\p{N}", RE_GPT2}, {0, MEMRA__SPLIT_GPT2}};
static const regex_set_t SET_FALCON = {
    "falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, {0, MEMRA__SPLIT_GPT2}};
static const regex_set_t SET_DS_CODER = {
    "deepseek-coder", {"[\\r\\n]", SP "?\\p{L}+", SP "?\\p{P}+", RE_CJK, "\\p{N}"}, {0}};
static const regex_set_t SET_DS_LLM = {
    "deepseek-llm", {"[\\r\\n]", RE_DS_LETTERS, RE_DS_PUNCT, SP "+\\z", RE_CJK, "\\p{N}+"}, {0}};
/* gemma4: split only into runs of newlines and runs of anything else. */
static const regex_set_t SET_NEWLINES = {"gemma4", {"[^\\n]+|[\\n]+"}, {MEMRA__SPLIT_NEWLINES}};

typedef struct pre_row {
    const char *name;
    const regex_set_t *set;
    memra__pre_info_t info; /* .name filled from the row */
} pre_row_t;

/* name, regexes, {ignore_merges, add_bos, clean_spaces, bos_none}: the flags
 * llama.cpp's llama_vocab::impl::load sets for each name. */
#define ROW(n, s, im, ab, cs, bn) {n, &s, {n, im, ab, cs, bn}}
static const pre_row_t PRE_ROWS[] = {
    ROW("default", SET_DEFAULT, false, false, true, false),
    ROW("llama3", SET_LLAMA3, true, true, true, false),
    ROW("llama-v3", SET_LLAMA3, true, true, true, false),
    ROW("llama-bpe", SET_LLAMA3, true, true, true, false),
    ROW("falcon3", SET_LLAMA3, true, true, true, false),
    ROW("falcon-h1", SET_LLAMA3, true, true, true, false),
    ROW("pixtral", SET_LLAMA3, true, true, true, false),
    ROW("midm-2.0", SET_LLAMA3, true, true, true, false),
    ROW("lfm2", SET_LLAMA3, true, true, true, false),
    ROW("jina-v5-nano", SET_LLAMA3, true, true, true, false),
    ROW("smaug-bpe", SET_LLAMA3, false, false, true, false),
    ROW("dbrx", SET_LLAMA3, false, false, true, false),
    ROW("glm4", SET_LLAMA3, false, false, true, true),
    ROW("chatglm-bpe", SET_LLAMA3, false, false, true, true),
    ROW("deepseek-llm", SET_DS_LLM, false, false, false, false),
    ROW("deepseek-coder", SET_DS_CODER, false, false, false, false),
    ROW("falcon", SET_FALCON, false, false, true, false),
    ROW("mpt", SET_GPT2, false, false, true, false),
    ROW("gpt-2", SET_GPT2, false, false, true, false),
    ROW("phi-2", SET_GPT2, false, false, true, false),
    ROW("jina-es", SET_GPT2, false, false, true, false),
    ROW("jina-de", SET_GPT2, false, false, true, false),
    ROW("gigachat", SET_GPT2, false, false, true, false),
    ROW("jina-v2-es", SET_GPT2, false, false, true, false),
    ROW("jina-v2-de", SET_GPT2, false, false, true, false),
    ROW("a.x-4.0", SET_GPT2, false, false, true, false),
    ROW("mellum", SET_GPT2, false, false, true, false),
    ROW("modern-bert", SET_GPT2, false, false, true, false),
    ROW("olmo", SET_GPT2, false, false, true, false),
    ROW("jais", SET_GPT2, false, false, true, false),
    ROW("exaone4", SET_GPT2, false, false, true, false),
    ROW("trillion", SET_GPT2, false, false, false, false),
    ROW("granite-docling", SET_GPT2, false, false, false, false),
    ROW("starcoder", SET_STARCODER, false, false, true, false),
    ROW("refact", SET_STARCODER, false, false, true, false),
    ROW("codeshell", SET_STARCODER, false, false, true, false),
    ROW("exaone", SET_STARCODER, false, false, true, false),
    ROW("minerva-7b", SET_STARCODER, false, false, true, false),
    ROW("mellum2", SET_STARCODER, false, false, true, false),
    ROW("command-r", SET_STARCODER, false, false, false, false),
    ROW("smollm", SET_STARCODER, false, false, false, false),
    ROW("qwen2", SET_QWEN2, false, false, false, false),
    ROW("deepseek-r1-qwen", SET_QWEN2, false, false, false, false),
    ROW("kormo", SET_QWEN2, false, false, false, false),
    ROW("f2llmv2", SET_QWEN2, false, false, false, false),
    ROW("hunyuan", SET_QWEN2, false, false, false, false),
    ROW("solar-open", SET_QWEN2, false, false, false, false),
    ROW("grok-2", SET_QWEN2, false, false, false, false),
    ROW("megrez", SET_QWEN2, false, false, true, false),
    ROW("stablelm2", SET_QWEN2, false, false, true, false),
    ROW("qwen35", SET_QWEN35, false, false, false, false),
    ROW("gemma4", SET_NEWLINES, false, false, true, false),
    ROW("granite-embed-multi-311m", SET_NEWLINES, false, false, true, false),
};
#undef ROW

const memra__pre_info_t *memra__pre_lookup(const char *name)
{
    if (!name || !*name)
        name = "default";
    for (size_t i = 0; i < MEMRA__ARRAY_LEN(PRE_ROWS); i++)
        if (strcmp(PRE_ROWS[i].name, name) == 0)
            return &PRE_ROWS[i].info;
    return NULL;
}

const char *memra__pre_names(void)
{
    return "qwen2, qwen35, llama-bpe, smaug-bpe, gpt-2, deepseek-coder, deepseek-llm, falcon, starcoder, "
           "refact, mpt, default, gemma4 and their llama.cpp aliases (docs/TOKENIZER.md)";
}

struct memra__pretok {
    int n;
    pcre2_code *re[MAX_RE];
    bool jit[MAX_RE];
    memra__split_kind_t kind[MAX_RE];
};

struct memra__pretok_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    memra__spans_t a, b; /* pieces between stages */
};

void memra__pretok_free(memra__pretok_t *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++)
        pcre2_code_free(p->re[i]);
    free(p);
}

memra_status_t memra__pretok_create(const char *name, memra__pretok_t **out)
{
    *out = NULL;
    const regex_set_t *set = NULL;
    for (size_t i = 0; i < MEMRA__ARRAY_LEN(PRE_ROWS); i++)
        if (strcmp(PRE_ROWS[i].name, name) == 0)
            set = PRE_ROWS[i].set;
    if (!set)
        return memra__fail(NULL, MEMRA_E_UNSUPPORTED, "unknown pre-tokenizer '%s'", name);
    memra__pretok_t *p = calloc(1, sizeof *p);
    if (!p)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory compiling the '%s' pre-tokenizer", name);
    for (int i = 0; i < MAX_RE && set->re[i]; i++) {
        int err = 0;
        PCRE2_SIZE erroff = 0;
        p->re[i] = pcre2_compile((PCRE2_SPTR)set->re[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                                 &erroff, NULL);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            memra__pretok_free(p);
            return memra__fail(NULL, MEMRA_E_INTERNAL, "pre-tokenizer '%s' regex %d does not compile at %zu: %s",
                               name, i, (size_t)erroff, (const char *)msg);
        }
        p->n = i + 1;
        p->kind[i] = set->kind[i];
        /* Without JIT (not built in, or no executable memory) PCRE2 interprets. */
        p->jit[i] = pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE) == 0;
    }
    *out = p;
    return MEMRA_OK;
}

void memra__pretok_scratch_free(memra__pretok_scratch_t *s)
{
    if (!s)
        return;
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jstack);
    free(s->a.v);
    free(s->b.v);
    free(s);
}

/* One match attempt; grows the JIT stack when a deep backtrack needs it. */
static int match_once(const memra__pretok_t *p, int r, memra__pretok_scratch_t *s, const char *subj,
                      size_t n, size_t start, uint32_t opts)
{
    for (;;) {
        int rc;
        if (p->jit[r] && !opts)
            rc = pcre2_jit_match(p->re[r], (PCRE2_SPTR)subj, n, start, 0, s->md, s->mctx);
        else
            rc = pcre2_match(p->re[r], (PCRE2_SPTR)subj, n, start, opts | PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        /* The default 32 KiB JIT stack overflowed: retry once with 1 MiB growing to 64 MiB. */
        if (rc != PCRE2_ERROR_JIT_STACKLIMIT || s->jstack)
            return rc;
        if (!s->mctx && !(s->mctx = pcre2_match_context_create(NULL)))
            return PCRE2_ERROR_NOMEMORY;
        if (!(s->jstack = pcre2_jit_stack_create(1 << 20, 64 << 20, NULL)))
            return PCRE2_ERROR_NOMEMORY;
        pcre2_jit_stack_assign(s->mctx, NULL, s->jstack);
    }
}

/* Start of the char after the one at I (the text was checked on entry). */
static inline size_t utf8_next(const char *s, size_t i, size_t n)
{
    uint32_t cp;
    const size_t len = memra__utf8_decode((const unsigned char *)s + i, n - i, false, &cp);
    return i + (len ? len : 1);
}

/* Splits one piece with regex R, as std::regex_iterator walks it: every match
 * is a piece and so is every gap between matches. */
static memra_status_t split_piece(const memra__pretok_t *p, int r, memra__pretok_scratch_t *s,
                                  const char *text, size_t off, size_t n, memra__piece_fn fn, void *ctx)
{
    const char *subj = text + off;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
    size_t pos = 0;  /* end of the last piece */
    size_t from = 0; /* where the next search starts */
    uint32_t opts = 0;
    memra_status_t st = MEMRA_OK;
    while (from <= n) {
        int rc = match_once(p, r, s, subj, n, from, opts);
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (opts) {
                /* No non-empty match right after an empty one: step over one char. */
                opts = 0;
                if (from >= n)
                    break;
                from = utf8_next(subj, from, n);
                continue;
            }
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return memra__fail(NULL, rc == PCRE2_ERROR_NOMEMORY ? MEMRA_E_NOMEM : MEMRA_E_INTERNAL,
                               "pre-tokenizer regex failed at byte %zu: %s", off + from, (const char *)msg);
        }
        size_t ms = ov[0], me = ov[1];
        if (ms > pos && (st = fn(ctx, text, off + pos, ms - pos)) != MEMRA_OK)
            return st;
        if (me > ms && (st = fn(ctx, text, off + ms, me - ms)) != MEMRA_OK)
            return st;
        pos = me;
        from = me;
        opts = ms == me ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
        if (ms == me && me >= n)
            break;
    }
    return n > pos ? fn(ctx, text, off + pos, n - pos) : MEMRA_OK;
}

static memra_status_t collect(void *ctx, const char *text, size_t off, size_t len)
{
    (void)text;
    if (memra__spans_push(ctx, off, len) != MEMRA_OK)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory in the pre-tokenizer");
    return MEMRA_OK;
}

static memra_status_t stage(const memra__pretok_t *p, int r, memra__pretok_scratch_t *s, const char *text,
                            size_t off, size_t n, bool regex_only, memra__piece_fn fn, void *ctx)
{
    if (p->kind[r] != MEMRA__SPLIT_REGEX && !regex_only)
        return memra__split_custom(p->kind[r], text, off, n, fn, ctx);
    return split_piece(p, r, s, text, off, n, fn, ctx);
}

memra_status_t memra__pretok_run(const memra__pretok_t *p, memra__pretok_scratch_t **scratch, const char *text,
                                 size_t n, bool regex_only, memra__piece_fn fn, void *ctx)
{
    memra__pretok_scratch_t *s = *scratch;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || !(s->md = pcre2_match_data_create(1, NULL))) {
            free(s);
            return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory in the pre-tokenizer");
        }
        *scratch = s;
    }
    if (n == 0)
        return MEMRA_OK;
    if (p->n == 1)
        return stage(p, 0, s, text, 0, n, regex_only, fn, ctx);
    /* Earlier stages collect their pieces; the last one streams to FN. */
    s->a.n = 0;
    if (memra__spans_push(&s->a, 0, n) != MEMRA_OK)
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory in the pre-tokenizer");
    memra_status_t st = MEMRA_OK;
    for (int r = 0; r + 1 < p->n && st == MEMRA_OK; r++) {
        s->b.n = 0;
        for (size_t i = 0; i < s->a.n && st == MEMRA_OK; i++)
            st = stage(p, r, s, text, s->a.v[i].off, s->a.v[i].len, regex_only, collect, &s->b);
        memra__spans_t t = s->a;
        s->a = s->b;
        s->b = t;
    }
    for (size_t i = 0; i < s->a.n && st == MEMRA_OK; i++)
        st = stage(p, p->n - 1, s, text, s->a.v[i].off, s->a.v[i].len, regex_only, fn, ctx);
    return st;
}

memra_status_t memra__pretok_split(const memra__pretok_t *p, memra__pretok_scratch_t **scratch,
                                   const char *text, size_t n, bool regex_only, memra__spans_t *out)
{
    out->n = 0;
    return memra__pretok_run(p, scratch, text, n, regex_only, collect, out);
}
