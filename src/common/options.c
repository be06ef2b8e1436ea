/* Parameters: defaults, REGCACHE_* environment overrides, validation.
 *
 * One table (env_options) lists every option: its variable, the field it
 * overrides, what it accepts, its default and what it does.
 * regcache_params_init() takes its defaults from it, and the process-wide
 * variables are read through it (rc_option_ledger() and the like); README's table says the
 * same.  Numbers are
 * strict decimal (no sign, no spaces, no 0x or leading-zero octal) with an
 * optional K, M, G or T suffix (powers of 1024).  A bad value fails
 * regcache_create() with a message that names the variable; a bad field
 * set in code is named as params.<field>. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "access.h"
#include "bounds.h"
#include "last_error.h"
#include "options.h"
#include "symver.h"

#define DEFAULT_ACCESS (RC_IBV_LOCAL_WRITE | RC_IBV_REMOTE_WRITE | RC_IBV_REMOTE_READ)
/* Larger alignments buy nothing (registrations are 64 KiB BAR pages at
 * most) and would let rounded byte counts wrap. */
#define MAX_ALIGNMENT ((size_t)1 << 30)

bool rc_parse_size(const char *s, size_t *out)
{
    if (!isdigit((unsigned char)s[0]) || (s[0] == '0' && isdigit((unsigned char)s[1])))
        return false;
    uint64_t v = 0;
    for (; isdigit((unsigned char)*s); s++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    static const char suffixes[] = "KMGT";
    const char *suffix = *s ? strchr(suffixes, toupper((unsigned char)*s)) : NULL;
    unsigned shift = suffix ? 10u * (unsigned)(suffix - suffixes + 1) : 0;
    if (suffix)
        s++;
    if (*s || v > (SIZE_MAX >> shift))
        return false;
    *out = (size_t)(v << shift);
    return true;
}

static bool parse_word(const char *s, const char *const *words, int *out)
{
    for (int i = 0; words[i]; i++)
        if (!strcasecmp(s, words[i])) {
            *out = i;
            return true;
        }
    return false;
}

static const char *const bool_words[] = {
    "0", "1", "off", "on", "no", "yes", "false", "true", NULL
};

bool rc_parse_bool(const char *s, int *out)
{
    int word;
    if (!parse_word(s, bool_words, &word))
        return false;
    *out = word & 1; /* the words alternate false, true */
    return true;
}
static const char *const method_words[] = { "auto", "dmabuf", "peermem", NULL };
/* In the order of enum regcache_validation. */
static const char *const validation_words[] = { "auto", "tag_check", "hooks", "notify", NULL };
/* In the order of enum rc_dmabuf_mapping and enum rc_data_direct. */
static const char *const mapping_words[] = { "auto", "pcie", "default", NULL };
static const char *const data_direct_words[] = { "auto", "on", "off", NULL };
/* In the order of enum regcache_host_monitor. */
static const char *const host_monitor_words[] = { "auto", "off", "libc", "uffd", "ucm", NULL };
/* In the order of enum regcache_host_merge. */
static const char *const host_merge_words[] = { "auto", "off", "same_access", "all", NULL };

/* NAME: a ledger namespace; CACHE_NAME: what params.name takes. */
enum kind { SIZE, BOOL, WORD, NAME, CACHE_NAME };

/* The rows, named: the process-wide ones (no field, width 0) are read where
 * they act (the BAR1 reading, the ledger) through the accessors below, and
 * checked at regcache_create() too, so that a bad value fails it like any
 * other. */
enum row {
    OPT_METHOD,
    OPT_VALIDATION,
    OPT_ALIGNMENT,
    OPT_MAX_BYTES,
    OPT_MAX_ENTRIES,
    OPT_WHOLE_ALLOCATION,
    OPT_WHOLE_ALLOCATION_MAX,
    OPT_HOST_MEMORY,
    OPT_HOST_MONITOR,
    OPT_HOST_MERGE,
    OPT_DMABUF_MAPPING,
    OPT_DATA_DIRECT,
    OPT_MAX_MR_SIZE,
    OPT_STATS,
    OPT_NAME,
    OPT_HOOKS,
    OPT_EAGER_MIN_BYTES,
    OPT_EAGER_RAILS,
    OPT_WORKERS,
    OPT_PREFETCH_QUEUE,
    OPT_LEDGER,
    OPT_LEDGER_NAMESPACE,
    OPT_BAR1_BYTES,
    ROWS
};

#define FIELD(f) offsetof(struct rc_options, f), sizeof(((struct rc_options *)0)->f)
#define PROCESS_WIDE 0, 0

/* Every option: its variable, the field it overrides, what it accepts, its
 * default (the value, and as README's table writes it) and what it does.
 * README's environment table lists the same rows with the same defaults
 * (the test core_options_readme compares them). */
static const struct env_option {
    const char *name;
    enum kind kind;
    size_t offset, width;
    const char *const *words;
    const char *accepts;
    uint64_t value;    /* the default of a field */
    const char *shown; /* the default as README's table shows it */
    const char *does;
} env_options[ROWS] = {
    [OPT_METHOD] = { "REGCACHE_METHOD", WORD, FIELD(params.method), method_words,
                     "auto, dmabuf or peermem", REGCACHE_METHOD_AUTO, "auto",
                     "how GPU memory is registered" },
    [OPT_VALIDATION] = { "REGCACHE_VALIDATION", WORD, FIELD(params.validation), validation_words,
                         "auto, tag_check, hooks or notify", REGCACHE_VALIDATE_AUTO, "auto",
                         "how the cache learns that memory was freed" },
    [OPT_ALIGNMENT] = { "REGCACHE_ALIGNMENT", SIZE, FIELD(params.alignment), NULL,
                        "a power of two from 4K to 1G, e.g. 64K", 65536, "64K",
                        "registrations are rounded out to this" },
    [OPT_MAX_BYTES] = { "REGCACHE_MAX_BYTES", SIZE, FIELD(params.max_bytes), NULL,
                        "a size such as 512M", 0, "0",
                        "bytes registered per device; 0: the shared BAR1 budget (GPU), none "
                        "(host)" },
    [OPT_MAX_ENTRIES] = { "REGCACHE_MAX_ENTRIES", SIZE, FIELD(params.max_entries), NULL, "a count",
                          0, "0", "entries per device; 0: none" },
    [OPT_WHOLE_ALLOCATION] = { "REGCACHE_WHOLE_ALLOCATION", BOOL, FIELD(params.whole_allocation),
                               bool_words, "0 or 1 (off/on, no/yes)", 1, "1",
                               "register the whole allocation a request lies in" },
    [OPT_WHOLE_ALLOCATION_MAX] = { "REGCACHE_WHOLE_ALLOCATION_MAX", SIZE,
                                   FIELD(params.whole_allocation_max), NULL, "a size such as 256M",
                                   0, "0",
                                   "the largest allocation registered whole; 0: a quarter of the "
                                   "device's budget" },
    [OPT_HOST_MEMORY] = { "REGCACHE_HOST_MEMORY", BOOL, FIELD(params.host_memory), bool_words,
                          "0 or 1", 0, "0", "cache pageable host memory too" },
    [OPT_HOST_MONITOR] = { "REGCACHE_HOST_MONITOR", WORD, FIELD(params.host_monitor),
                           host_monitor_words, "auto, off, libc, uffd or ucm",
                           REGCACHE_HOST_MONITOR_AUTO, "auto",
                           "watch cached pageable host memory for unmapping; off: invalidate it "
                           "yourself" },
    [OPT_HOST_MERGE] = { "REGCACHE_HOST_MERGE", WORD, FIELD(params.host_merge), host_merge_words,
                         "auto, off, same_access or all", REGCACHE_HOST_MERGE_AUTO, "auto",
                         "which overlapping pageable host entries a miss merges; auto: off for a "
                         "cache with "
                         "on_register or on_leave, else all" },
    [OPT_DMABUF_MAPPING] = { "REGCACHE_DMABUF_MAPPING", WORD, FIELD(dmabuf_mapping), mapping_words,
                             "auto, pcie or default", 0, "auto",
                             "the dmabuf mapping asked of the driver" },
    [OPT_DATA_DIRECT] = { "REGCACHE_DATA_DIRECT", WORD, FIELD(data_direct), data_direct_words,
                          "auto, on or off", 0, "auto", "data-direct registrations" },
    [OPT_MAX_MR_SIZE] = { "REGCACHE_MAX_MR_SIZE", SIZE, FIELD(max_mr_size), NULL,
                          "a size such as 4G", 0, "the devices'",
                          "the longest registration; 0: as the NICs say" },
    [OPT_STATS] = { "REGCACHE_STATS", BOOL, FIELD(stats_dump), bool_words, "0 or 1", 0, "0",
                    "print the statistics at regcache_destroy()" },
    [OPT_NAME] = { "REGCACHE_NAME", CACHE_NAME, PROCESS_WIDE, NULL,
                   "1-63 of letters, digits and _.:@+-/", 0, "cache<N>",
                   "the name of a cache whose params.name is NULL" },
    [OPT_HOOKS] = { "REGCACHE_HOOKS", BOOL, FIELD(intercept), bool_words, "on or off", 1, "on",
                    "may patch libcuda in-process" },
    [OPT_EAGER_MIN_BYTES] = { "REGCACHE_EAGER_MIN_BYTES", SIZE, FIELD(params.eager_min_bytes), NULL,
                              "a size such as 1M (0: off)", 0, "0",
                              "register allocations of at least this size in the background as "
                              "they are made; 0: off" },
    [OPT_EAGER_RAILS] = { "REGCACHE_EAGER_RAILS", SIZE, FIELD(params.eager_rails), NULL,
                          "a bit mask of rails such as 3", 1, "1",
                          "the rails eager registration registers on" },
    [OPT_WORKERS] = { "REGCACHE_WORKERS", SIZE, FIELD(params.workers), NULL,
                      "a count up to 256 (0: one a rail)", 0, "0",
                      "background registration threads; 0: one a rail" },
    [OPT_PREFETCH_QUEUE] = { "REGCACHE_PREFETCH_QUEUE", SIZE, FIELD(params.prefetch_queue), NULL,
                             "a count from 1 to 1M", 1024, "1024",
                             "ranges queued or being registered in the background at most" },
    [OPT_LEDGER] = { "REGCACHE_LEDGER", BOOL, PROCESS_WIDE, bool_words, "on or off", 1, "on",
                     "share each GPU's BAR1 budget with every process" },
    [OPT_LEDGER_NAMESPACE] = { "REGCACHE_LEDGER_NAMESPACE", NAME, PROCESS_WIDE, NULL,
                               "1-32 of [A-Za-z0-9_]", 0, "none", "a separate set of ledgers" },
    [OPT_BAR1_BYTES] = { "REGCACHE_BAR1_BYTES", SIZE, PROCESS_WIDE, NULL, "a size such as 256M", 0,
                         "NVML, else the GPU's memory",
                         "assume an empty BAR1 of this size on every GPU" },
};

/* Store v into the field, whatever its width (size_t, int or enum, bool). */
static void store(void *base, const struct env_option *e, uint64_t v)
{
    size_t s = (size_t)v;
    int i = (int)v;
    bool b = v != 0;
    const void *from = e->width == sizeof(s)   ? (const void *)&s
                       : e->width == sizeof(i) ? (const void *)&i
                                               : (const void *)&b;
    if (e->width)
        memcpy((char *)base + e->offset, from, e->width);
}

/* The params come first in rc_options: a params field's offset there is
 * its offset in the params. */
_Static_assert(offsetof(struct rc_options, params) == 0, "params first");

/* The size of the params layouts of 0.2 and later, before the fields
 * added since: a program built against one keeps working, with those
 * fields' defaults.  0.2's layout ends before the fields added in 0.3. */
#define PARAMS_0_2 offsetof(struct regcache_params, eager_min_bytes)
/* And of 0.3, before the fields added in 0.4. */
#define PARAMS_0_3 offsetof(struct regcache_params, host_merge)
/* 0.1's, which ended at backend, is below the floor: a 0.1 program's
 * unversioned regcache_get_stats() and regcache_params_init() reach the
 * 0.2 entry points, which write past its shorter structs, so it is told to
 * rebuild instead of half served. */
#define PARAMS_0_1 (offsetof(struct regcache_params, backend) + sizeof(void *))

/* The defaults in the first `size` bytes of *p: a program's struct of
 * that layout. */
static int params_init(struct regcache_params *p, size_t size)
{
    if (!p)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_params_init: params is NULL");
    memset(p, 0, size);
    p->size = size;
    p->access = DEFAULT_ACCESS;
    p->rails = 1;
    for (size_t i = 0; i < ROWS; i++)
        if (env_options[i].width && env_options[i].offset + env_options[i].width <= size)
            store(p, &env_options[i], env_options[i].value);
    return REGCACHE_OK;
}

/* Programs built against 0.4 and later. */
RC_SYMVER(rc_params_init, regcache_params_init, "@@REGCACHE_0.4");
int rc_params_init(struct regcache_params *p)
{
    return params_init(p, sizeof(*p));
}

/* Programs linked before 0.4 (the function was in the 0.2 node alone):
 * those of 0.3 pass the 0.3 struct, which must not be written past. */
RC_SYMVER(rc_params_init_0_3, regcache_params_init, "@REGCACHE_0.2");
int rc_params_init_0_3(struct regcache_params *p)
{
    return params_init(p, PARAMS_0_3);
}

/* The defaults of the fields beyond the params. */
static void defaults_beyond_params(struct rc_options *o)
{
    for (size_t i = 0; i < ROWS; i++)
        if (env_options[i].width && env_options[i].offset >= sizeof(o->params))
            store(o, &env_options[i], env_options[i].value);
}

size_t rc_option_count(void)
{
    return ROWS;
}

void rc_option_describe(size_t i, const char **name, const char **shown, const char **does)
{
    *name = env_options[i].name;
    *shown = env_options[i].shown;
    *does = env_options[i].does;
}

/* Names go into tables, JSON and Prometheus labels unquoted by the reader's
 * eye: letters, digits and a few separators, no blanks. */
static bool name_ok(const char *name)
{
    size_t len = strlen(name);
    return len > 0 && len < REGCACHE_NAME_MAX &&
           strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:@+-/") ==
               len;
}

/* A ledger namespace goes into the segments' names, between the separators
 * '.' and '-' that no namespace holds: no namespace's prefix is another's
 * start. */
static bool namespace_ok(const char *ns)
{
    size_t len = strlen(ns);
    return len > 0 && len <= 32 &&
           strspn(ns, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == len;
}

/* The value of `text` for row e into *v; names are only checked. */
static bool parse(const struct env_option *e, const char *text, uint64_t *v)
{
    size_t size;
    int word;
    if (e->kind == NAME)
        return !*text || namespace_ok(text); /* empty: none */
    if (e->kind == CACHE_NAME)
        return name_ok(text);
    if (e->kind == SIZE) {
        if (!rc_parse_size(text, &size))
            return false;
        *v = size;
        return true;
    }
    if (!parse_word(text, e->words, &word))
        return false;
    /* bool_words alternate false/true. */
    *v = e->kind == BOOL ? (uint64_t)(word & 1) : (uint64_t)word;
    return true;
}

static bool apply(const struct env_option *e, const char *text, struct rc_options *o)
{
    uint64_t v = e->value;
    if (!parse(e, text, &v))
        return false;
    store(o, e, v);
    return true;
}

/* A process-wide row's value (its default while the variable is unset) and
 * the variable's text (NULL while unset or empty); false with why[n] (when
 * given) saying what it expects when the text is none of its values. */
static bool process_wide(enum row r, uint64_t *v, const char **text, char *why, size_t n)
{
    const struct env_option *e = &env_options[r];
    const char *t = getenv(e->name);
    *v = e->value;
    if (text)
        *text = t && *t ? t : NULL;
    if (!t || parse(e, t, v))
        return true;
    if (why)
        snprintf(why, n, "%s=\"%s\": expected %s", e->name, t, e->accepts);
    return false;
}

bool rc_option_ledger(bool *on, char *why, size_t n)
{
    uint64_t v;
    bool ok = process_wide(OPT_LEDGER, &v, NULL, why, n);
    *on = v != 0;
    return ok;
}

bool rc_option_ledger_namespace(const char **ns, char *why, size_t n)
{
    uint64_t v;
    return process_wide(OPT_LEDGER_NAMESPACE, &v, ns, why, n);
}

bool rc_option_bar1_bytes(size_t *bytes, char *why, size_t n)
{
    uint64_t v;
    bool ok = process_wide(OPT_BAR1_BYTES, &v, NULL, why, n);
    *bytes = (size_t)v;
    return ok;
}

_Static_assert(ROWS <= 32, "from_env has a bit for every row");

bool rc_options_set_by_env(const struct rc_options *o, size_t offset, char *out, size_t n)
{
    for (size_t i = 0; i < ROWS; i++)
        if (env_options[i].width && env_options[i].offset == offset && o->from_env >> i & 1) {
            const char *text = getenv(env_options[i].name);
            snprintf(out, n, "%s=%s", env_options[i].name, text ? text : "");
            return true;
        }
    return false;
}

/* The name to blame for a field: the variable when it set the field. */
static const char *source(unsigned from_env, enum row r, const char *field)
{
    return from_env >> r & 1 ? env_options[r].name : field;
}

static int check(const struct rc_options *o, unsigned from_env)
{
    const struct regcache_params *p = &o->params;
    if (p->alignment < 4096 || p->alignment > MAX_ALIGNMENT || (p->alignment & (p->alignment - 1)))
        return rc_fail(REGCACHE_ERR_INVALID, "%s=%zu: expected a power of two from 4096 to %zu",
                       source(from_env, OPT_ALIGNMENT, "params.alignment"), p->alignment,
                       MAX_ALIGNMENT);
    if ((unsigned)p->method > REGCACHE_METHOD_PEERMEM)
        return rc_fail(REGCACHE_ERR_INVALID, "params.method %d is not a regcache_method",
                       (int)p->method);
    if ((unsigned)p->validation > REGCACHE_VALIDATE_NOTIFY)
        return rc_fail(REGCACHE_ERR_INVALID, "params.validation %d is not a regcache_validation",
                       (int)p->validation);
    if ((unsigned)p->host_monitor > REGCACHE_HOST_MONITOR_UCM)
        return rc_fail(REGCACHE_ERR_INVALID,
                       "params.host_monitor %d is not a regcache_host_monitor", p->host_monitor);
    if ((unsigned)p->host_merge > REGCACHE_HOST_MERGE_ALL)
        return rc_fail(REGCACHE_ERR_INVALID, "params.host_merge %d is not a regcache_host_merge",
                       p->host_merge);
    if (p->rails < 1 || p->rails > RC_MAX_RAILS)
        return rc_fail(REGCACHE_ERR_INVALID, "params.rails %zu is outside 1..%d", p->rails,
                       RC_MAX_RAILS);
    if (p->backend && ((!p->backend->reg && !(o->header_minor >= 4 && p->backend->reg_access)) ||
                       !p->backend->dereg))
        return rc_fail(REGCACHE_ERR_INVALID,
                       "the custom backend needs dereg, and reg (or, from 0.4, reg_access)");
    if (p->priv_size > RC_MAX_PRIV)
        return rc_fail(REGCACHE_ERR_INVALID, "params.priv_size %zu is larger than %d", p->priv_size,
                       RC_MAX_PRIV);
    if (p->eager_rails >> p->rails)
        return rc_fail(REGCACHE_ERR_INVALID, "%s=%#x names a rail beyond the cache's %zu",
                       source(from_env, OPT_EAGER_RAILS, "params.eager_rails"), p->eager_rails,
                       p->rails);
    if (p->workers > 256)
        return rc_fail(REGCACHE_ERR_INVALID, "%s=%u: expected 0 to 256",
                       source(from_env, OPT_WORKERS, "params.workers"), p->workers);
    if (p->prefetch_queue < 1 || p->prefetch_queue > ((size_t)1 << 20))
        return rc_fail(REGCACHE_ERR_INVALID, "%s=%zu: expected 1 to 1M",
                       source(from_env, OPT_PREFETCH_QUEUE, "params.prefetch_queue"),
                       p->prefetch_queue);
    if ((unsigned)p->device_keys > 1)
        return rc_fail(REGCACHE_ERR_INVALID, "params.device_keys %d: expected 0 or 1",
                       p->device_keys);
    if (!p->backend && !p->pd && !p->pds)
        return rc_fail(REGCACHE_ERR_INVALID, "the built-in verbs backend needs params.pd");
    return REGCACHE_OK;
}

/* params.name, else REGCACHE_NAME, else "cache<N>" (the process's N-th). */
static int resolve_name(struct rc_options *o)
{
    static atomic_uint created;
    unsigned n = atomic_fetch_add_explicit(&created, 1, memory_order_relaxed) + 1;
    const char *env = getenv(env_options[OPT_NAME].name); /* checked by apply() */
    const char *name = o->params.name ? o->params.name : env;
    if (!name) {
        snprintf(o->name, sizeof o->name, "cache%u", n);
        return REGCACHE_OK;
    }
    if (!name_ok(name))
        return rc_fail(
            REGCACHE_ERR_INVALID, "%s=\"%.80s\": expected 1 to %d of letters, digits and _.:@+-/",
            o->params.name ? "params.name" : "REGCACHE_NAME", name, REGCACHE_NAME_MAX - 1);
    snprintf(o->name, sizeof o->name, "%s", name);
    return REGCACHE_OK;
}

int rc_options_resolve(const struct regcache_params *in, struct rc_options *out)
{
    static const size_t layouts[] = { PARAMS_0_2, PARAMS_0_3, sizeof(struct regcache_params) };
    const unsigned n = sizeof(layouts) / sizeof(layouts[0]);
    unsigned layout = 0;
    while (layout < n && in->size != layouts[layout])
        layout++;
    if (in->size == PARAMS_0_1)
        return rc_fail(REGCACHE_ERR_INVALID,
                       "params.size %zu is the layout of 0.1, which this library no longer "
                       "serves: rebuild the program against this header",
                       in->size);
    if (layout == n)
        return rc_fail(REGCACHE_ERR_INVALID,
                       "params.size %zu is not sizeof(struct regcache_params) = %zu: "
                       "call regcache_params_init()",
                       in->size, sizeof(struct regcache_params));
    rc_params_init(&out->params);
    memcpy(&out->params, in, in->size);
    out->params.size = sizeof(out->params);
    defaults_beyond_params(out);
    out->header_minor = 2 + layout;

    unsigned from_env = 0;
    for (size_t i = 0; i < ROWS; i++) {
        const char *v = getenv(env_options[i].name);
        if (!v)
            continue;
        if (!apply(&env_options[i], v, out))
            return rc_fail(REGCACHE_ERR_INVALID, "%s=\"%s\": expected %s", env_options[i].name, v,
                           env_options[i].accepts);
        from_env |= 1u << i;
    }
    out->from_env = from_env;
    int rc = check(out, from_env);
    out->params.access = rc_access_with_local_write(out->params.access);
    return rc == REGCACHE_OK ? resolve_name(out) : rc;
}
