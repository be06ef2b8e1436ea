#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "last_error.h"
#include "options.h"

#define DEFAULT_ACCESS (1 | 2 | 4) /* IBV_ACCESS_LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ */

int regcache_params_init(struct regcache_params *p)
{
    if (!p)
        return REGCACHE_ERR_INVALID;
    memset(p, 0, sizeof(*p));
    p->size = sizeof(*p);
    p->access = DEFAULT_ACCESS;
    p->method = REGCACHE_METHOD_AUTO;
    p->validation = REGCACHE_VALIDATE_AUTO;
    p->alignment = 65536;
    p->whole_allocation = 1;
    return REGCACHE_OK;
}

/* Sizes accept K, M, G suffixes (powers of 1024) as in "REGCACHE_MAX_BYTES=8G". */
static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *s == '-')
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end || (shift && v > (SIZE_MAX >> shift)))
        return -1;
    *out = (size_t)(v << shift);
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"1", "yes", "on", "true"};
    static const char *const no[] = {"0", "no", "off", "false"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) { *out = 1; return 0; }
        if (!strcasecmp(s, no[i])) { *out = 0; return 0; }
    }
    return -1;
}

static int parse_word(const char *s, const char *const *words, int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (!strcasecmp(s, words[i])) {
            *out = i;
            return 0;
        }
    return -1;
}

static int parse_method(const char *s, struct rc_options *o)
{
    static const char *const words[] = {"auto", "dmabuf", "peermem"};
    int v;
    if (parse_word(s, words, 3, &v))
        return -1;
    o->params.method = (enum regcache_method)v;
    return 0;
}

static int parse_validation(const char *s, struct rc_options *o)
{
    static const char *const words[] = {"auto", "tag_check", "hooks"};
    int v;
    if (parse_word(s, words, 3, &v))
        return -1;
    o->params.validation = (enum regcache_validation)v;
    return 0;
}

static int parse_alignment(const char *s, struct rc_options *o) { return parse_size(s, &o->params.alignment); }
static int parse_max_bytes(const char *s, struct rc_options *o) { return parse_size(s, &o->params.max_bytes); }
static int parse_max_entries(const char *s, struct rc_options *o) { return parse_size(s, &o->params.max_entries); }
static int parse_whole(const char *s, struct rc_options *o) { return parse_bool(s, &o->params.whole_allocation); }
static int parse_host(const char *s, struct rc_options *o) { return parse_bool(s, &o->params.host_memory); }

static int parse_flag(const char *s, bool *out)
{
    int v;
    if (parse_bool(s, &v))
        return -1;
    *out = v;
    return 0;
}

static int parse_stats(const char *s, struct rc_options *o) { return parse_flag(s, &o->stats_dump); }
static int parse_hooks(const char *s, struct rc_options *o) { return parse_flag(s, &o->intercept); }

/* The one table of environment overrides; README lists the same. */
static const struct {
    const char *name;
    int (*parse)(const char *value, struct rc_options *o);
    const char *accepts;
} env_options[] = {
    {"REGCACHE_METHOD", parse_method, "auto, dmabuf or peermem"},
    {"REGCACHE_VALIDATION", parse_validation, "auto, tag_check or hooks"},
    {"REGCACHE_ALIGNMENT", parse_alignment, "a power of two >= 4096"},
    {"REGCACHE_MAX_BYTES", parse_max_bytes, "a size such as 512M"},
    {"REGCACHE_MAX_ENTRIES", parse_max_entries, "a count"},
    {"REGCACHE_WHOLE_ALLOCATION", parse_whole, "0 or 1"},
    {"REGCACHE_HOST_MEMORY", parse_host, "0 or 1"},
    {"REGCACHE_STATS", parse_stats, "0 or 1"},
    {"REGCACHE_HOOKS", parse_hooks, "on or off"},
};

static int check(const struct regcache_params *p)
{
    if (p->alignment < 4096 || (p->alignment & (p->alignment - 1))) {
        rc_set_error("alignment %zu is not a power of two >= 4096", p->alignment);
        return REGCACHE_ERR_INVALID;
    }
    if ((unsigned)p->method > REGCACHE_METHOD_PEERMEM) {
        rc_set_error("method %d is not a regcache_method", (int)p->method);
        return REGCACHE_ERR_INVALID;
    }
    if ((unsigned)p->validation > REGCACHE_VALIDATE_HOOKS) {
        rc_set_error("validation %d is not a regcache_validation", (int)p->validation);
        return REGCACHE_ERR_INVALID;
    }
    if (p->backend && (!p->backend->reg || !p->backend->dereg)) {
        rc_set_error("custom backend needs both reg and dereg");
        return REGCACHE_ERR_INVALID;
    }
    if (!p->backend && !p->pd) {
        rc_set_error("the built-in verbs backend needs params.pd");
        return REGCACHE_ERR_INVALID;
    }
    return REGCACHE_OK;
}

int rc_options_resolve(const struct regcache_params *in, struct rc_options *out)
{
    /* Only one layout exists so far; a larger size comes from a newer
     * header whose fields this library cannot honour. */
    if (in->size < offsetof(struct regcache_params, backend) + sizeof(in->backend) ||
        in->size > sizeof(struct regcache_params)) {
        rc_set_error("params.size %zu is not sizeof(struct regcache_params) = %zu: "
                     "call regcache_params_init()", in->size, sizeof(struct regcache_params));
        return REGCACHE_ERR_INVALID;
    }
    regcache_params_init(&out->params);
    memcpy(&out->params, in, in->size);
    out->params.size = sizeof(out->params);
    out->stats_dump = false;
    out->intercept = true;
    out->validation_reason[0] = '\0';

    for (size_t i = 0; i < sizeof(env_options) / sizeof(env_options[0]); i++) {
        const char *v = getenv(env_options[i].name);
        if (v && env_options[i].parse(v, out)) {
            rc_set_error("%s=\"%s\": expected %s", env_options[i].name, v,
                         env_options[i].accepts);
            return REGCACHE_ERR_INVALID;
        }
    }
    return check(&out->params);
}
