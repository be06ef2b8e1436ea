/* Writing code (see patch.h). */
#include "patch.h"

#include <cpuid.h>
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
            snprintf(why, n, "no free address within 2 GiB of the code to patch");
            return NULL;
        }
        void *p = mmap((void *)at, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == (void *)at)
            return p;
        if (p == MAP_FAILED && errno != EEXIST) {
            snprintf(why, n, "cannot map a page near the code to patch: %s", strerror(errno));
            return NULL;
        }
        /* Kernels before 4.17 take the address as a hint only. */
        if (p != MAP_FAILED)
            munmap(p, size);
    }
    snprintf(why, n, "no page within 2 GiB of the code to patch stayed free");
    return NULL;
}

int rc_patch_seal(void *page, size_t size, char *why, size_t n)
{
    if (mprotect(page, size, PROT_READ | PROT_EXEC) == 0)
        return 0;
    snprintf(why, n, "cannot make the trampoline page executable: %s", strerror(errno));
    return -1;
}

/* Intel's rule for code modified while other processors may run it: they
 * must execute a serialising instruction before they run the new bytes.
 * This makes every thread of the process do so.  Kernels before 4.16 (or a
 * seccomp filter) refuse it: best effort, since one atomic store already
 * makes a thread run either the old instruction or the new one. */
static void sync_cores(void)
{
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) == 0)
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0);
}

static bool has_cmpxchg16b(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_CMPXCHG16B);
}

/* A locked cmpxchg16b: the whole aligned block changes at once, for
 * instruction fetch too (it reads the block from one cache line). */
static bool cas16(uint64_t *at, uint64_t expect[2], const uint64_t want[2])
{
    bool ok;
    __asm__ volatile("lock cmpxchg16b %1"
                     : "=@ccz"(ok), "+m"(*(volatile uint64_t(*)[2])at), "+a"(expect[0]),
                       "+d"(expect[1])
                     : "b"(want[0]), "c"(want[1])
                     : "memory");
    return ok;
}

bool rc_patch_fits(uintptr_t site)
{
    if ((site & 7) + RC_PATCH_LEN <= 8)
        return true;
    return (site & 15) + RC_PATCH_LEN <= 16 && has_cmpxchg16b();
}

/* The compare-and-swap of the aligned word or block that holds the site:
 * 0, or 1 when the site no longer holds `was`.  Bytes of the block around
 * the site that change meanwhile (another function's entry) are read
 * again. */
static int swap_site(uintptr_t site, const uint8_t *was, const uint8_t *bytes)
{
    bool wide = (site & 7) + RC_PATCH_LEN > 8;
    uintptr_t block = site & ~(uintptr_t)(wide ? 15 : 7);
    uint64_t *at = (uint64_t *)block;
    for (;;) {
        uint64_t old[2] = { __atomic_load_n(&at[0], __ATOMIC_ACQUIRE),
                            wide ? __atomic_load_n(&at[1], __ATOMIC_ACQUIRE) : 0 };
        if (memcmp((uint8_t *)old + (site - block), was, RC_PATCH_LEN) != 0)
            return 1;
        uint64_t now[2] = { old[0], old[1] };
        memcpy((uint8_t *)now + (site - block), bytes, RC_PATCH_LEN);
        if (wide ? cas16(at, old, now)
                 : __atomic_compare_exchange_n(at, &old[0], now[0], false, __ATOMIC_SEQ_CST,
                                               __ATOMIC_SEQ_CST))
            return 0;
    }
}

int rc_patch_site(uintptr_t site, const uint8_t *was, const uint8_t *bytes, char *why, size_t n)
{
    struct rc_mapping m;
    if (!rc_patch_fits(site)) {
        snprintf(why, n, "site %#jx cannot be written with one atomic store", (uintmax_t)site);
        return -1;
    }
    if (rc_maps_find(site, &m) != 0 || m.end < site + RC_PATCH_LEN) {
        snprintf(why, n, "site %#jx is not within one mapping of /proc/self/maps", (uintmax_t)site);
        return -1;
    }
    uintptr_t page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = site & ~(page_size - 1);
    size_t span = ((site + RC_PATCH_LEN - 1) & ~(page_size - 1)) + page_size - from;
    /* Executable all along: other threads may be running this code. */
    if (mprotect((void *)from, span, m.prot | PROT_WRITE) != 0) {
        snprintf(why, n, "cannot make the code at %#jx writable: %s", (uintmax_t)site,
                 strerror(errno));
        return -1;
    }
    int rc = swap_site(site, was, bytes);
    /* The store alone makes other cores run the old instruction or the new
     * one; this makes sure none still runs the old one once a cache trusts
     * the patch. */
    if (rc == 0)
        sync_cores();
    if (mprotect((void *)from, span, m.prot) != 0) {
        snprintf(why, n, "cannot restore the protection of the code at %#jx: %s", (uintmax_t)site,
                 strerror(errno));
        return -1;
    }
    return rc;
}

bool rc_patch_holds(uintptr_t at, const uint8_t *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (__atomic_load_n((const uint8_t *)at + i, __ATOMIC_RELAXED) != bytes[i])
            return false;
    return true;
}
