/* The defaults the documentation writes are the library's: those of the
 * comments of struct regcache_params and struct regcache_device_keys_params
 * in include/regcache.h, and those of the parameter lists of
 * regcache_create(3) and regcache_device_keys_attach(3), against what
 * regcache_params_init() and regcache_device_keys_params_init() fill (the
 * former from the options table, options.c); and the defaults of the
 * ENVIRONMENT list of regcache_create(3) against the options table itself,
 * as core_options_readme checks README's.  Every field's comment in the
 * header states its default, so a new field cannot leave it out.
 * SOURCE_DIR is the source tree. */
#include <ctype.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "access.h"
#include "options.h"
#include "regcache.h"

#define MAX_TEXT (1 << 20)

/* A field of a documented struct: its name, and where it lies. */
struct field {
    const char *name;
    size_t offset, width;
};

#define PARAM(f)                                                                          \
    {                                                                                     \
#f, offsetof(struct regcache_params, f), sizeof(((struct regcache_params *)0)->f) \
    }
static const struct field params_fields[] = {
    PARAM(size),          PARAM(pd),          PARAM(access),
    PARAM(method),        PARAM(validation),  PARAM(alignment),
    PARAM(max_bytes),     PARAM(max_entries), PARAM(whole_allocation),
    PARAM(host_memory),   PARAM(backend),     PARAM(whole_allocation_max),
    PARAM(rails),         PARAM(pds),         PARAM(eager_min_bytes),
    PARAM(eager_rails),   PARAM(workers),     PARAM(prefetch_queue),
    PARAM(host_monitor),  PARAM(priv_size),   PARAM(on_register),
    PARAM(on_deregister), PARAM(on_leave),    PARAM(callback_arg),
    PARAM(name),          PARAM(host_merge),  PARAM(device_keys),
    { NULL, 0, 0 },
};

#define KEYS(f)                                                  \
    {                                                            \
#f, offsetof(struct regcache_device_keys_params, f),     \
            sizeof(((struct regcache_device_keys_params *)0)->f) \
    }
static const struct field keys_fields[] = {
    KEYS(size),       KEYS(page_slots), KEYS(records),          KEYS(max_probe),
    KEYS(hold_slots), KEYS(ring_slots), KEYS(drain_timeout_ns), KEYS(poll_ns),
    KEYS(lkey),       KEYS(lkey_arg),   { NULL, 0, 0 },
};

/* The names a default may be written with. */
static const struct {
    const char *name;
    uint64_t value;
} constants[] = {
    { "NULL", 0 },
    { "REGCACHE_METHOD_AUTO", REGCACHE_METHOD_AUTO },
    { "REGCACHE_VALIDATE_AUTO", REGCACHE_VALIDATE_AUTO },
    { "REGCACHE_HOST_MONITOR_AUTO", REGCACHE_HOST_MONITOR_AUTO },
    { "REGCACHE_HOST_MERGE_AUTO", REGCACHE_HOST_MERGE_AUTO },
    { "IBV_ACCESS_LOCAL_WRITE", RC_IBV_LOCAL_WRITE },
    { "IBV_ACCESS_REMOTE_WRITE", RC_IBV_REMOTE_WRITE },
    { "IBV_ACCESS_REMOTE_READ", RC_IBV_REMOTE_READ },
};

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    char *text = malloc(MAX_TEXT);
    assert_non_null(text);
    size_t n = fread(text, 1, MAX_TEXT - 1, f);
    fclose(f);
    text[n] = 0;
    return text;
}

static const struct field *field_named(const struct field *fields, const char *name)
{
    for (; fields->name; fields++)
        if (!strcmp(fields->name, name))
            return fields;
    return NULL;
}

static uint64_t field_value(const void *base, const struct field *f)
{
    uint64_t v = 0;
    if (f->width == sizeof(uint64_t))
        memcpy(&v, (const char *)base + f->offset, sizeof(v));
    else if (f->width == sizeof(uint32_t)) {
        uint32_t u;
        memcpy(&u, (const char *)base + f->offset, sizeof(u));
        v = u;
    } else
        fail_msg("field %s of width %zu", f->name, f->width);
    return v;
}

/* One term of a default: a number (2^N, a unit of time after it: s, ms, us,
 * ns, counted in ns) or a constant's name.  *p moves past it. */
