/* The defaults that include/regcache.h writes beside the fields of struct
 * regcache_params ("default 1024", "1 (default)") are the ones
 * regcache_params_init() sets from the options table: the header cannot
 * drift from what the library does.  HEADER_PATH is the source tree's
 * include/regcache.h. */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "regcache.h"

/* The fields a default may be written for: where init put it, and what
 * "AUTO" means for it. */
#define FIELD(f, automatic)                                                                \
    {                                                                                      \
#f, offsetof(struct regcache_params, f), sizeof(((struct regcache_params *)0)->f), \
            automatic                                                                      \
    }
static const struct field {
    const char *name;
    size_t offset, size;
    long automatic;
} fields[] = {
    FIELD(access, -1),
    FIELD(method, REGCACHE_METHOD_AUTO),
    FIELD(validation, REGCACHE_VALIDATE_AUTO),
    FIELD(alignment, -1),
    FIELD(max_bytes, -1),
    FIELD(max_entries, -1),
    FIELD(whole_allocation, -1),
    FIELD(host_memory, -1),
    FIELD(whole_allocation_max, -1),
    FIELD(rails, -1),
    FIELD(eager_min_bytes, -1),
    FIELD(eager_rails, -1),
    FIELD(workers, -1),
    FIELD(prefetch_queue, -1),
    FIELD(host_monitor, REGCACHE_HOST_MONITOR_AUTO),
    FIELD(priv_size, -1),
    FIELD(host_merge, REGCACHE_HOST_MERGE_AUTO),
    FIELD(device_keys, -1),
};

static const struct field *field_named(const char *name)
{
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!strcmp(fields[i].name, name))
            return &fields[i];
    return NULL;
}

static uint64_t value_of(const struct regcache_params *p, const struct field *f)
{
    const char *at = (const char *)p + f->offset;
    if (f->size == sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, at, sizeof v);
        return v;
    }
    uint32_t v;
    assert_int_equal(f->size, sizeof v);
    memcpy(&v, at, sizeof v);
    return v;
}

/* The file at path, NUL-terminated. */
static char *slurp(const char *path)
{
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, in);
    fclose(in);
    text[n] = '\0';
    return text;
}

/* A comment's words, one space apart, without its slashes and stars. */
static void flatten(const char *from, const char *to, char *out, size_t n)
{
    size_t k = 0;
    bool space = false;
    for (const char *s = from; s < to && k + 1 < n; s++) {
        bool blank = isspace((unsigned char)*s) || *s == '*' || *s == '/';
        if (blank) {
            space = k > 0;
            continue;
        }
        if (space && k + 2 < n)
            out[k++] = ' ';
        space = false;
        out[k++] = *s;
    }
    out[k] = '\0';
}

/* The default a comment writes: "default X", "(default X" or "X (default)";
 * false when it writes none. */
static bool written_default(const char *comment, char *value, size_t n)
{
    const char *at = strstr(comment, "default ");
    if (at) {
        at += strlen("default ");
        size_t len = strspn(at, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_|");
        snprintf(value, n, "%.*s", (int)len, at);
        return len > 0;
    }
    at = strstr(comment, " (default)");
    if (!at)
        return false;
    const char *start = at;
    while (start > comment && !isspace((unsigned char)start[-1]))
        start--;
    snprintf(value, n, "%.*s", (int)(at - start), start);
    return at > start;
}

static uint64_t access_bits(const char *value)
{
    static const struct {
        const char *name;
        uint64_t bit;
    } bits[] = { { "LOCAL_WRITE", IBV_ACCESS_LOCAL_WRITE },
                 { "REMOTE_WRITE", IBV_ACCESS_REMOTE_WRITE },
                 { "REMOTE_READ", IBV_ACCESS_REMOTE_READ },
                 { "REMOTE_ATOMIC", IBV_ACCESS_REMOTE_ATOMIC } };
    uint64_t v = 0;
    char copy[128];
    snprintf(copy, sizeof copy, "%s", value);
    for (char *save, *name = strtok_r(copy, "|", &save); name; name = strtok_r(NULL, "|", &save)) {
        size_t i = 0;
        while (i < sizeof bits / sizeof bits[0] && strcmp(bits[i].name, name))
            i++;
        if (i == sizeof bits / sizeof bits[0])
            fail_msg("params.access: the header's default names %s, no access bit", name);
        v |= bits[i].bit;
    }
    return v;
}

/* What the header's text for field f's default stands for. */
static uint64_t meaning(const struct field *f, const char *value)
{
    if (!strcmp(f->name, "access"))
        return access_bits(value);
    if (!strcmp(value, "AUTO")) {
        if (f->automatic < 0)
            fail_msg("params.%s: the header says AUTO, which it has not", f->name);
        return (uint64_t)f->automatic;
    }
    if (!strcmp(value, "off"))
        return 0;
    char *end;
    uint64_t v = strtoull(value, &end, 10);
    if (!isdigit((unsigned char)value[0]) || *end)
        fail_msg("params.%s: the header's default \"%s\" is no value", f->name, value);
    return v;
}

/* The name a declaration ending at `semicolon` declares: the last word,
 * or for a function pointer the one in (*name). */
static void declared(const char *from, const char *semicolon, char *name, size_t n)
{
    const char *star = NULL;
    for (const char *s = from; s < semicolon; s++)
        if (s[0] == '(' && s[1] == '*')
            star = s + 2;
    const char *end = star ? star : semicolon;
    if (star)
        while (isalnum((unsigned char)*end) || *end == '_')
            end++;
    const char *start = end;
    while (start > from && (isalnum((unsigned char)start[-1]) || start[-1] == '_'))
        start--;
    snprintf(name, n, "%.*s", (int)(end - start), start);
}

static void header_defaults_are_the_tables(void **state)
{
    (void)state;
    struct regcache_params p;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    const char *text = slurp(HEADER_PATH);
    const char *body = strstr(text, "struct regcache_params {");
    assert_non_null(body);
    const char *end = strstr(body, "\n};");
    assert_non_null(end);
    body = strchr(body, '{') + 1;
    unsigned checked = 0;
    const char *decl = body;
    for (const char *s = body; s < end; s++) {
        if (s[0] == '/' && s[1] == '*') {
            const char *close = strstr(s + 2, "*/");
            assert_non_null(close);
            s = close + 1;
            decl = s + 1;
            continue;
        }
        if (*s != ';')
            continue;
        char name[64], comment[2048], value[128];
        declared(decl, s, name, sizeof name);
        decl = s + 1;
        /* The comment that starts on the declaration's own line. */
        const char *c = s + 1;
        while (*c == ' ')
            c++;
        if (c[0] != '/' || c[1] != '*')
            continue;
        const char *close = strstr(c, "*/");
        flatten(c, close, comment, sizeof comment);
        if (!written_default(comment, value, sizeof value))
            continue;
        const struct field *f = field_named(name);
        if (!f)
            fail_msg("params.%s: the header writes a default this test does not know", name);
        uint64_t says = meaning(f, value), is = value_of(&p, f);
        if (says != is)
            fail_msg("params.%s: the header says the default is %s (%llu), "
                     "regcache_params_init() sets %llu",
                     name, value, (unsigned long long)says, (unsigned long long)is);
        checked++;
    }
    /* The parser found the defaults there are, not none. */
    assert_true(checked >= 10);
    print_message("%u defaults of struct regcache_params checked\n", checked);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(header_defaults_are_the_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
