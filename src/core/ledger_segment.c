/* The BAR1 ledger's segment: naming, safe opening, owners (see
 * ledger_segment.h). */
#include "ledger_segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ledger_guard.h"

#define NAMESPACE_MAX 32

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
say(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

static bool all_of(const char *s, size_t max, const char *extra)
{
    size_t len = strlen(s);
    if (len == 0 || len > max)
        return false;
    for (const char *p = s; *p; p++)
        if (!(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z') && !(*p >= '0' && *p <= '9') &&
            *p != '_' && !strchr(extra, *p))
            return false;
    return true;
}

bool rc_ledger_key_ok(const char *key)
{
    return all_of(key, RC_LEDGER_KEY_MAX - 1, ".:-");
}

bool rc_ledger_namespace_ok(const char *ns)
{
    return all_of(ns, NAMESPACE_MAX, "");
}

bool rc_ledger_prefix(char *out, size_t n, char *why, size_t why_len)
{
    const char *ns = getenv("REGCACHE_LEDGER_NAMESPACE");
    unsigned uid = (unsigned)geteuid();
    if (!ns || !*ns) {
        snprintf(out, n, "regcache-%u-", uid);
        return true;
    }
    if (!rc_ledger_namespace_ok(ns)) {
        say(why, why_len, "REGCACHE_LEDGER_NAMESPACE=\"%s\": expected 1-%d of [A-Za-z0-9_]", ns,
            NAMESPACE_MAX);
        return false;
    }
    snprintf(out, n, "regcache-%u.%s-", uid, ns);
    return true;
}

/* /proc/<pid>/<what>, `pid` "self" or a number as readdir() names it. */
#define PROC_PATH_MAX (sizeof "/proc//ns/pid" + sizeof ((struct dirent *)0)->d_name)

/* /proc/<pid>/<what> into buf, NUL-terminated.  false with errno set when
 * it cannot be read (ENOENT: no such process).  errno is EINVAL when it
 * was read, so that a caller that cannot parse it fails with that. */
static bool read_proc(const char *pid, const char *what, char *buf, size_t len)
{
    char path[PROC_PATH_MAX];
    snprintf(path, sizeof path, "/proc/%s/%s", pid, what);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, len - 1);
    int err = n < 0 ? errno : EINVAL;
    close(fd);
    errno = err;
    if (n <= 0)
        return false;
    buf[n] = '\0';
    return true;
}

/* Field 22 (start time) and field 3 (state) of /proc/<pid>/stat.  false
 * with errno set when it cannot be read. */
static bool proc_stat(const char *pid, unsigned long long *start, char *state)
{
    char buf[512];
    if (!read_proc(pid, "stat", buf, sizeof buf))
        return false;
    /* The name (field 2) may hold spaces and parentheses: count fields from
     * the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || p[2] == '\0')
        return false;
    *state = p[2];
    p += 2;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return false;
        p++;
    }
    char *end;
    *start = strtoull(p, &end, 10);
    return end != p;
}

static bool exited(char state)
{
    return state == 'Z' || state == 'X'; /* a zombie holds no BAR1 */
}

/* The top bit is the owner word's CLAIMING flag: start times lose it,
 * which takes 700 years of uptime at 100 ticks a second to matter. */
static uint64_t identity(pid_t pid, unsigned long long start)
{
    return ((uint64_t)start << RC_LEDGER_PID_BITS | (uint64_t)pid) & ~RC_LEDGER_CLAIMING;
}

static bool pid_ok(pid_t pid)
{
    return pid > 0 && !((uint64_t)pid >> RC_LEDGER_PID_BITS);
}

uint64_t rc_ledger_identity(pid_t pid)
{
    char name[16], state;
    unsigned long long start;
    if (!pid_ok(pid))
        return 0;
    snprintf(name, sizeof name, "%d", (int)pid);
    return proc_stat(name, &start, &state) && !exited(state) ? identity(pid, start) : 0;
}

uint64_t rc_ledger_self(void)
{
    char state;
    unsigned long long start;
    pid_t pid = getpid();
    return pid_ok(pid) && proc_stat("self", &start, &state) ? identity(pid, start) : 0;
}

uint64_t rc_ledger_pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* A claim word: CLAIMING, the low START_BITS of the start time, the pid
 * namespace's inode (32 bits, as the kernel numbers them), the pid. */
#define NS_SHIFT RC_LEDGER_PID_BITS
#define START_SHIFT (NS_SHIFT + 32)
#define START_BITS 8

uint64_t rc_ledger_claim_word(uint64_t owner, uint64_t pidns)
{
    uint64_t start = owner >> RC_LEDGER_PID_BITS;
    return RC_LEDGER_CLAIMING | (start & ((1ull << START_BITS) - 1)) << START_SHIFT |
           (pidns & 0xffffffffull) << NS_SHIFT | (uint64_t)rc_ledger_owner_pid(owner);
}

/* An owner to judge: its pid in its own pid namespace, that namespace
 * (32 bits), and its start time, of which `mask` tells the bits known. */
struct who {
    pid_t pid;
    uint32_t ns;
    uint64_t start, mask;
};

static enum rc_ledger_owner_state judge_start(const struct who *w, unsigned long long start,
                                              char state)
{
    return exited(state) || ((uint64_t)start & w->mask) != w->start ? RC_LEDGER_GONE
                                                                    : RC_LEDGER_LIVE;
}

/* The effective uid, the last NSpid (the pid in the process's own
 * namespace) and how many namespaces NSpid lists, from /proc/<pid>/status,
 * which anyone may read. */
static bool proc_status(const char *pid, unsigned *euid, long *nspid, int *depth)
{
    char buf[4096];
    if (!read_proc(pid, "status", buf, sizeof buf))
        return false;
    const char *uid = strstr(buf, "\nUid:"), *ns = strstr(buf, "\nNSpid:");
    if (!uid || !ns || sscanf(uid, "\nUid: %*u %u", euid) != 1) {
        errno = EINVAL; /* a kernel without NSpid (before 4.1) */
        return false;
    }
    *depth = 0;
    for (char *p = (char *)ns + sizeof "\nNSpid:" - 1, *end;; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        *nspid = v;
        ++*depth;
    }
    if (!*depth)
        errno = EINVAL;
    return *depth > 0;
}

/* Whether the numbered process `pid` (in /proc) is in pid namespace `ns`:
 * 1 yes, 0 no, -1 cannot tell. */
static int in_namespace(const char *pid, uint32_t ns)
{
    char path[PROC_PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%s/ns/pid", pid);
    if (stat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    return (uint32_t)st.st_ino == ns;
}

/* The inode the kernel gives the initial pid namespace. */
#define INITIAL_PIDNS 0xeffffffcu

/* Whether /proc is of this process's pid namespace (then /proc/<pid> is
 * the process that has that pid here). */
static bool proc_is_mine(void)
{
    char self[24];
    ssize_t n = readlink("/proc/self", self, sizeof self - 1);
    if (n <= 0)
        return false;
    self[n] = '\0';
    return strtol(self, NULL, 10) == getpid();
}

/* Whether /proc shows every process of every pid namespace: it is the
 * initial namespace's. */
static bool proc_shows_all(uint32_t pidns, bool mine)
{
    struct stat st;
    return (mine && pidns == INITIAL_PIDNS) ||
           (stat("/proc/1/ns/pid", &st) == 0 && st.st_ino == INITIAL_PIDNS);
}

/* An owner judged from /proc's list of processes, seen from pid namespace
 * `pidns`: the owner's namespace is another, or /proc belongs to another
 * (`mine` false).  Only this user's processes can own a record of this
 * user's segment. */
static enum rc_ledger_owner_state judge_by_scan(const struct who *w, uint32_t pidns, bool mine)
{
    DIR *dir = opendir("/proc");
    if (!dir)
        return RC_LEDGER_UNKNOWN;
    bool seen = false, complete = true;
    enum rc_ledger_owner_state state = RC_LEDGER_UNKNOWN;
    unsigned me = (unsigned)geteuid();
    struct dirent *d;
    /* errno = 0: readdir() leaves it so at the end, and says why it
     * stopped otherwise. */
    while (state == RC_LEDGER_UNKNOWN && (errno = 0, d = readdir(dir))) {
        unsigned euid;
        long nspid;
        int depth, in;
        if (d->d_name[0] < '0' || d->d_name[0] > '9')
            continue;
        if (!proc_status(d->d_name, &euid, &nspid, &depth)) {
            complete &= errno == ENOENT; /* gone meanwhile */
            continue;
        }
        if (euid != me)
            continue;
        /* With one NSpid a process is of /proc's namespace, known when it
         * is this process's: it need not be asked then (its ns link may be
         * closed to this process, as init's often is). */
        if (mine && depth == 1)
            in = w->ns == pidns;
        else if ((in = in_namespace(d->d_name, w->ns)) < 0)
            complete = false;
        if (in <= 0)
            continue;
        seen = true;
        unsigned long long start;
        char st;
        if (nspid != w->pid)
            continue;
        if (proc_stat(d->d_name, &start, &st))
            state = judge_start(w, start, st);
        else
            complete &= errno == ENOENT;
    }
    complete &= errno == 0;
    closedir(dir);
    if (state != RC_LEDGER_UNKNOWN || !complete)
        return state;
    /* /proc shows all of the owner's namespace when it shows one of its
     * processes (it is /proc's or below it), or when it is the initial
     * namespace's; then the owner is not among them. */
    return seen || proc_shows_all(pidns, mine) ? RC_LEDGER_GONE : RC_LEDGER_UNKNOWN;
}

enum rc_ledger_owner_state rc_ledger_owner_state(const struct rc_ledger_record *r, uint64_t owner,
                                                 uint64_t pidns)
{
    struct who w = { .pid = rc_ledger_owner_pid(owner) };
    if (!owner || !w.pid)
        return RC_LEDGER_UNKNOWN;
    if (owner & RC_LEDGER_CLAIMING) {
        w.ns = (uint32_t)(owner >> NS_SHIFT);
        w.start = owner >> START_SHIFT & ((1ull << START_BITS) - 1);
        w.mask = (1ull << START_BITS) - 1;
    } else {
        w.ns = (uint32_t)rc_ledger_read(&r->pidns);
        w.start = owner >> RC_LEDGER_PID_BITS;
        w.mask = ~0ull >> (RC_LEDGER_PID_BITS + 1); /* identity() drops the top bit */
    }
    /* kill() asks this process's namespace, whatever /proc is. */
    if (w.ns == (uint32_t)pidns && kill(w.pid, 0) != 0 && errno == ESRCH)
        return RC_LEDGER_GONE;
    bool mine = proc_is_mine();
    if (w.ns != (uint32_t)pidns || !mine)
        return judge_by_scan(&w, (uint32_t)pidns, mine);
    char name[16], state;
    unsigned long long start;
    snprintf(name, sizeof name, "%d", (int)w.pid);
    return proc_stat(name, &start, &state) ? judge_start(&w, start, state) : RC_LEDGER_UNKNOWN;
}

bool rc_ledger_check_record(const struct rc_ledger_segment *s, unsigned i, char *why,
                            size_t why_len)
{
    const struct rc_ledger_record *r = &s->rec[i];
    uint64_t owner = atomic_load_explicit((_Atomic uint64_t *)&r->owner, memory_order_acquire);
    if (owner && !rc_ledger_owner_pid(owner)) {
        say(why, why_len, "record %u has an owner without a pid (%#llx)", i,
            (unsigned long long)owner);
        return false;
    }
    const struct {
        const char *what;
        uint64_t value;
    } counts[] = { { "bytes", rc_ledger_read(&r->bytes) },
                   { "entries", rc_ledger_read(&r->entries) },
                   { "budget", rc_ledger_read(&r->budget) } };
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        if (counts[k].value > RC_LEDGER_MAX_BYTES) {
            say(why, why_len, "record %u claims %llu %s", i, (unsigned long long)counts[k].value,
                counts[k].what);
            return false;
        }
    return true;
}

bool rc_ledger_check(const struct rc_ledger_segment *s, size_t len, char *why, size_t why_len)
{
    const struct rc_ledger_header *h = &s->hdr;
    if (h->magic == RC_LEDGER_CUT) {
        say(why, why_len, "truncated by another process while mapped");
        return false;
    }
    if (h->magic != RC_LEDGER_MAGIC) {
        say(why, why_len, "bad magic %#llx: not a regcache ledger", (unsigned long long)h->magic);
        return false;
    }
    if (h->version != RC_LEDGER_VERSION) {
        say(why, why_len, "layout version %u, but this library reads version %u", h->version,
            RC_LEDGER_VERSION);
        return false;
    }
    if (len != sizeof *s || h->size != sizeof *s || h->header_size != sizeof *h ||
        h->records != RC_LEDGER_RECORDS || h->record_size != sizeof s->rec[0]) {
        say(why, why_len,
            "%zu bytes (header says %llu: %u + %u records of %u), but layout version %u is %zu",
            len, (unsigned long long)h->size, h->header_size, h->records, h->record_size,
            RC_LEDGER_VERSION, sizeof *s);
        return false;
    }
    if (!memchr(h->key, '\0', sizeof h->key) || !rc_ledger_key_ok(h->key)) {
        say(why, why_len, "the GPU key is not a name");
        return false;
    }
    uint64_t used = rc_ledger_read(&h->used), budget = rc_ledger_read(&h->budget);
    if (used > RC_LEDGER_RECORDS || budget > RC_LEDGER_MAX_BYTES) {
        say(why, why_len, "%llu records in use of %u, budget %llu bytes", (unsigned long long)used,
            RC_LEDGER_RECORDS, (unsigned long long)budget);
        return false;
    }
    for (unsigned i = 0; i < RC_LEDGER_RECORDS; i++)
        if (!rc_ledger_check_record(s, i, why, why_len))
            return false;
    return true;
}

/* Create the segment complete, then give it its name.  shm_open(O_CREAT |
 * O_EXCL) would publish the name first: a process that found it then could
 * not tell a header still being written from a corrupt one, nor a creator
 * that died half-way from one that is busy.  An unnamed file in the shm
 * directory, linked once written, is never seen half-made.  Returns its
 * descriptor, -1 with *why filled, or -2 when another process linked the
 * name first (theirs is to be used). */
static int create(const char *name, const char *key, char *why, size_t why_len)
{
    int fd = open(RC_LEDGER_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        say(why, why_len, "cannot create a segment in %s: %s", RC_LEDGER_DIR, strerror(errno));
        return -1;
    }
    struct rc_ledger_segment *s = MAP_FAILED;
    /* fchmod: the umask may have taken bits that the owner needs. */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, sizeof *s) != 0 ||
        (s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        say(why, why_len, "cannot size a new segment: %s", strerror(errno));
        close(fd);
        return -1;
    }
    s->hdr.magic = RC_LEDGER_MAGIC;
    s->hdr.version = RC_LEDGER_VERSION;
    s->hdr.header_size = sizeof s->hdr;
    s->hdr.size = sizeof *s;
    s->hdr.records = RC_LEDGER_RECORDS;
    s->hdr.record_size = sizeof s->rec[0];
    snprintf(s->hdr.key, sizeof s->hdr.key, "%s", key);
    munmap(s, sizeof *s);

    char self[40], path[sizeof RC_LEDGER_DIR + RC_LEDGER_NAME_MAX];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    snprintf(path, sizeof path, "%s%s", RC_LEDGER_DIR, name);
    if (linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW) != 0) {
        int err = errno;
        close(fd);
        if (err == EEXIST)
            return -2;
        say(why, why_len, "cannot name the new segment %s: %s", path, strerror(err));
        return -1;
    }
    return fd;
}

bool rc_ledger_name_ok(const char *name)
{
    char key[RC_LEDGER_KEY_MAX];
    const char *plus = strchr(name, '+');
    size_t len = plus ? (size_t)(plus - name) : strlen(name);
    if (len >= sizeof key)
        return false;
    memcpy(key, name, len);
    key[len] = '\0';
    return rc_ledger_key_ok(key) && (!plus || (plus[1] >= '1' && plus[1] < '0' + RC_LEDGER_NAMES &&
                                               plus[2] == '\0'));
}

/* What is under a name: a segment to use, a name to pass by (another
 * user's), or a refusal (*why filled). */
enum found { USE, FOREIGN, REFUSED };

static const char *kind(mode_t mode)
{
    return S_ISREG(mode) ? "" : S_ISDIR(mode) ? " (a directory)" : S_ISFIFO(mode) ? " (a FIFO)"
                            : S_ISSOCK(mode) ? " (a socket)" : S_ISLNK(mode) ? " (a link)"
                                             : " (a device)";
}

/* Whoever can write a segment can make this process misjudge its budget
 * or read garbage, so only this user's own, private segments are used.
 * Judged from the opened file, not the name: root opens anyone's. */
static enum found owned(const struct stat *st, const char *name, char *why, size_t why_len)
{
    if (S_ISREG(st->st_mode) && st->st_uid == geteuid() && (st->st_mode & 07777) == 0600)
        return USE;
    say(why, why_len,
        "%s%s belongs to uid %u with mode %04o%s: only a regular file of uid %u with mode "
        "0600 is used",
        RC_LEDGER_DIR, name, (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777),
        kind(st->st_mode), (unsigned)geteuid());
    return st->st_uid != geteuid() ? FOREIGN : REFUSED;
}

bool rc_ledger_file_ok(const struct stat *st, const char *name, char *why, size_t why_len)
{
    return owned(st, name, why, why_len) == USE;
}

/* Open the segment called `name` into *fd, creating it when attaching and
 * it does not exist.  O_NOFOLLOW: a link planted under the name is
 * refused, never followed; O_NONBLOCK: a FIFO is opened at once (and then
 * refused), not waited on. */
static enum found open_segment(const char *name, const char *key, int *fd, char *why,
                               size_t why_len)
{
    for (int attempt = 0; attempt < 4; attempt++) {
        *fd = shm_open(name, (key ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK, 0);
        if (*fd >= 0) {
            struct stat st;
            if (fstat(*fd, &st) != 0) {
                say(why, why_len, "cannot stat %s%s: %s", RC_LEDGER_DIR, name, strerror(errno));
                close(*fd);
                return REFUSED;
            }
            enum found f = owned(&st, name, why, why_len);
            if (f != USE)
                close(*fd);
            return f;
        }
        if (errno != ENOENT || !key) {
            int err = errno;
            char path[sizeof RC_LEDGER_DIR + RC_LEDGER_NAME_MAX];
            struct stat st;
            snprintf(path, sizeof path, "%s%s", RC_LEDGER_DIR, name);
            /* What could not be opened (a link, a directory, another
             * user's file) is passed by when it is another user's. */
            if (err != ENOENT && lstat(path, &st) == 0 && st.st_uid != geteuid())
                return owned(&st, name, why, why_len);
            say(why, why_len, "cannot open %s: %s", path, strerror(err));
            return REFUSED;
        }
        *fd = create(name, key, why, why_len);
        if (*fd >= 0)
            return USE;
        if (*fd == -1)
            return REFUSED;
    }
    say(why, why_len, "%s%s keeps appearing and disappearing", RC_LEDGER_DIR, name);
    return REFUSED;
}

/* open_segment() of the first name that is not another user's, for a
 * cache that attaches; the name itself for regcache-stat.  *why tells of
 * the first name passed by when none is left. */
static int open_named(const char *name, const char *key, char used[RC_LEDGER_NAME_MAX], char *why,
                      size_t why_len)
{
    for (int n = 0; n < (key ? RC_LEDGER_NAMES : 1); n++) {
        char other[256];
        int fd;
        snprintf(used, RC_LEDGER_NAME_MAX, n ? "%s+%d" : "%s", name, n);
        switch (open_segment(used, key, &fd, n ? other : why, n ? sizeof other : why_len)) {
        case USE:
            return fd;
        case REFUSED:
            if (n)
                say(why, why_len, "%s", other);
            return -1;
        case FOREIGN:
            break;
        }
    }
    return -1;
}

struct rc_ledger_segment *rc_ledger_map(const char *name, const char *key, char *why,
                                        size_t why_len)
{
    char used[RC_LEDGER_NAME_MAX];
    int fd = open_named(name, key, used, why, why_len);
    if (fd < 0)
        return NULL;
    name = used;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) != 0) {
        say(why, why_len, "cannot stat %s%s: %s", RC_LEDGER_DIR, name, strerror(errno));
    } else if (st.st_size < (off_t)sizeof(struct rc_ledger_header) ||
               st.st_size > (off_t)(16 * sizeof(struct rc_ledger_segment))) {
        say(why, why_len, "%s%s is %lld bytes: not a ledger", RC_LEDGER_DIR, name,
            (long long)st.st_size);
    } else {
        p = mmap(NULL, (size_t)st.st_size, key ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                 fd, 0);
        if (p == MAP_FAILED)
            say(why, why_len, "cannot map %s%s: %s", RC_LEDGER_DIR, name, strerror(errno));
    }
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    size_t size = (size_t)st.st_size;
    /* Guarded before the first read: a truncation can come at any time. */
    if (!rc_ledger_guard(p, size)) {
        say(why, why_len, "cannot guard %s%s against truncation (%u ledgers mapped)",
            RC_LEDGER_DIR, name, RC_LEDGER_GUARDS);
        munmap(p, size);
        return NULL;
    }
    struct rc_ledger_segment *s = p;
    char detail[160];
    if (!rc_ledger_check(s, size, detail, sizeof detail)) {
        say(why, why_len, "%s%s is corrupt: %s", RC_LEDGER_DIR, name, detail);
    } else if (key && strcmp(s->hdr.key, key) != 0) {
        say(why, why_len, "%s%s is the ledger of GPU %s, not %s", RC_LEDGER_DIR, name, s->hdr.key,
            key);
    } else {
        return s;
    }
    rc_ledger_unguard(p);
    munmap(p, size);
    return NULL;
}

void rc_ledger_unmap(struct rc_ledger_segment *s)
{
    if (!s)
        return;
    rc_ledger_unguard(s);
    munmap(s, sizeof *s);
}
