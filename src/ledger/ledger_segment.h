/* The BAR1 ledger's shared memory: one segment per GPU and user, in which
 * every cache of every process on that GPU keeps one record (see ledger.h
 * for what the caches do with it, docs/design.md "The shared BAR1 budget"
 * for the operator's view).  This part is shared with regcache-stat: the layout,
 * the segment's name, opening it safely, and telling live owners from
 * dead ones.  It reports failures in a `why` buffer, not through
 * regcache_last_error(), so that the tool needs nothing else of the
 * library. */
#ifndef RC_LEDGER_SEGMENT_H
#define RC_LEDGER_SEGMENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Where shm_open() keeps segments on Linux; creation needs the path (see
 * rc_ledger_map). */
#define RC_LEDGER_DIR "/dev/shm"

#define RC_LEDGER_MAGIC 0x31524744454c4352ull /* "RCLEDGR1" in memory order */
/* What a mapping reads once its segment was truncated under it
 * (ledger_guard.h): "RCLEDCUT". */
#define RC_LEDGER_CUT 0x54554344454c4352ull
/* 2: caches bump `claims` when they claim a record (a cache of version 1
 * would not, and one alone would miss its arrival). */
#define RC_LEDGER_VERSION 2u
#define RC_LEDGER_RECORDS 256u  /* caches per GPU at once, all processes */
#define RC_LEDGER_KEY_MAX 64    /* GPU key with its NUL */
#define RC_LEDGER_PREFIX_MAX 64 /* "regcache-<uid>.<namespace>-" */
/* A GPU's segment is <prefix><key>, or <prefix><key>+<n> (n 1 to
 * RC_LEDGER_NAMES - 1) where the names before it are another user's. */
#define RC_LEDGER_NAMES 8
#define RC_LEDGER_NAME_MAX (1 + RC_LEDGER_PREFIX_MAX + RC_LEDGER_KEY_MAX + 2)

/* A record's owner word: 0 while free, else the owning process's identity
 * (pid and start time, rc_ledger_identity).  While the owner is still
 * clearing the record, RC_LEDGER_CLAIMING with what judges it until its
 * pidns field is written (rc_ledger_claim_word): its pid, pid namespace and
 * the low bits of its start time, so that a process killed mid-claim is
 * taken back like any other.  One word, so that claiming a record and
 * taking back a dead owner's are single compare-and-swaps: no lock lives
 * in the segment that a dead or forked process could hold. */
#define RC_LEDGER_PID_BITS 22 /* Linux pids stay below 2^22 */
#define RC_LEDGER_CLAIMING (1ull << 63)

/* Every field is written by one process (the creator, before anyone can
 * see the segment, or the record's owner) and read by any: plain atomics,
 * relaxed unless said otherwise. */
struct rc_ledger_record {
    _Atomic uint64_t owner;   /* release-stored once the record is clear */
    _Atomic uint64_t pidns;   /* the owner's pid namespace (its inode) */
    _Atomic uint64_t cache;   /* which cache of that process */
    _Atomic uint64_t comm[2]; /* the process name, 16 bytes */
    /* What the cache holds on this GPU, counting a registration it is about
     * to make, and the limit it last computed (0: none yet, or unlimited). */
    _Atomic uint64_t bytes, entries, budget;
    /* Its counters on this GPU, for regcache-stat. */
    _Atomic uint64_t hits, misses, evictions, inval_tag, inval_notify, reg_failures;
    uint64_t reserved[2];
};

struct rc_ledger_header {
    uint64_t magic;
    uint32_t version, header_size;
    uint64_t size; /* of the whole segment */
    uint32_t records, record_size;
    char key[RC_LEDGER_KEY_MAX]; /* the GPU, as in the segment's name */
    /* The GPU's budget shared by every cache; 0 = unknown (unlimited). */
    _Atomic uint64_t budget;
    /* Bumped by each cache that registers while the GPU is over budget:
     * the others compare it with what they saw last. */
    _Atomic uint64_t pressure;
    /* Records [0, used) have ever been claimed: scans stop there. */
    _Atomic uint64_t used;
    /* CLOCK_MONOTONIC ns of the last search for dead owners. */
    _Atomic uint64_t swept;
    /* Bumped, with release, after each record is claimed: a cache that
     * found no other record in use is alone for as long as this stays
     * still, and need not read the records at every miss.  On the line
     * after `pressure`, which full misses keep dirtying. */
    _Atomic uint64_t claims;
    /* Where `budget` came from (enum rc_budget_source), for regcache-stat;
     * written with it. */
    _Atomic uint64_t budget_source;
    uint64_t reserved[14];
};

struct rc_ledger_segment {
    struct rc_ledger_header hdr;
    struct rc_ledger_record rec[RC_LEDGER_RECORDS];
};

_Static_assert(sizeof(struct rc_ledger_record) == 128, "record layout");
/* 256: the records start on a cache line. */
_Static_assert(sizeof(struct rc_ledger_header) == 256, "header layout");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the ledger needs lock-free 64-bit atomics");

