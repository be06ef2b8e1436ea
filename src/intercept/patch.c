/* Writing code (see patch.h). */
#include "patch.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proc_maps.h"

/* jmp rel32 spans +-2 GiB; a margin keeps every byte of the page and every
 * entry of the library inside it. */
#define REACH (((uintptr_t)1 << 31) - ((uintptr_t)1 << 20))

void *rc_patch_page_near(uintptr_t lo, uintptr_t hi, size_t size, char *why, size_t n)
{
    uintptr_t from = hi > REACH ? hi - REACH : 0;
    uintptr_t to = lo + REACH;
    /* Another thread may map the gap first: look again. */
    for (int attempt = 0; attempt < 4; attempt++) {
        uintptr_t at;
        if (rc_maps_free_near(from, to, size, lo, &at) != 0) {
            snprintf(why, n, "no free address within 2 GiB of libcuda's code");
            return NULL;
        }
        void *p = mmap((void *)at, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == (void *)at)
            return p;
        if (p == MAP_FAILED && errno != EEXIST) {
            snprintf(why, n, "cannot map a page near libcuda's code: %s", strerror(errno));
            return NULL;
        }
        /* Kernels before 4.17 take the address as a hint only. */
        if (p != MAP_FAILED)
            munmap(p, size);
    }
    snprintf(why, n, "no page within 2 GiB of libcuda's code stayed free");
    return NULL;
}

int rc_patch_seal(void *page, size_t size, char *why, size_t n)
{
    if (mprotect(page, size, PROT_READ | PROT_EXEC) == 0)
        return 0;
    snprintf(why, n, "cannot make the trampoline page executable: %s", strerror(errno));
    munmap(page, size);
    return -1;
}

bool rc_patch_fits(uintptr_t entry)
{
    return (entry & 7) + RC_PATCH_LEN <= sizeof(uint64_t);
}

int rc_patch_entry(uintptr_t entry, const uint8_t *bytes, char *why, size_t n)
{
    uintptr_t word = entry & ~(uintptr_t)7;
    size_t offset = entry - word;
    struct rc_mapping m;
    if (rc_maps_find(entry, &m) != 0) {
        snprintf(why, n, "entry %#jx is in no mapping of /proc/self/maps", (uintmax_t)entry);
        return -1;
    }
    uintptr_t page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    void *page = (void *)(word & ~(page_size - 1));
    /* Executable all along: other threads may be running this page. */
    if (mprotect(page, page_size, m.prot | PROT_WRITE) != 0) {
        snprintf(why, n, "cannot make libcuda's code writable: %s", strerror(errno));
        return -1;
    }
    uint64_t *at = (uint64_t *)word;
    uint64_t value = __atomic_load_n(at, __ATOMIC_RELAXED);
    memcpy((uint8_t *)&value + offset, bytes, RC_PATCH_LEN);
    __atomic_store_n(at, value, __ATOMIC_SEQ_CST);
    if (mprotect(page, page_size, m.prot) != 0) {
        snprintf(why, n, "cannot restore the protection of libcuda's code: %s", strerror(errno));
        return -1;
    }
    return 0;
}

bool rc_patch_holds(uintptr_t at, const uint8_t *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (__atomic_load_n((const uint8_t *)at + i, __ATOMIC_RELAXED) != bytes[i])
            return false;
    return true;
}

/* Intel's rule for code modified while other processors may run it: they
 * must execute a serialising instruction before they run the new bytes.
 * The store alone makes them run old or new bytes; this barrier makes sure
 * none still runs the old ones once the first cache trusts the patches.
 * Kernels before 4.16 (or a seccomp filter) refuse it; the window it closes
 * is a few instructions long. */
void rc_patch_sync_cores(void)
{
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) == 0)
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0);
}
