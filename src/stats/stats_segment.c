/* The per-process statistics segment's layout, name and reading (see
 * stats_segment.h). */
#include "stats_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ledger_guard.h"

static void say(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

void rc_statseg_name(char *out, size_t n, const char *prefix, uint64_t pidns, int pid)
{
    snprintf(out, n, "%s" RC_STATSEG_TAG "%llu.%d", prefix, (unsigned long long)pidns, pid);
}

bool rc_statseg_name_ok(const char *name)
{
    size_t tag = sizeof RC_STATSEG_TAG - 1;
    if (strncmp(name, RC_STATSEG_TAG, tag) != 0)
        return false;
    const char *p = name + tag;
    size_t digits = strspn(p, "0123456789");
    if (!digits || p[digits] != '.')
        return false;
    p += digits + 1;
    digits = strspn(p, "0123456789");
    return digits && digits <= 7 && !p[digits];
}

struct rc_statseg *rc_statseg_map(const char *name, char *why, size_t why_len)
{
    char path[RC_STATSEG_NAME_MAX + 1];
    snprintf(path, sizeof path, "/%s", name);
    int fd = shm_open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
    if (fd < 0) {
        if (errno == ENOENT)
            why[0] = '\0';
        else
            say(why, why_len, "cannot open %s%s: %s", RC_LEDGER_DIR, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) != 0)
        say(why, why_len, "cannot stat %s%s: %s", RC_LEDGER_DIR, path, strerror(errno));
    else if (!rc_ledger_file_ok(&st, path, why, why_len))
        ;
    else if (st.st_size != (off_t)sizeof(struct rc_statseg))
        say(why, why_len, "%s%s is %lld bytes: not a statistics segment", RC_LEDGER_DIR, path,
            (long long)st.st_size);
    else if ((p = mmap(NULL, sizeof(struct rc_statseg), PROT_READ, MAP_SHARED, fd, 0)) ==
             MAP_FAILED)
        say(why, why_len, "cannot map %s%s: %s", RC_LEDGER_DIR, path, strerror(errno));
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    if (!rc_ledger_guard(p, sizeof(struct rc_statseg))) {
        say(why, why_len, "cannot guard %s%s against truncation", RC_LEDGER_DIR, path);
        munmap(p, sizeof(struct rc_statseg));
        return NULL;
    }
    const struct rc_statseg_header *h = p;
    if (h->magic == RC_STATSEG_MAGIC && h->version == RC_STATSEG_VERSION &&
        h->header_size == sizeof *h && h->size == sizeof(struct rc_statseg) &&
        h->caches == RC_STATSEG_CACHES && h->cache_size == sizeof(struct rc_statseg_cache))
        return p;
    say(why, why_len, "%s%s is corrupt: %s", RC_LEDGER_DIR, path,
        h->magic == RC_LEDGER_CUT ? "truncated while mapped" : "not this layout");
    rc_statseg_unmap(p);
    return NULL;
}

void rc_statseg_unmap(struct rc_statseg *s)
{
    if (!s)
        return;
    rc_ledger_unguard(s);
    munmap(s, sizeof *s);
}

const char *rc_statseg_cache_name(const struct rc_statseg_cache *c)
{
    return (const char *)c->name;
}

/* What no cache writes: a name that is not one (1-63 of the characters
 * params.name takes, NUL-padded), more rails than a cache has, a mapping
 * or a flag out of range, byte counts no machine holds. */
static bool plausible(const struct rc_statseg_cache *c, char *why, size_t why_len)
{
    const char *name = rc_statseg_cache_name(c);
    size_t len = strnlen(name, sizeof c->name);
    if (!len || len == sizeof c->name ||
        strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:@+-/") !=
            len) {
        say(why, why_len, "a cache name that is not one");
        return false;
    }
    if (c->rails < 1 || c->rails > RC_MAX_RAILS || c->host > 1 || c->bytes > RC_LEDGER_MAX_BYTES ||
        c->entries > RC_LEDGER_MAX_BYTES) {
        say(why, why_len, "cache %s: impossible figures", name);
        return false;
    }
    for (unsigned r = 0; r < RC_MAX_RAILS; r++)
        if (c->rail[r].mapping > 2 || c->rail[r].data_direct > 1 ||
            c->rail[r].bytes > RC_LEDGER_MAX_BYTES) {
            say(why, why_len, "cache %s: impossible figures on rail %u", name, r);
            return false;
        }
    return true;
}

bool rc_statseg_read(const struct rc_statseg *s, unsigned i, struct rc_statseg_cache *out,
                     char *why, size_t why_len)
{
    const struct rc_statseg_cache *c = &s->cache[i];
    _Atomic uint64_t *from = (_Atomic uint64_t *)c;
    uint64_t *to = (uint64_t *)out;
    why[0] = '\0';
    for (int attempt = 0; attempt < 100; attempt++) {
        uint64_t seq =
            atomic_load_explicit(&((struct rc_statseg_cache *)c)->seq, memory_order_acquire);
        if (seq & 1)
            continue;
        for (size_t w = 0; w < sizeof *c / 8; w++)
            to[w] = atomic_load_explicit(&from[w], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&((struct rc_statseg_cache *)c)->seq, memory_order_relaxed) != seq)
            continue;
        return out->in_use == 1 && plausible(out, why, why_len);
    }
    say(why, why_len, "record %u kept changing while read", i);
    return false;
}
