/* Who owns a ledger record, and whether that process still lives: the
 * owner words and what kill() and /proc say of them (see
 * ledger_segment.h). */
#include "ledger_segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* /proc/<pid>/<what>, `pid` "self" or a number as readdir() names it. */
#define PROC_PATH_MAX (sizeof "/proc//ns/pid" + sizeof((struct dirent *)0)->d_name)

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