/* "regcache-<uid>-" or, with REGCACHE_LEDGER_NAMESPACE=ns, "regcache-<uid>.ns-":
 * the start of every segment name of this user (and namespace).  false with
 * *why filled when the namespace is none (the options table's rule). */
bool rc_ledger_prefix(char *out, size_t n, char *why, size_t why_len);

/* True when `key` may name a GPU: 1-63 of [A-Za-z0-9_.:-]. */
bool rc_ledger_key_ok(const char *key);

/* True when `name`, after a prefix, names a GPU's segment: a key
 * (rc_ledger_key_ok), or a key, '+' and 1 to RC_LEDGER_NAMES - 1. */
bool rc_ledger_name_ok(const char *name);

/* Open the segment called `name` (under RC_LEDGER_DIR) and map it, never
 * blocking (a FIFO planted under the name is opened and refused).  With
 * `key` the caller attaches: the segment is created when missing, mapped
 * writable, and must be this GPU's; where something of another user holds
 * the name, the next of RC_LEDGER_NAMES names is used (name+1, ...), so
 * that every process of the user finds the same one.  Without `key` it is
 * mapped read-only (regcache-stat).  Refuses, with *why filled, a segment
 * that is not a regular file of this user with mode 0600, or whose layout,
 * size or values are not what this library writes (rc_ledger_check).  The
 * mapping is guarded (ledger_guard.h): truncated under it, it reads
 * RC_LEDGER_CUT instead of raising SIGBUS. */
struct rc_ledger_segment *rc_ledger_map(const char *name, const char *key, char *why,
                                        size_t why_len);
void rc_ledger_unmap(struct rc_ledger_segment *s);

/* Whether the opened file st, named `name` in RC_LEDGER_DIR, may be
 * trusted: a regular file of this user with mode 0600 (the statistics
 * segments use the ledger's rule).  false with *why filled if not. */
struct stat;
bool rc_ledger_file_ok(const struct stat *st, const char *name, char *why, size_t why_len);

/* No GPU's BAR1 comes near this; a larger byte or entry count is garbage
 * (and 256 records of it still sum without overflow). */
#define RC_LEDGER_MAX_BYTES (1ull << 48)

/* Whether the `len` mapped bytes at s hold a ledger of this layout with
 * possible values: header fields, `used`, every record
 * (rc_ledger_check_record).  false with *why filled if not. */
bool rc_ledger_check(const struct rc_ledger_segment *s, size_t len, char *why, size_t why_len);

/* Whether record i is possible: an owner word with a pid, counts of bytes
 * and entries below RC_LEDGER_MAX_BYTES.  false with *why filled if not. */
bool rc_ledger_check_record(const struct rc_ledger_segment *s, unsigned i, char *why,
                            size_t why_len);

/* The owner word of process `pid` now: its pid and start time (clock ticks
 * after boot, /proc/<pid>/stat), so that a reused pid never passes for the
 * process that held it.  0 when there is no such process, it has exited
 * (a zombie holds no BAR1) or /proc does not say. */
uint64_t rc_ledger_identity(pid_t pid);

/* This process's owner word (from /proc/self, which is this process also
 * where /proc belongs to another pid namespace); 0 when /proc does not
 * say. */
uint64_t rc_ledger_self(void);

/* The owner word of a record being claimed by `owner` of pid namespace
 * `pidns` (see RC_LEDGER_CLAIMING). */
uint64_t rc_ledger_claim_word(uint64_t owner, uint64_t pidns);

/* A shared counter as it is now.  Relaxed: each field is exact on its own,
 * and readers act on none of them together. */
static inline uint64_t rc_ledger_read(const _Atomic uint64_t *v)
{
    return atomic_load_explicit((_Atomic uint64_t *)v, memory_order_relaxed);
}

static inline pid_t rc_ledger_owner_pid(uint64_t owner)
{
    return (pid_t)(owner & ((1ull << RC_LEDGER_PID_BITS) - 1));
}

/* The inode of this process's pid namespace, in which its pid means this
 * process.  0 when /proc does not say. */
uint64_t rc_ledger_pid_namespace(void);

/* What can be told of a record's owner from here. */
enum rc_ledger_owner_state {
    RC_LEDGER_LIVE,
    RC_LEDGER_GONE,   /* definitely: its records may be taken back */
    RC_LEDGER_UNKNOWN /* cannot be told: it must be left alone */
};

/* The state of `owner`, the owner word read (with acquire) from record
 * `r`, seen from this process, of pid namespace `pidns`.  Gone only on a definite answer: no
 * process with its pid (ESRCH), or one that is a zombie or started at another time; or, for an
 * owner of another pid namespace, none of its pid and start time among this user's processes where
 * /proc shows every process of that namespace (it shows one of them, or /proc is the initial
 * namespace's, which shows all).  Anything that cannot be read (out of descriptors, no permission)
 * is unknown, never gone.  Reads /proc: slow paths only. */
enum rc_ledger_owner_state rc_ledger_owner_state(const struct rc_ledger_record *r, uint64_t owner,
                                                 uint64_t pidns);

#endif
