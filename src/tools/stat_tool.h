/* regcache-stat's parts: the GPU ledgers (regcache_stat.c), every cache
 * of every process from their statistics segments (stat_caches.c), and
 * the text helpers they share (stat_text.c). */
#ifndef RC_STAT_TOOL_H
#define RC_STAT_TOOL_H

#include <stddef.h>
#include <stdint.h>

#include "stats_segment.h"

/* Text as each output wants it (stat_text.c). */

/* A JSON string of s to stdout: its UTF-8 as it is, control characters
 * and what JSON escapes as escapes, a byte that is no UTF-8 as U+FFFD. */
void json_string(const char *s);

/* A label value of the Prometheus text format of s to stdout: its UTF-8 as
 * it is, '\\', '"' and newline as the format escapes them, any other
 * control character as the text \xHH (its backslash escaped), a byte that
 * is no UTF-8 as U+FFFD. */
void prometheus_label(const char *s);

/* s with what a terminal would act on, bytes beyond ASCII and '\\' as
 * \xHH. */
const char *printable(const char *s, char *out, size_t n);

/* 1536 -> "1.5K" */
const char *size_text(uint64_t v, char *buf, size_t n);

/* One cache of one process, read from its statistics segment. */
struct cache_row {
    int pid;
    char process[17];
    const char *state; /* live or unknown (gone ones are left out) */
    struct rc_statseg_cache c;
};

struct caches {
    struct cache_row *rows;
    size_t n;
    char **errors; /* segments that could not be read, and why */
    size_t nerrors;
};

/* Every cache in the segments of this user and namespace (`prefix`). */
void caches_read(const char *prefix, struct caches *out);
void caches_free(struct caches *c);

void caches_text(const struct caches *c);
void caches_json(const struct caches *c); /* a JSON array */
void caches_prometheus(const struct caches *c);

#endif
