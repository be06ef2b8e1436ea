/* The other patcher (chain_patcher.h).  Its page, mapped within 2 GiB of
 * the function: the stub (an absolute jump to the hook) and the trampoline
 * (the displaced instruction, then an absolute jump past it; a displaced
 * jmp rel32 becomes an absolute jump to its target).  The jump is written
 * with one 8-byte store, as the entry's first five bytes lie in one aligned
 * word (libc's and the test doubles' functions are 16-byte aligned). */
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

/* Write the 5 bytes at fn (one aligned word, written whole: inline
 * assembly, which no sanitizer instruments, as it keeps no shadow for
 * code). */
static int write_entry(void *fn, const uint8_t *bytes)
{
    uintptr_t at = (uintptr_t)fn, word = at & ~(uintptr_t)7;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *from = (void *)(at & ~(uintptr_t)(page - 1));
    if ((at & 7) > 3 || mprotect(from, page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        return -1;
    uint64_t value;
    __asm__ volatile("movq (%1), %0" : "=r"(value) : "r"(word) : "memory");
    memcpy((uint8_t *)&value + (at - word), bytes, 5);
    __asm__ volatile("movq %0, (%1)" ::"r"(value), "r"(word) : "memory");
    return mprotect(from, page, PROT_READ | PROT_EXEC);
}

int chain_patch(struct chain_patch *p, void *fn, void *hook)
{
    const uint8_t *entry = fn;
    if (entry[0] != 0xe9 && entry[0] != 0xb8)
        return -1;
    uint8_t *page = page_near((uintptr_t)fn);
    if (!page)
        return -1;
    uint8_t *stub = page, *trampoline = absolute_jump(stub, (uintptr_t)hook);
    memcpy(p->was, entry, sizeof p->was);
    if (entry[0] == 0xe9) {
        int32_t rel;
        memcpy(&rel, entry + 1, sizeof rel);
        absolute_jump(trampoline, (uintptr_t)fn + 5 + (uintptr_t)(intptr_t)rel);
    } else {
        memcpy(trampoline, entry, 5);
        absolute_jump(trampoline + 5, (uintptr_t)fn + 5);
    }
    if (mprotect(page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC) != 0)
        return -1;
    p->fn = fn;
    p->displaced = trampoline;
    uint8_t jmp[5] = { 0xe9 };
    int32_t rel = (int32_t)((intptr_t)stub - ((intptr_t)fn + 5));
    memcpy(jmp + 1, &rel, sizeof rel);
    return write_entry(fn, jmp);
}

int chain_unpatch(struct chain_patch *p)
{
    return write_entry(p->fn, p->was);
}
