/* README's environment table and the options table (options.c) list the
 * same variables with the same defaults: the manual cannot drift from what
 * the library does.  README_PATH is README.md of the source tree. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "options.h"

#define MAX_ROWS 64

struct row {
    char name[1024], shown[1024];
};

/* s without the spaces and backticks around it and inside at its ends. */
static void trim(char *s)
{
    size_t n = strlen(s), i = 0;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '`'))
        s[--n] = 0;
    while (s[i] == ' ' || s[i] == '`')
        i++;
    memmove(s, s + i, n - i + 1);
}

/* The rows of README's environment table (its section "## Environment
 * variables"): `| \`REGCACHE_...\` | ... | default |`. */
static size_t readme_rows(struct row *rows)
{
    FILE *f = fopen(README_PATH, "r");
    assert_non_null(f);
    char line[1024];
    size_t n = 0;
    bool in_section = false;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "## ", 3))
            in_section = !strcmp(line, "## Environment variables\n");
        if (!in_section || strncmp(line, "| `REGCACHE_", 12))
            continue;
        assert_true(n < MAX_ROWS);
        line[strcspn(line, "\n")] = 0;
        char *first = line + 1, *bar = strchr(first, '|');
        char *last_bar = strrchr(line, '|'), *before = last_bar;
        assert_non_null(bar);
        *bar = 0;
        *last_bar = 0;
        while (before > line && before[-1] != '|')
            before--;
        snprintf(rows[n].name, sizeof rows[n].name, "%s", first);
        snprintf(rows[n].shown, sizeof rows[n].shown, "%s", before);
        trim(rows[n].name);
        trim(rows[n].shown);
        n++;
    }
    fclose(f);
    return n;
}

static void same_options_same_defaults(void **state)
{
    (void)state;
    static struct row rows[MAX_ROWS];
    size_t n = readme_rows(rows), count = rc_option_count();
    for (size_t i = 0; i < count; i++) {
        const char *name, *shown, *does;
        rc_option_describe(i, &name, &shown, &does);
        size_t r = 0;
        while (r < n && strcmp(rows[r].name, name))
            r++;
        if (r == n)
            fail_msg("%s (%s) is missing from README's environment table", name, does);
        if (strcmp(rows[r].shown, shown))
            fail_msg("%s: README says the default is \"%s\", the options table \"%s\"", name,
                     rows[r].shown, shown);
    }
    if (n != count)
        fail_msg("README's environment table has %zu rows, the options table %zu", n, count);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_options_same_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
