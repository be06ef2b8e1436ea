/* The process's statistics segment from the library's side: created with
 * the process's first cache, a record per cache, removed with the last
 * cache.  Records go out at create, on misses at most every 100 ms, and at
 * a reset; hits never write them.  A fork child's caches write nothing:
 * the segment it inherited is its parent's (stats_publish.h). */
#include "stats_publish.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "last_error.h"
#include "ledger_guard.h"
#include "options.h"
#include "stats_dump.h"
#include "stats_read.h"
#include "stats_segment.h"

/* One cache's record. */
struct record {
    struct regcache *cache;
    int index;                      /* in the process's segment, or -1 */
    int pid;                        /* the process whose segment that is */
    atomic_uint_fast64_t published; /* when it last went out (a clock reading) */
    char note[256];                 /* why it has no record, for the dump */
    bool dump;                      /* REGCACHE_STATS */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    struct rc_statseg *seg; /* NULL: none (yet, or it could not be made) */
    pid_t pid;              /* the process that made it */
    unsigned users;         /* records in use */
    char name[RC_STATSEG_NAME_MAX];
    char why[256]; /* why there is none, for the REGCACHE_STATS dump */
} proc;

/* Segments of this user's processes that died without removing theirs. */
static void sweep_dead(const char *prefix, uint64_t pidns)
{
    DIR *dir = opendir(RC_LEDGER_DIR);
    if (!dir)
        return;
    size_t len = strlen(prefix);
    for (struct dirent *d; (d = readdir(dir)) != NULL;) {
        if (strncmp(d->d_name, prefix, len) != 0 || !rc_statseg_name_ok(d->d_name + len))
            continue;
        char why[256];
        struct rc_statseg *s = rc_statseg_map(d->d_name, why, sizeof why);
        if (!s)
            continue;
        struct rc_ledger_record owner = { 0 };
        atomic_store_explicit(&owner.pidns, s->hdr.pidns, memory_order_relaxed);
        bool gone = rc_ledger_owner_state(&owner, s->hdr.owner, pidns) == RC_LEDGER_GONE;
        rc_statseg_unmap(s);
        if (gone)
            unlinkat(dirfd(dir), d->d_name, 0);
    }
    closedir(dir);
}

/* An unnamed file, linked once whole, as the ledger does: no reader ever
 * sees half a header.  A file of this user already under the name is a
 * dead process's (this pid in this namespace is this process now). */
