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
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/fs.h>

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

/* Set once the kernel said it has no PROCMAP_QUERY: later misses skip the
 * open. */
static atomic_bool unsupported;

/* The mapping that holds addr, or false; *shared: whether it is. */
static bool mapping_at(int fd, uintptr_t addr, uintptr_t *lo, uintptr_t *hi, bool *shared)
{
    struct procmap_query q = { .size = sizeof(q), .query_addr = addr };
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
    bool one;
    bool mapped = mapping_at(fd, start, lo, hi, shared);
    while (mapped && *hi < end) {
        mapped = mapping_at(fd, *hi, &next, hi, &one);
        *shared |= one;
    }
    close(fd);
    return mapped;
}

/* Without the ioctl: the text, line by line ("lo-hi perms ..."), in pieces
 * of one buffer.  Whether [start, end) is mapped without a hole, and by
 * private mappings only. */
static bool private_by_text(int fd, uintptr_t start, uintptr_t end)
{
    char buf[4096];
    size_t have = 0;
    uintptr_t covered = start;
    for (;;) {
        ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
        if (got <= 0)
            return false;
        have += (size_t)got;
        buf[have] = 0;
        char *line = buf, *nl;
        while ((nl = strchr(line, '\n'))) {
            uintptr_t lo, hi;
            char perms[5];
            if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s", &lo, &hi, perms) == 3 &&
                hi > covered) {
                if (lo > covered || perms[3] == 's')
                    return false;
                covered = hi;
                if (covered >= end)
                    return true;
            }
            line = nl + 1;
        }
        have = (size_t)(buf + have - line);
        memmove(buf, line, have);
        if (have == sizeof buf - 1) /* a line longer than the buffer */
            have = 0;
    }
}

bool rc_host_mapping_private(uintptr_t start, uintptr_t end)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool answer;
    if (atomic_load_explicit(&unsupported, memory_order_relaxed)) {
        answer = private_by_text(fd, start, end);
    } else {
        uintptr_t lo, at = start;
        bool shared = false, mapped = true;
        while (mapped && !shared && at < end)
            mapped = mapping_at(fd, at, &lo, &at, &shared);
        answer = mapped && !shared;
        if (!mapped && atomic_load_explicit(&unsupported, memory_order_relaxed))
            answer = private_by_text(fd, start, end);
    }
    close(fd);
    return answer;
}
