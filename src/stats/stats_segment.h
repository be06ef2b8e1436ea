/* The per-process statistics segment: every cache of a process, GPU or
 * host, keeps a record in it of what regcache-stat shows (its name,
 * devices, entries, bytes, hits, latency, fds, each rail's choice).  One
 * segment per process, named for its pid namespace and pid, created when
 * its first cache is and removed with its last.  This part is shared with
 * regcache-stat: the layout, the name, and mapping it to read, with the
 * ledger's rules (ledger_segment.h): only a regular file of this user with
 * mode 0600, checked field by field, guarded against truncation. */
#ifndef RC_STATS_SEGMENT_H
#define RC_STATS_SEGMENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bounds.h"
#include "ledger_segment.h"

#define RC_STATSEG_MAGIC 0x3153544154534352ull /* "RCSTATS1" in memory order */
#define RC_STATSEG_VERSION 1u
#define RC_STATSEG_CACHES 64u /* caches of one process shown at once */
/* "<prefix>proc@<pid namespace>.<pid>": '@' keeps it apart from ledgers
 * (rc_ledger_name_ok refuses it). */
#define RC_STATSEG_TAG "proc@"
#define RC_STATSEG_NAME_MAX (RC_LEDGER_PREFIX_MAX + 40)
#define RC_STATSEG_NAME_WORDS 8 /* REGCACHE_NAME_MAX bytes */

struct rc_statseg_rail {
    _Atomic uint64_t registrations, failures, bytes, mapping, data_direct, p50_ns, p99_ns, reserved;
};

/* Written by the owning process only, under a seqlock: `seq` is odd while
 * a write is under way, so a reader takes what it read between two equal
 * even values. */
struct rc_statseg_cache {
    _Atomic uint64_t seq;
    _Atomic uint64_t in_use; /* 1 while a cache has it */
    _Atomic uint64_t name[RC_STATSEG_NAME_WORDS];
    _Atomic uint64_t gpus; /* bit g: GPU g seen */
    _Atomic uint64_t host; /* 1: host memory seen */
    _Atomic uint64_t entries, bytes, hits, misses, evictions, invalidations, reg_failures, p50_ns,
        p99_ns, fds, mrs, budget, rails;
    _Atomic uint64_t reserved[7];
    struct rc_statseg_rail rail[RC_MAX_RAILS];
};

struct rc_statseg_header {
    uint64_t magic;
    uint32_t version, header_size;
    uint64_t size;
    uint32_t caches, cache_size;
    uint64_t owner;   /* rc_ledger_self() of the process */
    uint64_t pidns;   /* its pid namespace */
    uint64_t comm[2]; /* its name, 16 bytes */
    uint64_t reserved[8];
};

struct rc_statseg {
    struct rc_statseg_header hdr;
    struct rc_statseg_cache cache[RC_STATSEG_CACHES];
};

_Static_assert(sizeof(struct rc_statseg_header) == 128, "header layout");
_Static_assert(sizeof(struct rc_statseg_cache) == 768, "record layout");

/* The segment's name for process `pid` of pid namespace `pidns` (without
 * the leading '/'), after `prefix` (rc_ledger_prefix). */
void rc_statseg_name(char *out, size_t n, const char *prefix, uint64_t pidns, int pid);

/* Whether `name`, after a prefix, names a statistics segment. */
bool rc_statseg_name_ok(const char *name);

/* Map segment `name` (under RC_LEDGER_DIR) read-only, never blocking, and
 * check its header; NULL with *why filled when it is not this user's
 * private file or not a segment of this layout, and with *why empty when
 * there is no such segment (any more: its process removed it). */
struct rc_statseg *rc_statseg_map(const char *name, char *why, size_t why_len);
void rc_statseg_unmap(struct rc_statseg *s);

/* A copy of record i as it was between two writes, checked: false when it
 * is free, keeps changing, or holds what no cache writes (then *why says
 * what, and the copy must not be shown). */
bool rc_statseg_read(const struct rc_statseg *s, unsigned i, struct rc_statseg_cache *out,
                     char *why, size_t why_len);

/* The name in a record read, NUL-terminated (rc_statseg_read checked it). */
const char *rc_statseg_cache_name(const struct rc_statseg_cache *c);

#endif