static struct rc_statseg *create(const char *name, uint64_t pidns, char *why, size_t n)
{
    int fd = open(RC_LEDGER_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    struct rc_statseg *s = MAP_FAILED;
    if (fd < 0 || fchmod(fd, 0600) != 0 || ftruncate(fd, sizeof *s) != 0 ||
        (s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        snprintf(why, n, "cannot create a statistics segment in %s: %s", RC_LEDGER_DIR,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    uint64_t comm[2] = { 0 };
    FILE *f = fopen("/proc/self/comm", "re");
    if (f) {
        if (fgets((char *)comm, sizeof comm, f))
            ((char *)comm)[strcspn((char *)comm, "\n")] = '\0';
        fclose(f);
    }
    s->hdr = (struct rc_statseg_header){ .magic = RC_STATSEG_MAGIC,
                                         .version = RC_STATSEG_VERSION,
                                         .header_size = sizeof s->hdr,
                                         .size = sizeof *s,
                                         .caches = RC_STATSEG_CACHES,
                                         .cache_size = sizeof s->cache[0],
                                         .owner = rc_ledger_self(),
                                         .pidns = pidns,
                                         .comm = { comm[0], comm[1] } };
    char self[40], path[sizeof RC_LEDGER_DIR + RC_STATSEG_NAME_MAX + 1];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    snprintf(path, sizeof path, "%s/%s", RC_LEDGER_DIR, name);
    int rc = linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
    if (rc != 0 && errno == EEXIST) {
        struct stat st;
        char ignored[256];
        int old = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        bool mine = old >= 0 && fstat(old, &st) == 0 &&
                    rc_ledger_file_ok(&st, path, ignored, sizeof ignored);
        if (old >= 0)
            close(old);
        if (mine && unlink(path) == 0)
            rc = linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
        else
            errno = EEXIST;
    }
    int err = errno;
    close(fd);
    if (rc != 0 || !rc_ledger_guard(s, sizeof *s)) {
        snprintf(why, n, "no statistics segment for regcache-stat: cannot name %s: %s", path,
                 rc != 0 ? strerror(err) : "cannot guard it against truncation");
        if (rc == 0)
            unlink(path);
        munmap(s, sizeof *s);
        return NULL;
    }
    return s;
}

/* Under lock: the segment of this process, made if needed. */
static struct rc_statseg *segment_locked(void)
{
    pid_t pid = getpid();
    if (proc.seg && proc.pid != pid) {
        /* Inherited across fork(): the parent's, left to it. */
        rc_ledger_unguard(proc.seg);
        munmap(proc.seg, sizeof *proc.seg);
        proc.seg = NULL;
        proc.users = 0;
    }
    if (proc.seg)
        return proc.seg;
    char prefix[RC_LEDGER_PREFIX_MAX];
    if (!rc_ledger_prefix(prefix, sizeof prefix, proc.why, sizeof proc.why))
        return NULL;
    uint64_t pidns = rc_ledger_pid_namespace();
    sweep_dead(prefix, pidns);
    rc_statseg_name(proc.name, sizeof proc.name, prefix, pidns, (int)pid);
    proc.seg = create(proc.name, pidns, proc.why, sizeof proc.why);
    proc.pid = pid;
    return proc.seg;
}

static void store(_Atomic uint64_t *to, uint64_t v)
{
    atomic_store_explicit(to, v, memory_order_relaxed);
}

/* Under lock: write c's record. */
static void write_locked(const struct regcache *c, struct rc_statseg_cache *r)
{
    struct regcache_stats s;
    regcache_get_stats(c, &s);
    uint64_t gpus = 0;
    for (int g = 0; g < RC_MAX_DEVICES; g++)
        gpus |= (uint64_t)rc_stats_seen(c, g) << g;
    uint64_t seq = atomic_load_explicit(&r->seq, memory_order_relaxed);
    store(&r->seq, seq + 1);
    atomic_thread_fence(memory_order_release);
    char name[REGCACHE_NAME_MAX] = { 0 };
    snprintf(name, sizeof name, "%s", c->opts.name);
    for (unsigned w = 0; w < RC_STATSEG_NAME_WORDS; w++) {
        uint64_t v;
        memcpy(&v, name + 8 * w, 8);
        store(&r->name[w], v);
    }
    store(&r->gpus, gpus);
    store(&r->host, rc_stats_seen(c, RC_HOST_SLOT));
    const uint64_t figures[] = { s.entries,
                                 s.bytes,
                                 s.hits,
                                 s.misses,
                                 s.evictions,
                                 s.invalidations_tag + s.invalidations_notify +
                                     s.invalidations_explicit,
                                 s.reg_failures,
                                 s.reg_latency_p50_ns,
                                 s.reg_latency_p99_ns,
                                 s.fds,
                                 s.mrs,
                                 s.budget,
                                 s.rails };
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++)
        store(&r->entries + i, figures[i]);
    for (unsigned k = 0; k < RC_MAX_RAILS; k++) {
        struct regcache_latency l = { 0 };
        if (k < s.rails)
            rc_stats_latency(c, -1, (int)k, &l);
        struct rc_statseg_rail *rail = &r->rail[k];
        store(&rail->registrations, s.rail_registrations[k]);
        store(&rail->failures, s.rail_reg_failures[k]);
        store(&rail->bytes, s.rail_bytes[k]);
        store(&rail->mapping, s.dmabuf_mapping[k]);
        store(&rail->data_direct, s.data_direct[k]);
        store(&rail->p50_ns, l.p50_ns);
        store(&rail->p99_ns, l.p99_ns);
    }
    store(&r->in_use, 1);
    atomic_store_explicit(&r->seq, seq + 2, memory_order_release);
}

/* A fork child may find the lock taken by a parent's thread that is not
 * there: it never writes the parent's records, so a fresh lock is right. */
static void child_after_fork(void)
{
    pthread_mutex_init(&lock, NULL);
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, child_after_fork);
}

static void attach(struct record *r)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_atfork);
    pthread_mutex_lock(&lock);
    struct rc_statseg *s = segment_locked();
    for (unsigned i = 0; s && i < RC_STATSEG_CACHES; i++)
        if (!atomic_load_explicit(&s->cache[i].in_use, memory_order_relaxed)) {
            r->index = (int)i;
            r->pid = proc.pid;
            proc.users++;
            write_locked(r->cache, &s->cache[i]);
            break;
        }
    if (s && r->index < 0)
        snprintf(proc.why, sizeof proc.why,
                 "not in the statistics segment: the process has %u caches shown already",
                 RC_STATSEG_CACHES);
    if (r->index < 0)
        snprintf(r->note, sizeof r->note, "%s", proc.why);
    pthread_mutex_unlock(&lock);
}

