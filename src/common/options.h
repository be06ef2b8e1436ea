/* Parameters: defaults, REGCACHE_* environment overrides, validation. */
#ifndef RC_OPTIONS_H
#define RC_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "regcache.h"

/* The largest params.priv_size. */
#define RC_MAX_PRIV 4096

struct rc_options {
    struct regcache_params params; /* caller's params with overrides */
    bool stats_dump;               /* REGCACHE_STATS: print stats at destroy */
    bool intercept;                /* REGCACHE_HOOKS: validation AUTO may
                                      patch libcuda in-process (default on) */
    size_t max_mr_size;            /* REGCACHE_MAX_MR_SIZE: the longest
                                      registration; 0 = as the NICs say */
    int dmabuf_mapping;            /* REGCACHE_DMABUF_MAPPING: 0 auto, 1 pcie,
                                      2 default (enum rc_dmabuf_mapping) */
    int data_direct;               /* REGCACHE_DATA_DIRECT: 0 auto, 1 on, 2 off
                                      (enum rc_data_direct) */
    char name[REGCACHE_NAME_MAX];  /* params.name, REGCACHE_NAME or "cache<N>" */
    /* The minor version of the header the caller was built against, as
     * params.size tells it (2 to 4): what it knows of the structs it hands
     * over (struct regcache_backend's reg_access from 4 on) and of the
     * values it is told (REGCACHE_REASON_MERGED from 4 on). */
    unsigned header_minor;
    char validation_reason[512]; /* why validation is what it is; set by
                                    regcache_create */
    unsigned from_env;           /* the table's rows whose variable was set */
};

/* Copy *in (honouring in->size), apply the environment, check the result.
 * REGCACHE_ERR_INVALID with rc_set_error() naming the field or variable. */
int rc_options_resolve(const struct regcache_params *in, struct rc_options *out);

/* The value forms every REGCACHE_* variable uses: a strict decimal size
 * with an optional K, M, G or T suffix; 0/1, no/yes, off/on, false/true.
 * false (and *out untouched) when the text is neither. */
bool rc_parse_size(const char *s, size_t *out);
bool rc_parse_bool(const char *s, int *out);

/* When the variable of the field at `offset` in struct rc_options set it:
 * true, with "VARIABLE=value" in out[n] for a message. */
bool rc_options_set_by_env(const struct rc_options *o, size_t offset, char *out, size_t n);

/* The process-wide options (no field of the params), read where they act
 * and parsed by the table's row, as regcache_create() parses them (and
 * fails on a bad value).  Each gives the value, the default while the
 * variable is unset; false, with why[n] (when given) naming the variable
 * and what it expects, when it holds none of the option's values. */
bool rc_option_ledger(bool *on, char *why, size_t n);                  /* REGCACHE_LEDGER */
bool rc_option_ledger_namespace(const char **ns, char *why, size_t n); /* NULL: none */
bool rc_option_bar1_bytes(size_t *bytes, char *why, size_t n);         /* 0: unset */

/* The options table, row i < rc_option_count(): the variable, its default
 * as README shows it, and what it does. */
size_t rc_option_count(void);
void rc_option_describe(size_t i, const char **name, const char **shown, const char **does);

#endif
