/* What the ledger tests share: a namespace of their own per test (parallel
 * ctest runs never meet), the segments under it, and helper processes
 * (ledger_helper.c) driven over pipes. */
#ifndef LEDGER_FIXTURE_H
#define LEDGER_FIXTURE_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "ledger_segment.h"

#define M (1024ull * 1024ull)
/* REGCACHE_BAR1_BYTES=320M less the reserve (32 MiB, the floor). */
#define BUDGET (288 * M)

/* cmocka setup and teardown: a fresh REGCACHE_LEDGER_NAMESPACE and BAR1 of
 * 320 MiB, the ledger on; teardown removes the namespace's segments. */
int ledger_setup(void **state);
int ledger_teardown(void **state);

struct rc_ledger;

/* rc_ledger_attach() that must succeed. */
struct rc_ledger *ledger_attach(const char *key, size_t budget);

/* A valid segment for `key` with nobody attached. */
void segment_make(const char *key);

/* /dev/shm/<this namespace's prefix><key>. */
void segment_path(const char *key, char *path, size_t n);

/* The segment of `key` mapped read-write, as only its owner can; NULL when
 * there is none.  Unmap with rc_ledger_unmap(). */
struct rc_ledger_segment *segment_open(const char *key);

/* Records with a settled owner, and the bytes they hold. */
unsigned live_records(const struct rc_ledger_segment *s, uint64_t *bytes);

/* The record owned by `pid`, or NULL. */
struct rc_ledger_record *record_of(struct rc_ledger_segment *s, pid_t pid);

/* Fork and exec argv[] with its stdin and stdout on pipes. */
pid_t spawn(char *const argv[], FILE **to, FILE **from);

struct helper {
    pid_t pid;
    FILE *to, *from;
};

/* Start ledger_helper on GPU `key` and wait until it has attached. */
void helper_start(struct helper *h, const char *key);
/* The same with one of its options (ledger_helper.c), NULL for none. */
void helper_start_with(struct helper *h, const char *key, const char *option);
/* ledger_helper's path, for tests that start it their own way. */
extern const char ledger_helper_path[];
/* Send one command; returns the MiB it holds afterwards. */
unsigned long long helper_ask(struct helper *h, const char *command);
/* Close its input: it detaches (a cache_helper destroys its cache) and
 * must exit 0. */
void helper_stop(struct helper *h);
/* SIGKILL: it leaves its record behind. */
void helper_kill(struct helper *h);

/* A cache_helper process (cache_helper.c: one real cache over the fake
 * backend, holding a 1 MiB anchor entry) and its answer to a command:
 * device 0's statistics. */
struct cache_view {
    int rc; /* the command's REGCACHE_* status */
    unsigned long long bytes, entries, budget, hits, misses, evictions, tag, notify, failures;
    unsigned long long held; /* bytes it holds (anchor included) */
};

/* Start cache_helper, with its stderr in the file `err` (NULL: this
 * process's), and wait until its cache holds the anchor. */
void cache_start(struct helper *h, const char *err);
/* Send one command and read the answer into *v; returns v->bytes. */
unsigned long long cache_ask(struct helper *h, const char *command, struct cache_view *v);

/* Run regcache-stat with `args` (a string of options) and return what it
 * printed (malloc'd) and its exit status. */
char *run_stat(const char *args, int *status);

/* Fail the test unless `text` is in `out`. */
void assert_contains(const char *out, const char *text);

/* Fail the test unless `json` parses as JSON (python3's json module). */
void assert_json(const char *json);

/* One cache as regcache-stat shows it. */
struct stat_cache {
    int pid;
    char process[17], state[8];
    unsigned long long cache, entries, bytes, budget, hits, misses, evictions, inval_tag,
        inval_notify, reg_failures;
};

/* The one GPU of this test's namespace, as `regcache-stat --json` shows it. */
struct stat_gpu {
    char key[RC_LEDGER_KEY_MAX];
    unsigned long long budget, in_use, pressure;
    char budget_source[16];
    unsigned n;
    struct stat_cache c[16];
};

/* Run `regcache-stat --json`, which must exit 0 and list exactly one GPU. */
void stat_json(struct stat_gpu *g);

/* The cache of process `pid` in g, or NULL. */
const struct stat_cache *stat_cache_of(const struct stat_gpu *g, pid_t pid);

/* The text table's row of process `pid` in regcache-stat's output `out`,
 * fields split (sizes as printed, "288.0M"); false when there is none. */
struct stat_row {
    int pid;
    char process[17], state[8], bytes[16], budget[16];
    unsigned long long cache, entries, hits, misses, evictions, tag, notify, failures;
};
bool stat_row(const char *out, pid_t pid, struct stat_row *r);

/* The ledger segments of this test's namespace: how many there are;
 * with `remove`, every segment of it goes (statistics segments too). */
unsigned namespace_segments(bool remove);

#endif
