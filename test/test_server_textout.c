/* memra-server's text release rules (examples/server/textout.c): stop
 * strings cut the text and never leak, even in part, whatever the token
 * boundaries; incomplete UTF-8 characters wait for their bytes; bytes
 * that never form a character become U+FFFD (one per maximal invalid
 * subpart, as Python's errors="replace"). Expected values are written out
 * by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "textout.h"

/* Feeds PIECES (NULL-terminated) and returns all released text, the
 * concatenation checked against what was released at each step. */
static char *feed(const char *const *stop, int n_stop, const char *const *pieces, int *stopped)
{
    textout_t t;
    textout_init(&t, stop, n_stop);
    static char all[1024];
    size_t n_all = 0;
    *stopped = 0;
    for (int i = 0; pieces[i] && !*stopped; i++) {
        int hit = textout_add(&t, pieces[i], strlen(pieces[i]));
        assert_true(hit == 0 || hit == 1);
        *stopped = hit;
        char *s = NULL;
        size_t n = 0;
        assert_int_equal(textout_take(&t, hit, &s, &n), 0);
        if (s) {
            memcpy(all + n_all, s, n);
            n_all += n;
            free(s);
        }
    }
    if (!*stopped) { /* the end of generation releases the rest */
        char *s = NULL;
        size_t n = 0;
        assert_int_equal(textout_take(&t, 1, &s, &n), 0);
        if (s) {
            memcpy(all + n_all, s, n);
            n_all += n;
            free(s);
        }
    }
    all[n_all] = 0;
    textout_free(&t);
    return all;
}

static void test_stop_across_pieces(void **state)
{
    (void)state;
    const char *stop[] = {"END", "\n\n"};
    int stopped;
    const char *p1[] = {"Hello E", "N", "D tail", NULL};
    assert_string_equal(feed(stop, 2, p1, &stopped), "Hello ");
    assert_true(stopped);
    const char *p2[] = {"a\n", "\nb", NULL};
    assert_string_equal(feed(stop, 2, p2, &stopped), "a");
    assert_true(stopped);
    /* a prefix that does not complete is released in the end */
    const char *p3[] = {"x EN", "d", NULL};
    assert_string_equal(feed(stop, 2, p3, &stopped), "x ENd");
    assert_false(stopped);
    /* the earliest start wins when two stops complete at once */
    const char *stop2[] = {"bc", "abcd"};
    const char *p4[] = {"xabcd", NULL};
    assert_string_equal(feed(stop2, 2, p4, &stopped), "x"); /* abcd at 1, before bc at 2 */
}

static void test_holdback(void **state)
{
    (void)state;
    const char *stop[] = {"STOP"};
    textout_t t;
    textout_init(&t, stop, 1);
    char *s = NULL;
    size_t n = 0;
    assert_int_equal(textout_add(&t, "abc ST", 6), 0);
    assert_int_equal(textout_take(&t, 0, &s, &n), 0);
    assert_string_equal(s, "abc "); /* "ST" may still become STOP */
    free(s);
    assert_int_equal(textout_add(&t, "AR", 2), 0);
    assert_int_equal(textout_take(&t, 0, &s, &n), 0);
    assert_string_equal(s, "STAR");
    free(s);
    textout_free(&t);
}

static void test_utf8(void **state)
{
    (void)state;
    textout_t t;
    textout_init(&t, NULL, 0);
    char *s = NULL;
    size_t n = 0;
    /* "é" = C3 A9 split over two pieces; "€" = E2 82 AC over three */
    assert_int_equal(textout_add(&t, "a\xc3", 2), 0);
    assert_int_equal(textout_take(&t, 0, &s, &n), 0);
    assert_string_equal(s, "a");
    free(s);
    assert_int_equal(textout_add(&t, "\xa9\xe2", 2), 0);
    assert_int_equal(textout_take(&t, 0, &s, &n), 0);
    assert_string_equal(s, "\xc3\xa9");
    free(s);
    assert_int_equal(textout_add(&t, "\x82", 1), 0);
    assert_int_equal(textout_take(&t, 0, &s, &n), 0);
    assert_null(s);
    assert_int_equal(textout_add(&t, "\xac", 1), 0);
    assert_int_equal(textout_take(&t, 0, &s, &n), 0);
    assert_string_equal(s, "\xe2\x82\xac");
    free(s);
    /* an incomplete character at the end becomes U+FFFD */
    assert_int_equal(textout_add(&t, "z\xe2\x82", 3), 0);
    assert_int_equal(textout_take(&t, 1, &s, &n), 0);
    assert_string_equal(s, "z\xef\xbf\xbd");
    free(s);
    textout_free(&t);
}

static void test_clean(void **state)
{
    (void)state;
    size_t n = 0;
    struct {
        const char *in, *want;
    } cases[] = {
        {"plain", "plain"},
        {"\xff", "\xef\xbf\xbd"},
        {"a\x80" "b", "a\xef\xbf\xbd" "b"},
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},          /* overlong: two bytes, neither can start */
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* a surrogate */
        {"\xe2\x82" "x", "\xef\xbf\xbd" "x"},               /* one maximal subpart, one U+FFFD */
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* past U+10FFFF */
        {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *s = textout_utf8_clean(cases[i].in, strlen(cases[i].in), &n);
        assert_non_null(s);
        assert_string_equal(s, cases[i].want);
        assert_int_equal(n, strlen(cases[i].want));
        free(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_across_pieces),
        cmocka_unit_test(test_holdback),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