static bool term(const char **p, uint64_t *out)
{
    const char *s = *p;
    while (*s == ' ' || *s == '*')
        s++;
    if (isdigit((unsigned char)*s)) {
        char *end;
        uint64_t v = strtoull(s, &end, 10);
        if (*end == '^') {
            uint64_t e = strtoull(end + 1, &end, 10);
            v = (uint64_t)1 << e;
        }
        static const struct {
            const char *unit;
            uint64_t ns;
        } units[] = { { " s", 1000000000 }, { " ms", 1000000 }, { " us", 1000 }, { " ns", 1 } };
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t n = strlen(units[i].unit);
            if (!strncmp(end, units[i].unit, n) && !isalnum((unsigned char)end[n])) {
                v *= units[i].ns;
                end += n;
                break;
            }
        }
        *out = v;
        *p = end;
        return true;
    }
    for (size_t i = 0; i < sizeof(constants) / sizeof(constants[0]); i++) {
        size_t n = strlen(constants[i].name);
        if (!strncmp(s, constants[i].name, n) && !isalnum((unsigned char)s[n]) && s[n] != '_') {
            *out = constants[i].value;
            *p = s + n;
            return true;
        }
    }
    return false;
}

/* A default as written: terms joined by '|'. */
static bool value_of(const char *s, uint64_t *out)
{
    uint64_t v = 0, t;
    for (;;) {
        if (!term(&s, &t))
            return false;
        v |= t;
        while (*s == ' ' || *s == '*')
            s++;
        if (*s != '|')
            break;
        s++;
    }
    *out = v;
    return true;
}

/* The text after "default " in s (case aside), or that before " (the
 * default)"; NULL when s states no default. */
static const char *stated_default(const char *s, char *buf, size_t size)
{
    for (const char *p = s; *p; p++)
        if (!strncasecmp(p, "default ", 8) && (p == s || !isalnum((unsigned char)p[-1])))
            return p + 8;
    const char *the = strstr(s, " (the default)");
    if (!the)
        return NULL;
    const char *start = the;
    while (start > s && start[-1] != ' ' && start[-1] != ':')
        start--;
    snprintf(buf, size, "%.*s", (int)(the - start), start);
    return buf;
}

/* Collapse a comment's text: its marks and line breaks made spaces, and
 * runs of spaces one. */
static void flatten(char *s)
{
    char *w = s;
    for (const char *r = s; *r;) {
        if ((r[0] == '/' && r[1] == '*') || (r[0] == '*' && r[1] == '/')) {
            r += 2;
            *w++ = ' ';
        } else if (*r == '\n') {
            r++;
            while (*r == ' ' || *r == '\t')
                r++;
            if (r[0] == '*' && r[1] != '/')
                r++; /* the mark that starts a comment's line */
            *w++ = ' ';
        } else
            *w++ = *r++;
    }
    *w = 0;
    w = s;
    for (const char *r = s; *r; r++)
        if (*r != ' ' || (w > s && w[-1] != ' '))
            *w++ = *r;
    while (w > s && w[-1] == ' ')
        w--;
    *w = 0;
}

/* The members of struct `name` in the header and each one's comments: the
 * comment after its ';' on the same line, and a comment on lines of its own
 * before it.  Calls check(member, comments) for each. */
