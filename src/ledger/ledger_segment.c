/* The BAR1 ledger's segment: naming, checking, safe opening (see
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
#include "options.h"

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

bool rc_ledger_prefix(char *out, size_t n, char *why, size_t why_len)
{
    const char *ns;
    unsigned uid = (unsigned)geteuid();
    if (!rc_option_ledger_namespace(&ns, why, why_len))
        return false;
    if (!ns)
        snprintf(out, n, "regcache-%u-", uid);
    else
        snprintf(out, n, "regcache-%u.%s-", uid, ns);
    return true;
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
    return rc_ledger_key_ok(key) &&
           (!plus || (plus[1] >= '1' && plus[1] < '0' + RC_LEDGER_NAMES && plus[2] == '\0'));
}

/* What is under a name: a segment to use, a name to pass by (another
 * user's), or a refusal (*why filled). */
enum found { USE, FOREIGN, REFUSED };

static const char *kind(mode_t mode)
{
    return S_ISREG(mode)    ? ""
           : S_ISDIR(mode)  ? " (a directory)"
           : S_ISFIFO(mode) ? " (a FIFO)"
           : S_ISSOCK(mode) ? " (a socket)"
           : S_ISLNK(mode)  ? " (a link)"
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
        p = mmap(NULL, (size_t)st.st_size, key ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd,
                 0);
        if (p == MAP_FAILED)
            say(why, why_len, "cannot map %s%s: %s", RC_LEDGER_DIR, name, strerror(errno));
    }
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    size_t size = (size_t)st.st_size;
    /* Guarded before the first read: a truncation can come at any time. */
    if (!rc_ledger_guard(p, size)) {
        say(why, why_len, "cannot guard %s%s against truncation (%u ledgers mapped)", RC_LEDGER_DIR,
            name, RC_LEDGER_GUARDS);
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
