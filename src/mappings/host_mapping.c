/* The mappings that hold a range, asked of the kernel one at a time with
 * the PROCMAP_QUERY ioctl of /proc/self/maps (Linux 6.11).  Parsing the
 * text of /proc/self/maps instead costs time in the number of mappings
 * (the kernel prints every one before the one asked for), and probing with
 * mincore() sees holes but not where one mapping ends and the next begins:
 * the text is read only where the ioctl is missing and nothing else
 * answers (whether a mapping is shared). */
#include "host_mapping.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/fs.h>

#include "proc_maps.h"

#ifndef PROCMAP_QUERY
/* The ABI of <linux/fs.h> from Linux 6.11, for older headers. */
struct procmap_query {
    uint64_t size;
    uint64_t query_flags;
    uint64_t query_addr;
    uint64_t vma_start;
    uint64_t vma_end;
    uint64_t vma_flags;
    uint64_t vma_page_size;
    uint64_t vma_offset;
    uint64_t inode;
    uint32_t dev_major;
    uint32_t dev_minor;
    uint32_t vma_name_size;
    uint32_t build_id_size;
    uint64_t vma_name_addr;
    uint64_t build_id_addr;
};
#define PROCMAP_QUERY _IOWR(0x66, 17, struct procmap_query)
#define PROCMAP_QUERY_VMA_SHARED 0x08
#endif
#ifndef PROCMAP_QUERY_COVERING_OR_NEXT_VMA
#define PROCMAP_QUERY_COVERING_OR_NEXT_VMA 0x10
#endif

/* Set once the kernel said it has no PROCMAP_QUERY: later misses skip the
 * open. */
static atomic_bool unsupported;

/* The mapping that holds addr (with `flags`, the first at or after it),
 * or false; *shared: whether it is. */
static bool query(int fd, uintptr_t addr, uint64_t flags, uintptr_t *lo, uintptr_t *hi,
                  bool *shared)
{
    struct procmap_query q = { .size = sizeof(q), .query_flags = flags, .query_addr = addr };
    if (ioctl(fd, PROCMAP_QUERY, &q) != 0) {
        if (errno == ENOTTY || errno == EINVAL)
            atomic_store_explicit(&unsupported, true, memory_order_relaxed);
        return false;
    }
    *lo = (uintptr_t)q.vma_start;
    *hi = (uintptr_t)q.vma_end;
    *shared = q.vma_flags & PROCMAP_QUERY_VMA_SHARED;
    return true;
}

bool rc_host_mapping_span(uintptr_t start, uintptr_t end, uintptr_t *lo, uintptr_t *hi,
                          bool *shared)
{
    if (atomic_load_explicit(&unsupported, memory_order_relaxed))
        return false;
    /* Opened per call: a descriptor kept open would describe the parent
     * in a fork child. */
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    /* A query answers with the mapping that covers the address, so one
     * found at the end of the last starts there: no hole between them. */
    uintptr_t next;
    bool one = false; /* what a failed query leaves unset */
    bool mapped = query(fd, start, 0, lo, hi, shared);
    while (mapped && *hi < end) {
        mapped = query(fd, *hi, 0, &next, hi, &one);
        *shared |= one;
    }
    close(fd);
    return mapped;
}

/* Without the ioctl: the text, mapping by mapping. */
struct private_walk {
    uintptr_t covered, end;
    bool private;
};

static int private_so_far(const struct rc_mapping *m, void *arg)
{
    struct private_walk *w = arg;
    if (m->start > w->covered || m->shared)
        return 1;
    w->covered = m->end;
    w->private = w->covered >= w->end;
    return w->private;
}

bool rc_host_mapping_private(uintptr_t start, uintptr_t end)
{
    int fd = atomic_load_explicit(&unsupported, memory_order_relaxed)
                 ? -1
                 : open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        uintptr_t lo, at = start;
        bool shared = false, mapped = true;
        while (mapped && !shared && at < end)
            mapped = query(fd, at, 0, &lo, &at, &shared);
        close(fd);
        if (mapped || !atomic_load_explicit(&unsupported, memory_order_relaxed))
            return mapped && !shared;
    }
    struct private_walk w = { start, end, false };
    return rc_maps_visit(start, end, private_so_far, &w) == 0 && w.private;
}

struct collect {
    uintptr_t (*out)[2];
    int n, max;
};

static int collect(const struct rc_mapping *m, void *arg)
{
    struct collect *c = arg;
    if (c->n < c->max) {
        c->out[c->n][0] = m->start;
        c->out[c->n][1] = m->end;
    }
    c->n++;
    return 0;
}

int rc_host_mappings(uintptr_t start, uintptr_t end, uintptr_t (*out)[2], int max)
{
    int fd = atomic_load_explicit(&unsupported, memory_order_relaxed)
                 ? -1
                 : open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    int n = 0;
    uintptr_t at = start, lo, hi;
    bool shared;
    if (fd >= 0) {
        while (n < max && at < end &&
               query(fd, at, PROCMAP_QUERY_COVERING_OR_NEXT_VMA, &lo, &hi, &shared) && lo < end) {
            out[n][0] = lo;
            out[n][1] = hi;
            n++;
            at = hi;
        }
        close(fd);
        if (!atomic_load_explicit(&unsupported, memory_order_relaxed))
            return n;
    }
    struct collect c = { out, 0, max };
    if (rc_maps_visit(start, end, collect, &c) != 0)
        return -1;
    return c.n < max ? c.n : max;
}