static void header_members(const char *header, const char *name,
                           void (*check)(const char *member, char *comments, void *arg), void *arg)
{
    char open[128];
    snprintf(open, sizeof open, "struct %s {\n", name);
    const char *p = strstr(header, open);
    if (!p)
        fail_msg("no %s in the header", open);
    p += strlen(open);
    const char *end = strstr(p, "\n};");
    assert_non_null(end);
    end++; /* the last member's line ends there too */
    static char before[4096], member[128], after[4096];
    before[0] = member[0] = 0;
    bool line_has_decl = false;
    while (p < end) {
        if (p[0] == '/' && p[1] == '*') {
            const char *close = strstr(p, "*/") + 2;
            char *to = line_has_decl && member[0] ? after : before;
            size_t used = strlen(to);
            snprintf(to + used, 4096 - used, " %.*s", (int)(close - p), p);
            p = close;
            continue;
        }
        if (*p == '\n') {
            if (line_has_decl && member[0]) {
                char all[8192];
                snprintf(all, sizeof all, "%s %s", before, after);
                flatten(all);
                check(member, all, arg);
                before[0] = after[0] = member[0] = 0;
            }
            line_has_decl = false;
            p++;
            continue;
        }
        if (isspace((unsigned char)*p)) {
            p++;
            continue;
        }
        /* A declaration: up to its ';', the member's name in it. */
        const char *semi = strchr(p, ';');
        assert_non_null(semi);
        const char *ptr = strstr(p, "(*");
        const char *n0, *n1;
        if (ptr && ptr < semi) {
            n0 = ptr + 2;
            n1 = n0;
            while (isalnum((unsigned char)*n1) || *n1 == '_')
                n1++;
        } else {
            n1 = semi;
            while (n1[-1] == ']' || n1[-1] == ' ')
                n1 = n1[-1] == ']' ? strchr(p, '[') : n1 - 1;
            n0 = n1;
            while (isalnum((unsigned char)n0[-1]) || n0[-1] == '_')
                n0--;
        }
        snprintf(member, sizeof member, "%.*s", (int)(n1 - n0), n0);
        line_has_decl = true;
        /* The rest of the line after the ';': the member's comment. */
        p = semi + 1;
        const char *nl = strchr(p, '\n');
        if (nl && nl < end) {
            /* Its comment may run on over lines: keep reading it. */
            const char *q = p;
            while (q < nl && isspace((unsigned char)*q))
                q++;
            if (q[0] == '/' && q[1] == '*') {
                const char *close = strstr(q, "*/") + 2;
                size_t used = strlen(after);
                snprintf(after + used, sizeof after - used, " %.*s", (int)(close - q), q);
                p = close;
            }
        }
    }
}

struct compare {
    const char *what;
    const struct field *fields;
    const void *defaults;
    unsigned seen;
};

static void compare_default(const char *member, char *comments, void *arg)
{
    struct compare *c = arg;
    const struct field *f = field_named(c->fields, member);
    if (!f)
        fail_msg("%s: member %s is not in this test's list of fields: add it", c->what, member);
    c->seen++;
    if (!strcmp(member, "size"))
        return;
    char buf[256];
    const char *text = stated_default(comments, buf, sizeof buf);
    if (!text)
        fail_msg("%s: the comment of %s states no default (\"%s\")", c->what, member, comments);
    uint64_t written;
    if (!value_of(text, &written))
        fail_msg("%s: %s's default \"%.60s\" is no value this test reads", c->what, member, text);
    uint64_t actual = field_value(c->defaults, f);
    if (written != actual)
        fail_msg("%s: %s's default is written %" PRIu64 " (\"%.60s\"), the library's is %" PRIu64,
                 c->what, member, written, text, actual);
}

static size_t count(const struct field *f)
{
    size_t n = 0;
    while (f[n].name)
        n++;
    return n;
}

static void header_defaults_are_the_librarys(void **state)
{
    (void)state;
    char *header = slurp(SOURCE_DIR "/include/regcache.h");
    struct regcache_params p;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    struct compare c = { "regcache.h, struct regcache_params", params_fields, &p, 0 };
    header_members(header, "regcache_params", compare_default, &c);
    assert_int_equal(c.seen, count(params_fields));

    struct regcache_device_keys_params k;
    assert_int_equal(regcache_device_keys_params_init(&k), REGCACHE_OK);
    struct compare d = { "regcache.h, struct regcache_device_keys_params", keys_fields, &k, 0 };
    header_members(header, "regcache_device_keys_params", compare_default, &d);
    assert_int_equal(d.seen, count(keys_fields));
    free(header);
}

/* The lines of a page's section, from the line after `heading` to the
 * next heading; *n says how many.  The text is the caller's to free. */
static char **section_lines(const char *page, const char *heading, size_t *n, char **text)
{
    *text = slurp(page);
    char *p = strstr(*text, heading);
    if (!p)
        fail_msg("%s has no \"%s\"", page, heading + 1);
    p += strlen(heading);
    static char *lines[4096];
    *n = 0;
    while (*p && *p != '#' && *n < 4096) {
        lines[(*n)++] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = 0;
        p = nl + 1;
    }
    return lines;
}

/* A definition-list entry at line i: its term is line i, its definition
 * the lines from the next one (which starts with ':') to a blank line,
 * joined into def.  false where line i begins no entry. */
static bool entry_at(char **lines, size_t n, size_t i, char *def, size_t size)
{
    if (!lines[i][0] || lines[i][0] == ':' || i + 1 >= n || lines[i + 1][0] != ':')
        return false;
    def[0] = 0;
    for (size_t j = i + 1; j < n && lines[j][0]; j++) {
        size_t used = strlen(def);
        snprintf(def + used, size - used, " %s", j == i + 1 ? lines[j] + 1 : lines[j]);
    }
    return true;
}

