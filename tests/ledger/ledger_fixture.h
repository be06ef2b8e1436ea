/* What the ledger tests share: a namespace of their own per test (parallel
 * ctest runs never meet), the segments under it, and helper processes
 * (ledger_helper.c) driven over pipes. */
#ifndef LEDGER_FIXTURE_H
#define LEDGER_FIXTURE_H

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
/* Send one command; returns the MiB it holds afterwards. */
unsigned long long helper_ask(struct helper *h, const char *command);
/* Close its input: it detaches and must exit 0. */
void helper_stop(struct helper *h);
/* SIGKILL: it leaves its record behind. */
void helper_kill(struct helper *h);

/* Run regcache-stat with `args` (a string of options) and return what it
 * printed (malloc'd) and its exit status. */
char *run_stat(const char *args, int *status);

#endif
