/* The other patcher (chain_patcher.h).  Its page, mapped within 2 GiB of
 * the function: the stub (an absolute jump to the hook) and the trampoline
 * (an endbr64 that led the entry, the displaced instruction, then an
 * absolute jump past it; a displaced jmp rel32 becomes an absolute jump to
 * its target).  The jump is written with one store: 8 bytes where its five
 * lie in one aligned word, else 16 (cmpxchg16b), as after an endbr64 (libc's
 * and the test doubles' functions are 16-byte aligned). */
#include "chain_patcher.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* jmp *0(%rip), then the address. */
static uint8_t *absolute_jump(uint8_t *at, uintptr_t to)
{
    static const uint8_t jmp[6] = { 0xff, 0x25, 0, 0, 0, 0 };
    memcpy(at, jmp, sizeof jmp);
    memcpy(at + sizeof jmp, &to, sizeof to);
    return at + sizeof jmp + sizeof to;
}

/* A page within 2 GiB of `near`, looked for downwards from it. */
static uint8_t *page_near(uintptr_t near)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (uintptr_t step = (uintptr_t)1 << 24; step < ((uintptr_t)1 << 31); step += 1 << 24) {
        void *hint = (void *)((near - step) & ~(uintptr_t)(page - 1));
        void *p = mmap(hint, page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == hint)
            return p;
        if (p != MAP_FAILED)
            munmap(p, page);
    }
    return NULL;
}

static const uint8_t endbr64[4] = { 0xf3, 0x0f, 0x1e, 0xfa };

/* Where the jump goes: past an endbr64, which indirect calls need first. */
static size_t site_of(const uint8_t *entry)
{
    return memcmp(entry, endbr64, sizeof endbr64) == 0 ? sizeof endbr64 : 0;
}

/* The 5 bytes at `at` in one store of the aligned word or 16 bytes that
 * hold them (inline assembly, which no sanitizer instruments, as it keeps
 * no shadow for code). */
static void store_jump(uintptr_t at, const uint8_t *bytes)
{
    uintptr_t word = at & ~(uintptr_t)7, block = at & ~(uintptr_t)15;
    if ((at & 7) <= 3) {
        uint64_t value;
        __asm__ volatile("movq (%1), %0" : "=r"(value) : "r"(word) : "memory");
        memcpy((uint8_t *)&value + (at - word), bytes, 5);
        __asm__ volatile("movq %0, (%1)" ::"r"(value), "r"(word) : "memory");
        return;
    }
    uint64_t lo, hi;
    __asm__ volatile("movq (%2), %0\n\tmovq 8(%2), %1"
                     : "=r"(lo), "=r"(hi)
                     : "r"(block)
                     : "memory");
    for (;;) {
        uint8_t want[16];
        memcpy(want, &lo, 8);
        memcpy(want + 8, &hi, 8);
        memcpy(want + (at - block), bytes, 5);
        uint64_t new_lo, new_hi;
        memcpy(&new_lo, want, 8);
        memcpy(&new_hi, want + 8, 8);
        unsigned char done;
        __asm__ volatile("lock cmpxchg16b (%[p])\n\tsete %[done]"
                         : [done] "=q"(done), "+a"(lo), "+d"(hi)
                         : [p] "r"(block), "b"(new_lo), "c"(new_hi)
                         : "memory", "cc");
        if (done)
            return;
    }
}

static int write_entry(void *fn, size_t site, const uint8_t *bytes)
{
    uintptr_t at = (uintptr_t)fn + site;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *from = (void *)(at & ~(uintptr_t)(page - 1));
    if ((at & 15) > 11 || mprotect(from, page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        return -1;
    store_jump(at, bytes);
    return mprotect(from, page, PROT_READ | PROT_EXEC);
}

int chain_patch(struct chain_patch *p, void *fn, void *hook)
{
    size_t site = site_of(fn);
    const uint8_t *entry = (const uint8_t *)fn + site;
    if (entry[0] != 0xe9 && entry[0] != 0xb8)
        return -1;
    uint8_t *page = page_near((uintptr_t)fn);
    if (!page)
        return -1;
    uint8_t *stub = page, *trampoline = absolute_jump(stub, (uintptr_t)hook);
    memcpy(p->was, entry, sizeof p->was);
    uint8_t *displaced = trampoline;
    if (site) {
        memcpy(displaced, endbr64, sizeof endbr64);
        displaced += sizeof endbr64;
    }
    uintptr_t past = (uintptr_t)entry + 5;
    if (entry[0] == 0xe9) {
        int32_t rel;
        memcpy(&rel, entry + 1, sizeof rel);
        absolute_jump(displaced, past + (uintptr_t)(intptr_t)rel);
    } else {
        memcpy(displaced, entry, 5);
        absolute_jump(displaced + 5, past);
    }
    if (mprotect(page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC) != 0)
        return -1;
    p->fn = fn;
    p->site = site;
    p->displaced = trampoline;
    uint8_t jmp[5] = { 0xe9 };
    int32_t rel = (int32_t)((intptr_t)stub - (intptr_t)past);
    memcpy(jmp + 1, &rel, sizeof rel);
    return write_entry(fn, site, jmp);
}

int chain_unpatch(struct chain_patch *p)
{
    return write_entry(p->fn, p->site, p->was);
}