/* The entries of a page's parameter list whose term is one italic field
 * name: each default they state against the library's. */
static void page_fields(const char *page, const char *heading, struct compare *c)
{
    char *text;
    size_t n;
    char **lines = section_lines(page, heading, &n, &text);
    unsigned entries = 0;
    for (size_t i = 0; i < n; i++) {
        static char def[8192], term[128], buf[256];
        if (!entry_at(lines, n, i, def, sizeof def) || lines[i][0] != '*')
            continue;
        char *close = strchr(lines[i] + 1, '*');
        if (!close || close[1]) /* "*pd*, *pds*" names two */
            continue;
        snprintf(term, sizeof term, "%.*s", (int)(close - lines[i] - 1), lines[i] + 1);
        const char *d = stated_default(def, buf, sizeof buf);
        if (!d || !strcmp(term, "size"))
            continue;
        const struct field *f = field_named(c->fields, term);
        if (!f)
            fail_msg("%s: a field %s that the struct does not have", page, term);
        uint64_t written;
        if (!value_of(d, &written))
            fail_msg("%s: %s's default \"%.60s\" is no value this test reads", page, term, d);
        uint64_t actual = field_value(c->defaults, f);
        if (written != actual)
            fail_msg("%s: %s's default is written %" PRIu64
                     " (\"%.60s\"), the library's is %" PRIu64,
                     page, term, written, d, actual);
        entries++;
    }
    c->seen = entries;
    free(text);
}

static void man_page_defaults_are_the_librarys(void **state)
{
    (void)state;
    struct regcache_params p;
    regcache_params_init(&p);
    struct compare c = { "regcache_create(3)", params_fields, &p, 0 };
    page_fields(SOURCE_DIR "/docs/man/regcache_create.3.md", "\n## Parameters\n", &c);
    /* Every field with a default of its own, but the transport's (a
     * sentence of their own) and those without one (pd, pds). */
    assert_true(c.seen >= count(params_fields) - 9);

    struct regcache_device_keys_params k;
    regcache_device_keys_params_init(&k);
    struct compare d = { "regcache_device_keys_attach(3)", keys_fields, &k, 0 };
    page_fields(SOURCE_DIR "/docs/man/regcache_device_keys_attach.3.md", "\n## Parameters\n", &d);
    assert_true(d.seen >= count(keys_fields) - 3);
}

/* "**REGCACHE_X** (...default Y)": each variable of the options table once,
 * with the default the table shows. */
static void environment_defaults_are_the_tables(void **state)
{
    (void)state;
    char *text;
    size_t n, rows = rc_option_count(), found = 0;
    char **lines =
        section_lines(SOURCE_DIR "/docs/man/regcache_create.3.md", "\n# ENVIRONMENT\n", &n, &text);
    for (size_t i = 0; i < n; i++) {
        static char def[8192];
        if (!entry_at(lines, n, i, def, sizeof def))
            continue;
        char *line = lines[i], *close = strstr(line + 2, "**");
        char *shown = strstr(line, "default "), *end = strrchr(line, ')');
        if (strncmp(line, "**REGCACHE_", 11) || !close || !shown || !end || end < shown)
            fail_msg("regcache_create(3): \"%s\" is not **NAME** (...default VALUE)", line);
        *close = 0;
        *end = 0;
        shown += 8;
        const char *name = line + 2, *row_name = NULL, *row_shown = NULL, *does = NULL;
        size_t r = 0;
        for (; r < rows; r++) {
            rc_option_describe(r, &row_name, &row_shown, &does);
            if (!strcmp(row_name, name))
                break;
        }
        if (r == rows)
            fail_msg("regcache_create(3) lists %s, which the options table does not have", name);
        if (strcmp(row_shown, shown))
            fail_msg("%s: regcache_create(3) says the default is \"%s\", the options table \"%s\"",
                     name, shown, row_shown);
        found++;
    }
    if (found != rows)
        fail_msg("regcache_create(3) lists %zu variables, the options table %zu", found, rows);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(header_defaults_are_the_librarys),
        cmocka_unit_test(man_page_defaults_are_the_librarys),
        cmocka_unit_test(environment_defaults_are_the_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