/* Under lock: r is in this process's segment (not in one a fork child's
 * cache inherited, nor in the child's own at the same place). */
static bool ours_locked(const struct record *r)
{
    return r->index >= 0 && proc.seg && r->pid == proc.pid && proc.pid == getpid();
}

static void publish(struct record *r)
{
    pthread_mutex_lock(&lock);
    if (ours_locked(r))
        write_locked(r->cache, &proc.seg->cache[r->index]);
    pthread_mutex_unlock(&lock);
}

/* On a miss, at clock reading `now` (clock.h; the miss's own where it
 * registered): the record goes out when it last did 100 ms ago or more. */
static void after_miss(void *arg, uint64_t now)
{
    struct record *r = arg;
    uint64_t last = atomic_load_explicit(&r->published, memory_order_relaxed);
    if (r->index < 0 || !rc_clock_100ms_since(last, now) ||
        !atomic_compare_exchange_strong_explicit(&r->published, &last, now, memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    publish(r);
}

/* The record goes back; the last one removes the segment. */
static void on_destroy(void *arg)
{
    struct record *r = arg;
    pthread_mutex_lock(&lock);
    if (ours_locked(r)) {
        struct rc_statseg_cache *rec = &proc.seg->cache[r->index];
        uint64_t seq = atomic_load_explicit(&rec->seq, memory_order_relaxed);
        store(&rec->seq, seq + 1);
        store(&rec->in_use, 0);
        atomic_store_explicit(&rec->seq, seq + 2, memory_order_release);
        if (--proc.users == 0) {
            char path[sizeof RC_LEDGER_DIR + RC_STATSEG_NAME_MAX + 1];
            snprintf(path, sizeof path, "%s/%s", RC_LEDGER_DIR, proc.name);
            unlink(path);
            rc_ledger_unguard(proc.seg);
            munmap(proc.seg, sizeof *proc.seg);
            proc.seg = NULL;
        }
    }
    r->index = -1;
    pthread_mutex_unlock(&lock);
}

/* The entries are deregistered: what the dump counts is final. */
static void after_drain(void *arg)
{
    struct record *r = arg;
    if (r->dump)
        rc_stats_dump(r->cache, r->note);
    free(r);
}

static const struct rc_listener listener = {
    .after_miss = after_miss,
    .on_destroy = on_destroy,
    .after_drain = after_drain,
};

int rc_stats_open(struct regcache *c, const struct rc_options *o)
{
    struct record *r = calloc(1, sizeof *r);
    if (!r)
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory for the cache's statistics record");
    *r = (struct record){ .cache = c, .index = -1, .dump = o->stats_dump };
    if (rc_listen(c, &listener, r) < 0) {
        free(r);
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "no room on the cache's edge for its statistics");
    }
    attach(r);
    return REGCACHE_OK;
}

void rc_stats_publish_now(struct regcache *c)
{
    struct record *r = rc_listener_arg(c, &listener);
    if (r)
        publish(r);
}
